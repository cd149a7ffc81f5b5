"""Setup on a fresh machine: the torch source is the user's choice, and missing prerequisites are named."""

import shutil
import subprocess
from pathlib import Path

import pytest

from pipeline.errors import OpsynthError
from pipeline.gpu.executors import make_executor
from pipeline.gpu.worker_settings import WorkerSettings
from pipeline.rundir.config import Config

ROOT = Path(__file__).resolve().parents[2]
needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60)


@needs_make
def test_torch_index_is_passed_only_when_chosen(tmp_path):
    venv = f"VENV={tmp_path / 'v'}"
    default = [ln for ln in _make("-n", "-B", "setup", venv).stdout.splitlines() if "torch==" in ln]
    assert len(default) == 1 and "--index-url" not in default[0] and "torch==2.13.0" in default[0]
    cpu = "https://download.pytorch.org/whl/cpu"
    chosen = [ln for ln in _make("-n", "-B", "setup", venv, f"TORCH_INDEX={cpu}").stdout.splitlines() if "torch==" in ln]
    assert len(chosen) == 1 and f"--index-url {cpu} torch==2.13.0" in chosen[0]


@needs_make
def test_old_python_and_missing_compiler_are_named(tmp_path):
    old = tmp_path / "python3.10"
    old.write_text("#!/bin/sh\n[ \"$1\" = --version ] && echo 'Python 3.10.12' && exit 0\nexit 1\n")
    old.chmod(0o755)
    p = _make("check-python", f"PY={old}")
    assert p.returncode != 0 and "needs Python >= 3.11" in p.stdout and "Python 3.10.12" in p.stdout
    p = _make("check-compiler", "CXX=no-such-g++")
    assert p.returncode != 0 and "needs a C++ compiler" in p.stdout and "no-such-g++" in p.stdout


def test_profile_without_a_compiler_says_so_before_starting_workers(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it
    monkeypatch.delenv("CXX", raising=False)
    s = WorkerSettings.from_config(Config()).with_profile(compile=True)
    with pytest.raises(OpsynthError, match=r"needs a C\+\+ compiler and `g\+\+` is not on PATH"):
        make_executor("local", device="cpu", workers=1, settings=s)
    monkeypatch.setenv("CC", "no-such-cc")
    with pytest.raises(OpsynthError, match="needs a C compiler for Triton"):
        make_executor("local", device="cuda", workers=1, gpus=[0], settings=s)
