"""The run directory contract: shards with markers, atomic writes, config mismatch detection."""

import json

import pytest

from pipeline.errors import OpsynthError
from pipeline.rundir.config import load_preset
from pipeline.rundir.schema import VERDICTS
from pipeline.rundir.store import RunDir


def test_only_marked_shards_are_read(tmp_path):
    rd = RunDir(tmp_path)
    rd.write_shard("verdicts", 0, [{"task_id": "a", "stage": "filter", "keep": True, "reason": ""}], VERDICTS)
    rd.write_shard("verdicts", 1, [{"task_id": "b", "stage": "filter", "keep": False, "reason": "x"}], VERDICTS)
    # a shard whose marker is missing (killed before the marker) is invisible
    rd.marker_path("verdicts", 1).unlink()
    assert [r["task_id"] for r in rd.read_rows("verdicts")] == ["a"]
    assert rd.done_shards("verdicts") == [0] and not rd.is_done("verdicts", 1)
    assert not list((tmp_path / "verdicts").glob(".*tmp*"))


def test_a_rewrite_killed_before_its_marker_leaves_the_shard_not_done(tmp_path, monkeypatch):
    import pipeline.rundir.store as store

    rd = RunDir(tmp_path)
    rd.write_shard("verdicts", 0, [{"task_id": "a", "stage": "filter", "keep": True, "reason": ""}], VERDICTS)

    def killed(*_):
        raise KeyboardInterrupt
    monkeypatch.setattr(store, "_atomic_write_bytes", killed)
    grown = [{"task_id": t, "stage": "filter", "keep": True, "reason": ""} for t in ("a", "b")]
    with pytest.raises(KeyboardInterrupt):
        rd.write_shard("verdicts", 0, grown, VERDICTS)
    # the old rows never count as the new shard: a rerun writes it again
    assert not rd.is_done("verdicts", 0) and rd.read_rows("verdicts") == []
    monkeypatch.undo()
    rd.write_shard("verdicts", 0, grown, VERDICTS)
    assert [r["task_id"] for r in rd.read_rows("verdicts")] == ["a", "b"]
    assert not list((tmp_path / "verdicts").glob(".*tmp*"))


def test_plain_parquet_readers_see_only_complete_shards(tmp_path):
    import pyarrow.parquet as pq

    rd = RunDir(tmp_path)
    rd.write_verdicts("filter", [{"task_id": "a", "keep": True}])
    rd.write_verdicts("dedupe", [{"task_id": "a", "keep": True}])
    assert pq.read_table(tmp_path / "verdicts").num_rows == 2  # markers in _done/ are skipped


def test_write_verdicts_replaces_one_stage_only(tmp_path):
    rd = RunDir(tmp_path)
    rd.write_verdicts("filter", [{"task_id": "a", "keep": True}])
    rd.write_verdicts("dedupe", [{"task_id": "a", "keep": False, "reason": "dup"}])
    rd.write_verdicts("filter", [{"task_id": "a", "keep": False, "reason": "slow"}])
    got = sorted((r["stage"], r["keep"], r["reason"]) for r in rd.read_rows("verdicts"))
    assert got == [("dedupe", False, "dup"), ("filter", False, "slow")]


def test_init_refuses_a_directory_from_another_config(tmp_path):
    cfg = load_preset("demo")
    rd = RunDir(tmp_path / "run")
    rd.init(cfg)
    rd.init(cfg.with_overrides(workers=7))  # how it runs may change
    with pytest.raises(OpsynthError, match="different config.*seed"):
        rd.init(cfg.with_overrides(seed=cfg.run.seed + 1))
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert "versions" in manifest["host"]
    assert (tmp_path / "run" / "config.toml").read_text() == cfg.to_toml()


def test_missing_table_names_the_stage_to_run(tmp_path):
    with pytest.raises(OpsynthError, match="opsynth profile"):
        RunDir(tmp_path).require_table("measurements", "profile")


def test_every_call_of_a_stage_is_kept_and_summed(tmp_path):
    from pipeline.rundir.config import load_preset

    rd = RunDir(tmp_path / "r")
    rd.init(load_preset("demo"))
    # a manifest written before calls were kept: its one record becomes the first call
    rd.update_manifest(stages={"profile": {"seconds": 100.0, "profiled": 10, "finished": "x"}})
    rd.record_stage("profile", 50.0, profiled=20, gpus=2)
    rd.record_stage("profile", 25.5, profiled=30, gpus=1)
    rec = rd.manifest()["stages"]["profile"]
    assert rec["seconds"] == 25.5 and rec["profiled"] == 30  # the last call, as before
    assert [c["seconds"] for c in rec["calls"]] == [100.0, 50.0, 25.5]
    assert [c.get("gpus") for c in rec["calls"]] == [None, 2, 1]
    assert rec["seconds_all_calls"] == 175.5
    assert all("calls" not in c for c in rec["calls"])


def test_many_shards_read_on_threads_keep_their_order_and_a_broken_one_is_named(tmp_path):
    rd = RunDir(tmp_path)
    for k in range(40):  # past the count read one at a time
        rd.write_shard("verdicts", k, [{"task_id": f"t{k:02d}-{i}", "stage": "filter", "keep": True, "reason": ""}
                                       for i in range(3)], VERDICTS)
    assert [r["task_id"] for r in rd.read_rows("verdicts")] == [f"t{k:02d}-{i}" for k in range(40) for i in range(3)]
    rd.shard_path("verdicts", 17).write_bytes(b"not parquet")
    with pytest.raises(OpsynthError, match="part-00017.parquet cannot be read"):
        rd.read_rows("verdicts")
