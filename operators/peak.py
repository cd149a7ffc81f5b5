"""Peak memory of a task's eager forward: a live-bytes counter, kernel workspaces, and the input draws.

`LiveBytes` is a TorchDispatchMode that counts the bytes of every storage an ATen call creates and frees them
when the last tensor on them dies, exactly as eager frees them; on the meta device it gives the eager peak of
everything the dispatcher sees without allocating anything, on real tensors it is the measured truth tests
compare predictions with. What the dispatcher cannot see are buffers a kernel allocates inside itself:
`WORKSPACE` lists the ops that do, with the bytes they hold while they run, as multiples of their inputs' or
outputs' bytes, with the entries a GPU run measured (operators/calibration.py) in place of the estimates. A
task's input draws (`torch.rand(...) + 1.0`, `torch.randint(...).float() * 2 - 1`) hold
temporaries too, before the forward starts: `draw_peak` prices them.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# ATen op -> (multiple of the bytes of its tensor inputs, multiple of its output bytes) held inside the kernel.
# logsumexp: ATen computes `(x - max).exp()` into a full-size temporary inside the one call (on every device).
# Sorts (sort, and what sorts internally on CUDA: topk, kthvalue, median, mode, unique): CUB's radix sort
# double-buffers keys and int64 indices. index_put with accumulate, scatter_reduce and index_add sort their
# indices on CUDA. Convolutions: cuDNN may pick an algorithm whose workspace is of the order of its input and
# output (benchmark mode off, heuristics). These CUDA entries are upper estimates: the GPU run's measured peak
# (measurements.peak_memory_bytes) against tasks.predicted_peak_bytes is what confirms or narrows them.
WORKSPACE: dict[str, tuple[float, float]] = {
    "aten.logsumexp": (1.0, 0.0),
    "aten.sort": (1.0, 1.0),
    "aten.topk": (1.0, 0.0),
    "aten.kthvalue": (1.0, 0.0),
    "aten.median": (1.0, 0.0),
    "aten.nanmedian": (1.0, 0.0),
    "aten.mode": (1.0, 0.0),
    "aten._unique2": (2.0, 0.0),
    "aten.unique_dim": (2.0, 0.0),
    "aten.convolution": (1.0, 1.0),
    "aten.index_put": (1.0, 0.0),
    "aten.index_put_": (1.0, 0.0),
    "aten.scatter_reduce": (1.0, 0.0),
    "aten.index_add": (1.0, 0.0),
}


def workspaces(calibrated: bool = True) -> dict[str, tuple[float, float]]:
    """WORKSPACE with the GPU calibration's measured entries in place of the estimates (operators/calibration.py:
    e.g. cdist and nansum hold a copy of their inputs on CUDA, count_nonzero an int64 copy of its bool input)."""
    global _MERGED
    if not calibrated:
        return WORKSPACE
    from operators.calibration import peak_workspaces

    cal = peak_workspaces()
    if _MERGED[0] is not cal:
        _MERGED = (cal, {**WORKSPACE, **cal})
    return _MERGED[1]


_MERGED: tuple = (None, WORKSPACE)
# what each draw of rendered get_inputs holds at its peak, in bytes per element of the drawn float32 input:
# `torch.rand(...) + 1.0` holds the rand beside the sum; `torch.randint(0, 2, s).float() * 2 - 1` an int64
# tensor beside its float copy, then two float32 tensors at each step
DRAW_PEAK_PER_ELEMENT = {"rand1": 8, "sign": 12}


def workspace_bytes(name: str, in_bytes: int, out_bytes: int, calibrated: bool = True) -> int:
    """Bytes `name` holds inside its kernel beyond its inputs and outputs (0 for ops not in `workspaces()`)."""
    w = workspaces(calibrated).get(name)
    return int(w[0] * in_bytes + w[1] * out_bytes) if w else 0


def draw_peak(inputs: Iterable[tuple[str, int, int]]) -> int:
    """Peak bytes while get_inputs draws `inputs` ((draw, numel, element size) in order): the inputs already
    drawn plus the one being drawn with its temporaries."""
    held = peak = 0
    for draw, numel, size in inputs:
        peak = max(peak, held + max(numel * DRAW_PEAK_PER_ELEMENT.get(draw, 0), numel * size))
        held += numel * size
    return max(peak, held)


def activation_peak(records, input_bytes: int, draw_bytes: int = 0, calibrated: bool = True) -> int:
    """Peak bytes of a traced forward beside its weights: the inputs, then every output the trace creates (a
    rendered forward names each node's output and holds it until it returns, so nothing is freed early;
    inside a composite module this over-counts), plus at each op the workspace it holds while it runs; or
    the input draws' own peak (`draw_bytes`, see `draw_peak`) if higher. `records` are CostMode's OpCost."""
    held = top = input_bytes
    table = workspaces(calibrated)
    for r in records:
        held += r.out_bytes
        if r.name in table:
            top = max(top, held + workspace_bytes(r.name, r.act_bytes - r.out_bytes + r.fixed_bytes, r.out_bytes,
                                                  calibrated))
    return max(top, held, draw_bytes)


def _storage_key(t: torch.Tensor) -> tuple[int, int] | None:
    try:
        st = t.untyped_storage()
        return st._cdata, st.nbytes()
    except (RuntimeError, NotImplementedError):  # sparse or other storage-less tensors
        return None


def _tensors(obj) -> Iterable[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, list | tuple):
        for o in obj:
            yield from _tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o)


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages ATen calls created that are still referenced: `live` now, `peak` at most.

    A storage counts from the call that created it (an output on a storage none of the call's inputs use)
    until the last tensor on it dies; views and in-place results of an input count nothing. Tensors that
    existed before the mode (weights, inputs) are not counted. With `workspaces`, each call also peaks at
    its WORKSPACE bytes above what is live while it runs."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # nothing here is compiled; saves importing torch._dynamo at the first dispatch

    def __init__(self, workspaces: bool = False) -> None:
        super().__init__()
        self.live = self.peak = 0
        self.workspaces = workspaces
        self._refs: dict[int, list[int]] = {}  # storage -> [tensors alive on it, nbytes]

    def _drop(self, key: int) -> None:
        entry = self._refs.get(key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] == 0:
            self.live -= entry[1]
            del self._refs[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        ins = list(_tensors((args, kwargs)))
        seen = {k[0] for k in map(_storage_key, ins) if k}
        out_bytes = 0
        for t in _tensors(out):
            key = _storage_key(t)
            if key is None:
                continue
            entry = self._refs.get(key[0])
            if entry is None:
                if key[0] in seen:  # a view or in-place result of a storage from before the mode
                    continue
                entry = self._refs[key[0]] = [0, key[1]]
                self.live += key[1]
                out_bytes += key[1]
            entry[0] += 1
            weakref.finalize(t, self._drop, key[0])
        extra = 0
        if self.workspaces:
            name = str(func.overloadpacket).replace("::", ".")
            name = name if name.startswith("aten.") else f"aten.{name}"
            extra = workspace_bytes(name, sum(t.nbytes for t in ins), out_bytes)
        self.peak = max(self.peak, self.live + extra)
        return out
