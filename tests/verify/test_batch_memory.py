"""verify_batch on a GPU keeps its verifications within the GPU's memory: the gate admits a verification only while
the reservations fit (one runs alone whatever its size), and a verification that still ran out of memory is done
again alone, so a neighbour's memory never costs a candidate its reward. The scheduling is tested with verify()
replaced by a recorder: no GPU is needed to see who ran beside whom."""

import threading
import time

import pytest

import verify.api as api
from verify.api import MemoryGate, verify_batch


@pytest.fixture(autouse=True)
def _a_gpu_as_far_as_the_device_check_goes(monkeypatch):
    """The scheduling is what these tests see, on any machine: the device check (a plain error on a machine
    without a GPU, tests/verify/test_policy.py) is taken as passed."""
    monkeypatch.setattr(api, "check_device", lambda *a, **k: None)


def test_gate_holds_back_what_does_not_fit_and_lets_one_run_alone():
    gate, log = MemoryGate(budget=10), []

    def run(name: str, need: int, hold: float) -> None:
        gate.take(need)
        log.append(("start", name, gate.used))
        time.sleep(hold)
        log.append(("end", name))
        gate.give(need)

    big = threading.Thread(target=run, args=("big", 8, 0.3))
    big.start()
    time.sleep(0.05)
    small = threading.Thread(target=run, args=("small", 5, 0.0))  # 8 + 5 > 10: waits for big
    huge = threading.Thread(target=run, args=("huge", 50, 0.0))  # over the budget: runs, but only alone
    small.start()
    huge.start()
    for t in (big, small, huge):
        t.join()
    assert log.index(("end", "big")) < min(i for i, e in enumerate(log) if e[0] == "start" and e[1] != "big")
    assert ("start", "huge", 50) in log  # alone: nothing else held memory when it started


def _fake_verify(active: list, peak_seen: list, oom_when_crowded: bool):
    lock = threading.Lock()

    def fake(task, cand, **kw):
        with lock:
            active.append(task["task_id"])
            peak_seen.append(len(active))
            crowded = len(active) > 1
        time.sleep(0.05)
        with lock:
            active.remove(task["task_id"])
        if oom_when_crowded and crowded:
            return {"task_id": task["task_id"], "reward": -1, "error": "OutOfMemoryError: CUDA out of memory."}
        return {"task_id": task["task_id"], "reward": 1, "error": None}
    return fake


GIB = 2**30


def _tasks(n: int, peak: int) -> list:
    return [({"task_id": f"t{i}", "code": "", "peak_memory_bytes": peak}, "cand") for i in range(n)]


def test_reservations_bound_how_many_run_at_once(monkeypatch):
    active, seen = [], []
    monkeypatch.setattr(api, "verify", _fake_verify(active, seen, oom_when_crowded=False))
    # 5 x 1 GiB + 0.5 GiB = 5.5 GiB each in a 12 GiB budget: at most two side by side though four workers are free
    rows = verify_batch(_tasks(8, GIB), workers=4, device="cuda", memory_budget=12 * GIB)
    assert [r["reward"] for r in rows] == [1] * 8
    assert max(seen) == 2, seen
    # a caller that knows its verifications hold less (3 x 1 GiB + 0.5 GiB): four side by side
    active, seen = [], []
    monkeypatch.setattr(api, "verify", _fake_verify(active, seen, oom_when_crowded=False))
    verify_batch(_tasks(8, GIB), workers=4, device="cuda", memory_budget=16 * GIB, memory_factor=3)
    assert max(seen) == 4, seen


def test_out_of_memory_is_verified_again_alone(monkeypatch):
    active, seen = [], []
    monkeypatch.setattr(api, "verify", _fake_verify(active, seen, oom_when_crowded=True))
    rows = verify_batch(_tasks(6, 1), workers=3, device="cuda", memory_budget=10 * GIB)
    assert max(seen) > 1  # they did run side by side, and the crowded ones ran out of memory
    assert [r["reward"] for r in rows] == [1] * 6
    assert any(r.get("retried_alone") for r in rows)


def test_cpu_batches_are_not_gated(monkeypatch):
    active, seen = [], []
    monkeypatch.setattr(api, "verify", _fake_verify(active, seen, oom_when_crowded=False))
    verify_batch(_tasks(6, 10**15), workers=3, device="cpu")
    assert max(seen) > 1


def test_each_gated_verification_is_capped_at_its_reservation_and_a_retry_alone_is_not(monkeypatch):
    caps = []

    def fake(task, cand, **kw):
        caps.append(kw.get("gpu_memory_cap"))
        crowded = len(caps) == 1  # the first runs out of memory, as if a neighbour had crowded it
        err = "OutOfMemoryError: CUDA out of memory." if crowded else None
        return {"task_id": task["task_id"], "reward": -1 if err else 1, "error": err}

    monkeypatch.setattr(api, "verify", fake)
    rows = verify_batch(_tasks(3, GIB), workers=2, device="cuda", memory_budget=40 * GIB)
    # 2.5 x the reservation (5 x the task's peak, and the fixed 0.5 GiB); then the retry, uncapped
    cap = int(2.5 * (5 * GIB + GIB // 2))
    assert caps[:3] == [cap, cap, cap] and caps[3:] == [None], caps
    assert [r["reward"] for r in rows] == [1, 1, 1]
    caps.clear()
    verify_batch(_tasks(2, 10), workers=2, device="cpu")
    assert caps == [None, None]  # no GPU, no cap
