"""profile.mps: the executor's private MPS control daemon (a stand-in `nvidia-cuda-mps-control` on PATH records how
it was driven) and the one more measurement of a task whose worker saw its CUDA context poisoned (a stand-in
worker script speaks the harness protocol), since under MPS a neighbour's fault poisons every client."""

import os
import stat

import pytest

from pipeline.gpu import executors
from pipeline.gpu.mps import MpsDaemon
from pipeline.gpu.worker_settings import WorkerSettings
from pipeline.rundir.config import Config, RunSection

FAKE_CONTROL = """#!/bin/sh
# records each call: its arguments, the pipe folder it was given, and what came on stdin for a bare call
if [ "$1" = "-d" ]; then
  echo "start $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY" >> "{log}"
  [ -n "{fail}" ] && { echo "cannot start: permission denied" >&2; exit 1; }
  touch "$CUDA_MPS_PIPE_DIRECTORY/control"
else
  read cmd; echo "$cmd $CUDA_MPS_PIPE_DIRECTORY" >> "{log}"
  [ "$cmd" = quit ] && rm -f "$CUDA_MPS_PIPE_DIRECTORY/control"
fi
"""

# speaks the worker protocol: a task whose id starts with "fault" reports a poisoned context the first time any
# worker runs it (a file marks it), as a neighbour's GPU fault would under MPS; "culprit" faults every time. Under
# MPS (the pipe folder in its environment) a fault poisons every worker alive then, as the real server does: each
# reports its next result poisoned. Every run is logged: task, start, end
FAKE_HARNESS = """
import json, os, sys, time
marks = os.environ["FAKE_MARKS"]
down = os.path.join(marks, "server-down")  # starts the server still refuses after a fault
if os.path.exists(down):
    left = int(open(down).read())
    if left > 0:
        open(down, "w").write(str(left - 1))
        sys.exit("cudaErrorMpsServerNotReady: the MPS server is recovering")
epochs = os.path.join(marks, "faults")
def faults():
    return len(open(epochs).read()) if os.path.exists(epochs) else 0
born = faults()
under_mps = bool(os.environ.get("CUDA_MPS_PIPE_DIRECTORY"))
cfg = json.loads(sys.stdin.readline())
print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)
for line in sys.stdin:
    task = json.loads(line)
    t0 = time.time()
    mark = os.path.join(marks, task["task_id"])
    first = not os.path.exists(mark)
    open(mark, "a").write("run\\n")
    fault = task["task_id"].startswith("culprit") or (task["task_id"].startswith("fault") and first)
    if not fault:  # a fault comes at once: neighbours still running see it
        time.sleep(float(os.environ.get("FAKE_TASK_S", "0")))
    poisoned = under_mps and faults() > born
    if fault:
        open(epochs, "a").write("x")
    if fault and task["task_id"].endswith("-recovering"):
        open(down, "w").write("5")
    open(os.path.join(marks, "log"), "a").write(task["task_id"] + " " + str(t0) + " " + str(time.time()) + "\\n")
    bad = fault or poisoned
    result = {"task_id": task["task_id"], "status": "crashed" if bad else "ok",
              "error": "AcceleratorError: CUDA error: an illegal memory access was encountered" if bad else "",
              "device": "cuda", "mps_pipe": os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "")}
    print(json.dumps({"result": result, "fatal": bad}), flush=True)
    if bad:
        os._exit(3)
"""


def _control(tmp_path, monkeypatch, fail: bool = False):
    bindir, log = tmp_path / "bin", tmp_path / "control.log"
    bindir.mkdir()
    exe = bindir / "nvidia-cuda-mps-control"
    exe.write_text(FAKE_CONTROL.replace("{log}", str(log)).replace("{fail}", "1" if fail else ""))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return log


