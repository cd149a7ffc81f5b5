"""The workers' fork server: a forked worker runs a module as `__main__` in its own session, with the environment
and the three pipes it was given; its exit code (a signal too) comes back through the server; a server that
cannot start workers says why in one line and the executor starts fresh interpreters instead."""

import os
import signal
import sys

import pytest

from pipeline.gpu import executors
from pipeline.gpu.fork_server import ForkServer
from pipeline.gpu.worker_settings import WorkerSettings
from pipeline.rundir.config import Config, FilterSection, RunSection

# reads one line, answers with what it sees, then exits with the code the line asks for
ECHO = """
import json, os, sys
line = sys.stdin.readline()
print(json.dumps({"line": line.strip(), "marker": os.environ.get("FORK_MARKER"), "pid": os.getpid(),
                  "own_session": os.getsid(0) == os.getpid(), "name": __name__, "ppid": os.getppid()}), flush=True)
print("to stderr", file=sys.stderr, flush=True)
code = int(line.split()[-1])
if code < 0:
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


@pytest.fixture
def server(tmp_path, monkeypatch):
    (tmp_path / "echo_worker.py").write_text(ECHO)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    s = ForkServer(env, ["json"])
    yield s, env
    s.close()


def _run(server, env, tmp_path, line: str, marker: str):
    import json

    err = open(tmp_path / f"{marker}.err", "wb")  # noqa: SIM115
    proc = server.spawn({**env, "FORK_MARKER": marker}, "echo_worker", err)
    proc.stdin.write((line + "\n").encode())
    proc.stdin.flush()
    out = b""
    while chunk := os.read(proc.stdout.fileno(), 4096):  # EOF once the worker exits: no other copy of its pipe
        out += chunk
    err.close()
    return proc, json.loads(out), (tmp_path / f"{marker}.err").read_text()


def test_a_forked_worker_runs_the_module_with_its_own_environment_session_and_pipes(server, tmp_path):
    s, env = server
    assert s.wait_ready() is None
    assert 0 <= s.import_s <= s.ready_s  # its imports are part of its start
    proc, seen, err = _run(s, env, tmp_path, "hello 7", "first")
    assert seen["line"] == "hello 7" and seen["marker"] == "first" and seen["name"] == "__main__"
    assert seen["own_session"] and seen["pid"] == proc.pid and seen["ppid"] == s.proc.pid
    assert proc.wait(timeout=30) == 7 and proc.returncode == 7
    assert err.strip() == "to stderr"
    # a second worker gets its own environment, not the first one's
    proc2, seen2, _ = _run(s, env, tmp_path, "again 0", "second")
    assert seen2["marker"] == "second" and seen2["pid"] != seen["pid"] and proc2.wait(timeout=30) == 0


def test_a_worker_killed_by_a_signal_reports_it_as_subprocess_does(server, tmp_path):
    s, env = server
    proc, _, _ = _run(s, env, tmp_path, f"die {-int(signal.SIGSEGV)}", "segv")
    assert proc.wait(timeout=30) == -signal.SIGSEGV


def test_a_server_that_cannot_import_says_why_in_one_line(tmp_path):
    s = ForkServer(dict(os.environ), ["no_such_module_here"])
    try:
        problem = s.wait_ready()
    finally:
        s.close()
    assert problem is not None and "\n" not in problem
    assert "no_such_module_here" in problem and "ModuleNotFoundError" in problem
    with pytest.raises(OSError):
        s.spawn(dict(os.environ), "json", open(os.devnull, "wb"))  # noqa: SIM115


def test_closing_a_server_still_importing_stops_it_at_once():
    s = ForkServer(dict(os.environ), ["torch._inductor.compile_fx"])
    s.close()
    assert s.proc.returncode == -signal.SIGKILL and not s.ready


CODE = '''
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.cos(x) * 3
def get_inputs():
    return [torch.rand(16, 16)]
def get_init_inputs():
    return []
'''


def test_the_executor_falls_back_to_fresh_workers_with_one_warning(monkeypatch, capsys):
    monkeypatch.setattr(executors, "PRELOAD", ("no_such_module_here",))
    cfg = Config(run=RunSection(seed=0), filter=FilterSection(min_eager_ms=0.0, max_eager_ms=1e9))
    s = WorkerSettings.from_config(cfg).with_profile(timeout_s=20.0, memory_limit_gb=3.0, compile=False, warmup=1,
                                                     min_runs=3, max_runs=5)
    with executors.make_executor("local", device="cpu", workers=1, settings=s) as ex:
        (r,) = ex.imap_unordered([{"task_id": "t", "code": CODE, "flops": 0, "bytes_moved": 0}])
        assert type(ex.workers[0].proc).__name__ == "Popen" and ex.forks is None
    assert r["status"] == "ok"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("opsynth: warning: profile.fork_workers:")
    assert "no_such_module_here" in err and "fresh processes" in err
