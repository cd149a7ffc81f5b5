"""How close a task's step operators come to their steps, in units of an honest rounding: one float32 and one
float64 forward of the same inputs, each step operator's distance to its step recorded in both.

A step operator's output is not continuous in its input: a comparison (x > y, at x - y = 0), a rounding (at the
integers, round at the halves), a sign or threshold (at 0 or the threshold), an ordering (argmax, sort, topk: at
ties between neighbours). An element whose float64 distance to the step is within k times its float32-vs-float64
difference is one an honest kernel's rounding may put on the other side. The counts of such elements per k are a
measurement only: whether one flips the output past the verifier's tolerance depends on what follows the step,
which the fragility check measures (measures/shortcuts.py). torch and stdlib only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from measures.shortcuts import _cast_model

NEAR_K = (1, 4, 16, 64)
SAMPLE = 2**20  # distances kept per call: an even stride over more
COMPARE = frozenset({"gt", "lt", "ge", "le", "eq", "ne", "greater", "less", "greater_equal", "less_equal",
                     "__gt__", "__lt__", "__ge__", "__le__", "__eq__", "__ne__", "isclose"})
AT_ZERO = frozenset({"sign", "sgn", "signbit", "heaviside"})
TO_INTEGER = frozenset({"floor", "ceil", "trunc", "fix"})
ORDER = frozenset({"argmax", "argmin", "sort", "argsort", "msort", "topk", "kthvalue", "median", "nanmedian",
                   "mode", "max", "min"})


def _name(func: Any) -> str:
    return getattr(func, "__name__", "") or ""


def _distance(name: str, args: tuple, kwargs: dict) -> torch.Tensor | None:
    """The distance of each element to the call's step, or None for a call that holds no step (or one this does
    not read: binning, a max over no dim)."""
    x = args[0] if args else kwargs.get("input")
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        return None
    if name in COMPARE:
        y = args[1] if len(args) > 1 else kwargs.get("other")
        if isinstance(y, torch.Tensor) and not y.is_floating_point():
            return None
        return (x - y) if y is not None else None
    if name in AT_ZERO:
        return x
    if name == "round":
        return x - torch.floor(x) - 0.5
    if name in TO_INTEGER:
        return x - torch.round(x)
    if name == "threshold" and len(args) > 1:
        return x - float(args[1])
    if name in ORDER:
        dim = args[1] if len(args) > 1 and isinstance(args[1], int) else kwargs.get("dim")
        if name == "msort":
            dim = 0
        if not isinstance(dim, int) or x.dim() == 0:
            return None  # a max over everything, or a binary max: no ties along a dim to read
        s = torch.sort(x, dim=dim).values
        return torch.diff(s, dim=dim)
    return None


class _Steps(TorchFunctionMode):
    """Records each step call's distances, sampled on an even stride, in call order."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[torch.Tensor] = []
        self.sizes: list[int] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        d = _distance(_name(func), tuple(args), kwargs)  # step_margins runs the forward under no_grad
        if d is not None:
            flat = d.reshape(-1)
            stride = max(1, flat.numel() // SAMPLE)
            self.seen.append(flat[::stride].double().clone())
            self.sizes.append(flat.numel())
        return func(*args, **kwargs)


def step_margins(model: Any, x: Sequence[Any]) -> dict:
    """The step calls of one forward of `model` on inputs `x`, in float32 and float64 (the model cast in place and
    back), and per k in NEAR_K how many elements lie within k float32-vs-float64 differences of their step
    (scaled from the kept sample to each call's elements). A forward whose step calls differ between the two
    precisions (control flow) records nothing."""
    with torch.no_grad(), _Steps() as f32:
        model(*x)
    saved = _cast_model(model, None)
    try:
        x64 = tuple(t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in x)
        with torch.no_grad(), _Steps() as f64:
            model(*x64)
        del x64
    finally:
        _cast_model(model, saved)
    out = {"calls": len(f32.seen), "elements": sum(f32.sizes), "near": {str(k): 0.0 for k in NEAR_K}}
    if len(f32.seen) != len(f64.seen) or any(a.shape != b.shape for a, b in zip(f32.seen, f64.seen, strict=False)):
        out["error"] = "the step calls differ between float32 and float64"
        return out
    for a, b, size in zip(f32.seen, f64.seen, f32.sizes, strict=True):
        err = (a - b).abs()
        moved = err > 0  # an element exactly on its step in both (a relu's zero against 0) no rounding moves
        scale = size / max(a.numel(), 1)
        for k in NEAR_K:
            out["near"][str(k)] += float(((b.abs() <= k * err) & moved).sum()) * scale
    return out