def test_the_daemon_gets_private_folders_and_is_told_to_quit(tmp_path, monkeypatch):
    log = _control(tmp_path, monkeypatch)
    d = MpsDaemon(tmp_path / "exec")
    assert d.env() == {} and d.start() is None
    assert d.env() == {"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path / "exec" / "mps-pipe"),
                       "CUDA_MPS_LOG_DIRECTORY": str(tmp_path / "exec" / "mps-log")}
    d.stop()
    pipe = tmp_path / "exec" / "mps-pipe"
    assert log.read_text().splitlines() == [f"start {pipe} {tmp_path / 'exec' / 'mps-log'}", f"quit {pipe}"]
    assert not d.running and d.env() == {}
    d.stop()  # stopping twice sends nothing more
    assert len(log.read_text().splitlines()) == 2


def test_without_the_program_or_when_it_fails_one_line_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    problem = MpsDaemon(tmp_path / "a").start()
    assert "nvidia-cuda-mps-control is not on PATH" in problem and "profile.mps = false" in problem
    monkeypatch.undo()
    _control(tmp_path, monkeypatch, fail=True)
    d = MpsDaemon(tmp_path / "b")
    problem = d.start()
    assert "exited with 1 (cannot start: permission denied)" in problem and "\n" not in problem
    assert not d.running and d.env() == {}


@pytest.fixture
def fake_workers(tmp_path, monkeypatch):
    """The local executor on 'cuda' with stand-in workers: no GPU, no torch in the workers."""
    (tmp_path / "fake_harness.py").write_text(FAKE_HARNESS)
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("FAKE_MARKS", str(marks))
    monkeypatch.setattr(executors, "HARNESS", "fake_harness")
    monkeypatch.setattr(executors, "PRELOAD", ())  # the stand-in speaks on import: forked workers import it
    return marks


def _executor(mps: bool, workers: int = 2):
    s = WorkerSettings.from_config(Config(run=RunSection(seed=0))).with_profile(compile=False, mps=mps, timeout_s=30)
    return executors.LocalExecutor(device="cuda", workers=workers, gpus=["0"], settings=s)


def _run(ex, ids):
    with ex:
        return {r["task_id"]: r for r in ex.imap_unordered([{"task_id": i, "code": ""} for i in ids])}


def test_under_mps_a_poisoned_task_is_measured_once_more(tmp_path, monkeypatch, fake_workers):
    log = _control(tmp_path, monkeypatch)
    ex = _executor(mps=True)
    assert ex.uses_mps
    out = _run(ex, ["fault-a", "ok-b", "culprit-c", "ok-d"])
    assert sorted(out) == ["culprit-c", "fault-a", "ok-b", "ok-d"]
    # the neighbour's fault does not count against it; the task that faults each time is recorded as it faulted
    assert out["fault-a"]["status"] == "ok" and out["ok-b"]["status"] == "ok"
    assert out["culprit-c"]["status"] == "crashed" and "illegal memory access" in out["culprit-c"]["error"]
    assert (fake_workers / "fault-a").read_text().count("run") == 2
    assert (fake_workers / "culprit-c").read_text().count("run") == 2  # once more, not again and again
    assert all(r["mps_pipe"].endswith("mps-pipe") for r in out.values())
    lines = log.read_text().splitlines()
    assert lines[0].startswith("start ") and lines[-1].startswith("quit ")  # stopped when the executor closed


def test_without_mps_a_poisoned_task_keeps_its_result(tmp_path, monkeypatch, fake_workers):
    log = _control(tmp_path, monkeypatch)
    ex = _executor(mps=False)
    out = _run(ex, ["fault-a", "ok-b"])
    assert out["fault-a"]["status"] == "crashed" and out["ok-b"]["status"] == "ok"
    assert out["ok-b"]["mps_pipe"] == "" and not log.exists() and not ex.uses_mps


def test_a_daemon_that_cannot_start_leaves_a_warning_and_a_working_run(tmp_path, monkeypatch, fake_workers, capsys):
    _control(tmp_path, monkeypatch, fail=True)
    ex = _executor(mps=True)
    out = _run(ex, ["ok-a"])
    assert out["ok-a"]["status"] == "ok" and not ex.uses_mps
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("opsynth: warning: profile.mps:")



