"""DuckDB reports over a run directory: the report database, the canned reports and ad-hoc SQL.

The database holds a table per run table (tasks, measurements, verdicts, contamination, dedupe), plus
`rejections` (each dropped task's first rejecting stage and reason), `accepted` (the accepted task ids)
and `run_info` (manifest entries), and views for the canned reports: funnel, rejection_reasons,
contamination_by_detector, contamination_by_nearest, op_coverage, task_summary, near_clusters, and for audits
label_findings (rows per finding kind) and label_errors (operators per kind: wrong, missing, cannot judge). The file is
self-contained: it can be copied away from the run directory and opened with any DuckDB client.

It is built once and reused until the run changes: `report_source` in it holds the run's key (a hash of every
shard's completion marker, config.toml and manifest.json), and a call whose run has another key builds it again.
It is never written into the run directory (a release's run/ stays as shipped): by default it lives in the user's
cache folder, `$OPSYNTH_CACHE_DIR/report/` or `${XDG_CACHE_HOME:-~/.cache}/opsynth/report/`, one file per run
directory; `db=PATH` (`opsynth report DIR --db PATH`) puts it where the caller says.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa

from filters.base import reason_kind
from pipeline.errors import OpsynthError, require
from pipeline.rundir.schema import BY_TABLE
from pipeline.rundir.stage_defs import CODE_STAGES, VERDICT_ORDER
from pipeline.rundir.store import TABLES, RunDir

VIEWS = {
    "rejection_reasons": f"""
        SELECT stage, reason_short AS reason, count(*) AS tasks FROM rejections GROUP BY stage, reason_short
        ORDER BY list_position({list(VERDICT_ORDER)}, stage), tasks DESC, reason""",
    "contamination_by_detector": """
        SELECT detector, count(*) AS tasks FROM (SELECT unnest(detectors_fired) AS detector FROM contamination)
        GROUP BY detector ORDER BY tasks DESC""",
    "contamination_by_nearest": """
        SELECT kb_nearest, count(*) AS tasks, list_distinct(flatten(list(detectors_fired))) AS detectors,
               round(max(kb_ast_similarity), 3) AS max_ast, round(max(kb_minhash_jaccard), 3) AS max_minhash,
               sum(kb_op_signature_match::INT) AS op_signature_matches
        FROM contamination WHERE contaminated GROUP BY kb_nearest ORDER BY tasks DESC, kb_nearest""",
    "op_coverage": """
        SELECT op, count(*) AS tasks, count(a.task_id) AS accepted
        FROM (SELECT task_id, unnest(ops) AS op FROM tasks) t LEFT JOIN accepted a USING (task_id)
        GROUP BY op ORDER BY tasks DESC, op""",
    "task_summary": """
        SELECT t.task_id, t.name, t.num_ops, t.data_source, m.status, m.eager_ms, m.compile_ms,
               c.contaminated, c.kb_nearest, c.kb_ast_similarity, c.kb_op_signature_match, c.kb_minhash_jaccard,
               d.exact_cluster, d.structural_cluster, d.near_cluster, d.near_evidence,
               l.finding AS label_finding, l.wrong_labels, l.missing_labels, l.unknown_labels,
               r.stage AS rejected_by, r.reason AS rejection_reason, a.task_id IS NOT NULL AS accepted
        FROM tasks t LEFT JOIN measurements m USING (task_id) LEFT JOIN contamination c USING (task_id)
        LEFT JOIN labels l USING (task_id)
        LEFT JOIN dedupe d USING (task_id) LEFT JOIN rejections r USING (task_id) LEFT JOIN accepted a USING (task_id)""",
    "label_findings": """
        SELECT finding, count(*) AS tasks FROM labels GROUP BY finding ORDER BY tasks DESC, finding""",
    "label_errors": """
        SELECT 'wrong label' AS kind, op, count(*) AS tasks FROM (SELECT unnest(wrong_labels) AS op FROM labels)
        GROUP BY op UNION ALL
        SELECT 'missing label', op, count(*) FROM (SELECT unnest(missing_labels) AS op FROM labels) GROUP BY op
        UNION ALL
        SELECT 'cannot judge (unknown operator)', op, count(*) FROM (SELECT unnest(unknown_labels) AS op FROM labels)
        GROUP BY op ORDER BY kind DESC, tasks DESC, op""",
    "near_clusters": """
        SELECT d.near_cluster AS representative, t.name, count(*) AS tasks,
               count(*) FILTER (WHERE d.near_evidence LIKE 'same graph%') AS same_graph,
               count(*) FILTER (WHERE d.near_evidence LIKE 'same ops%') AS same_ops,
               max(d.representative_reason) AS why_kept
        FROM dedupe d JOIN tasks t ON t.task_id = d.near_cluster WHERE d.near_cluster IS NOT NULL
        GROUP BY d.near_cluster, t.name ORDER BY tasks DESC, representative""",
}


def cache_dir() -> Path:
    """Where report databases live unless a path is given: $OPSYNTH_CACHE_DIR, else the user's cache folder."""
    if explicit := os.environ.get("OPSYNTH_CACHE_DIR"):
        return Path(explicit) / "report"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "opsynth" / "report"


