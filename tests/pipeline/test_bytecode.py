"""Bytecode for packages installed without it: detected without importing them, compiled ahead on several
processes into our own folder (tests folders left out, fresh files left alone), and used by the fork server's
imports; an installation that ships bytecode is left as it is."""

import json
import os
import subprocess
import sys
from pathlib import Path

from pipeline.gpu import bytecode
from pipeline.gpu.fork_server import ForkServer


def _package(root: Path, name: str, with_bytecode: bool = False) -> Path:
    pkg = root / name
    (pkg / "sub").mkdir(parents=True)
    (pkg / "tests").mkdir()
    (pkg / "__init__.py").write_text("from . import sub\n")
    (pkg / "sub" / "__init__.py").write_text("VALUE = 41 + 1\n")
    (pkg / "tests" / "test_it.py").write_text("X = 1\n")
    if with_bytecode:
        (pkg / "__pycache__").mkdir()
        (pkg / "__pycache__" / f"__init__.{sys.implementation.cache_tag}.pyc").write_bytes(b"")
    return pkg


def _pycs(prefix: Path, under: Path | None = None) -> list[str]:
    """The bytecode files in `prefix`, or in its mirror of folder `under` (the interpreter may cache more)."""
    root = prefix / str(under).lstrip(os.sep) if under else prefix
    return sorted(p.name for p in root.rglob("*.pyc"))


def test_only_an_installation_without_bytecode_gets_the_cache(tmp_path, monkeypatch):
    _package(tmp_path, "bare_pkg")
    _package(tmp_path, "shipped_pkg", with_bytecode=True)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("OPSYNTH_PYCACHE", str(tmp_path / "cache"))
    assert not bytecode.ships_bytecode("bare_pkg") and bytecode.ships_bytecode("shipped_pkg")
    assert "bare_pkg" not in sys.modules  # looked at, not imported
    base = {"PATH": "/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    env = bytecode.with_cache(base, ["bare_pkg"], probe="bare_pkg")
    assert env[bytecode.PREFIX_VAR] == str(tmp_path / "cache") and env[bytecode.COMPILE_AHEAD_VAR] == "bare_pkg"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"  # the caller's choice stands: only the compile ahead writes
    assert bytecode.with_cache(base, ["shipped_pkg"], probe="shipped_pkg") == base
    own = {**base, bytecode.PREFIX_VAR: "/elsewhere"}
    assert bytecode.with_cache(own, ["bare_pkg"], probe="bare_pkg") == own  # the caller's own prefix stands


def _compile_in_child(tmp_path: Path, prefix: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]), bytecode.PREFIX_VAR: str(prefix),
           bytecode.COMPILE_AHEAD_VAR: "bare_pkg"}
    code = "import json; from pipeline.gpu.bytecode import compile_ahead_from_env as c; print(json.dumps(c()))"
    return json.loads(subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True,
                                     text=True).stdout)


def test_compiling_ahead_fills_the_prefix_leaves_tests_out_and_keeps_fresh_files(tmp_path):
    _package(tmp_path, "bare_pkg")
    prefix = tmp_path / "cache"
    done = _compile_in_child(tmp_path, prefix)
    assert done["files"] == done["compiled_ok"] == 2
    tag = sys.implementation.cache_tag
    assert _pycs(prefix, tmp_path) == [f"__init__.{tag}.pyc", f"__init__.{tag}.pyc"]  # package and sub, no tests
    assert not list((tmp_path / "bare_pkg").rglob("*.pyc"))  # nothing written beside the sources
    mirror = prefix / str(tmp_path).lstrip(os.sep)
    before = {p: p.stat().st_mtime_ns for p in mirror.rglob("*.pyc")}
    _compile_in_child(tmp_path, prefix)
    assert {p: p.stat().st_mtime_ns for p in mirror.rglob("*.pyc")} == before


def test_a_parallel_compile_matches_a_serial_one(tmp_path, monkeypatch):
    pkg = _package(tmp_path, "bare_pkg")
    for i in range(40):
        (pkg / "sub" / f"m{i}.py").write_text(f"X = {i}\n" * (i + 1))
    monkeypatch.syspath_prepend(str(tmp_path))
    files = bytecode.source_files(["bare_pkg"])
    assert len(files) == 42 and files[0].stat().st_size >= files[-1].stat().st_size  # largest first
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "par"))
    par = bytecode.compile_ahead(["bare_pkg"], workers=2)
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "ser"))
    ser = bytecode.compile_ahead(["bare_pkg"], workers=1)
    assert par["compiled_ok"] == ser["compiled_ok"] == 42
    assert len(_pycs(tmp_path / "par", pkg)) == len(_pycs(tmp_path / "ser", pkg)) == 42


def test_the_fork_server_compiles_ahead_then_imports_from_the_cache(tmp_path):
    _package(tmp_path, "bare_pkg")
    prefix = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]), bytecode.PREFIX_VAR: str(prefix),
           bytecode.COMPILE_AHEAD_VAR: "bare_pkg"}
    server = ForkServer(env, ["bare_pkg"])
    try:
        assert server.wait_ready() is None
        assert server.compile_ahead["files"] == 2 and server.compile_ahead["compiled_ok"] == 2
    finally:
        server.close()
    assert len(_pycs(prefix, tmp_path / "bare_pkg")) == 2
