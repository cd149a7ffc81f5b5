"""The report database, its cache, the canned reports and ad-hoc SQL over a tiny hand-made run directory."""

import duckdb
import pytest

from pipeline.errors import OpsynthError
from pipeline.outputs import report
from pipeline.rundir.config import Config
from pipeline.rundir.schema import CONTAMINATION, DEDUPE, MEASUREMENTS, TASKS
from pipeline.rundir.store import RunDir


def make_run(path) -> RunDir:
    """Four tasks: t1 accepted, t2 rejected by filter, t3 contaminated, t4 a duplicate of t1."""
    rd = RunDir(path)
    rd.init(Config())
    ops = {"t1": ["nn.Conv2d", "F.relu"], "t2": ["torch.tanh"], "t3": ["nn.Conv2d"], "t4": ["nn.Conv2d", "F.relu"]}
    rd.write_shard("tasks", 0, [{"task_id": k, "name": k.upper(), "code": "x", "ops": v, "num_ops": len(v)}
                                for k, v in ops.items()], TASKS)
    rd.write_shard("measurements", 0, [{"task_id": k, "status": "ok" if k != "t2" else "timeout", "eager_ms": 2.0}
                                       for k in ops], MEASUREMENTS)
    rd.write_verdicts("filter", [{"task_id": "t1", "keep": True}, {"task_id": "t2", "keep": False,
                                                                    "reason": "profile failed (timeout)"},
                                 {"task_id": "t3", "keep": True}, {"task_id": "t4", "keep": True}])
    cont = [{"task_id": k, "contaminated": k == "t3", "kb_nearest": "level1/63_conv" if k == "t3" else "level2/1_x",
             "kb_ast_similarity": 0.95 if k == "t3" else 0.5, "kb_op_signature_match": k == "t3",
             "kb_minhash_jaccard": 0.2, "detectors_fired": ["ast", "op_signature"] if k == "t3" else []} for k in ops]
    rd.replace_table("contamination", cont, CONTAMINATION)
    rd.write_verdicts("decontaminate", [{"task_id": c["task_id"], "keep": not c["contaminated"],
                                         "reason": "contaminated by ast+op_signature (nearest level1/63_conv)"
                                         if c["contaminated"] else ""} for c in cont])
    rd.replace_table("dedupe", [{"task_id": "t1", "exact_cluster": "t1", "keep": True, "reason": ""},
                                {"task_id": "t4", "exact_cluster": "t1", "keep": False,
                                 "reason": "exact duplicate of t1"}], DEDUPE)
    rd.write_verdicts("dedupe", [{"task_id": "t1", "keep": True},
                                 {"task_id": "t4", "keep": False, "reason": "exact duplicate of t1"}])
    return rd


def test_build_has_every_table_and_the_accepted_set(tmp_path):
    rd = make_run(tmp_path / "run")
    db = report.build(rd)
    con = duckdb.connect(str(db), read_only=True)
    counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
              for t in ("tasks", "measurements", "verdicts", "contamination", "dedupe", "rejections", "accepted")}
    assert counts == {"tasks": 4, "measurements": 4, "verdicts": 10, "contamination": 4, "dedupe": 2,
                      "rejections": 3, "accepted": 1}
    assert con.execute("SELECT task_id FROM accepted").fetchall() == [("t1",)]
    funnel = dict(con.execute("SELECT stage, tasks FROM funnel").fetchall())
    # run order: decontaminate (code only) drops t3 before the GPU; profiled ok counts the tasks still in
    assert funnel["kept after decontaminate"] == 3 and funnel["profiled (status ok)"] == 2
    assert funnel["kept after filter"] == 2 and funnel["accepted"] == 1
    cov = {r[0]: r[1:] for r in con.execute("SELECT op, tasks, accepted FROM op_coverage").fetchall()}
    assert cov["nn.Conv2d"] == (3, 1) and cov["torch.tanh"] == (1, 0)
    con.close()


def test_canned_report_text(tmp_path):
    text = report.canned(make_run(tmp_path / "run"))
    assert "== Funnel ==" in text and "== Operator coverage" in text
    assert "profile failed" in text and "exact duplicate of t1" in text
    lines = {ln.split()[0]: ln.split() for ln in text.splitlines() if ln.startswith(("ast ", "op_signature", "any "))}
    assert lines["ast"][1] == "1" and lines["op_signature"][1] == "1"
    assert "level1/63_conv" in text