def db_path(rd: RunDir, db: str | Path | None = None) -> Path:
    """`db`, or this run directory's database in the cache folder (named after the run, keyed by its full path)."""
    if db is not None:
        return Path(db)
    where = rd.path.resolve()
    return cache_dir() / f"{where.name}-{hashlib.sha256(str(where).encode()).hexdigest()[:12]}.duckdb"


def run_key(rd: RunDir) -> str:
    """What the database is built from, as one hash: every completion marker (which shard, written when, how many
    rows), config.toml and manifest.json. A stage that writes a shard, `filter --set`, a profile call: a new key.
    Content, not file times, so a fresh checkout of a committed run keeps its key."""
    h = hashlib.sha256()
    for p in sorted(rd.path.glob("*/_done/part-*")):
        h.update(str(p.relative_to(rd.path)).encode() + b"\0" + p.read_bytes() + b"\0")
        shard = p.parent.parent / f"{p.name}.parquet"
        h.update(str(shard.stat().st_size if shard.exists() else -1).encode() + b"\0")
    for p in (rd.config_path, rd.manifest_path):
        h.update(p.name.encode() + b"\0" + (p.read_bytes() if p.exists() else b"") + b"\0")
    return h.hexdigest()


def built_key(path: Path) -> str | None:
    """The run key a database was built from, or None (no file, or not one this module wrote)."""
    if not path.exists():
        return None
    duckdb = require("duckdb", "report")
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return None
    try:
        row = con.execute("SELECT cache_key FROM report_source").fetchone()
        return row[0] if row else None
    except duckdb.Error:
        return None
    finally:
        con.close()


def ensure(rd: RunDir, db: str | Path | None = None) -> tuple[Path, bool]:
    """The run's database, built only when missing or built from another state of the run; (path, built now)."""
    path, key = db_path(rd, db), run_key(rd)
    if built_key(path) == key:
        return path, False
    return build(rd, path, key), True


_FUNNEL_STEP = {"import": "passed import check", "labels": "kept after label checking"}


def _funnel_sql(has_measurements: bool, stages: list[str]) -> str:
    steps = ["SELECT 0 AS step, 'tasks (sampled or imported)' AS stage, (SELECT count(*) FROM tasks) AS tasks"]
    def dropped_by(names: tuple[str, ...]) -> str:
        return "(SELECT task_id FROM rejections WHERE stage IN ({}))".format(", ".join(f"'{p}'" for p in names))

    def kept_after(s: str) -> str:
        return f"(SELECT count(*) FROM tasks WHERE task_id NOT IN {dropped_by(VERDICT_ORDER[: VERDICT_ORDER.index(s) + 1])})"

    profiled = not has_measurements
    for s in VERDICT_ORDER:  # profiling sits between the code-only stages and the rest
        if not profiled and s not in CODE_STAGES:
            # among the tasks still in: the funnel narrows at every step
            steps.append(f"SELECT {len(steps)}, 'profiled (status ok)', (SELECT count(DISTINCT task_id) FROM "
                         f"measurements WHERE status = 'ok' AND task_id NOT IN {dropped_by(CODE_STAGES)})")
            profiled = True
        if s in stages:
            steps.append(f"SELECT {len(steps)}, '{_FUNNEL_STEP.get(s, f'kept after {s}')}', {kept_after(s)}")
    steps.append(f"SELECT {len(steps)}, 'accepted', (SELECT count(*) FROM accepted)")
    return " UNION ALL ".join(steps) + " ORDER BY step"


def build(rd: RunDir, db: str | Path | None = None, key: str | None = None) -> Path:
    """Write the run's database (`db_path`) with every run table, the accepted set, rejections and the report views,
    and `key` (default: the run's key now) in `report_source`."""
    duckdb = require("duckdb", "report")
    from pipeline.rundir.selection import accepted_task_ids, first_rejection, stages_run

    if not rd.path.is_dir():
        raise OpsynthError(f"{rd.path} is not a run directory; give the --out DIR of a run or audit")
    if rd.read_table("tasks") is None:
        raise OpsynthError(f"{rd.path} has no tasks/ table; run `opsynth run` or `opsynth audit FILE --out {rd.path}` first")
    key = key or run_key(rd)
    out = db_path(rd, db)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    con = duckdb.connect(str(tmp))
    try:
        present = []
        for name in TABLES:
            t = rd.read_table(name)
            if t is None:
                t = BY_TABLE[name].empty_table()
            else:
                present.append(name)
                # tables written before a column existed get it as nulls, so every view builds on old runs
                for f in BY_TABLE[name]:
                    if f.name not in t.column_names:
                        t = t.append_column(f, pa.nulls(len(t), f.type))
            con.register("_src", t)
            con.execute(f"CREATE TABLE {name} AS SELECT * FROM _src")
            con.unregister("_src")
        rej = [{"task_id": k, "stage": s, "reason": r, "reason_short": reason_kind(r)}
               for k, (s, r) in first_rejection(rd).items()]
        tables: dict[str, pa.Table] = {
            "rejections": pa.Table.from_pylist(rej, schema=pa.schema([(c, pa.string()) for c in
                                                                      ("task_id", "stage", "reason", "reason_short")])),
            "accepted": pa.table({"task_id": pa.array(accepted_task_ids(rd), pa.string())}),
            "run_info": pa.table({"key": pa.array(list(rd.manifest()), pa.string()),
                                  "value": pa.array([json.dumps(v, default=str) for v in rd.manifest().values()],
                                                    pa.string())}),
            "report_source": pa.table({"run_dir": pa.array([str(rd.path.resolve())], pa.string()),
                                       "cache_key": pa.array([key], pa.string())}),
        }
        for name, t in tables.items():
            con.register("_src", t)
            con.execute(f"CREATE TABLE {name} AS SELECT * FROM _src")
            con.unregister("_src")
        for name, sql in VIEWS.items():
            con.execute(f"CREATE VIEW {name} AS {sql}")
        con.execute(f"CREATE VIEW funnel AS {_funnel_sql('measurements' in present, stages_run(rd))}")
    except BaseException:
        con.close()
        tmp.unlink(missing_ok=True)
        raise
    con.close()
    tmp.replace(out)
    return out


