"""`opsynth profile DIR --preset NAME`: a preset's profile settings applied to an existing run for one call, recorded
as `--set profile.KEY=VALUE` pairs are, and the preset files' comments."""

from __future__ import annotations

import dataclasses
import re

import pytest
from typer.testing import CliRunner

from pipeline import cli
from pipeline.rundir.config import PRESET_DIR, load_preset, preset_profile_settings, with_profile_settings
from pipeline.rundir.store import RunDir


def _old_run_config():
    """The h200 preset with the profile section's defaults: a run made before the preset learned its settings."""
    from pipeline.rundir.config import ProfileSection

    return dataclasses.replace(load_preset("h200"), profile=ProfileSection(timeout_s=300.0))


def test_preset_settings_make_the_call_measure_as_the_preset_does():
    old = _old_run_config()
    base = preset_profile_settings(old, "h200")
    assert "timeout_s" not in base  # the same in both: not a change, not recorded
    assert base["median_precision"] == load_preset("h200").profile.median_precision != old.profile.median_precision
    cfg, settings = with_profile_settings(old, [], "test", base)
    assert cfg.profile == load_preset("h200").profile
    assert settings == base
    # --set goes over the preset
    cfg, settings = with_profile_settings(old, ["profile.median_precision=0.02"], "test", base)
    assert cfg.profile.median_precision == 0.02 and settings["median_precision"] == 0.02
    assert cfg.profile.mps == load_preset("h200").profile.mps


def test_a_run_made_with_the_preset_gets_no_changes():
    assert preset_profile_settings(load_preset("h200"), "h200") == {}


def test_cli_passes_the_preset_settings_to_the_stage(tmp_path, monkeypatch):
    from pipeline.rundir.schema import TASKS
    from pipeline.stages import profile as profile_stage

    rd = RunDir(tmp_path / "run")
    cfg = _old_run_config()
    rd.init(dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, n=1)))
    # what profile reads: a sampled task that decontaminate kept
    rd.write_shard("tasks", 0, [{"task_id": "t0", "code": "x"}], TASKS)
    rd.write_verdicts("decontaminate", [{"task_id": "t0", "keep": True}])
    seen = {}

    def fake_run(rd_, cfg, *args, settings=None, **kwargs):
        seen.update(cfg=cfg, settings=settings)
        return {"stopped": False}

    monkeypatch.setattr(profile_stage, "run", fake_run)
    res = CliRunner().invoke(cli.app, ["profile", str(rd.path), "--preset", "h200", "--set", "profile.warmup=4"])
    assert res.exit_code == 0, res.output
    assert seen["cfg"].profile == dataclasses.replace(load_preset("h200").profile, warmup=4)
    assert seen["settings"] == {**preset_profile_settings(_old_run_config(), "h200"), "warmup": 4}
    assert rd.load_config().profile == _old_run_config().profile  # config.toml keeps the run's own settings


def test_unknown_preset_is_one_line(tmp_path):
    import subprocess
    import sys

    rd = RunDir(tmp_path / "run")
    rd.init(_old_run_config())
    p = subprocess.run([sys.executable, "-m", "pipeline.cli", "profile", str(rd.path), "--preset", "h100"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "unknown preset 'h100'" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("path", sorted(PRESET_DIR.glob("*.toml")), ids=lambda p: p.name)
def test_preset_comments_say_what_settings_do_not_their_history(path):
    text = path.read_text()
    assert not re.search(r"\bcalls? \d+", text), "a preset comment names a measurement call"
    assert "see README" not in text  # each comment stands alone
