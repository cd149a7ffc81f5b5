"""The dedupe stage on a tiny hand-made run directory: what it reads (kept tasks, eager times, the window), what
it writes (DIR/dedupe/, verdicts, counts) and what the report shows of it."""

import pyarrow.parquet as pq

from pipeline.outputs import report
from pipeline.rundir.config import Config, FilterSection
from pipeline.rundir.schema import DEDUPE, MEASUREMENTS, TASKS
from pipeline.rundir.store import RunDir
from pipeline.stages import dedupe


def task(op: str, batch: int) -> tuple[str, str]:
    """(code, graph JSON) of one pointwise op in the template's layout."""
    var = op.rsplit(".", 1)[-1]
    code = (f'import torch\n\n\nclass Model(torch.nn.Module):\n    """{op}"""\n\n    def forward(self, x):\n'
            f"        {var} = {op}(x)\n        return {var}\n\n\nbatch_size = {batch}\nfeatures = 1024\n\n\n"
            "def get_inputs():\n    x = torch.rand(batch_size, features)\n    return [x]\n")
    graph = (f'{{"nodes": [{{"kind": "input", "id": "x", "shape": [{batch}, 1024]}}, {{"kind": "op", "op": "{op}", '
             f'"id": "{var}"}}], "edges": [{{"arg": "x", "source": "x", "target": "{var}"}}]}}')
    return code, graph


def make_run(path, cfg: Config) -> RunDir:
    """tanh at four sizes (t3 dropped by filter), a different op (u1), an exact copy of u1 (u2)."""
    rd = RunDir(path)
    rd.init(cfg)
    rows = []
    for i, pred in enumerate((3.0, 40.0, 12.0, 10.0)):
        code, graph = task("torch.tanh", 2 ** (i + 2))
        rows.append({"task_id": f"t{i}", "code": code, "graph": graph, "graph_hash": f"g{i}", "ops": ["torch.tanh"],
                     "predicted_ms": pred})
    code, graph = task("torch.sigmoid", 4)
    rows += [{"task_id": u, "code": code, "graph": graph, "graph_hash": "h", "ops": ["torch.sigmoid"],
              "predicted_ms": 3.0} for u in ("u1", "u2")]
    rd.write_shard("tasks", 0, rows, TASKS)
    # the prediction places a task (t2 at 12 ms is nearest the 10 ms log-middle of 1-100); measured times, which
    # differ between re-runs, do not: t1's eager 11 ms would be nearer
    eager = {"t1": 11.0, "t2": 25.0, "t3": 10.0, "u1": 5.0, "u2": 5.0}
    rd.write_shard("measurements", 0, [{"task_id": t, "status": "ok", "eager_ms": ms} for t, ms in eager.items()]
                   + [{"task_id": "t0", "status": "timeout", "eager_ms": 11.0}], MEASUREMENTS)
    rd.write_verdicts("filter", [{"task_id": r["task_id"], "keep": r["task_id"] != "t3",
                                  "reason": "slow" if r["task_id"] == "t3" else ""} for r in rows])
    return rd


def test_stage_keeps_the_representative_and_names_it(tmp_path):
    rd = make_run(tmp_path / "run", Config())
    counts = dedupe.run(rd, Config())
    rows = {r["task_id"]: r for r in rd.read_rows("dedupe")}
    assert set(rows) == {"t0", "t1", "t2", "u1", "u2"}  # t3 was dropped by filter: not a candidate
    assert pq.read_schema(next((rd.path / "dedupe").glob("part-*.parquet"))).names == DEDUPE.names
    assert [t for t, r in rows.items() if r["keep"]] == ["t2", "u1"]
    assert rows["t0"]["reason"] == rows["t1"]["reason"] == "near duplicate of t2: same graph up to sizes"
    assert rows["t2"]["representative_reason"].startswith("predicted 12 ms nearest the window's log-middle 10 ms")
    assert rows["u2"]["reason"] == "exact duplicate of u1" and rows["u2"]["near_cluster"] is None
    assert rows["t0"]["canonical_graph"] == rows["t2"]["canonical_graph"] != rows["u1"]["canonical_graph"]
    verdicts = {v["task_id"]: v for v in rd.read_rows("verdicts") if v["stage"] == "dedupe"}
    assert {t: v["keep"] for t, v in verdicts.items()} == {t: r["keep"] for t, r in rows.items()}
    assert counts["near_dropped"] == counts["near_same_graph_dropped"] == 2 and counts["exact_dropped"] == 1
    assert counts["near_clusters"] == 1 and counts["largest_near_cluster"] == 3
    assert rd.manifest()["stages"]["dedupe"]["near_dropped"] == 2


def test_window_comes_from_the_filter_section(tmp_path):
    cfg = Config(filter=FilterSection(min_eager_ms=1.0, max_eager_ms=9.0))  # log-middle 3 ms: t0's predicted 3 ms
    rd = make_run(tmp_path / "run", cfg)
    dedupe.run(rd, cfg)
    rows = {r["task_id"]: r for r in rd.read_rows("dedupe")}
    assert [t for t, r in rows.items() if r["keep"]] == ["t0", "u1"]
    assert rows["t0"]["representative_reason"].startswith("predicted 3 ms")


def test_report_lists_near_clusters(tmp_path):
    rd = make_run(tmp_path / "run", Config())
    dedupe.run(rd, Config())
    text = report.query(rd, "SELECT representative, tasks, same_graph, same_ops FROM near_clusters")
    assert "t2" in text.splitlines()[2] and "(1 row)" in text
    assert text.splitlines()[2].split() == ["t2", "3", "2", "0"]
