"""Every stage run too early: one line naming the stage to run first, nothing written. The rule is one
(pipeline/rundir/completeness.py, from the stage declaration), read back here from the command's own output."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.rundir.completeness import order_refusal, prerequisites
from pipeline.rundir.config import load_preset
from pipeline.rundir.schema import MEASUREMENTS, TASKS
from pipeline.rundir.stage_defs import PIPELINE_STAGES
from pipeline.rundir.store import RunDir

ROOT = Path(__file__).resolve().parents[2]
CODE = "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.tanh(x) * {k}\n"
STEPS = ("sample", "decontaminate", "profile", "filter")  # what `upto` can write by hand, in order


def opsynth(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def _cfg(n: int = 2):
    cfg = load_preset("demo")
    return dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, n=n, shard_size=4))


def _ids(rd: RunDir) -> list[str]:
    return [r["task_id"] for r in rd.read_rows("tasks", ["task_id"])]


def write(rd: RunDir, step: str, n: int = 2) -> None:
    """What `step` leaves in the run directory, written by hand (a real stage takes seconds to minutes)."""
    if step == "sample":
        rd.write_shard("tasks", 0, [{"task_id": f"t{i}", "name": "Tanh", "code": CODE.format(k=i + 2),
                                     "ops": ["torch.tanh"]} for i in range(n)], TASKS)
    elif step == "decontaminate":
        rd.write_verdicts("decontaminate", [{"task_id": t, "keep": True} for t in _ids(rd)])
    elif step == "profile":
        rd.write_shard("measurements", 0, [{"task_id": t, "status": "ok", "device": "cpu", "eager_ms": 1.0}
                                           for t in _ids(rd)], MEASUREMENTS)
    elif step == "filter":
        rd.write_verdicts("filter", [{"task_id": t, "keep": True} for t in _ids(rd)])


def make_run(path: Path, upto: str | None) -> RunDir:
    """A run directory (demo config, 2 tasks) whose stages up to `upto` are done."""
    rd = RunDir(path)
    rd.init(_cfg())
    for step in STEPS[: STEPS.index(upto) + 1] if upto else ():
        write(rd, step)
    return rd


def _error_line(p: subprocess.CompletedProcess) -> str:
    lines = [x for x in p.stderr.splitlines() if x.startswith("opsynth: error:")]
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    return lines[0]


def _listing(path: Path) -> dict[str, float]:
    return {str(p.relative_to(path)): p.stat().st_mtime for p in sorted(path.rglob("*"))}


# (the command, what is done before it, the stage it must name): each stage one step too early
TOO_EARLY = [
    ("decontaminate", None, "sample"),
    ("profile", "sample", "decontaminate"),
    ("filter", "decontaminate", "profile"),
    ("dedupe", "profile", "filter"),
    ("publish", "filter", "dedupe"),
]


@pytest.mark.parametrize(("stage", "done", "first"), TOO_EARLY, ids=[t[0] for t in TOO_EARLY])
def test_each_stage_run_too_early_names_the_stage_to_run_first(tmp_path, stage, done, first):
    rd = make_run(tmp_path / "r", done)
    before = _listing(rd.path)
    res = opsynth(stage, str(rd.path))
    line = _error_line(res)
    assert f"opsynth {first} {rd.path}" in line, line
    assert f"[{stage}] ..." not in res.stdout + res.stderr  # refused before the stage said it started
    assert _listing(rd.path) == before  # refused before anything was written


def test_the_table_covers_every_stage_that_reads_another_stages_work():
    assert [s for s in PIPELINE_STAGES if prerequisites(s)] == [t[0] for t in TOO_EARLY[:-1]]
    assert prerequisites("sample") == ()
    assert prerequisites("profile") == ("sample", "decontaminate")
    assert prerequisites("dedupe") == ("sample", "decontaminate", "profile", "filter")


def test_a_stale_filter_is_refused_by_dedupe(tmp_path):
    rd = make_run(tmp_path / "r", "filter")
    later = time.time() + 5  # measurements written again after filter ran (a profile call that finished more)
    for p in rd.path.glob("measurements/_done/part-*"):
        os.utime(p, (later, later))
    line = order_refusal(rd, _cfg(), "dedupe")
    assert line and "filter is stale" in line and f"opsynth filter {rd.path}" in line


def test_tasks_added_after_decontaminate_refuse_profile(tmp_path):
    rd = make_run(tmp_path / "r", "decontaminate")
    write(rd, "sample", n=3)  # the run grew by one task (`sample --add 1`) and decontaminate has not seen it
    line = order_refusal(rd, _cfg(n=3), "profile")
    assert line and "decontaminate is partial (2 of 3 tasks): tasks came after it ran" in line


def test_a_partial_sample_or_profile_is_work_in_progress_not_a_refusal(tmp_path):
    rd = make_run(tmp_path / "r", "filter")
    cfg = _cfg(n=6)  # 6 asked for, 2 sampled (2 shards of 4: one done), all of them measured and filtered
    assert order_refusal(rd, cfg, "decontaminate") is None
    assert order_refusal(rd, cfg, "dedupe") is None


def test_an_audit_needs_only_the_stages_it_chose(tmp_path):
    rd = make_run(tmp_path / "r", "sample")
    rd.write_verdicts("import", [{"task_id": t, "keep": True} for t in _ids(rd)])
    write(rd, "decontaminate")
    # `opsynth audit --stages labels,decontaminate,dedupe`: no profile, no filter
    assert order_refusal(rd, _cfg(), "dedupe") is None


def test_in_order_nothing_is_refused(tmp_path):
    rd = make_run(tmp_path / "r", None)
    for stage in STEPS:
        assert order_refusal(rd, _cfg(), stage) is None, stage
        write(rd, stage)
    assert order_refusal(rd, _cfg(), "dedupe") is None