def test_each_gpu_gets_its_own_daemon_that_sees_it_alone(tmp_path, monkeypatch, fake_workers):
    log = _control(tmp_path, monkeypatch)
    # the stand-in records CUDA_VISIBLE_DEVICES too: each daemon is started for one GPU
    exe = tmp_path / "bin" / "nvidia-cuda-mps-control"
    exe.write_text(exe.read_text().replace('echo "start $CUDA_MPS_PIPE_DIRECTORY',
                                           'echo "start gpu=$CUDA_VISIBLE_DEVICES $CUDA_MPS_PIPE_DIRECTORY'))
    s = WorkerSettings.from_config(Config(run=RunSection(seed=0))).with_profile(compile=False, mps=True, timeout_s=30)
    ex = executors.LocalExecutor(device="cuda", workers=1, gpus=["0", "1"], settings=s)
    out = _run(ex, ["ok-a", "ok-b", "ok-c"])
    starts = [ln for ln in log.read_text().splitlines() if ln.startswith("start")]
    assert sorted(ln.split()[1] for ln in starts) == ["gpu=0", "gpu=1"]
    assert len({ln.split()[2] for ln in starts}) == 2  # two pipe folders
    pipes = {r["mps_pipe"] for r in out.values()}
    assert pipes <= {ln.split()[2] for ln in starts} and all(r["status"] == "ok" for r in out.values())
    assert sum(ln.startswith("quit") for ln in log.read_text().splitlines()) == 2


def test_workers_that_cannot_start_while_the_server_recovers_do_not_stop_the_run(tmp_path, monkeypatch,
                                                                                 fake_workers):
    # after the fault the next five workers fail to start (more than the three that stop a run otherwise). One
    # worker: with two, the second could finish the other tasks before any replacement tries to start
    _control(tmp_path, monkeypatch)
    out = _run(_executor(mps=True, workers=1), ["fault-a-recovering", "ok-b", "ok-c"])
    assert {t: r["status"] for t, r in out.items()} == {"fault-a-recovering": "ok", "ok-b": "ok", "ok-c": "ok"}
    assert (fake_workers / "server-down").read_text() == "0"


def test_without_mps_workers_that_cannot_start_stop_the_run_with_one_line(tmp_path, fake_workers):
    from pipeline.errors import OpsynthError

    # one worker: the tasks left need a new one (with two, the other could finish them before three starts fail)
    with pytest.raises(OpsynthError, match="profile workers fail to start .*MpsServerNotReady"):
        _run(_executor(mps=False, workers=1), ["fault-a-recovering", "ok-b", "ok-c"])


def test_under_mps_retries_run_alone_so_only_the_culprit_is_recorded(tmp_path, monkeypatch, fake_workers):
    """The culprit faults every time and each fault poisons every worker alive: run beside other retries, its second
    fault would cost them their second try too. Retries run alone on the GPU, so every good task is measured."""
    _control(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_TASK_S", "0.15")
    ids = ["ok-0", "ok-1", "culprit-x", "ok-2", "ok-3", "ok-4", "ok-5", "ok-6"]
    ex = _executor(mps=True, workers=3)
    assert ex.wait_ready() == 3  # the first three tasks run side by side, whatever the machine's load
    out = _run(ex, ids)
    assert {t: r["status"] for t, r in out.items()} == {t: "crashed" if t == "culprit-x" else "ok" for t in ids}
    runs: dict[str, list[tuple[float, float]]] = {}
    for line in (fake_workers / "log").read_text().splitlines():
        t, a, b = line.split()
        runs.setdefault(t, []).append((float(a), float(b)))
    assert len(runs["culprit-x"]) == 2  # measured once more, then recorded
    retries = [(t, ivs[1]) for t, ivs in runs.items() if len(ivs) == 2]
    assert len(retries) >= 2, "a fault under MPS poisons the neighbours in flight"
    every = [(t, iv) for t, ivs in runs.items() for iv in ivs]
    for t, (a, b) in retries:  # nothing else ran while a retry did
        assert all((u, iv) == (t, (a, b)) or iv[1] <= a or iv[0] >= b for u, iv in every), t
