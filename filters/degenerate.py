"""Anti reward-hacking checks: the output depends on the input and is not degenerate."""

from __future__ import annotations

from typing import Any


def input_sensitive(m: dict[str, Any], f: Any) -> str | None:
    d = m.get("input_min_pairwise_diff")
    if d is None or d < f.min_input_sensitivity:
        return f"input-insensitive (outputs for different inputs differ by {d} < {f.min_input_sensitivity:g})"
    return None


def not_fakeable(m: dict[str, Any], f: Any) -> str | None:
    """Draws that agree within the verifier's tolerance let a kernel return one fixed tensor and pass on every
    input (a softmax over 100k values, a mean loss over 1e8, a saturated sigmoid)."""
    r = m.get("input_sensitivity_ratio")
    # measurements from before this column have none: keep them, so old runs still filter as they did
    if r is not None and r < f.min_input_sensitivity_ratio:
        return (f"fakeable by a fixed output (draws agree within the verifier tolerance "
                f"{f.compile_tolerance:g}: ratio {r:.3g} < {f.min_input_sensitivity_ratio:g})")
    return None


def not_degenerate(m: dict[str, Any], f: Any) -> str | None:
    if f.reject_degenerate and m.get("degenerate"):
        return f"degenerate output ({m['degenerate']})"
    return None


# what one forward's outputs over several input draws decide, on any device: the profile worker's eager checks
# (with determinism) and the sampler's CPU pre-screen apply them in this order
OUTPUT_CHECKS = (input_sensitive, not_degenerate, not_fakeable)
