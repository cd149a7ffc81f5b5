"""report.duckdb, the canned reports and ad-hoc SQL over a tiny hand-made run directory."""

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
    import os
    import time

    future = time.time() + 5
    for p in rd.path.glob("verdicts/_done/part-*"):
        os.utime(p, (future, future))
    assert "(2 rows)" in report.query(rd, "SELECT * FROM accepted")
    with pytest.raises(OpsynthError, match="query failed"):
        report.query(rd, "SELECT * FROM no_such_table")


def test_report_on_a_directory_without_tasks(tmp_path):
    with pytest.raises(OpsynthError, match="no tasks/ table"):
        report.build(RunDir(tmp_path))
