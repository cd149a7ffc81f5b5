"""A light TorchDispatchMode for the meta device: records each ATen op with its FLOPs and bytes.

One pass gives the ATen trace (the truth behind the `ops` labels), FlopCounterMode's FLOP formulas
(matmul, convolution, attention), the FLOPs of every other family (operators/flops.py), the bytes each kernel reads and writes, and the output sizes for a
peak-memory bound. Pointwise ops take a fast path: meta kernels for them are Python reference
decompositions costing ~1 ms each, while their output is just the broadcast shape with a dtype we
learn once per (op, dtypes) on 0-d probes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from operators.calibration import runtime_factors
from operators.flops import family_flops, family_rule
from operators.labels import VIEW_OPS
from operators.trace import SKIP_OPS

_POINTWISE = torch.Tag.pointwise
# bookkeeping ops (operators.trace.SKIP_OPS) that still allocate and move bytes: a cast (`(x > y).float()`) is a
# kernel and a new tensor, so it is recorded for runtime and peak memory, but it carries no label and is left
# out of the ATen names (`aten_names`), as every tracer leaves it out
UNNAMED = frozenset({"aten._to_copy"})


@dataclass
class OpCost:
    name: str            # aten overload packet, e.g. aten.convolution
    flops: int
    act_bytes: int       # bytes of activations read and written (scale with the batch)
    fixed_bytes: int     # bytes of parameters and buffers read (do not scale)
    out_bytes: int
    view: bool
    # FLOPs of the families FlopCounterMode does not count (pointwise, reductions, norms...: operators/flops.py);
    # apart from `flops`, which sizing prices, so that counting them left every sampled size as it was
    family_flops: int = 0


def _name(func) -> str:
    name = str(func.overloadpacket).replace("::", ".")
    return name if name.startswith(("aten.", "prim")) else f"aten.{name}"


class CostMode(TorchDispatchMode):
    """Records OpCost per ATen call; `fixed_ids` are ids of parameter/buffer tensors."""

    _dtype_cache: dict = {}

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # nothing here is ever compiled: without this torch wraps __torch_dispatch__ in torch._disable_dynamo,
        # ~20 us a call and an import of torch._dynamo (~3 s) at the first dispatch in a process
        return False

    def __init__(self) -> None:
        super().__init__()
        self.records: list[OpCost] = []
        self.fixed_ids: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        info = _INFO.get(func)
        if info is None:
            info = _INFO[func] = _func_info(func)
        name, skip, view, flop_fn, pointwise, inplace, rule, info_rule2, count_rule = info
        out = self._fast_pointwise(func, args, kwargs, inplace) if pointwise else None
        if out is None and rule is not None:
            out = self._fast_rule(rule, args, kwargs)
        if out is None and info_rule2 is not None:
            out = info_rule2(func, args, kwargs)
        if out is None:
            out = func(*args, **kwargs)
        if skip:
            return out
        flops = extra = 0
        if flop_fn is not None:
            flops = _flops(func, flop_fn, args, kwargs, out)
        elif count_rule is not None:
            extra = family_flops(count_rule, args, kwargs, out)
        if view:  # a view reads and writes nothing (and split/unbind may return tens of thousands of them)
            self.records.append(OpCost(name, flops, 0, 0, 0, True, extra))
            return out
        act = fixed = 0
        fixed_ids = self.fixed_ids
        for t in _tensors(args, kwargs):
            if id(t) in fixed_ids:
                fixed += t.nbytes
            else:
                act += t.nbytes
        if isinstance(out, Tensor):
            out_bytes = out.nbytes
        else:
            out_bytes = sum(t.nbytes for t in _tensors((out,), {}))
        self.records.append(OpCost(name, flops, act + out_bytes, fixed, out_bytes, False, extra))
        return out

    def _fast_rule(self, rule, args, kwargs):
        """Output metadata for ops whose meta kernels are slow Python decompositions (contiguous inputs only)."""
        x = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if x is None or not x.is_contiguous() or not x.is_floating_point():
            return None
        return rule(x, args, kwargs)

    def _fast_pointwise(self, func, args, kwargs, inplace: bool):
        ts = [a for a in args if isinstance(a, torch.Tensor)]
        if not ts or any(isinstance(v, torch.Tensor) for v in kwargs.values()):
            return None
        strided = None  # dense, permuted inputs of one layout (a transposed q, say): the output takes it
        big = [a for a in ts if a.dim()]
        if any(not a.is_contiguous() for a in big):
            if inplace or not _dense(big[0]) or _layout_arg(func):
                return None
            if len(big) > 1 and (1 in big[0].shape or any(a.shape != big[0].shape or a.stride() != big[0].stride()
                                                         for a in big[1:])):
                return None
            strided = big[0].stride()
        key = (func, tuple(_dtype_key(a) for a in args), tuple(sorted(kwargs.items())))
        try:
            dtype = self._dtype_cache.get(key)
        except TypeError:  # an unhashable scalar argument
            return None
        if dtype is None:
            probe = [torch.empty((), dtype=a.dtype, device="meta") if isinstance(a, torch.Tensor) else a for a in args]
            dtype = self._dtype_cache[key] = func(*probe, **kwargs).dtype
        shape = _broadcast([a.shape for a in ts])
        if inplace:  # self is written and returned; it must already have the result's shape and dtype
            x = args[0]
            ok = isinstance(x, torch.Tensor) and shape == list(x.shape) and dtype == x.dtype and x.is_contiguous()
            return x if ok else None
        if shape is None:
            return None
        if strided is not None:
            return torch.empty_strided(shape, strided, dtype=dtype, device="meta")
        return torch.empty(shape, dtype=dtype, device="meta")


def _dtype_key(a):
    """What of a pointwise argument decides the result dtype: a tensor's dtype and whether it is 0-d; a Python
    scalar's type and value (True, 1 and 1.0 are equal dict keys but promote differently)."""
    if isinstance(a, torch.Tensor):
        return a.dtype, a.dim() == 0
    return type(a), a


