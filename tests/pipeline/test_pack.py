"""pack / unpack: a profile call on the packed copy of a run lands in the full run as if it had run there."""

import dataclasses

import pyarrow.parquet as pq
import pytest

from pipeline.errors import OpsynthError
from pipeline.rundir.config import load_preset
from pipeline.rundir.pack import PROFILE_MEASUREMENT_COLUMNS, PROFILE_TASK_COLUMNS, pack, unpack
from pipeline.rundir.schema import TASKS, conform
from pipeline.rundir.store import RunDir
from pipeline.stages import profile
from tests.pipeline.test_profile_shortcuts_only import BOTH, DEAD_Y


def _measured_run(path):
    cfg = load_preset("demo")
    cfg = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, workers=1, shard_size=1),
                              profile=dataclasses.replace(cfg.profile, compile=False))
    rd = RunDir(path)
    rd.init(cfg)
    tasks = [{"task_id": "dead", "name": "Dead", "code": DEAD_Y}, {"task_id": "both", "name": "Both", "code": BOTH}]
    for k, t in enumerate(tasks):
        rd.write_shard("tasks", k, conform([t], TASKS), TASKS)
    profile.run(rd, cfg, "local")
    return rd, cfg


def _calls(rd):
    return rd.manifest()["stages"]["profile"]["calls"]


def test_a_shortcuts_call_on_the_packed_run_comes_back_into_the_full_run(tmp_path):
    full, cfg = _measured_run(tmp_path / "run")
    measured = {k: full.shard_path("measurements", k).read_bytes() for k in (0, 1)}
    out = pack(full.path, tmp_path / "packed")
    packed = RunDir(tmp_path / "packed")
    assert out["shards"]["tasks"] == 2 and out["shards"]["measurements"] == 2
    assert tuple(pq.read_schema(packed.shard_path("tasks", 0)).names) == PROFILE_TASK_COLUMNS
    assert tuple(pq.read_schema(packed.shard_path("measurements", 1)).names) == PROFILE_MEASUREMENT_COLUMNS
    assert packed.config_path.read_text() == full.config_path.read_text()

    cfg2 = dataclasses.replace(cfg, profile=dataclasses.replace(
        cfg.profile, shortcuts_only=True, shortcut_checks=("dead",)))
    profile.run(packed, cfg2, "local")
    assert not full.done_shards("shortcuts")
    r = unpack(packed.path, full.path)
    assert r == {"shards": {"measurements": 0, "shortcuts": 2}, "measured_again": 0, "profile_calls": 1}
    assert {m["task_id"]: m["dead_inputs"] for m in full.read_rows("shortcuts")} == {"dead": ["y"], "both": []}
    assert {k: full.shard_path("measurements", k).read_bytes() for k in (0, 1)} == measured  # left as they were
    assert len(_calls(full)) == 2 and _calls(full)[-1] == _calls(packed)[-1]
    assert unpack(packed.path, full.path) == {"shards": {"measurements": 0, "shortcuts": 0}, "measured_again": 0,
                                              "profile_calls": 0}


def test_a_profile_call_on_the_packed_run_fills_the_shards_the_full_run_lacks(tmp_path):
    full, cfg = _measured_run(tmp_path / "run")
    for p in (full.shard_path("measurements", 1), full.marker_path("measurements", 1)):
        p.unlink()  # as if the call that measured shard 1 had been cut off
    pack(full.path, tmp_path / "packed")
    profile.run(RunDir(tmp_path / "packed"), cfg, "local")
    assert unpack(tmp_path / "packed", full.path)["shards"]["measurements"] == 1
    row = full.read_rows("measurements")[1]
    assert row["task_id"] == "both" and row["status"] == "ok" and row["eager_ms"] > 0  # the whole row came back


def test_pack_refuses_an_existing_folder_and_unpack_a_foreign_run(tmp_path):
    full, _ = _measured_run(tmp_path / "run")
    (tmp_path / "taken").mkdir()
    with pytest.raises(OpsynthError, match="exists"):
        pack(full.path, tmp_path / "taken")
    pack(full.path, tmp_path / "packed")
    other = RunDir(tmp_path / "other")
    cfg = load_preset("demo")
    other.init(dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, seed=cfg.run.seed + 1)))
    with pytest.raises(OpsynthError, match="not packed from"):
        unpack(tmp_path / "packed", other.path)


def test_shortcut_shards_measured_again_on_the_packed_run_replace_the_older_ones_and_never_the_reverse(tmp_path):
    full, cfg = _measured_run(tmp_path / "run")
    dead = dataclasses.replace(cfg, profile=dataclasses.replace(cfg.profile, shortcuts_only=True,
                                                                shortcut_checks=("dead",)))
    profile.run(full, dead, "local")  # the full run has its checks, older than the packed run's below
    old = {k: full.shard_path("shortcuts", k).read_bytes() for k in (0, 1)}
    pack(full.path, tmp_path / "packed")
    packed = RunDir(tmp_path / "packed")
    stale = tmp_path / "stale"  # a copy of the pack as it was, before the packed run measured again
    import shutil
    shutil.copytree(packed.path, stale)
    for k in (0, 1):  # the checks run again, as a shortcuts-only call does for stale rows
        for p in (packed.shard_path("shortcuts", k), packed.marker_path("shortcuts", k)):
            p.unlink()
    profile.run(packed, dead, "local")
    assert {k: packed.shard_path("shortcuts", k).read_bytes() for k in (0, 1)} != old
    r = unpack(packed.path, full.path)
    assert r["measured_again"] == 2 and r["shards"]["shortcuts"] == 0
    new = {k: full.shard_path("shortcuts", k).read_bytes() for k in (0, 1)}
    assert new == {k: packed.shard_path("shortcuts", k).read_bytes() for k in (0, 1)}
    assert {m["task_id"]: m["dead_inputs"] for m in full.read_rows("shortcuts")} == {"dead": ["y"], "both": []}
    # the older pack unpacked afterwards leaves the newer checks as they are
    assert unpack(stale, full.path)["measured_again"] == 0
    assert {k: full.shard_path("shortcuts", k).read_bytes() for k in (0, 1)} == new
