"""Generated manual pages: docs/run-directory.md from pipeline/rundir/schema.py, docs/configuration.md from the
config dataclasses in pipeline/rundir/config.py and the presets in data/presets/.

A column's meaning is its entry in `schema.COLUMNS` (published columns) or the comment on or just above its line
in schema.py; a config field's meaning is the comment on or just above its line in config.py, or `FIELD_DOCS`
below. `python -m pipeline.outputs.docs_gen` writes both pages; `--check` exits 1 when either is stale.
`missing_meanings()` lists what has none, so a test can hold the count.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import re
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SCHEMA_SRC = ROOT / "pipeline" / "rundir" / "schema.py"
CONFIG_SRC = ROOT / "pipeline" / "rundir" / "config.py"

# meanings of config fields whose line carries no comment (the filter's thresholds first: they are what a
# user changes with `opsynth filter DIR --set filter.KEY=VALUE`)
FIELD_DOCS = {
    "filter.min_eager_ms": "drop a task whose median eager runtime is below this (ms)",
    "filter.max_eager_ms": "drop a task whose median eager runtime is above this (ms)",
    "filter.require_compile": "drop a task that torch.compile cannot compile or whose compiled output disagrees",
    "filter.require_deterministic": "drop a task whose two runs on the same input disagree",
    "filter.min_input_sensitivity": "drop a task whose outputs for different inputs differ by less than this",
    "filter.reject_degenerate": "drop a task whose output is degenerate (constant, all zero, non-finite)",
    "filter.max_peak_memory_gb": "drop a task whose measured peak memory is above this (GiB)",
    "filter.require_label_match": "drop a task whose labelled operators did not all run (ATen trace)",
    "run.seed": "sampling seed of the run",
    "sample.min_ops": "fewest operators in a task",
    "sample.max_ops": "most operators in a task",
    "decontaminate.ast_threshold": "AST similarity above which a task counts as a KernelBench copy",
    "decontaminate.minhash_threshold": "MinHash Jaccard above which a task counts as a KernelBench copy",
    "decontaminate.op_signature": "a task with a KernelBench problem's exact traced op sequence counts as a copy",
    "dedupe.structural": "drop tasks with the same canonical graph as a kept task",
    "sample.target_max_ms": "the sampler sizes a task so its predicted runtime is at most this (ms)",
    "sample.max_peak_memory_gb": "memory cap a task's predicted peak is sized under (GiB)",
    "sample.target_gpu": "the GPU the cost model prices tasks for",
    "sample.tflops_bf16": "the target GPU's bf16 TFLOP/s in the cost model",
    "sample.launch_overhead_us": "per-kernel launch cost in the cost model (microseconds)",
    "sample.prescreen_ms": "CPU time budget of the pre-screen per draw (ms); larger draws are screened scaled down",
    "sample.prescreen_mb": "memory budget of the pre-screen per draw (MB)",
    "profile.compile": "measure torch.compile too",
    "profile.compile_backend": "torch.compile backend",
    "profile.warmup": "untimed runs before timing",
    "profile.min_runs": "fewest timed runs per median",
    "profile.max_runs": "most timed runs per median",
    "profile.reserve_margin_measured": "margin on the measured peak for the memory reservation after the first forward",
    "profile.reserve_slack_gb": "slack added to each memory reservation (GiB)",
    "profile.shortcut_draws": "input draws the fragility check runs on",
    "profile.shortcut_ulp_steps": "the fragility check moves every floating input by this many ulps (each "
                                  "element's own); the CPU pre-screen multiplies its scaled move by it",
    "profile.shortcut_f64_draws": "of the fragility check's draws, the first this many also compare against the "
                                  "reference recomputed in float64",
    "profile.shortcut_fresh_weights": "the fragility check builds the model again, with fresh seeded weights, on each "
                                      "draw after the first, as the verifier does",
    "profile.shortcut_stop_first": "each shortcut check kind stops at its first finding, and in the profile stage a "
                                   "task's checks stop at the first kind that finds one",
    "publish.name": "dataset name on the card",
    "publish.license": "license on the card",
    "publish.shard_rows": "rows per published parquet shard",
}

# meanings of columns whose schema line carries no comment; a bare name applies to every table
COLUMN_DOCS = {
    "task_id": "the task's content id (sha256 of the canonical graph and sizes, 16 hex chars): the join key",
    "keep": "true: the stage keeps the task; false: it drops it for `reason`",
    "reason": "why the stage dropped the task (empty when kept)",
    "error": "the worker's error for a failed status, one line",
    "device": "cpu or cuda: where the task was measured",
    "eager_runs": "timed eager runs behind the median",
    "compile_runs": "timed compiled runs behind the median",
    "compile_iqr_ms": "interquartile range of the compiled runtime, ms",
    "compile_error": "why torch.compile failed (empty when it ran)",
    "graph_breaks": "Dynamo graph breaks in the compiled forward",
    "timing_alloc_retries": "allocator retries during the timed runs (> 0: the memory cap inflated the runtimes)",
    "compile_max_abs_err": "largest absolute difference between compiled and eager outputs",
    "compile_max_rel_err": "largest relative difference between compiled and eager outputs",
    "determinism_max_diff": "largest difference between two eager runs on the same input",
    "compile_checksum": "checksum of the compiled output bits (tells two runs' compiled programs apart)",
    "compile_benchmarks": "how many choices inductor timed while compiling (0 with untimed choices)",
    "input_min_pairwise_diff": "smallest difference between the outputs of two input draws",
    "output_numel": "elements in the task's output",
    "wall_s": "the worker's wall time for the task, seconds",
    "call_wall_s": "the shortcuts-only call's wall time for the task (its worker's), seconds",
    "call_cpu_s": "the shortcuts-only call's CPU seconds for the task",
    "call_gpu_busy_s": "seconds the shortcuts-only call held the GPU for the task (checks, draws, model build)",
    "call_lock_wait_s": "seconds the shortcuts-only call waited for the GPU lock for the task",
    "call_budget_wait_s": "seconds the shortcuts-only call waited for room in the GPU's memory budget for the task",
    "call_gpu_setup_s": "seconds of the shortcuts-only call's GPU hold before the task's first forward ended (model, inputs)",
    "call_reserved_gib": "the shortcuts-only call's last reservation for the task, GiB (a retry's is the larger one)",
    "lock_wait_s": "seconds the worker waited for the GPU lock",
    "lock_wait_exclusive_s": "seconds it waited to hold the GPU alone (timing)",
    "lock_gather_s": "seconds a timer waited to gather other timers into one timing phase",
    "budget_wait_s": "seconds it waited for room in the GPU's memory budget",
    "regrow_wait_s": "seconds it waited to grow its memory reservation",
    "gpu_exclusive_s": "seconds it held the GPU alone",
    "gpu_busy_compile_s": "seconds it held the GPU while compiling",
    "compile_wall_s": "wall seconds torch.compile took",
    "contaminated": "true: a detector matched a KernelBench problem",
    "kb_ast_nearest": "the KernelBench problem with the highest AST similarity",
    "kb_op_signature_nearest": "the KernelBench problem whose traced op sequence matched",
    "kb_minhash_nearest": "the KernelBench problem with the highest MinHash Jaccard",
    "detectors_fired": "the detectors that matched",
    "reference": "the reference source the nearest problem comes from",
    "categories": "catalog categories of the operators",
    "num_ops": "number of operators in the graph",
    "is_dag": "true for graphs with branches, residuals or several inputs",
    "predicted_ms": "runtime the sampler's cost model predicts on the target GPU, ms",
    "predicted_peak_bytes": "peak memory the sampler predicts for one forward",
    "composer_note": "the composer's note (LLM composer: the model's remark)",
    "seed": "sampling seed of the task",
    "name": "KernelBench-style name, e.g. Conv2d_GroupNorm_GELU",
    "code": "the KernelBench-format module",
    "graph": "the operator graph, JSON node-link",
    "degenerate": "why the output is degenerate (empty: it is not)",
}

# history does not belong in a meaning: measurement references and commit hashes are cut
_HISTORY = re.compile(r"\s*\([^()]*\b(?:calls?|commit)\s+\w[^()]*\)|\s*\(?\b(?:calls?)\s+\d+(?:[-,]\s*\d+)*\)?[^;.]*")


def _comments(path: Path) -> dict[int, str]:
    """Line number -> comment text on that line."""
    out: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string.lstrip("#").strip()
    return out


def _meaning(lines: list[str], comments: dict[int, str], lineno: int) -> str:
    """The comment on the line, else the block of comment-only lines right above it."""
    if lineno in comments and not lines[lineno - 1].lstrip().startswith("#"):
        text = comments[lineno]
    else:
        block, k = [], lineno - 1
        while k >= 1 and lines[k - 1].lstrip().startswith("#"):
            block.insert(0, comments.get(k, ""))
            k -= 1
        text = " ".join(block)
    text = _HISTORY.sub("", text).strip()
    # the first sentence is the meaning; what follows in a comment is the why, kept in the code
    text = re.split(r"(?<=[a-z0-9)`])\. (?=[A-Z(`])", text, maxsplit=1)[0].rstrip(".;, ")
    return text.replace("|", "\\|")


def _column_meanings() -> dict[str, dict[str, str]]:
    from pipeline.rundir import schema

    src = SCHEMA_SRC.read_text()
    lines, comments = src.splitlines(), _comments(SCHEMA_SRC)
    tables: dict[str, dict[str, str]] = {}
    current = None
    names = {id(v): k for k, v in schema.BY_TABLE.items()}
    for i, line in enumerate(lines, 1):
        m = re.match(r"^([A-Z_]+) = pa\.schema\(\[", line)
        if m:
            obj = getattr(schema, m.group(1), None)
            current = names.get(id(obj))
            if current:
                tables[current] = {}
            continue
        if current and line.startswith("])"):
            current = None
            continue
        c = re.match(r'^\s*\("([a-z0-9_]+)",', line)
        if current and c:
            tables[current][c.group(1)] = _meaning(lines, comments, i)
    for table, sch in schema.BY_TABLE.items():  # columns added by code, not a literal line
        for name in sch.names:
            tables.setdefault(table, {}).setdefault(name, "")
    published = {name: doc for name, (_, doc) in schema.COLUMNS.items()}
    # a column of the same name in another table (a table built from another's fields) or published means the same
    known = {name: m for cols in tables.values() for name, m in cols.items() if m}
    for table, cols in tables.items():
        for name, meaning in cols.items():
            cols[name] = meaning or known.get(name) or published.get(name) or COLUMN_DOCS.get(f"{table}.{name}") \
                or COLUMN_DOCS.get(name, "")
    tables["dataset"] = published
    return tables


def _field_meanings() -> dict[str, tuple[str, str, object]]:
    """section.field -> (type, meaning, default)."""
    from pipeline.rundir import config

    src = CONFIG_SRC.read_text()
    lines, comments = src.splitlines(), _comments(CONFIG_SRC)
    out: dict[str, tuple[str, str, object]] = {}
    for cfg_field in dataclasses.fields(config.Config):
        section = cfg_field.type if isinstance(cfg_field.type, type) else getattr(config, str(cfg_field.type), None)
        if section is None or not dataclasses.is_dataclass(section):
            continue
        start = next(i for i, line in enumerate(lines, 1) if line.startswith(f"class {section.__name__}"))
        for f in dataclasses.fields(section):
            key = f"{cfg_field.name}.{f.name}"
            lineno = next(i for i in range(start, len(lines) + 1)
                          if re.match(rf"^\s+{f.name}\s*:", lines[i - 1]))
            meaning = _meaning(lines, comments, lineno) or FIELD_DOCS.get(key, "")
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            out[key] = (str(f.type), meaning, default)
    return out


def _presets() -> dict[str, dict[str, object]]:
    import tomllib

    out = {}
    for path in sorted((ROOT / "data" / "presets").glob("*.toml")):
        data = tomllib.loads(path.read_text())
        out[path.stem] = {f"{s}.{k}": v for s, sec in data.items() if isinstance(sec, dict) for k, v in sec.items()}
    return out


def _fmt(value: object) -> str:
    return "`" + repr(value).replace("|", "\\|") + "`"


def run_directory_page() -> str:
    intro = """# The run directory