_LAYOUT_ARG: dict = {}


def _layout_arg(func) -> bool:
    """The op takes a memory_format (clone, _to_copy...): its output layout is not simply its input's."""
    hit = _LAYOUT_ARG.get(func)
    if hit is None:
        hit = _LAYOUT_ARG[func] = any(a.name in ("memory_format", "layout") for a in func._schema.arguments)
    return hit


def _dense(t: torch.Tensor) -> bool:
    """Non-overlapping and dense: some permutation of its dims is contiguous (size-1 dims aside)."""
    if not t.numel():
        return False
    expect = 1
    for stride, n in sorted((st, n) for n, st in zip(t.shape, t.stride(), strict=True) if n != 1):
        if stride != expect:
            return False
        expect *= n
    return True


def _broadcast(shapes) -> list[int] | None:
    """torch.broadcast_shapes without its symbolic-shape checks (None: not broadcastable; torch says why)."""
    out = list(shapes[0])
    for shape in shapes[1:]:
        if len(shape) > len(out):
            out = [1] * (len(shape) - len(out)) + out
        off = len(out) - len(shape)
        for i, n in enumerate(shape):
            m = out[off + i]
            if m == 1:
                out[off + i] = n
            elif n != 1 and n != m:
                return None
    return out


_INFO: dict = {}


def _func_info(func) -> tuple:
    """Per-overload facts the mode needs on every call: name, skip, view, FLOP formula, fast paths, FLOP count of
    the other families."""
    name = _name(func)
    packet = func.overloadpacket
    schema = func._schema
    # in-place overloads (add_, clamp_min_...) mutate and return self; other mutable ones (out=) are left alone
    inplace = schema.is_mutable and name.endswith("_") and len(schema.returns) == 1 and bool(schema.arguments) \
        and schema.arguments[0].alias_info is not None and schema.arguments[0].alias_info.is_write
    pointwise = _POINTWISE in func.tags and (inplace or not schema.is_mutable)
    return (name, name in SKIP_OPS and name not in UNNAMED, name in VIEW_OPS or func.is_view, flop_registry.get(packet), pointwise, inplace,
            _RULES.get(name), _OVERLOAD_RULES.get(str(func)), family_rule(func, name))


