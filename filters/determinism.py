"""Reproducibility checks: eager is deterministic and torch.compile agrees with it."""

from __future__ import annotations

from typing import Any

# the tolerances profile records compile-vs-eager agreement at (allclose atol = rtol), and the column of each;
# the config refuses any other filter.compile_tolerance, since no measurement could judge it
AGREEMENT_COLUMNS = {1e-4: "compile_agrees_1e4", 1e-2: "compile_agrees_1e2"}


def compiles_and_agrees(m: dict[str, Any], f: Any) -> str | None:
    if not f.require_compile:
        return None
    if not m.get("compile_ok"):
        return f"compile failed: {m.get('compile_error') or 'unknown'}"[:200]
    if not m.get(AGREEMENT_COLUMNS[f.compile_tolerance]):
        return (f"compile disagrees with eager (max abs {m.get('compile_max_abs_err')!s:.8}, "
                f"rel {m.get('compile_max_rel_err')!s:.8} > {f.compile_tolerance:g})")
    return None


def deterministic(m: dict[str, Any], f: Any) -> str | None:
    if not f.require_deterministic:
        return None
    diff = m.get("determinism_max_diff")
    if m.get("deterministic") or (diff is not None and diff <= f.determinism_tolerance):
        return None
    return f"non-deterministic (eager runs on the same inputs differ by {diff})"
