"""verify_batch's timing lock: with 2 workers on one device the timed regions never overlap (each worker holds the
device's lock exclusively while it times); with the lock switched off, or with the workers on two GPUs (one lock
each), they do. The candidate sleeps 40 ms per call so that each timed region (over a second) outlasts the jitter
of the two workers' start."""

import itertools

import pytest

from verify.api import verify_batch
from verify.batch import parse_gpus
from verify.suite import render

SLOW = render("time.sleep(0.04)\nreturn ext.relu_k(y)", imports="import time")


def _overlapping(rows: list[dict]) -> list[tuple[int, int]]:
    spans = [r["timed_region"] for r in rows]
    return [(i, j) for i, j in itertools.combinations(range(len(spans)), 2)
            if spans[i][0] < spans[j][1] and spans[j][0] < spans[i][1]]


def _batch(ext_dir: str, task: str, off: tuple[str, ...] = (), gpus: list[int] | None = None) -> list[dict]:
    rows = verify_batch([(task, SLOW)] * 2, workers=2, device="cpu", off=("static", *off), rounds=15,
                        extensions_dir=ext_dir, gpus=gpus)
    assert all(r["correct"] and r["timed_region"] for r in rows), rows
    return rows


def test_timed_regions_never_overlap(ext_dir, suite_task):
    rows = _batch(ext_dir, suite_task)
    assert not _overlapping(rows), [r["timed_region"] for r in rows]
    # one of them waited for the other's timing: to time (both came to time together) or to warm up (the later
    # one came while the other timed: its shared warm-up waits behind the exclusive hold)
    waits = [r["timing_lock_wait_s"] + r["check_lock_wait_s"] for r in rows]
    assert max(waits) > 0.1, rows


def test_without_the_lock_timed_regions_overlap(ext_dir, suite_task):
    rows = _batch(ext_dir, suite_task, off=("timing_lock",))
    assert _overlapping(rows), [r["timed_region"] for r in rows]


def test_gpus_spread_workers_with_one_lock_each(ext_dir, suite_task):
    rows = _batch(ext_dir, suite_task, gpus=[0, 1])
    assert sorted(r["gpu"] for r in rows) == [0, 1], rows
    assert _overlapping(rows), [r["timed_region"] for r in rows]  # two devices: both time at once


def test_parse_gpus():
    from opsynth.errors import OpsynthError

    assert parse_gpus("0,1") == [0, 1] and parse_gpus(None) is None
    with pytest.raises(OpsynthError, match="--gpus"):
        parse_gpus("a,b")


def test_lock_waits_are_credited_up_to_the_grace():
    """verify()'s deadline moves back by the seconds the worker reported waiting for the timing lock (b"w" ... b"h"
    on its events pipe), never by more than the grace."""
    import os
    import time

    from verify.api import LockWaits

    r, w = os.pipe()
    waits = LockWaits(r)
    os.write(w, b"w")
    time.sleep(0.3)
    os.write(w, b"hx")  # an unknown byte counts for nothing
    time.sleep(0.1)
    assert 0.25 <= waits.credit(10.0) < 5.0
    assert waits.credit(0.1) == 0.1
    os.write(w, b"w")  # a wait still going on when asked counts too
    time.sleep(0.2)
    assert waits.credit(10.0) >= 0.45
    os.close(w)
    assert waits.stop(0.2) == 0.2