_FLOPS: dict = {}


def _sig(a):
    if isinstance(a, torch.Tensor):
        return tuple(a.shape), a.dtype
    if isinstance(a, list | tuple):
        return tuple(_sig(v) for v in a)
    return a


def _flops(func, flop_fn, args, kwargs, out) -> int:
    """FlopCounterMode's formula, memoized by argument shapes (its Python formulas cost ~0.1 ms a call)."""
    try:
        key = (func, _sig(args), tuple(sorted((k, _sig(v)) for k, v in kwargs.items())), _sig(out))
        hit = _FLOPS.get(key)
    except TypeError:  # an unhashable argument
        key, hit = None, None
    if hit is None:
        hit = int(flop_fn(*args, **kwargs, out_val=out))
        if key is not None:
            if len(_FLOPS) > 100_000:
                _FLOPS.clear()
            _FLOPS[key] = hit
    return hit


_SCHEMAS: dict = {}


def _bind(func, args, kwargs) -> dict:
    """Arguments by schema name, defaults filled in."""
    schema = _SCHEMAS.get(func)
    if schema is None:
        schema = _SCHEMAS[func] = [(a.name, a.kwarg_only, a.has_default_value(), a.default_value)
                                   for a in func._schema.arguments]
    out, i = {}, 0
    for name, kw_only, has_default, default in schema:
        if not kw_only and i < len(args):
            out[name] = args[i]
            i += 1
        elif name in kwargs:
            out[name] = kwargs[name]
        elif has_default:
            out[name] = default
    return out


def _reduce(func, args, kwargs):
    """Reductions over listed dims of a contiguous float tensor, no dtype override."""
    b = _bind(func, args, kwargs)
    x, dim = b.get("self"), b.get("dim")
    if not isinstance(x, torch.Tensor) or not x.is_contiguous() or not x.is_floating_point() or not x.dim():
        return None
    if b.get("dtype") is not None or dim is None or dim == [] or dim == ():
        return None
    dims = [dim] if isinstance(dim, int) else list(dim)
    r = x.dim()
    if not all(isinstance(d, int) and -r <= d < r for d in dims):
        return None
    dims = {d % r for d in dims}
    if len(dims) != len([dim] if isinstance(dim, int) else dim) or any(x.shape[d] == 0 for d in dims):
        return None
    if b.get("keepdim"):
        shape = [1 if i in dims else n for i, n in enumerate(x.shape)]
    else:
        shape = [n for i, n in enumerate(x.shape) if i not in dims]
    return _meta(shape, x.dtype)


def _float2(*ts) -> bool:
    return all(isinstance(t, torch.Tensor) and t.dtype == torch.float32 for t in ts)


def _mm(func, args, kwargs):
    a, b = args[0], args[1]
    if not _float2(a, b) or a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        return None
    return _meta([a.shape[0], b.shape[1]])


def _bmm(func, args, kwargs):
    a, b = args[0], args[1]
    if not _float2(a, b) or a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        return None
    return _meta([a.shape[0], a.shape[1], b.shape[2]])


def _add_mm(inner):
    def rule(func, args, kwargs):
        if len(args) < 3 or not _float2(args[0]):
            return None
        out = inner(func, args[1:], kwargs)
        if out is None or _broadcast([args[0].shape, out.shape]) != list(out.shape):
            return None
        return out

    return rule


def _like(x: torch.Tensor, *_) -> torch.Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device="meta")


def _meta(shape, dtype=torch.float32) -> torch.Tensor:
    return torch.empty(list(shape), dtype=dtype, device="meta")


