"""Shortcut checks: every tensor input and every operator must matter at the verifier's tolerance, and the output
must hold under an honest rounding change (measured by measures/shortcuts.py in the profile stage)."""

from __future__ import annotations

from typing import Any


def no_shortcuts(m: dict[str, Any], f: Any) -> str | None:
    """The first shortcut measured, naming the input, the operator or the change. Measurements taken without
    the shortcut checks (no `shortcut_checks`) keep, so older runs filter as they did; checks that a shortcuts-only
    call ran and that failed (`shortcut_error`) drop, since the task is then unchecked."""
    if not f.reject_shortcuts:
        return None
    if m.get("shortcut_error"):
        return f"shortcut checks failed, the task is unchecked: {m['shortcut_error']}"[:240]
    if not m.get("shortcut_checks"):
        return None
    if m.get("dead_inputs"):
        return (f"dead input: {m['dead_inputs'][0]} (redrawn alone, the output stays within "
                f"{f.compile_tolerance:g}: ratio {m.get('min_input_redraw_ratio')!s:.6})")
    if m.get("skippable_ops"):
        how = (m.get("skippable_by") or ["replaced"])[0]
        return (f"skippable operator: {m['skippable_ops'][0]} ({how}, the output stays within "
                f"{f.compile_tolerance:g}: ratio {m.get('min_op_ratio')!s:.6})")
    if m.get("fragile"):
        ratio = m.get("fragile_ulp_ratio") if m["fragile"].endswith("ulp input move") else m.get("fragile_f64_ratio")
        return f"fragile: {m['fragile']} (the output moves beyond {f.compile_tolerance:g}: ratio {ratio!s:.6})"
    return None