def _connect(rd: RunDir, db: str | Path | None = None, current: bool = False):
    """A read-only connection to the run's database; `current`: the caller has just ensured it (no second key)."""
    duckdb = require("duckdb", "report")
    path = db_path(rd, db) if current else ensure(rd, db)[0]
    return duckdb.connect(str(path), read_only=True)


CELL_WIDTH = 70  # canned reports cut longer cells (with "..."); ad-hoc queries and --full print them whole


def format_table(columns: list[str], rows: list[tuple[Any, ...]], max_rows: int = 50,
                 width: int | None = CELL_WIDTH) -> str:
    """A plain fixed-width text table; cells longer than `width` are cut (None: whole, line breaks as \\n)."""
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        s = "" if v is None else str(v).replace("\n", "\\n")
        return s if width is None or len(s) <= width else s[: width - 3] + "..."

    shown = [[cell(v) for v in r] for r in rows[:max_rows]]
    widths = [max([len(c)] + [len(r[i]) for r in shown]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=False)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=False)) for r in shown]
    if len(rows) > max_rows:
        lines.append(f"... {len(rows) - max_rows} more rows")
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines)


def _run(con, sql: str, max_rows: int = 50, width: int | None = CELL_WIDTH) -> str:
    cur = con.execute(sql)
    return format_table([d[0] for d in cur.description], cur.fetchall(), max_rows, width)


def canned(rd: RunDir, db: str | Path | None = None, full: bool = False, current: bool = False) -> str:
    """The canned reports: funnel with rejection reasons, contamination by detector and nearest problem, operators.
    full: every row and whole cells (default: 25 rows a report, cells cut at CELL_WIDTH). current: the database
    was just ensured (`ensure`)."""
    con = _connect(rd, db, current)
    try:
        parts = [
            ("Funnel", "SELECT stage, tasks FROM funnel"),
            ("Rejections by stage and reason (first rejecting stage per task)", "SELECT * FROM rejection_reasons"),
            ("Contamination by detector", """
                SELECT detector, tasks, round(100.0 * tasks / (SELECT count(*) FROM contamination), 1) AS pct
                FROM contamination_by_detector
                UNION ALL SELECT 'any (contaminated)', count(*), round(100.0 * count(*) /
                    greatest((SELECT count(*) FROM contamination), 1), 1) FROM contamination WHERE contaminated"""),
            ("Contamination by nearest KernelBench problem", "SELECT * FROM contamination_by_nearest"),
            ("Operator coverage (catalog operators in tasks)", "SELECT * FROM op_coverage"),
            ("Near-duplicate clusters (representative kept, the rest dropped)", "SELECT * FROM near_clusters"),
            ("Label findings (audits; only wrong/missing labels reject, with --check-labels)",
             "SELECT * FROM label_findings"),
        ]
        rows, width = (10**9, None) if full else (25, CELL_WIDTH)
        return "\n\n".join(f"== {title} ==\n{_run(con, sql, rows, width)}" for title, sql in parts) + "\n"
    finally:
        con.close()


def query(rd: RunDir, sql: str, db: str | Path | None = None, full: bool = True, max_rows: int = 200,
          current: bool = False) -> str:
    """Run one ad-hoc SQL statement against the run's database (built first if missing or the run changed, unless
    `current`: just ensured); its cells are printed whole unless `full` is False."""
    duckdb = require("duckdb", "report")
    con = _connect(rd, db, current)
    try:
        return _run(con, sql, max_rows=max_rows, width=None if full else CELL_WIDTH)
    except duckdb.Error as e:
        raise OpsynthError(f"query failed: {str(e).splitlines()[0]}; tables: tasks, measurements, verdicts, "
                           "contamination, dedupe, rejections, accepted, run_info, report_source; views: "
                           f"funnel, {', '.join(VIEWS)}") from None
    finally:
        con.close()