def _layer_norm(x, args, kwargs):
    # torch's checks first: a shape it rejects goes to the real kernel, which raises
    shape = list(args[1])
    axis = x.dim() - len(shape)
    if not shape or axis < 0 or list(x.shape[axis:]) != shape:
        return None
    if any(isinstance(w, torch.Tensor) and list(w.shape) != shape for w in args[2:4]):
        return None
    stats = list(x.shape[:axis]) + [1] * len(args[1])
    return _like(x), _meta(stats, x.dtype), _meta(stats, x.dtype)


def _batch_norm(x, args, kwargs):
    training = args[5] if len(args) > 5 else kwargs.get("training")
    if not training or x.dim() < 2:
        return None
    c = x.shape[1]
    if any(isinstance(t, torch.Tensor) and list(t.shape) != [c] for t in args[1:5]):
        return None
    return _like(x), _meta([x.shape[1]], x.dtype), _meta([x.shape[1]], x.dtype)


def _group_norm(x, args, kwargs):
    n, c, hxw, group = args[3], args[4], args[5], args[6]
    if x.dim() < 2 or [n, c] != list(x.shape[:2]) or x.numel() != n * c * hxw or group <= 0 or c % group:
        return None
    if any(isinstance(t, torch.Tensor) and list(t.shape) != [c] for t in args[1:3]):
        return None
    return _like(x), _meta([n, group], x.dtype), _meta([n, group], x.dtype)


def _upsample(x, args, kwargs):
    size = args[1] if len(args) > 1 else None
    if not isinstance(size, list | tuple) or not all(isinstance(v, int) for v in size):
        return None
    return _meta([*x.shape[:2], *size], x.dtype)


def _grid_sampler(x, args, kwargs):
    grid = args[1]
    if not isinstance(grid, torch.Tensor) or grid.dim() != x.dim() or grid.shape[0] != x.shape[0] \
            or grid.shape[-1] != x.dim() - 2 or grid.dtype != x.dtype:
        return None
    return _meta([x.shape[0], x.shape[1], *grid.shape[1:-1]], x.dtype)


def _euclidean_dist(x, args, kwargs):
    y = args[1]
    if not isinstance(y, torch.Tensor) or y.dim() != x.dim() or x.shape[:-2] != y.shape[:-2] \
            or x.shape[-1] != y.shape[-1] or y.dtype != x.dtype:
        return None
    return _meta([*x.shape[:-1], y.shape[-2]], x.dtype)


def _ints(v, n: int, lo: int) -> bool:
    return isinstance(v, list | tuple) and len(v) == n and all(type(i) is int and i >= lo for i in v)