<!-- generated by `python -m pipeline.outputs.docs_gen` from pipeline/rundir/schema.py: do not edit -->

A run directory holds all of a run's state: `config.toml` (the resolved config), `manifest.json` (versions,
host, seeds, per-stage times and counts, each profile call and its settings, growth and `filter_settings`),
and one folder of parquet shards per table, keyed by `task_id`. A shard counts only once its marker in the
table's `_done/` folder exists (written last; plain parquet readers skip `_done`). `dataset/` (from
`opsynth publish`) is rebuilt from the tables; `opsynth report` builds its DuckDB database from them outside the
run directory (docs/auditing.md).

"""
    where = {"tasks": "sample, or audit's import", "measurements": "profile", "verdicts": "decontaminate, filter, dedupe",
             "contamination": "decontaminate", "dedupe": "dedupe", "prescreen": "sample (the CPU pre-screen; not "
             "published)", "labels": "audit's labels stage",
             "shortcuts": "profile with `profile.shortcuts_only` (the shortcut checks alone on a measured run; the "
             "filter joins them to the measurements by task_id)", "dataset": "publish: `dataset/data/train-*.parquet`"}
    parts = [intro]
    for table, cols in _column_meanings().items():
        parts.append(f"## {table}\n\nWritten by {where.get(table, table)}.\n\n| column | meaning |\n| --- | --- |")
        parts.extend(f"| `{c}` | {m or '—'} |" for c, m in cols.items())
        parts.append("")
        if table == "dataset":
            parts.append(_releases_note(list(cols)))
    return "\n".join(parts)


def release_columns() -> dict[str, list[str]]:
    """Each shipped release (data/releases/NAME) and the columns of its parquet shards."""
    import pyarrow.parquet as pq

    out = {}
    for folder in sorted((ROOT / "data" / "releases").glob("*/data")):
        shards = sorted(folder.glob("*.parquet"))
        if shards:
            out[folder.parent.name] = pq.read_schema(shards[0]).names
    return out


def _releases_note(columns: list[str]) -> str:
    """Which of the dataset columns each shipped release lacks (a reader of it gets no such column)."""
    lines = []
    for name, have in release_columns().items():
        lacks = [c for c in columns if c not in have]
        what = ("every column above" if not lacks else
                f"all but {len(lacks)} of the columns above; it lacks " + ", ".join(f"`{c}`" for c in lacks))
        lines.append(f"- `data/releases/{name}` ({len(have)} columns): {what}.")
    if not lines:
        return ""
    return "The shipped releases hold:\n\n" + "\n".join(lines) + "\n"


def configuration_page() -> str:
    presets = _presets()
    names = list(presets)
    head = """# Configuration

