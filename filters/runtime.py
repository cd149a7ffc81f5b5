"""Runtime and resource checks on a task's measurements: it ran, in the window, with undisturbed timings, under
the memory cap."""

from __future__ import annotations

from typing import Any


def ran_ok(m: dict[str, Any], f: Any) -> str | None:
    if m.get("status") != "ok":
        return f"{m.get('status') or 'not profiled'}: {m.get('error') or 'no detail'}"[:200]
    return None


def eager_in_window(m: dict[str, Any], f: Any) -> str | None:
    ms = m.get("eager_ms")
    if ms is None:
        # not timed because a check rejected it: that check names the reason (or `timed` does, at other thresholds)
        return None if m.get("timing_skipped") else "no eager runtime"
    if ms < f.min_eager_ms:
        return f"too fast (eager {ms:.3g} ms < {f.min_eager_ms:g} ms)"
    if ms > f.max_eager_ms:
        return f"too slow (eager {ms:.3g} ms > {f.max_eager_ms:g} ms)"
    return None


def timing_undisturbed(m: dict[str, Any], f: Any) -> str | None:
    """Allocator retries inside the timed runs (the allocator freeing its cache and calling cudaMalloc again,
    under a cap too tight for the task) inflate the runtimes a kernel would be judged against."""
    retries = m.get("timing_alloc_retries")
    # measurements from before this column have none, and CPU runs record 0: both keep
    if f.require_undisturbed_timing and retries:
        return f"timing disturbed by allocator retries ({retries} in timed runs)"
    return None


def peak_memory_under_cap(m: dict[str, Any], f: Any) -> str | None:
    peak = m.get("peak_memory_bytes") or 0
    cap = f.max_peak_memory_gb * 2**30
    if peak > cap:
        return f"too much memory (peak {peak / 2**30:.2f} GiB > {f.max_peak_memory_gb:g} GiB)"
    return None


def timed(m: dict[str, Any], f: Any) -> str | None:
    """Last of the checks: a task the worker did not time (profile.skip_timing_when_rejected) and that every other
    check keeps at these thresholds (looser than the profile's) has no runtime to judge or publish."""
    if m.get("eager_ms") is None and m.get("timing_skipped"):
        return (f"not timed: profile it again with profile.skip_timing_when_rejected off to judge it at these "
                f"thresholds (rejected while profiling: {m['timing_skipped']})")[:200]
    return None
