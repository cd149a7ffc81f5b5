"""With sample.avoid_near_duplicates the sampler emits one task per operator graph up to sizes and literal values
(dedupe's near-duplicate key), serially, on a process pool and across a grown run, and without it draws repeat."""

from collections import Counter
from dataclasses import replace

from filters.dedupe import canonical_graph_key
from operators.sample import Stats, sample_parallel, sample_tasks, seen_keys
from pipeline.rundir.config import load_preset
from pipeline.rundir.store import RunDir
from pipeline.stages import sample as sample_stage

DEMO = load_preset("demo")
# single pointwise operators: few distinct graphs, so draws repeat one within a few dozen tasks
NARROW = replace(DEMO.sample, min_ops=1, max_ops=1, categories=("activation",), avoid_reference=())
N = 24


def _graph_counts(rows) -> Counter:
    return Counter(canonical_graph_key(r["graph"]) for r in rows)


def test_without_the_option_single_op_draws_repeat_a_graph():
    rows = sample_tasks(NARROW, 3, range(N), set())
    assert max(_graph_counts(rows).values()) > 1  # what dedupe would drop after the GPU measured it


def test_with_the_option_no_two_tasks_share_a_graph_and_the_repeats_were_redrawn():
    cfg = replace(NARROW, avoid_near_duplicates=True)
    stats = Stats()
    rows = sample_tasks(cfg, 3, range(N), set(), stats)
    assert len(rows) == N and max(_graph_counts(rows).values()) == 1
    assert stats.duplicates > 0
    plain = sample_tasks(NARROW, 3, range(N), set())
    # up to the first repeat the draws are the tasks sampled without the option; the repeat is redrawn
    keys = [canonical_graph_key(r["graph"]) for r in plain]
    j = next(i for i, k in enumerate(keys) if k in keys[:i])
    assert [r["task_id"] for r in rows[:j]] == [r["task_id"] for r in plain[:j]]
    assert rows[j]["task_id"] != plain[j]["task_id"]


def test_seen_keys_hold_the_graph_only_with_the_option():
    row = sample_tasks(NARROW, 3, range(1), set())[0]
    assert seen_keys(NARROW, row) == {row["task_id"]}
    assert seen_keys(replace(NARROW, avoid_near_duplicates=True), row) == {
        row["task_id"], f"graph:{canonical_graph_key(row['graph'])}"}


def test_a_pool_samples_what_a_serial_run_samples():
    cfg = replace(NARROW, avoid_near_duplicates=True)
    want_seen: set[str] = set()
    want = sample_tasks(cfg, 4, range(N), want_seen)
    got_seen: set[str] = set()
    got = [row for _, row in sample_parallel(cfg, 4, range(N), got_seen, processes=2, chunk=5)]
    assert [r["task_id"] for r in got] == [r["task_id"] for r in want]
    assert got_seen == want_seen


def test_a_grown_run_avoids_the_graphs_of_its_earlier_tasks(tmp_path):
    cfg = replace(DEMO, run=replace(DEMO.run, n=12, shard_size=4, workers=1),
                  sample=replace(NARROW, avoid_near_duplicates=True))
    rd = RunDir(tmp_path / "run")
    rd.init(cfg)
    sample_stage.run(rd, cfg, processes=1)
    rd.grow(N)
    sample_stage.run(rd, rd.load_config(), processes=1)
    rows = rd.read_rows("tasks", ["task_id", "graph"])
    assert len(rows) == N and max(_graph_counts(rows).values()) == 1