<!-- generated by `python -m pipeline.outputs.docs_gen` from pipeline/rundir/config.py and data/presets/: do not edit -->

A run's config is frozen dataclasses (`pipeline/rundir/config.py`), resolved from a preset (`--preset NAME`,
`data/presets/NAME.toml`) or a TOML file (`--config FILE`) and written to `DIR/config.toml`. A run directory
refuses a different config, except a larger `run.n` (`opsynth sample DIR --add N`), `run.workers` and
`run.device`, the filter's thresholds (`opsynth filter DIR --set filter.KEY=VALUE`, repeatable, validated
like the config, logged in the manifest under `filter_settings`; measurements are not touched), the publish
settings (`opsynth publish DIR --set publish.KEY=VALUE`, logged under `publish_settings`) and a profile
call's settings (`opsynth profile DIR --preset h200`, recorded for that call). `opsynth run` on a run directory
whose filter or publish settings were changed with `--set` keeps them (and says so).

"""
    rows = ["| field | type | default | " + " | ".join(names) + " | meaning |",
            "| --- | --- | --- | " + " | ".join("---" for _ in names) + " | --- |"]
    for key, (typ, meaning, default) in _field_meanings().items():
        preset_cells = [_fmt(presets[n][key]) if key in presets[n] else "" for n in names]
        rows.append(f"| `{key}` | `{typ}` | {_fmt(default)} | " + " | ".join(preset_cells) + f" | {meaning or '—'} |")
    return head + "\n".join(rows) + "\n"


PAGES = {"run-directory.md": run_directory_page, "configuration.md": configuration_page}


def missing_meanings() -> list[str]:
    cols = [f"{t}.{c}" for t, cs in _column_meanings().items() for c, m in cs.items() if not m]
    fields = [k for k, (_, m, _) in _field_meanings().items() if not m]
    return cols + fields


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a generated page is stale")
    args = ap.parse_args(argv)
    stale = []
    for name, build in PAGES.items():
        page, path = build(), DOCS / name
        if args.check:
            if not path.exists() or path.read_text() != page:
                stale.append(name)
        else:
            path.write_text(page)
            print(f"wrote docs/{name}")
    if stale:
        print(f"stale: {', '.join(stale)}; run python -m pipeline.outputs.docs_gen", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
