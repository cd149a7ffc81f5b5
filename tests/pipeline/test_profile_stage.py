"""The profile stage spends no worker time on tasks an earlier stage (decontaminate) already dropped, and only an
earlier stage decides that: a lost shard's tasks get their own measurements back."""

import dataclasses

from pipeline.rundir.config import load_preset
from pipeline.rundir.schema import TASKS, conform
from pipeline.rundir.store import RunDir
from pipeline.stages import profile


def _run(tmp_path, tasks: list[dict], skip_dropped: bool, filtered: bool = False) -> dict:
    cfg = load_preset("demo")
    cfg = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, workers=1),
                              profile=dataclasses.replace(cfg.profile, compile=False))
    rd = RunDir(tmp_path / f"run-{skip_dropped}")
    rd.init(cfg)
    rd.write_shard("tasks", 0, conform(tasks, TASKS), TASKS)
    rd.write_verdicts("decontaminate", [{"task_id": "t0", "keep": True, "reason": ""},
                                        {"task_id": "t1", "keep": False, "reason": "contaminated by ast"}])
    if filtered:  # what an earlier profile + filter left behind before the measurements shard was lost
        rd.write_verdicts("filter", [{"task_id": "t0", "keep": False, "reason": "fakeable by a fixed output (0.5)"},
                                     {"task_id": "t1", "keep": False, "reason": "not profiled: dropped by decontaminate"}])
    counts = profile.run(rd, cfg, "local", skip_dropped=skip_dropped)
    return {"counts": counts, "rows": {m["task_id"]: m for m in rd.read_rows("measurements")}}


def test_dropped_tasks_are_skipped_with_their_reason_and_the_rest_profiled(tmp_path, tanh_tasks):
    got = _run(tmp_path, tanh_tasks(2), skip_dropped=True)
    assert got["counts"]["profiled"] == 1 and got["counts"]["skipped"] == 1
    t0 = got["rows"]["t0"]
    assert t0["status"] == "ok" and t0["eager_ms"] > 0 and t0["quick_eager_ms"] > 0
    # where the worker's wall time went reaches the measurements table (the GPU runs' diagnostics)
    assert 0 < t0["cpu_s"] and t0["lock_wait_exclusive_s"] <= t0["lock_wait_s"]
    assert t0["lock_wait_s"] + t0["budget_wait_s"] <= t0["wall_s"]
    skipped = got["rows"]["t1"]
    assert skipped["status"] == "skipped" and skipped["eager_ms"] is None
    assert "decontaminate" in skipped["error"] and "contaminated by ast" in skipped["error"]


def test_without_skipping_every_task_is_profiled(tmp_path, tanh_tasks, monkeypatch, capsys):
    monkeypatch.setenv("OPSYNTH_PROGRESS_S", "0.2")  # off a terminal (captured stderr): plain progress lines
    got = _run(tmp_path, tanh_tasks(2), skip_dropped=False)
    assert got["counts"]["skipped"] == 0
    assert {m["status"] for m in got["rows"].values()} == {"ok"}
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("[profile]")]
    assert any(x.startswith("[profile] starting workers: 2 tasks, ") for x in lines), lines


def test_a_lost_shard_is_measured_again_whatever_the_filter_said(tmp_path, tanh_tasks):
    got = _run(tmp_path, tanh_tasks(2), skip_dropped=True, filtered=True)
    assert got["rows"]["t0"]["status"] == "ok" and got["rows"]["t0"]["eager_ms"] > 0
    assert got["rows"]["t1"]["status"] == "skipped" and "decontaminate" in got["rows"]["t1"]["error"]


INSENSITIVE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.ones(16, 16) * 3 + 0 * x

def get_inputs():
    return [torch.rand(16, 16)]

def get_init_inputs():
    return []
'''


def test_a_task_rejected_before_timing_keeps_its_verdict_untimed(tmp_path, tanh_tasks):
    """profile.skip_timing_when_rejected: the filter stage keeps and rejects the same tasks for the same reasons,
    and the rejected task's row says why it was not timed."""
    from pipeline.stages import filter as filter_stage

    tasks = [*tanh_tasks(1), {"task_id": "t1", "name": "Ones", "code": INSENSITIVE}]
    got = {}
    for skip in (False, True):
        cfg = load_preset("demo")
        cfg = dataclasses.replace(
            cfg, run=dataclasses.replace(cfg.run, workers=1),
            profile=dataclasses.replace(cfg.profile, compile=False, skip_timing_when_rejected=skip),
            filter=dataclasses.replace(cfg.filter, min_eager_ms=0.0, max_eager_ms=1e9, require_compile=False))
        rd = RunDir(tmp_path / f"run-{skip}")
        rd.init(cfg)
        rd.write_shard("tasks", 0, conform(tasks, TASKS), TASKS)
        profile.run(rd, cfg, "local")
        filter_stage.run(rd, cfg)
        rows = {m["task_id"]: m for m in rd.read_rows("measurements")}
        verdicts = {v["task_id"]: (v["keep"], v["reason"].split(" (")[0]) for v in rd.read_rows("verdicts")}
        got[skip] = rows, verdicts
    assert got[True][1] == got[False][1] == {"t0": (True, ""), "t1": (False, "input-insensitive")}
    (timed, untimed), (_, kept_off) = [got[True][0][t] for t in ("t0", "t1")], [got[False][0][t] for t in ("t0", "t1")]
    assert untimed["timing_skipped"].startswith("input-insensitive") and untimed["eager_ms"] is None
    assert timed["timing_skipped"] == "" and timed["eager_ms"] > 0
    assert kept_off["eager_ms"] > 0 and kept_off["timing_skipped"] == ""  # off: timed like any other