def test_query_and_rebuild_after_the_run_changes(tmp_path):
    rd = make_run(tmp_path / "run")
    out = report.query(rd, "SELECT task_id, rejected_by FROM task_summary WHERE accepted ORDER BY task_id")
    assert "t1" in out and "(1 row)" in out
    rd.write_verdicts("dedupe", [{"task_id": "t1", "keep": True}, {"task_id": "t4", "keep": True}])
    assert "(2 rows)" in report.query(rd, "SELECT * FROM accepted")
    with pytest.raises(OpsynthError, match="query failed"):
        report.query(rd, "SELECT * FROM no_such_table")


def _listing(path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(path)): (p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(path.rglob("*"))}


def test_the_database_is_built_once_and_reused_until_the_run_changes(tmp_path):
    rd = make_run(tmp_path / "run")
    path, built = report.ensure(rd)
    assert built and path.is_file() and path.parent == report.cache_dir()
    stamp = path.stat().st_mtime_ns
    assert report.ensure(rd) == (path, False)  # the second call reuses it, untouched
    assert "(1 row)" in report.query(rd, "SELECT * FROM accepted") and path.stat().st_mtime_ns == stamp
    # a stage writes a shard: a new key, the next call builds it again and sees the change
    rd.write_verdicts("dedupe", [{"task_id": "t1", "keep": True}, {"task_id": "t4", "keep": True}])
    assert report.ensure(rd) == (path, True)
    assert "(2 rows)" in report.query(rd, "SELECT * FROM accepted")
    assert report.ensure(rd) == (path, False)
    # `filter --set` changes config.toml and the manifest only: that is a change of the run too
    rd.set_filter(["filter.min_eager_ms=3.5"])
    assert rd.manifest()["filter_settings"] and report.ensure(rd)[1] is True


def test_the_report_writes_nothing_into_the_run_directory(tmp_path):
    """A release's run/ is shipped as it is: report builds beside it, never in it."""
    rd = make_run(tmp_path / "release" / "run")
    before = _listing(tmp_path / "release")
    report.canned(rd)
    report.query(rd, "SELECT count(*) FROM tasks")
    assert _listing(tmp_path / "release") == before
    assert report.db_path(rd).is_file()
    other = make_run(tmp_path / "elsewhere" / "run")  # another run directory of the same name: its own file
    assert report.db_path(other) != report.db_path(rd)


def test_db_puts_the_database_where_asked(tmp_path):
    rd = make_run(tmp_path / "run")
    mine = tmp_path / "mine" / "audit.duckdb"
    assert report.ensure(rd, mine) == (mine, True) and report.ensure(rd, mine) == (mine, False)
    assert not report.db_path(rd).exists()
    con = duckdb.connect(str(mine), read_only=True)
    assert con.execute("SELECT run_dir FROM report_source").fetchone()[0] == str(rd.path.resolve())
    con.close()


def test_cells_are_whole_in_queries_and_with_full(tmp_path):
    rd = make_run(tmp_path / "run")
    long = "contaminated by ast+op_signature (nearest level1/63_conv)" + " and more" * 10
    rd.write_verdicts("decontaminate", [{"task_id": "t3", "keep": False, "reason": long}])
    assert long in report.query(rd, "SELECT reason FROM rejections WHERE task_id = 't3'")
    assert "..." in report.query(rd, "SELECT reason FROM rejections WHERE task_id = 't3'", full=False)
    nearest = "level1/63_conv_" + "x" * 80  # the canned reports cut a cell this long, unless --full
    cont = [{**r, "kb_nearest": nearest if r["task_id"] == "t3" else r["kb_nearest"]}
            for r in rd.read_rows("contamination")]
    rd.replace_table("contamination", cont, CONTAMINATION)
    assert nearest not in report.canned(rd) and nearest[:60] in report.canned(rd)
    assert nearest in report.canned(rd, full=True)


def test_report_on_a_directory_without_tasks(tmp_path):
    with pytest.raises(OpsynthError, match="no tasks/ table"):
        report.build(RunDir(tmp_path))


def test_the_command_reuses_the_database_and_leaves_the_run_as_it_was(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    rd = make_run(tmp_path / "release" / "run")
    before = _listing(tmp_path / "release")

    def opsynth_report(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pipeline.cli", "report", str(rd.path), *args],
                              cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=300)

    first = opsynth_report("--sql", "SELECT reason FROM rejections ORDER BY task_id")
    assert first.returncode == 0, first.stderr
    assert "profile failed (timeout)" in first.stdout and "(reused" not in first.stderr
    again = opsynth_report()
    assert again.returncode == 0 and "== Funnel ==" in again.stdout
    assert f"{report.db_path(rd)} (reused: the run has not changed since it was built)" in again.stderr
    assert _listing(tmp_path / "release") == before
