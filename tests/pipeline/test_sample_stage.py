"""The sample stage on a process pool writes exactly what it writes in one process, and resumes to it."""

from dataclasses import replace

import pytest

from operators.sample import sample_parallel, sample_tasks
from pipeline.rundir.config import load_preset
from pipeline.rundir.store import RunDir
from pipeline.stages import sample as sample_stage

DEMO = load_preset("demo")


def _config(n: int, shard: int):
    return replace(DEMO, run=replace(DEMO.run, n=n, shard_size=shard))


def _tasks(rd: RunDir) -> list[tuple]:
    return sorted((r["task_id"], r["code"], r["shape_variants"]) for r in rd.read_rows("tasks"))


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    rd = RunDir(tmp_path_factory.mktemp("serial"))
    rd.init(_config(20, 4))
    sample_stage.run(rd, _config(20, 4), processes=1)
    return rd


def test_pool_stage_writes_the_serial_tasks(serial, tmp_path):
    cfg = _config(20, 4)
    rd = RunDir(tmp_path / "pool")
    rd.init(cfg)
    out = sample_stage.run(rd, cfg, processes=2)
    assert out == {"sampled": 20}
    assert _tasks(rd) == _tasks(serial)
    assert rd.manifest()["stages"]["sample"]["processes"] == 2
    # a killed run (shards 1 and 3 lost) resumes to the same tasks
    for k in (1, 3, 4):
        rd.marker_path("tasks", k).unlink()
        rd.shard_path("tasks", k).unlink()
    sample_stage.run(rd, cfg, processes=1)
    assert _tasks(rd) == _tasks(serial)


def test_pool_redraws_a_task_seen_before_it_like_a_serial_run():
    cfg = DEMO.sample
    first = sample_tasks(cfg, 5, range(12), set())
    # index 9 draws what index 2 drew once index 2 is forced elsewhere: pre-seed `seen` with rows 2 and 9's ids
    seen0 = {first[2]["task_id"], first[9]["task_id"]}
    want_seen = set(seen0)
    want = sample_tasks(cfg, 5, range(12), want_seen)
    got_seen = set(seen0)
    got = [row for _, row in sample_parallel(cfg, 5, range(12), got_seen, processes=2, chunk=3)]
    assert [r["task_id"] for r in got] == [r["task_id"] for r in want]
    assert [r["code"] for r in got] == [r["code"] for r in want]
    assert got_seen == want_seen
    assert got[2]["task_id"] != first[2]["task_id"] and got[9]["task_id"] != first[9]["task_id"]


def test_a_grown_run_samples_what_the_larger_n_samples_at_once(serial, tmp_path):
    rd = RunDir(tmp_path / "grown")
    rd.init(_config(18, 4))  # shard 4 holds 2 tasks now and 4 once n is 20
    sample_stage.run(rd, _config(18, 4), processes=1)
    kept = {k: rd.shard_path("tasks", k).read_bytes() for k in range(4)}
    assert rd.shard_rows("tasks", 4) == 2
    assert rd.grow(20) == (18, 20)
    cfg = rd.load_config()
    assert cfg.run.n == 20 and cfg == _config(20, 4)
    assert sample_stage.run(rd, cfg, processes=1) == {"sampled": 20}
    assert _tasks(rd) == _tasks(serial)
    assert [r["task_id"] for r in rd.read_rows("tasks")] == [r["task_id"] for r in serial.read_rows("tasks")]
    assert {k: rd.shard_path("tasks", k).read_bytes() for k in range(4)} == kept  # full shards not rewritten
    assert [g["to"] for g in rd.manifest()["growth"]] == [20]


def _screened_config():
    h200 = load_preset("h200")  # prescreen = "resample"; seed 3's first ten indices include flagged draws
    return replace(h200, run=replace(h200.run, n=10, shard_size=5, seed=3))


def _prescreen_rows(rd: RunDir) -> list[tuple]:
    return [(r["task_id"], r["reason"], r["status"], r["resampled"], r["shapes"]) for r in rd.read_rows("prescreen")]


def test_prescreen_side_table_is_written_with_the_tasks_and_resumes(tmp_path):
    cfg = _screened_config()
    rd = RunDir(tmp_path / "screened")
    rd.init(cfg)
    sample_stage.run(rd, cfg, processes=1)
    tasks = {r["task_id"] for r in rd.read_rows("tasks")}
    rows = rd.read_rows("prescreen")
    assert rd.done_shards("prescreen") == rd.done_shards("tasks") == [0, 1]
    kept = [r for r in rows if not r["resampled"]]
    assert sorted(r["task_id"] for r in kept) == sorted(tasks) and not any(r["reason"] for r in kept)
    flagged = [r for r in rows if r["resampled"]]
    assert flagged and all(r["reason"] and r["task_id"] not in tasks and r["code"] for r in flagged)
    stage = rd.manifest()["stages"]["sample"]
    assert stage["prescreened"] == len(rows) and stage["prescreen_resampled"] == len(flagged)
    before = _prescreen_rows(rd)
    for table in ("tasks", "prescreen"):  # a run killed after shard 0
        rd.marker_path(table, 1).unlink()
        rd.shard_path(table, 1).unlink()
    sample_stage.run(rd, cfg, processes=1)
    assert _prescreen_rows(rd) == before
