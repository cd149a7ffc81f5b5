"""profile.warm_in_drain (pipeline.gpu.harness): a worker draws its timing inputs and runs its warm-ups after announcing its
timed runs, inside a shared hold, so the exclusive hold of the GPU holds the timed runs alone."""

import fcntl
import os
from pathlib import Path

import pytest

from pipeline.gpu.harness import Harness
from pipeline.gpu.worker_settings import WorkerSettings
from pipeline.rundir.config import Config, FilterSection, RunSection


def _code(lock: Path, log: Path) -> str:
    # each forward writes what the GPU lock looked like to a neighbour while it ran: "x" held alone (a shared flock
    # is refused), "a" shared with a timed run announced (the intent file refuses an exclusive flock), "s" shared
    return f'''
import fcntl, os
import torch
import torch.nn as nn

def _refused(path, op):
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, op | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False

def _state():
    if _refused({str(lock)!r}, fcntl.LOCK_SH):
        return "x"
    return "a" if _refused({str(lock)!r} + ".intent", fcntl.LOCK_EX) else "s"

class Model(nn.Module):
    def forward(self, x):
        open({str(log)!r}, "a").write(_state())
        return torch.relu(x) + 1
def get_inputs():
    return [torch.rand(64, 64)]
def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("warm_in_drain", [False, True])
def test_the_timed_hold_holds_the_timed_runs_alone_when_warm_ups_run_in_the_drain(tmp_path, warm_in_drain):
    lock = tmp_path / "gpu.lock"
    log = tmp_path / "log"
    s = WorkerSettings.from_config(Config(run=RunSection(seed=0), filter=FilterSection(min_eager_ms=0.0,
                                                                                         max_eager_ms=1e9)))
    s = s.with_profile(memory_limit_gb=0.0, compile=False, warmup=3, min_runs=3, max_runs=3, timing_phases=True,
                       warm_in_drain=warm_in_drain)
    h = Harness("cpu", s, lock_path=str(lock))
    m = h.profile({"task_id": "t", "code": _code(lock, log), "flops": 0, "bytes_moved": 0})
    assert m["status"] == "ok", m["error"]
    seen = log.read_text()
    runs = m["eager_runs"]
    assert runs == 3
    if warm_in_drain:
        # the checks' forwards shared, then the one warm-up after the announcement, then the timed runs alone
        assert seen.endswith("a" + "x" * runs) and "a" not in seen[:-runs - 1] and seen.count("x") == runs
    else:
        assert seen.endswith("x" * (runs + 1)) and "a" not in seen and seen.count("x") == runs + 1
    # the announcement ended with the task: a neighbour may hold the GPU alone now
    fd = os.open(str(lock) + ".intent", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(fd)


@pytest.mark.parametrize("varies", [False, True])
def test_the_compiled_warm_up_is_checksummed_beside_the_compile_checks_run(tmp_path, varies):
    """With warm-ups in the drain, the compiled graph's warm-up on draw 0 is checksummed: the same bits as the
    compile check's run on that draw give the same checksum, a graph whose output changes from run to run another."""
    code = '''
import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))
    def forward(self, x):
        self.calls += 1
        return x * 2 + ''' + ("self.calls" if varies else "1") + '''
def get_inputs():
    return [torch.rand(16, 16)]
def get_init_inputs():
    return []
'''
    s = WorkerSettings.from_config(Config(run=RunSection(seed=0), filter=FilterSection(min_eager_ms=0.0,
                                                                                         max_eager_ms=1e9)))
    s = s.with_profile(memory_limit_gb=0.0, compile=True, warmup=3, min_runs=3, max_runs=3, timing_phases=True,
                       warm_in_drain=True, skip_timing_when_rejected=False,
                       skip_compile_when_rejected=False)  # the varying task is non-deterministic eagerly too
    m = Harness("cpu", s, lock_path=str(tmp_path / "gpu.lock")).profile(
        {"task_id": "t", "code": code, "flops": 0, "bytes_moved": 0})
    assert m["status"] == "ok", m["error"]
    assert m["compile_ok"] and m["compile_checksum"] is not None
    assert (m["compile_rerun_checksum"] != m["compile_checksum"]) is varies
