"""A light TorchDispatchMode for the meta device: records each ATen op with its FLOPs and bytes.

One pass gives the ATen trace (the truth behind the `ops` labels), FlopCounterMode's FLOP formulas
(matmul, convolution, attention), the bytes each kernel reads and writes, and the output sizes for a
peak-memory bound. Pointwise ops take a fast path: meta kernels for them are Python reference
decompositions costing ~1 ms each, while their output is just the broadcast shape with a dtype we
learn once per (op, dtypes) on 0-d probes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from operators.labels import VIEW_OPS
from operators.trace import _SKIP

_POINTWISE = torch.Tag.pointwise


@dataclass
class OpCost:
    name: str            # aten overload packet, e.g. aten.convolution
    flops: int
    act_bytes: int       # bytes of activations read and written (scale with the batch)
    fixed_bytes: int     # bytes of parameters and buffers read (do not scale)
    out_bytes: int
    view: bool


def _name(func) -> str:
    name = str(func.overloadpacket).replace("::", ".")
    return name if name.startswith(("aten.", "prim")) else f"aten.{name}"


class CostMode(TorchDispatchMode):
    """Records OpCost per ATen call; `fixed_ids` are ids of parameter/buffer tensors."""

    _dtype_cache: dict = {}

    def __init__(self) -> None:
        super().__init__()
        self.records: list[OpCost] = []
        self.fixed_ids: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = self._fast_pointwise(func, args, kwargs)
        if out is None:
            out = self._fast_rule(func, args, kwargs)
        if out is None:
            out = func(*args, **kwargs)
        name = _name(func)
        if name in _SKIP:
            return out
        view = name in VIEW_OPS or func.is_view
        flops = 0
        packet = func.overloadpacket
        if packet in flop_registry:
            flops = int(flop_registry[packet](*args, **kwargs, out_val=out))
        act = fixed = 0
        if not view:
            for a in _tensors(args, kwargs):
                if id(a) in self.fixed_ids:
                    fixed += _nbytes(a)
                else:
                    act += _nbytes(a)
        out_bytes = sum(_nbytes(t) for t in _tensors((out,), {}))
        self.records.append(OpCost(name, flops, act + (0 if view else out_bytes), fixed, 0 if view else out_bytes, view))
        return out

    def _fast_rule(self, func, args, kwargs):
        """Output metadata for ops whose meta kernels are slow Python decompositions (contiguous inputs only)."""
        name = _name(func)
        x = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if x is None or not x.is_contiguous() or not x.is_floating_point() or name not in _RULES:
            return None
        return _RULES[name](x, args, kwargs)

    def _fast_pointwise(self, func, args, kwargs):
        if _POINTWISE not in func.tags or func._schema.is_mutable:
            return None
        ts = [a for a in args if isinstance(a, torch.Tensor)]
        if not ts or any(a.dim() and not a.is_contiguous() for a in ts) or any(
                isinstance(v, torch.Tensor) for v in kwargs.values()):
            return None
        key = (func, tuple(a if not isinstance(a, torch.Tensor) else (a.dtype, a.dim() == 0) for a in args),
               tuple(sorted(kwargs.items())))
        try:
            dtype = self._dtype_cache.get(key)
        except TypeError:  # an unhashable scalar argument
            return None
        if dtype is None:
            probe = [torch.empty((), dtype=a.dtype, device="meta") if isinstance(a, torch.Tensor) else a for a in args]
            dtype = self._dtype_cache[key] = func(*probe, **kwargs).dtype
        shape = torch.broadcast_shapes(*[a.shape for a in ts])
        return torch.empty(shape, dtype=dtype, device="meta")


def _like(x: torch.Tensor, *_) -> torch.Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device="meta")


def _meta(shape, dtype=torch.float32) -> torch.Tensor:
    return torch.empty(list(shape), dtype=dtype, device="meta")


def _layer_norm(x, args, kwargs):
    axis = x.dim() - len(args[1])
    stats = list(x.shape[:axis]) + [1] * len(args[1])
    return _like(x), _meta(stats, x.dtype), _meta(stats, x.dtype)


def _batch_norm(x, args, kwargs):
    training = args[5] if len(args) > 5 else kwargs.get("training")
    if not training:
        return None
    return _like(x), _meta([x.shape[1]], x.dtype), _meta([x.shape[1]], x.dtype)


def _group_norm(x, args, kwargs):
    n, group = args[3], args[6]
    return _like(x), _meta([n, group], x.dtype), _meta([n, group], x.dtype)


def _upsample(x, args, kwargs):
    size = args[1] if len(args) > 1 else None
    if not isinstance(size, list | tuple) or not all(isinstance(v, int) for v in size):
        return None
    return _meta([*x.shape[:2], *size], x.dtype)


def _grid_sampler(x, args, kwargs):
    grid = args[1]
    return _meta([x.shape[0], x.shape[1], *grid.shape[1:-1]], x.dtype)


def _euclidean_dist(x, args, kwargs):
    y = args[1]
    return _meta([*x.shape[:-1], y.shape[-2]], x.dtype)


# ops whose output is the input's shape and dtype (softmaxes, scans, triangles, some activations)
_SAME = ("aten._log_softmax", "aten._softmax", "aten._safe_softmax", "aten.hardswish", "aten.hardsigmoid",
         "aten.cumsum", "aten.cumprod", "aten.logcumsumexp", "aten.tril", "aten.triu", "aten._prelu_kernel",
         "aten.mish", "aten.softplus", "aten.elu", "aten.leaky_relu", "aten.hardtanh",
         "aten.log_sigmoid_forward")
_RULES = {name: _like for name in _SAME}
_RULES.pop("aten.log_sigmoid_forward")  # returns (out, buffer)
_RULES.update({
    "aten.native_layer_norm": _layer_norm, "aten.native_batch_norm": _batch_norm,
    "aten.native_group_norm": _group_norm, "aten.upsample_bicubic2d": _upsample,
    "aten.upsample_bilinear2d": _upsample, "aten.upsample_nearest2d": _upsample,
    "aten.upsample_linear1d": _upsample, "aten.upsample_nearest1d": _upsample,
    "aten.upsample_trilinear3d": _upsample, "aten.upsample_nearest3d": _upsample,
    "aten.grid_sampler_2d": _grid_sampler, "aten._euclidean_dist": _euclidean_dist,
})


def _tensors(args, kwargs):
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, list | tuple):
            yield from (t for t in a if isinstance(t, torch.Tensor))


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def aten_names(records: list[OpCost]) -> list[str]:
    return [r.name for r in records]


def predict_ms(records: list[OpCost], bandwidth_gbps: float, tflops: float, launch_us: float,
               batch_scale: float = 1.0) -> float:
    """Per-kernel roofline: max(compute, traffic) + launch overhead, summed; views are free.

    `batch_scale` extrapolates to another batch size: FLOPs and activation bytes scale, weights do not.
    """
    t = 0.0
    for r in records:
        if r.view:
            continue
        compute = r.flops * batch_scale / (tflops * 1e12)
        traffic = (r.act_bytes * batch_scale + r.fixed_bytes) / (bandwidth_gbps * 1e9)
        t += max(compute, traffic) + launch_us * 1e-6
    return t * 1e3


def peak_bytes(records: list[OpCost], input_bytes: int, fixed_bytes: int, batch_scale: float = 1.0) -> int:
    """Upper bound on peak memory: inputs, weights and every intermediate alive at once."""
    outs = sum(r.out_bytes for r in records)
    return int((input_bytes + outs) * batch_scale + fixed_bytes)
