"""Worker settings: every config field a profile worker needs reaches it unchanged through the executor's JSON line,
and a value the contract does not know or allow is refused where it is loaded, in one line."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.gpu.executors import worker_config
from pipeline.gpu.harness import read_worker_config
from pipeline.gpu.worker_settings import WorkerSettings
from pipeline.rundir.config import (
    Config,
    ConfigError,
    FilterSection,
    ProfileSection,
    RunSection,
    SampleSection,
    from_dict,
)

ROOT = Path(__file__).resolve().parents[2]


def _other(name: str, value):
    """A valid value other than the default, whatever the field's type."""
    if name == "compile_tolerance":
        return 1e-4
    if name == "compile_backend":
        return "aot_eager"
    if name == "reserve_margin_compiled":  # 0 (off) or >= 1
        return 1.3
    if name == "retry_reserve_factor":  # 0 (the whole cap) or > 1
        return 2.0
    if name == "shortcut_screen_margin":  # 0 (off) or >= 1
        return 10.0
    if name == "shortcut_mode":  # cheap | exhaustive
        return "exhaustive"
    if name == "shortcut_checks":  # kinds of measures/shortcuts.py; empty: off
        return ("dead", "fragile")
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 2 + 0.5
    raise AssertionError(f"no other value for {name}={value!r}")


def _through_the_pipe(settings: WorkerSettings, replacement=False):
    """What a worker reads: the executor's first line, as JSON text, decoded by the harness."""
    line = json.dumps(worker_config("cpu", settings, "/tmp/lock", 3, replacement))
    return read_worker_config(line)


@pytest.mark.parametrize("section, cls", [("profile", ProfileSection), ("filter", FilterSection)])
def test_every_field_reaches_the_worker_unchanged(section, cls):
    for f in dataclasses.fields(cls):
        changed = dataclasses.replace(cls(), **{f.name: _other(f.name, getattr(cls(), f.name))})
        cfg = Config(**{section: changed})
        sent = WorkerSettings.from_config(cfg, workers_per_gpu=5)
        device, got, lock, threads, replacement = _through_the_pipe(sent)
        assert got == sent and (device, lock, threads, replacement) == ("cpu", "/tmp/lock", 3, False)
        assert getattr(getattr(got, section), f.name) == getattr(changed, f.name) != getattr(cls(), f.name), f.name


def test_seed_peaks_and_workers_come_from_the_config():
    cfg = Config(run=RunSection(seed=123, workers=7), sample=SampleSection(tflops_fp32=55.0, bandwidth_gbps=3350.0))
    got = _through_the_pipe(WorkerSettings.from_config(cfg)).settings
    assert (got.seed, got.peaks, got.workers_per_gpu) == (123, (55.0, 3.35), 7)
    assert got.filter.max_peak_memory_gb == cfg.filter.max_peak_memory_gb  # the cap travels once, in filter


def test_a_replacement_is_told_so():
    assert _through_the_pipe(WorkerSettings.from_config(Config()), replacement=True).replacement


def test_settings_are_frozen():
    s = WorkerSettings.from_config(Config())
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.seed = 1  # type: ignore[misc]


@pytest.mark.parametrize("mutate, match", [
    (lambda d: d["profile"].update(warmup_runs=3), r"unknown key\(s\) \['warmup_runs'\] in \[profile\]"),
    (lambda d: d["filter"].update(compile_tolerance=1e-3), r"filter.compile_tolerance must be one of"),
    (lambda d: d["profile"].update(max_runs=2), r"profile.max_runs must be >= min_runs"),
    (lambda d: d["profile"].update(timeout_s="fast"), r"timeout_s must be a number"),
    (lambda d: d.update(window_ms=[1.0, 100.0]), r"expected keys .*got .*window_ms"),
    (lambda d: d.pop("seed"), r"expected keys"),
    (lambda d: d.update(peaks=[60.0]), r"peaks must be two numbers > 0"),
    (lambda d: d.update(workers_per_gpu=0), r"workers_per_gpu must be an integer >= 1"),
])
def test_a_worker_refuses_settings_outside_the_contract(mutate, match):
    data = json.loads(json.dumps(WorkerSettings.from_config(Config()).to_json()))
    mutate(data)
    with pytest.raises(ConfigError, match=match) as e:
        WorkerSettings.from_json(data)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("section, key, value, match", [
    ("profile", "warmups", 3, r"unknown key\(s\) \['warmups'\] in \[profile\]"),
    ("filter", "compile_tolerance", 1e-3, r"filter.compile_tolerance must be one of \[0.0001, 0.01\]"),
    ("filter", "max_peak_memory_gb", 0.0, r"filter.max_peak_memory_gb must be > 0"),
    ("profile", "early_reject_factor", 0.5, r"profile.early_reject_factor must be >= 1"),
    ("profile", "iqr_target", 0.0, r"profile.iqr_target must be > 0"),
    ("profile", "autotune_config_cap_ms", -1.0, r"profile.autotune_config_cap_ms must be >= 0"),
    ("filter", "determinism_tolerance", -1.0, r"filter.determinism_tolerance must be >= 0"),
])
def test_config_load_refuses_what_the_worker_would(section, key, value, match):
    with pytest.raises(ConfigError, match=match) as e:
        from_dict({section: {key: value}}, "test.toml")
    assert str(e.value).startswith("config error in test.toml: ") and "\n" not in str(e.value)


def test_a_worker_started_with_bad_settings_says_why_and_exits():
    data = WorkerSettings.from_config(Config()).to_json()
    data["profile"]["warmup_runs"] = 3
    line = json.dumps({"device": "cpu", "settings": data, "lock_path": None, "threads": 1})
    p = subprocess.run([sys.executable, "-P", "-m", "pipeline.gpu.harness"], input=line + "\n", text=True,
                       capture_output=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                       timeout=120)
    assert p.returncode != 0 and "unknown key(s) ['warmup_runs'] in [profile]" in p.stderr


def test_committed_configs_still_load():
    from pipeline.rundir.config import load_file

    files = [*ROOT.glob("data/presets/*.toml"), *ROOT.glob("data/releases/*/run/config.toml"),
             *ROOT.glob("benchmarks/results/gpu_runs/*/config.toml"), *ROOT.glob("data/sample/*/config.toml")]
    assert files
    for f in files:
        WorkerSettings.from_json(json.loads(json.dumps(WorkerSettings.from_config(load_file(f)).to_json())))
