"""Sizes: base input dimensions from a traffic budget, then the batch size that puts the predicted eager
runtime on the target device inside the window, under the peak-memory cap.

The model (operators/cost.py) is a per-kernel roofline over the ATen ops traced on meta: FLOPs from
torch's FlopCounterMode formulas, bytes from tensor sizes, plus a launch overhead per kernel. Batch
scaling is linear in activations and leaves weights alone; the final size is re-run on meta and
checked, so a graph that is not linear in the batch is caught, not mispredicted. Ops whose CUDA kernels a GPU
run showed far from the roofline or holding hidden buffers are priced by the pinned calibration
(operators/calibration.py).
"""

from __future__ import annotations

import math
import random

from operators.calibration import output_share
from operators.cost import OpCost, kernels, peak_from_activations, roofline_ms
from operators.peak import activation_peak

MAX_BATCH = 65536


def _nice(v: float, lo: int, hi: int) -> int:
    v = int(min(max(v, lo), hi))
    if v >= 64:
        return v - v % 16
    if v >= 16:
        return v - v % 4
    return v


def base_sizes(rng: random.Random, rank: int, layout: str, per_sample: float) -> list[int]:
    """Non-batch dimensions whose product is about `per_sample` elements."""
    n = max(per_sample, 16.0)
    if layout == "tokens":
        return [_nice(n / 256, 8, 4096)]
    if rank == 2:
        return [_nice(n, 16, 16384)]
    if rank == 3 and layout == "seq":
        e = rng.choice([64, 128, 256, 512])
        return [_nice(n / e, 8, 4096), e]
    c = rng.choice([3, 8, 16, 32, 64] if rank < 5 else [3, 8, 16])
    if rank == 3:
        return [c, _nice(n / c, 8, 65536)]
    if rank == 4:
        s = _nice(math.sqrt(n / c), 4, 1024)
        return [c, s, s]
    s = _nice((n / c) ** (1 / 3), 4, 128)
    return [c, max(4, s // 2 * 2), s, s]


def per_sample_budget(rng: random.Random, target_ms: float, bandwidth_gbps: float, num_ops: int) -> float:
    """Elements per sample so that a memory-bound graph at a middling batch lands near target_ms."""
    elems = bandwidth_gbps * 1e9 * target_ms * 1e-3 / 4 / (2 * num_ops + 2)
    batch = math.exp(rng.uniform(math.log(4), math.log(128)))
    return elems / batch


def output_cap(cap_bytes: int) -> int | None:
    """The most output bytes a task may have under the peak cap `cap_bytes` (None: no bound). The profile worker
    holds a reference output beside a further forward, so a task whose output is most of its peak needs nearly
    twice the peak: the calibration pins the largest output share of the cap that a GPU run ran through."""
    share = output_share()
    return None if share is None else int(share * cap_bytes)


def solve_batch(records: list[OpCost], batch0: int, target_ms: float, cap_bytes: int, input_bytes: int,
                fixed_bytes: int, bw: float, tflops: float, launch_us: float, draw_bytes: int = 0,
                out_bytes: int = 0) -> int:
    """Largest batch whose predicted runtime is <= target_ms (at least 1), within the memory cap; with
    `out_bytes` (the task's output at batch0), also with its output within `output_cap`."""
    ks, act = kernels(records), activation_peak(records, input_bytes, draw_bytes)  # ~17 probes price one trace
    out_cap = output_cap(cap_bytes) if out_bytes else None

    def t(b: int) -> float:
        return roofline_ms(ks, bw, tflops, launch_us, b / batch0)

    def mem(b: int) -> bool:
        if out_cap is not None and out_bytes * b / batch0 > out_cap:
            return False
        return peak_from_activations(act, fixed_bytes, b / batch0) <= cap_bytes

    lo, hi = 1, MAX_BATCH
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if t(mid) <= target_ms and mem(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo
