"""Checks on a task's outputs, shared by the profile worker and the sampler's CPU pre-screen
(operators.prescreen): degenerate outputs, differences between runs and between input draws, compile-vs-eager
agreement, and timing quantiles. torch and stdlib only (it runs on the bare GPU image)."""

from __future__ import annotations

import math
import statistics
from typing import Any

import torch

SAMPLE = 4_000_000  # elements of each further draw's output kept for the sensitivity and compile checks
# elements per pass of a whole-output check: its temporaries (differences, masks) stay a few times 16 MiB instead
# of a few times the output, which the task's memory reservation does not hold (on the H200, 312 of 704 tasks,
# those with outputs of ~1.3 GiB, ran out of their reservation in these checks and ran again with the whole cap)
CHUNK = 1 << 22
SATURATION_SAMPLE = 1_000_000  # elements the saturated-output check counts values over


def out_of_memory(e: BaseException) -> bool:
    """Whether an error is a want of memory (a GPU's, or the CPU allocator's under an address-space limit) rather
    than something the task's code cannot do."""
    msg = str(e)
    return isinstance(e, MemoryError | torch.OutOfMemoryError) or "out of memory" in msg \
        or "can't allocate memory" in msg


def tensors(obj: Any) -> list:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, list | tuple):
        return [t for o in obj for t in tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in tensors(o)]
    return []


def flatten(out: Any) -> Any:
    """All tensors of a forward's output as one flat float tensor (float64 stays float64), or None if it
    returned none. One float output gives a view, no copy."""
    ts = tensors(out)
    if not ts:
        return None
    flat = [t.detach().reshape(-1).to(torch.float64 if t.dtype == torch.float64 else torch.float32) for t in ts]
    return flat[0] if len(flat) == 1 else torch.cat(flat)


def _chunks(*ts: Any) -> Any:
    """Matching flat slices of equally long tensors, CHUNK elements at a time (views where the tensors are flat)."""
    flat = [t.reshape(-1) for t in ts]
    n = flat[0].numel()
    for i in range(0, n, CHUNK):
        yield tuple(f[i:i + CHUNK] for f in flat)


CHECKSUM_PERIOD = 1021  # weights 1..1021 by position: a permutation of equal values changes the sum


def checksum(flat: Any) -> float:
    """A position-weighted float64 sum of a flat output (NaN and infinities count as 0), read back once: two runs
    whose outputs differ in any element (an argsort that orders ties otherwise, say) almost surely differ here, so
    a repeat can tell which side of a compile check moved. Chunked like the other whole-output checks."""
    if flat.numel() == 0:
        return 0.0
    parts = []
    for i, (c,) in enumerate(_chunks(flat)):
        w = torch.arange(i * CHUNK, i * CHUNK + c.numel(), device=c.device, dtype=torch.int64) % CHECKSUM_PERIOD + 1
        parts.append((c.double().nan_to_num(0.0, 0.0, 0.0) * w).sum())
    return float(torch.stack(parts).sum())


def _worst(maxima: list) -> float:
    """One number from per-chunk maxima (0-d tensors) as one torch max over the whole gives it (NaN if any is
    NaN), read back once rather than once per chunk; 0.0 for no chunk (an empty output)."""
    return float(torch.stack(maxima).max()) if maxima else 0.0


def sample_stride(numel: int) -> int:
    """Stride of the even sample of an output kept per further draw: all of it up to SAMPLE elements."""
    return max(1, numel // SAMPLE)


def draw_checks(ref0: Any, subs: list, tol: float) -> dict[str, Any]:
    """The measurements the filter's output checks read, from draw 0's flat output `ref0` and the strided
    samples `subs` of every draw's output (subs[0] is ref0's): input_min_pairwise_diff (input-insensitive),
    input_sensitivity_ratio at the verifier's tolerance `tol` (< 1: a kernel returning draw 0's output for any
    input passes on every other draw; above SAMPLE elements: the sample's, at most the full ratio), degenerate
    and output_numel."""
    return {"input_min_pairwise_diff": min(max_diff(subs[i], subs[j])
                                           for i in range(len(subs)) for j in range(i + 1, len(subs))),
            "input_sensitivity_ratio": max(tolerance_ratio(subs[0], sub, tol) for sub in subs[1:]),
            "degenerate": degenerate(ref0), "output_numel": int(ref0.numel())}


def degenerate(flat: Any) -> str:
    """'' or the first of nonfinite | zero | tiny | constant | saturated that the output shows."""
    if flat.numel() == 0:
        return "empty"
    finite, highs, lows = [], [], []
    for (c,) in _chunks(flat):  # one pass: the largest magnitude and constancy both follow from max and min
        finite.append(torch.isfinite(c).all())
        highs.append(c.max())
        lows.append(c.min())
    if not bool(torch.stack(finite).all()):
        return "nonfinite"
    high, low = float(torch.stack(highs).max()), float(torch.stack(lows).min())
    amax = max(abs(high), abs(low))
    if amax == 0.0:
        return "zero"
    if amax < 1e-4:
        return "tiny"
    if flat.numel() > 1 and high == low:
        return "constant"
    # share of the most common value, exact up to SATURATION_SAMPLE elements, on an even stride above that. A value
    # held by more than half the elements is the median, so the median's share decides it: a selection, not the
    # sort torch.unique makes (ten times the CPU time at a million elements)
    sample = flat[:: max(1, flat.numel() // SATURATION_SAMPLE)]
    if sample.numel() > 1 and float((sample == sample.median()).sum()) / sample.numel() > 0.99:
        return "saturated"
    return ""


def max_diff(a: Any, b: Any) -> float:
    if a.shape != b.shape:
        return math.inf
    return _worst([_max_diff(x, y) for x, y in _chunks(a, b)])


def _max_diff(a: Any, b: Any) -> Any:
    if a.device.type == "cpu":  # one pass where every difference is finite (the usual case), then the exact rule
        m = (a - b).abs_().max()
        if bool(torch.isfinite(m)):
            return m
    d = (a - b).abs()
    # equal values (an inf of one sign in both: inf - inf is NaN) and NaN at the same place count as equal
    d = torch.where((a == b) | (torch.isnan(a) & torch.isnan(b)), torch.zeros_like(d), d)
    return d.max()


def tolerance_ratio(fixed: Any, ref: Any, tol: float) -> float:
    """How far `fixed` stands from `ref` at the verifier's allclose(fixed, ref, atol=tol, rtol=tol): the max
    over elements of |fixed - ref| / (tol + tol * |ref|), so < 1 means `fixed` passes as `ref`'s output. Equal
    values (infs of one sign included) and NaN at the same place count as equal; any other NaN or inf, or
    another shape, is inf."""
    if fixed.shape != ref.shape:
        return math.inf
    return _worst([_tolerance_ratio(f, r, tol) for f, r in _chunks(fixed, ref)])


def _tolerance_ratio(fixed: Any, ref: Any, tol: float) -> Any:
    if fixed.device.type == "cpu":
        # in place, one buffer: the same numbers where every ratio is finite (the usual case), checked with one
        # read; an inf or NaN anywhere takes the exact rule below. (The CPU pre-screen spent ~30% of its time here;
        # on a GPU the read would cost a sync per chunk, so it keeps the one expression.)
        m = (fixed - ref).abs_().div_(ref.abs().mul_(tol).add_(tol)).max()
        if bool(torch.isfinite(m)):
            return m
    r = (fixed - ref).abs() / (tol + tol * ref.abs())
    same = (fixed == ref) | (torch.isnan(fixed) & torch.isnan(ref))
    # what is left NaN compares a NaN or an inf with something else (inf / inf): the verifier fails it
    r = torch.where(same, torch.zeros_like(r), torch.nan_to_num(r, nan=math.inf, posinf=math.inf))
    return r.max()


def agreement(out: Any, ref: Any) -> tuple[float, float, bool, bool]:
    """(max abs err, max rel err, allclose at 1e-4, allclose at 1e-2) of out against ref."""
    if out.shape != ref.shape:
        return math.inf, math.inf, False, False
    abs_errs, rel_errs, close4, close2 = [], [], [], []
    for o, r in _chunks(out, ref):
        err = (o - r).abs()
        abs_errs.append(err.max())
        rel_errs.append((err / r.abs().clamp_min(1e-8)).max())
        del err
        close4.append(torch.isclose(o, r, atol=1e-4, rtol=1e-4).all())  # allclose, chunk by chunk
        close2.append(torch.isclose(o, r, atol=1e-2, rtol=1e-2).all())
    return (_worst(abs_errs), _worst(rel_errs), not close4 or bool(torch.stack(close4).all()),
            not close2 or bool(torch.stack(close2).all()))


def quantiles(xs: list[float]) -> tuple[float, float]:
    if len(xs) < 2:
        return xs[0], 0.0
    q1, q2, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return q2, q3 - q1
