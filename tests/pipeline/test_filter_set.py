"""`opsynth filter DIR --set filter.KEY=VALUE`: a measured run re-judged with other thresholds, read back from what
the command wrote (verdicts, config.toml, manifest) and what dedupe and publish then read."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.rundir.config import load_preset
from pipeline.rundir.schema import MEASUREMENTS, TASKS
from pipeline.rundir.store import RunDir

ROOT = Path(__file__).resolve().parents[2]
CODE = "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.tanh(x) * {k}\n"
EAGER = [0.5, 1.5, 2.5, 3.5]  # ms; the demo preset's window (0.01-1000 ms) keeps all four


def opsynth(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def make_run(path: Path, measured: bool = True) -> RunDir:
    cfg = load_preset("demo")
    cfg = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, n=len(EAGER), shard_size=len(EAGER)))
    rd = RunDir(path)
    rd.init(cfg)
    rd.write_shard("tasks", 0, [{"task_id": f"t{i}", "name": "Tanh", "code": CODE.format(k=i + 2), "ops": ["torch.tanh"],
                                 "predicted_ms": ms} for i, ms in enumerate(EAGER)], TASKS)
    if measured:
        rd.write_shard("measurements", 0, [
            {"task_id": f"t{i}", "status": "ok", "device": "cpu", "eager_ms": ms, "compile_ms": ms / 2,
             "compile_ok": True, "compile_agrees_1e4": True, "compile_agrees_1e2": True, "deterministic": True,
             "input_sensitivity_ratio": 50.0, "input_min_pairwise_diff": 0.5, "peak_memory_bytes": 2048}
            for i, ms in enumerate(EAGER)], MEASUREMENTS)
    return rd


def _kept(rd: RunDir) -> dict[str, bool]:
    return {v["task_id"]: v["keep"] for v in rd.read_rows("verdicts") if v["stage"] == "filter"}


def _digest(folder: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(folder.glob("*.parquet")))).hexdigest()


def test_set_rejudges_without_touching_measurements_and_records_it(tmp_path):
    rd = make_run(tmp_path / "run")
    assert opsynth("filter", str(rd.path)).returncode == 0
    assert all(_kept(rd).values())
    before = _digest(rd.table_dir("measurements"))
    p = opsynth("filter", str(rd.path), "--set", "filter.min_eager_ms=2", "--set", "filter.max_eager_ms=3")
    assert p.returncode == 0, p.stderr
    assert _kept(rd) == {"t0": False, "t1": False, "t2": True, "t3": False}
    reasons = {v["task_id"]: v["reason"] for v in rd.read_rows("verdicts") if v["stage"] == "filter"}
    assert reasons["t0"].startswith("too fast") and reasons["t3"].startswith("too slow")
    assert _digest(rd.table_dir("measurements")) == before
    cfg = rd.load_config()  # what dedupe, publish and the card read
    assert (cfg.filter.min_eager_ms, cfg.filter.max_eager_ms) == (2.0, 3.0)
    assert cfg.filter.max_peak_memory_gb == load_preset("demo").filter.max_peak_memory_gb  # the rest stays
    log = rd.manifest()["filter_settings"]
    assert len(log) == 1 and log[0]["set"] == {"filter.min_eager_ms": 2.0, "filter.max_eager_ms": 3.0}
    assert log[0]["before"] == {"filter.min_eager_ms": 0.01, "filter.max_eager_ms": 1000.0}
    # a second change is logged after the first; setting a value it already has logs nothing
    assert opsynth("filter", str(rd.path), "--set", "filter.max_eager_ms=4").returncode == 0
    assert opsynth("filter", str(rd.path), "--set", "filter.max_eager_ms=4").returncode == 0
    assert [e["set"] for e in rd.manifest()["filter_settings"]] == [log[0]["set"], {"filter.max_eager_ms": 4.0}]
    assert _kept(rd)["t3"] is True


def test_dedupe_reads_the_new_window(tmp_path):
    from pipeline.stages import dedupe

    rd = make_run(tmp_path / "run")
    assert opsynth("filter", str(rd.path), "--set", "filter.min_eager_ms=1", "--set", "filter.max_eager_ms=4").returncode == 0
    assert dedupe.runtime_window(rd.load_config()) == (1.0, 4.0)


@pytest.mark.parametrize(("pair", "fragment"), [
    ("filter.min_eagr_ms=2", "unknown key(s) ['min_eagr_ms'] in [filter]"),
    ("filter.min_eager_ms='two'", "[filter] min_eager_ms must be a number"),
    ("filter.require_compile=1", "[filter] require_compile must be true or false"),
    ("filter.min_eager_ms=5000", "filter.min_eager_ms must be >= 0 and < max_eager_ms"),
    ("filter.min_eager_ms=", "is not a TOML value"),
    ("profile.warmup=2", "--set takes filter.KEY=VALUE"),
    ("sample.max_ops=2", "--set takes filter.KEY=VALUE"),
])
def test_bad_settings_are_one_line_and_change_nothing(tmp_path, pair, fragment):
    rd = make_run(tmp_path / "run")
    config = rd.config_path.read_text()
    p = opsynth("filter", str(rd.path), "--set", pair)
    lines = [x for x in p.stderr.splitlines() if x.startswith("opsynth: error:")]
    assert p.returncode == 2 and len(lines) == 1 and fragment in lines[0], p.stderr
    assert "Traceback" not in p.stderr
    assert rd.config_path.read_text() == config and "filter_settings" not in rd.manifest()
    assert rd.read_table("verdicts") is None


def test_a_run_without_measurements_is_refused_before_its_config_changes(tmp_path):
    rd = make_run(tmp_path / "run", measured=False)
    config = rd.config_path.read_text()
    p = opsynth("filter", str(rd.path), "--set", "filter.min_eager_ms=2")
    assert p.returncode == 2 and "run `opsynth profile" in p.stderr
    assert rd.config_path.read_text() == config


def test_a_rerun_keeps_the_filter_settings_set_and_other_differences_still_refuse(tmp_path):
    from pipeline.errors import OpsynthError

    rd = make_run(tmp_path / "run")
    assert opsynth("filter", str(rd.path), "--set", "filter.min_eager_ms=2").returncode == 0
    config = rd.config_path.read_text()
    demo = load_preset("demo")
    same_run = dataclasses.replace(demo, run=dataclasses.replace(demo.run, n=len(EAGER), shard_size=len(EAGER)))
    # `opsynth run --preset demo --out DIR` again: the threshold the user set stays, config.toml is not rewritten
    kept = rd.check_config(dataclasses.replace(same_run, run=dataclasses.replace(same_run.run, workers=1)))
    assert kept.filter.min_eager_ms == 2.0 and kept.run.workers == 1
    rd.init(same_run)
    assert rd.config_path.read_text() == config
    # a filter field no `--set` changed is a different config, named with the fix
    wider = dataclasses.replace(same_run, filter=dataclasses.replace(same_run.filter, max_eager_ms=50.0))
    with pytest.raises(OpsynthError, match=r"filter.max_eager_ms: 1000.0 there, 50.0 now.*opsynth filter .* --set"):
        rd.init(wider)
    other_seed = dataclasses.replace(same_run, run=dataclasses.replace(same_run.run, seed=7))
    with pytest.raises(OpsynthError, match=r"run.seed.*use another directory"):
        rd.init(other_seed)
    assert json.loads(json.dumps(rd.manifest()["filter_settings"]))[0]["set"] == {"filter.min_eager_ms": 2.0}
    assert rd.config_path.read_text() == config


def test_run_again_after_filter_set_continues_and_keeps_the_threshold(tmp_path):
    """The quickstart in order: `opsynth run`, `opsynth filter DIR --set ...`, then the same `opsynth run` again
    (what `make demo` does) finishes, keeps the user's threshold and judges with it."""
    cfg = load_preset("demo")
    cfg = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, n=4, shard_size=4, workers=1),
                              profile=dataclasses.replace(cfg.profile, compile=False),
                              filter=dataclasses.replace(cfg.filter, require_compile=False))
    (tmp_path / "c.toml").write_text(cfg.to_toml())
    out = tmp_path / "r"
    first = opsynth("run", "--config", str(tmp_path / "c.toml"), "--out", str(out))
    assert first.returncode == 0, first.stderr
    rd = RunDir(out)
    kept = [t for t, k in _kept(rd).items() if k]
    eager = {m["task_id"]: m["eager_ms"] for m in rd.read_rows("measurements") if m["task_id"] in kept}
    assert len(set(eager.values())) >= 2, f"need two kept tasks of different speed: {eager}"
    cut = max(eager.values())  # only the slowest stays: the others become too fast
    assert opsynth("filter", str(out), "--set", f"filter.min_eager_ms={cut}").returncode == 0
    again = opsynth("run", "--config", str(tmp_path / "c.toml"), "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert f"keeps the settings `opsynth filter/publish --set` gave it: filter.min_eager_ms={cut!r}" in again.stderr
    assert rd.load_config().filter.min_eager_ms == cut
    after = _kept(rd)
    assert [t for t in kept if after[t]] == [t for t in kept if eager[t] >= cut]
    reasons = {v["task_id"]: v["reason"] for v in rd.read_rows("verdicts") if v["stage"] == "filter"}
    assert all(reasons[t].startswith("too fast") for t in kept if eager[t] < cut)
