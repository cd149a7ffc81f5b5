"""Checks on a task's outputs, shared by the profile worker: degenerate outputs, differences between runs,
compile-vs-eager agreement, and timing quantiles. torch and stdlib only (it runs on the bare GPU image)."""

from __future__ import annotations

import math
import statistics
from typing import Any

import torch


def tensors(obj: Any) -> list:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, list | tuple):
        return [t for o in obj for t in tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in tensors(o)]
    return []


def degenerate(flat: Any) -> str:
    """'' or the first of nonfinite | zero | tiny | constant | saturated that the output shows."""
    if flat.numel() == 0:
        return "empty"
    if not bool(torch.isfinite(flat).all()):
        return "nonfinite"
    amax = float(flat.abs().max())
    if amax == 0.0:
        return "zero"
    if amax < 1e-4:
        return "tiny"
    if flat.numel() > 1 and float(flat.max()) == float(flat.min()):
        return "constant"
    # share of the most common value, exact up to 1M elements, on an even stride above that
    sample = flat[:: max(1, flat.numel() // 1_000_000)]
    counts = torch.unique(sample, return_counts=True)[1]
    if sample.numel() > 1 and float(counts.max()) / sample.numel() > 0.99:
        return "saturated"
    return ""


def max_diff(a: Any, b: Any) -> float:
    if a.shape != b.shape:
        return math.inf
    d = (a - b).abs()
    d = torch.where(torch.isnan(a) & torch.isnan(b), torch.zeros_like(d), d)
    return float(d.max()) if d.numel() else 0.0


def tolerance_ratio(fixed: Any, ref: Any, tol: float) -> float:
    """How far `fixed` stands from `ref` at the verifier's allclose(fixed, ref, atol=tol, rtol=tol): the max
    over elements of |fixed - ref| / (tol + tol * |ref|), so < 1 means `fixed` passes as `ref`'s output. Equal
    values (infs of one sign included) and NaN at the same place count as equal; any other NaN or inf, or
    another shape, is inf."""
    if fixed.shape != ref.shape:
        return math.inf
    if not fixed.numel():
        return 0.0
    r = (fixed - ref).abs() / (tol + tol * ref.abs())
    same = (fixed == ref) | (torch.isnan(fixed) & torch.isnan(ref))
    # what is left NaN compares a NaN or an inf with something else (inf / inf): the verifier fails it
    r = torch.where(same, torch.zeros_like(r), torch.nan_to_num(r, nan=math.inf, posinf=math.inf))
    return float(r.max())


def agreement(out: Any, ref: Any) -> tuple[float, float, bool, bool]:
    """(max abs err, max rel err, allclose at 1e-4, allclose at 1e-2) of out against ref."""
    if out.shape != ref.shape:
        return math.inf, math.inf, False, False
    err = (out - ref).abs()
    abs_err = float(err.max()) if err.numel() else 0.0
    rel_err = float((err / ref.abs().clamp_min(1e-8)).max()) if err.numel() else 0.0
    return (abs_err, rel_err, bool(torch.allclose(out, ref, atol=1e-4, rtol=1e-4)),
            bool(torch.allclose(out, ref, atol=1e-2, rtol=1e-2)))


def quantiles(xs: list[float]) -> tuple[float, float]:
    if len(xs) < 2:
        return xs[0], 0.0
    q1, q2, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return q2, q3 - q1
