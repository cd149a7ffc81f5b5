"""Reading a package's files ahead of its import: which files, in what order, all of their bytes, within the time
box; the reader process the fork server starts is gone once the server is ready."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from pipeline import page_cache
from pipeline.fork_server import ForkServer


def _package(root: Path, name: str = "pcpkg") -> Path:
    pkg = root / name
    (pkg / "sub" / "__pycache__").mkdir(parents=True)
    (pkg / "__init__.py").write_text("X = 1\n")
    (pkg / "sub" / "mod.py").write_text("Y = 2\n" * 100)
    tag = sys.implementation.cache_tag
    (pkg / "sub" / "__pycache__" / f"mod.{tag}.pyc").write_bytes(b"\0" * 300)
    (pkg / "sub" / "__pycache__" / "mod.cpython-19.pyc").write_bytes(b"\0" * 300)  # another interpreter's
    (pkg / "libbig.so").write_bytes(b"\1" * 5000)
    (pkg / "libsmall.so.1").write_bytes(b"\1" * 50)
    (pkg / "data.json").write_text("{}")
    return pkg


def test_python_files_come_first_then_libraries_smallest_first(tmp_path):
    pkg = _package(tmp_path)
    names = [p.relative_to(pkg).as_posix() for p in page_cache.files_to_read([pkg])]
    tag = sys.implementation.cache_tag
    assert sorted(names[:3]) == sorted(["__init__.py", "sub/mod.py", f"sub/__pycache__/mod.{tag}.pyc"])
    assert names[3:] == ["libsmall.so.1", "libbig.so"]  # no data file, no other interpreter's bytecode


def test_every_byte_is_read_and_a_past_deadline_reads_nothing(tmp_path):
    files = page_cache.files_to_read([_package(tmp_path)])
    done = page_cache.read_all(files, threads=3)
    assert done["files"] == len(files) == 5
    assert done["bytes"] == sum(p.stat().st_size for p in files)
    late = page_cache.read_all(files, threads=3, deadline=time.monotonic() - 1)
    assert late["files"] == 0 and late["bytes"] == 0


def test_packages_are_found_without_importing_them_and_missing_ones_skipped(tmp_path, monkeypatch):
    pkg = _package(tmp_path)
    (pkg / "__init__.py").write_text("raise RuntimeError('imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert page_cache.package_dirs(["pcpkg", "no_such_package_here", "json.decoder"]) == [pkg]


def test_the_reader_process_reports_what_it_read(tmp_path):
    _package(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    out = subprocess.run([sys.executable, "-m", "pipeline.page_cache", "30", "pcpkg"], env=env, check=True,
                         capture_output=True, text=True).stdout
    seen = json.loads(out)
    assert seen["listed"] == seen["files"] == 5 and seen["bytes"] > 5000


def test_the_fork_servers_reader_is_stopped_once_it_is_ready(tmp_path):
    _package(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    server = ForkServer(env, ["json"], read_ahead=["pcpkg"])
    try:
        reader = server.reader
        assert reader is not None
        assert server.wait_ready() is None
        assert server.reader is None and reader.poll() is not None
    finally:
        server.close()


def test_only_a_cuda_runs_fork_server_reads_ahead_and_the_setting_turns_it_off():
    from pipeline.config import Config, RunSection
    from pipeline.executors import start_fork_server
    from pipeline.worker_settings import WorkerSettings

    settings = WorkerSettings.from_config(Config(run=RunSection(seed=0)))
    seen = {}
    for name, s, device in [("cuda", settings, "cuda"), ("cpu", settings, "cpu"),
                            ("off", settings.with_profile(read_ahead=False), "cuda")]:
        server = start_fork_server(s, device)  # the server only imports: no GPU needed
        try:
            seen[name] = server.reader is not None
        finally:
            server.close()
        assert server.reader is None  # closing stops it
    assert seen == {"cuda": True, "cpu": False, "off": False}
