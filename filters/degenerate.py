"""Anti reward-hacking checks: the output depends on the input and is not degenerate."""

from __future__ import annotations

from typing import Any


def input_sensitive(m: dict[str, Any], f: Any) -> str | None:
    d = m.get("input_min_pairwise_diff")
    if d is None or d < f.min_input_sensitivity:
        return f"input-insensitive (outputs for different inputs differ by {d} < {f.min_input_sensitivity:g})"
    return None


def not_degenerate(m: dict[str, Any], f: Any) -> str | None:
    if f.reject_degenerate and m.get("degenerate"):
        return f"degenerate output ({m['degenerate']})"
    return None