def _im2col(x, args, kwargs):
    """nn.Unfold: [N, C, H, W] -> [N, C*kh*kw, L] (batched input, valid sizes; else torch decides)."""
    if x.dim() != 4 or len(args) != 5 or kwargs or not all(x.shape):
        return None
    _, kernel, dilation, padding, stride = args
    if not (_ints(kernel, 2, 1) and _ints(dilation, 2, 1) and _ints(padding, 2, 0) and _ints(stride, 2, 1)):
        return None
    length = 1
    for i in range(2):
        n = (x.shape[2 + i] + 2 * padding[i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1
        # torch's decomposition ends in a reshape of a permuted gather: a copy (contiguous) when no kernel or
        # output extent is 1; otherwise it may be a view with other strides, which torch works out
        if n < 2 or kernel[i] < 2:
            return None
        length *= n
    return _meta([x.shape[0], x.shape[1] * kernel[0] * kernel[1], length], x.dtype)


def _same_dims(x, dims) -> bool:
    r = x.dim()
    return bool(dims) and all(type(d) is int and -r <= d < r for d in dims) and len({d % r for d in dims}) == len(dims)


def _roll(x, args, kwargs):
    shifts, dims = args[1], args[2] if len(args) > 2 else kwargs.get("dims", [])
    if not _ints(shifts, len(shifts), -2**62) or len(shifts) != len(dims) or not _same_dims(x, dims):
        return None
    return _like(x)


def _flip(x, args, kwargs):
    return _like(x) if len(args) == 2 and not kwargs and _same_dims(x, list(args[1])) else None


def _renorm(x, args, kwargs):
    if len(args) != 4 or kwargs or x.dim() < 2:
        return None
    _, p, dim, maxnorm = args
    ok = isinstance(p, int | float) and p > 0 and isinstance(maxnorm, int | float) and maxnorm >= 0
    return _like(x) if ok and _same_dims(x, [dim]) else None


def _log_sigmoid(x, args, kwargs):
    return _like(x), _like(x)


def _pair_loss(func, args, kwargs):
    """Elementwise losses of a contiguous float x and a target of x's layout, no weights: reduction none keeps
    x's shape, mean and sum give a 0-d tensor."""
    b = _bind(func, args, kwargs)
    x, y = b.get("self"), b.get("target")
    if not isinstance(x, torch.Tensor) or not x.is_contiguous() or not x.is_floating_point():
        return None
    if not isinstance(y, torch.Tensor) or y.shape != x.shape or y.dtype != x.dtype or not y.is_contiguous():
        return None
    if b.get("weight") is not None or b.get("pos_weight") is not None or b.get("reduction") not in (0, 1, 2):
        return None
    return _like(x) if b["reduction"] == 0 else _meta([], x.dtype)


def _dist(x, args, kwargs):
    y = args[1] if len(args) > 1 else None
    if kwargs or not isinstance(y, torch.Tensor) or y.dtype != x.dtype or _broadcast([x.shape, y.shape]) is None:
        return None
    return _meta([], x.dtype)


def _reduce_all(func, args, kwargs):
    """mean()/sum() of a whole float tensor, no dtype override: a 0-d tensor."""
    b = _bind(func, args, kwargs)
    x = b.get("self")
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or b.get("dtype") is not None:
        return None
    return _meta([], x.dtype)


def _reduce_pair(func, args, kwargs):
    """std_mean / var_mean over listed dims: two tensors of the reduced shape."""
    out = _reduce(func, args, kwargs)
    return None if out is None else (out, _meta(out.shape, out.dtype))


# ops whose output is the input's shape and dtype (softmaxes, scans, triangles, some activations)
_SAME = ("aten._log_softmax", "aten._softmax", "aten._safe_softmax", "aten.hardswish", "aten.hardsigmoid",
         "aten.cumsum", "aten.cumprod", "aten.logcumsumexp", "aten.tril", "aten.triu", "aten._prelu_kernel",
         "aten.mish", "aten.softplus", "aten.elu", "aten.leaky_relu", "aten.hardtanh")
_RULES = {name: _like for name in _SAME}
_RULES.update({
    "aten.native_layer_norm": _layer_norm, "aten.native_batch_norm": _batch_norm,
    "aten.native_group_norm": _group_norm, "aten.upsample_bicubic2d": _upsample,
    "aten.upsample_bilinear2d": _upsample, "aten.upsample_nearest2d": _upsample,
    "aten.upsample_linear1d": _upsample, "aten.upsample_nearest1d": _upsample,
    "aten.upsample_trilinear3d": _upsample, "aten.upsample_nearest3d": _upsample,
    "aten.grid_sampler_2d": _grid_sampler, "aten._euclidean_dist": _euclidean_dist,
    "aten.log_sigmoid_forward": _log_sigmoid,  # returns (out, buffer)
    "aten.im2col": _im2col, "aten.roll": _roll, "aten.flip": _flip, "aten.renorm": _renorm, "aten.dist": _dist,
})


_OVERLOAD_RULES = {name: _reduce for name in (
    "aten.mean.dim", "aten.sum.dim_IntList", "aten.amax.default", "aten.amin.default",
    "aten.linalg_vector_norm.default", "aten.norm.ScalarOpt_dim", "aten.logsumexp.default", "aten.std.correction",
    "aten.var.correction", "aten.prod.dim_int", "aten.nansum.default")}
def _triangle(func, args, kwargs):
    """tril/triu of a contiguous matrix (batch) of any dtype (causal masks are bool)."""
    x = args[0]
    if not isinstance(x, torch.Tensor) or x.dim() < 2 or not x.is_contiguous():
        return None
    return _like(x)


_OVERLOAD_RULES.update({"aten.tril.default": _triangle, "aten.triu.default": _triangle})
_OVERLOAD_RULES.update({"aten.mean.default": _reduce_all, "aten.sum.default": _reduce_all,
                        "aten.std_mean.correction": _reduce_pair, "aten.var_mean.correction": _reduce_pair})
_OVERLOAD_RULES.update({name: _pair_loss for name in (
    "aten.binary_cross_entropy.default", "aten.binary_cross_entropy_with_logits.default",
    "aten.smooth_l1_loss.default", "aten.huber_loss.default")})
_OVERLOAD_RULES.update({"aten.mm.default": _mm, "aten.bmm.default": _bmm, "aten.addmm.default": _add_mm(_mm),
                        "aten.baddbmm.default": _add_mm(_bmm)})


def _tensors(args, kwargs):
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, list | tuple):
            yield from (t for t in a if isinstance(t, torch.Tensor))


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def aten_names(records: list[OpCost]) -> list[str]:
    """The ATen ops a trace names (what labels and signatures compare): UNNAMED casts left out."""
    return [r.name for r in records if r.name not in UNNAMED]


def predict_ms(records: list[OpCost], bandwidth_gbps: float, tflops: float, launch_us: float,
               batch_scale: float = 1.0, calibrated: bool = True) -> float:
    """Per-kernel roofline: max(compute, traffic) times the op's calibration factor + launch overhead, summed;
    views are free.

    `batch_scale` extrapolates to another batch size: FLOPs and activation bytes scale, weights do not.
    """
    return roofline_ms(kernels(records, calibrated), bandwidth_gbps, tflops, launch_us, batch_scale)


def kernels(records: list[OpCost], calibrated: bool = True) -> list[tuple[int, int, int, float]]:
    """(FLOPs, activation bytes, fixed bytes, time factor) of each kernel (views are free): what `roofline_ms`
    reads, taken once where one trace is priced at many batch sizes. The factor is the GPU calibration's for
    ops whose CUDA kernels are far from the roofline (operators/calibration.py), else 1."""
    factors = runtime_factors() if calibrated else {}
    return [(r.flops, r.act_bytes, r.fixed_bytes, factors.get(r.name, 1.0)) for r in records if not r.view]


def roofline_ms(kernels: list[tuple[int, int, int, float]], bandwidth_gbps: float, tflops: float, launch_us: float,
                batch_scale: float = 1.0) -> float:
    """predict_ms over `kernels(records)`."""
    t = 0.0
    for flops, act, fixed, factor in kernels:
        compute = flops * batch_scale / (tflops * 1e12)
        traffic = (act * batch_scale + fixed) / (bandwidth_gbps * 1e9)
        t += max(compute, traffic) * factor + launch_us * 1e-6
    return t * 1e3


def peak_bytes(records: list[OpCost], input_bytes: int, fixed_bytes: int, batch_scale: float = 1.0,
               draw_bytes: int = 0) -> int:
    """Peak memory of the eager forward (operators.peak.activation_peak) beside the weights; activations
    scale with the batch, weights do not."""
    from operators.peak import activation_peak

    return peak_from_activations(activation_peak(records, input_bytes, draw_bytes), fixed_bytes, batch_scale)


def peak_from_activations(activations: int, fixed_bytes: int, batch_scale: float = 1.0) -> int:
    """peak_bytes given the trace's activation peak."""
    return int(activations * batch_scale + fixed_bytes)
