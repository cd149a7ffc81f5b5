"""Runtime and resource checks on a task's measurements: it ran, in the window, under the memory cap."""

from __future__ import annotations

from typing import Any


def ran_ok(m: dict[str, Any], f: Any) -> str | None:
    if m.get("status") != "ok":
        return f"{m.get('status') or 'not profiled'}: {m.get('error') or 'no detail'}"[:200]
    return None


def eager_in_window(m: dict[str, Any], f: Any) -> str | None:
    ms = m.get("eager_ms")
    if ms is None:
        return "no eager runtime"
    if ms < f.min_eager_ms:
        return f"too fast (eager {ms:.3g} ms < {f.min_eager_ms:g} ms)"
    if ms > f.max_eager_ms:
        return f"too slow (eager {ms:.3g} ms > {f.max_eager_ms:g} ms)"
    return None


def peak_memory_under_cap(m: dict[str, Any], f: Any) -> str | None:
    peak = m.get("peak_memory_bytes") or 0
    cap = f.max_peak_memory_gb * 2**30
    if peak > cap:
        return f"too much memory (peak {peak / 2**30:.2f} GiB > {f.max_peak_memory_gb:g} GiB)"
    return None
