"""Reproducibility checks: eager is deterministic and torch.compile agrees with it."""

from __future__ import annotations

from typing import Any


def compiles_and_agrees(m: dict[str, Any], f: Any) -> str | None:
    if not f.require_compile:
        return None
    if not m.get("compile_ok"):
        return f"compile failed: {m.get('compile_error') or 'unknown'}"[:200]
    key = "compile_agrees_1e4" if f.compile_tolerance <= 1e-4 else "compile_agrees_1e2"
    if not m.get(key):
        return (f"compile disagrees with eager (max abs {m.get('compile_max_abs_err')!s:.8}, "
                f"rel {m.get('compile_max_rel_err')!s:.8} > {f.compile_tolerance:g})")
    return None


def deterministic(m: dict[str, Any], f: Any) -> str | None:
    if not f.require_deterministic:
        return None
    diff = m.get("determinism_max_diff")
    if m.get("deterministic") or (diff is not None and diff <= f.determinism_tolerance):
        return None
    return f"non-deterministic (two eager runs differ by {diff})"
