"""FLOPs of the ATen ops torch's FlopCounterMode leaves at zero: pointwise, reductions, norms, softmax, scans,
pooling, interpolation, losses, and the few matrix products it has no formula for (mv, addbmm, bilinear, cdist).

Counted as roofline analyses of deep-learning operators count them (arithmetic per element, not per
instruction; a transcendental, a comparison or a max counts one):

- pointwise: 1 per output element (fused ones their arithmetic: addcmul/addcdiv/lerp 2, logaddexp 3, glu 2);
  copies, casts, fills, selects (where, masked_fill), padding and indexing move data and count 0
- reductions: 1 per input element (sum, mean, max, prod, any, argmax, median, topk...); norms 2 (square, add);
  var/std 4 (mean, then subtract, square, add); logsumexp 4 (max, subtract, exp, add)
- softmax / log_softmax: 5 per element (max, subtract, exp, sum, divide)
- layer / batch / group / instance norm: 6 per element (mean 1, variance 3, normalize 2), 8 with an affine
  weight and bias; renorm 3
- scans: 1 per element (cumsum, cumprod, cummax), logcumsumexp 3
- pooling: the window's size per output element (max and average); adaptive pools 1 per input element
- interpolation: per output element linear 3, bilinear 7, trilinear 15, bicubic 31 (a weighted sum of 2, 4, 8,
  16 taps), nearest 0; grid_sample 7
- losses: per input element mse 3, huber / smooth L1 4, BCE 4, BCE with logits 5, soft margin 3, multi margin 3;
  NLL 1 per target
- products: mv 2mn, addmv 2mn + m, addbmm 2bnmp + np, bilinear 2 per term of its sum, cdist 3 per feature of
  each pair; index_add / scatter_add / scatter_reduce 1 per source element; sort n log2(d) comparisons,
  searchsorted / bucketize log2(boundaries) per element; embedding_bag 1 per gathered element

These counts are kept apart from FlopCounterMode's (`OpCost.family_flops`): sizing prices kernels with the
latter alone, so counting them changed no sampled size.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

_POINTWISE = torch.Tag.pointwise

# pointwise by tag, yet they only move or select data
_MOVES = frozenset({
    "aten.clone", "aten.copy", "aten.copy_", "aten._to_copy", "aten.fill", "aten.fill_", "aten.zero_",
    "aten.where", "aten.masked_fill", "aten.masked_fill_", "aten.lift_fresh_copy", "aten.zeros_like",
    "aten.ones_like", "aten.full_like", "aten.scalar_tensor",
})
_POINTWISE_WEIGHT = {"aten.addcmul": 2, "aten.addcdiv": 2, "aten.lerp": 2, "aten.logaddexp": 3,
                     "aten.logaddexp2": 3, "aten.xlogy": 2, "aten.special_xlog1py": 2, "aten.isclose": 4}
# elementwise without the tag
_ELEMENTWISE = {"aten.hardswish": 1, "aten.log_sigmoid_forward": 1, "aten._prelu_kernel": 1, "aten.rsub": 1,
                "aten.isclose": 4, "aten.glu": 2}

_REDUCTION = {
    "aten.sum": 1, "aten.mean": 1, "aten.amax": 1, "aten.amin": 1, "aten.max": 1, "aten.min": 1, "aten.prod": 1,
    "aten.nansum": 1, "aten.any": 1, "aten.all": 1, "aten.count_nonzero": 1, "aten.argmax": 1, "aten.argmin": 1,
    "aten.aminmax": 2, "aten.median": 1, "aten.nanmedian": 1, "aten.kthvalue": 1, "aten.mode": 1, "aten.topk": 1,
    "aten.linalg_vector_norm": 2, "aten.norm": 2, "aten.std": 4, "aten.var": 4, "aten.std_mean": 4,
    "aten.var_mean": 4, "aten.logsumexp": 4, "aten.dist": 3,
}
_SOFTMAX = {"aten._softmax": 5, "aten._log_softmax": 5, "aten._safe_softmax": 5}
_SCAN = {"aten.cumsum": 1, "aten.cumprod": 1, "aten.cummax": 1, "aten.cummin": 1, "aten.logcumsumexp": 3}
_LOSS = {"aten.mse_loss": 3, "aten.huber_loss": 4, "aten.smooth_l1_loss": 4, "aten.binary_cross_entropy": 4,
         "aten.binary_cross_entropy_with_logits": 5, "aten.soft_margin_loss": 3, "aten.multi_margin_loss": 3,
         "aten.multilabel_margin_loss_forward": 3}
_INTERPOLATE = {"aten.upsample_linear1d": 3, "aten.upsample_bilinear2d": 7, "aten.upsample_trilinear3d": 15,
                "aten.upsample_bicubic2d": 31, "aten._upsample_bilinear2d_aa": 7, "aten._upsample_bicubic2d_aa": 31,
                "aten.grid_sampler_2d": 7, "aten.grid_sampler_3d": 15}
_POOL = ("aten.max_pool1d", "aten.max_pool2d_with_indices", "aten.max_pool3d_with_indices", "aten.avg_pool1d",
         "aten.avg_pool2d", "aten.avg_pool3d", "aten.max_pool2d", "aten.max_pool3d")
_ADAPTIVE = ("aten._adaptive_avg_pool2d", "aten._adaptive_avg_pool3d", "aten.adaptive_max_pool2d",
             "aten.adaptive_max_pool3d", "aten.adaptive_avg_pool1d", "aten.adaptive_max_pool1d",
             "aten.fractional_max_pool2d", "aten.fractional_max_pool3d")
# where the affine weight sits: layer_norm(x, normalized_shape, weight, bias), the others (x, weight, bias, ...)
_NORMS = {"aten.native_layer_norm": 2, "aten.native_batch_norm": 1, "aten.native_group_norm": 1,
          "aten._native_batch_norm_legit": 1, "aten._native_batch_norm_legit_no_training": 1,
          "aten._native_batch_norm_legit_functional": 1}


# counts with a log of a dim's size: not linear in the batch when that dim is the batch (msort), so a node with
# one is never derived at another batch (operators/batch_scale.py)
LOG_COUNTS = frozenset({"aten.sort", "aten.searchsorted", "aten.bucketize"})


def _first(args: tuple) -> torch.Tensor | None:
    return next((a for a in args if isinstance(a, torch.Tensor)), None)


def _numel(t: Any) -> int:
    if isinstance(t, torch.Tensor):
        return t.numel()
    if isinstance(t, list | tuple) and t:
        return _numel(t[0])  # (values, indices), (out, mean, rstd): the first is the result
    return 0


def _per_out(k: int) -> Callable:
    return lambda args, kwargs, out: k * _numel(out)


def _per_in(k: int) -> Callable:
    def rule(args, kwargs, out):
        x = _first(args)
        return k * x.numel() if x is not None else 0

    return rule


def _norm(weight_at: int) -> Callable:
    def rule(args, kwargs, out):
        x = _first(args)
        if x is None:
            return 0
        affine = len(args) > weight_at and isinstance(args[weight_at], torch.Tensor)
        return (8 if affine else 6) * x.numel()

    return rule


def _pool(args, kwargs, out) -> int:
    kernel = args[1] if len(args) > 1 else kwargs.get("kernel_size")
    size = math.prod(kernel) if isinstance(kernel, list | tuple) and kernel else 1
    if isinstance(kernel, list | tuple) and len(kernel) == 1:  # one size for every spatial dim
        x = _first(args)
        size = kernel[0] ** max(1, (x.dim() if x is not None else 3) - 2)
    return size * _numel(out)


def _sort(args, kwargs, out) -> int:
    x = _first(args)
    if x is None or not x.numel():
        return 0
    dim = args[1] if len(args) > 1 and isinstance(args[1], int) else kwargs.get("dim", -1)
    d = x.shape[dim] if x.dim() else 1
    return x.numel() * max(1, math.ceil(math.log2(max(d, 2))))


def _search(args, kwargs, out) -> int:
    boundaries = args[1] if isinstance(args[0], torch.Tensor) and args[0].dim() and len(args) > 1 \
        and isinstance(args[1], torch.Tensor) else None
    if boundaries is None:  # bucketize(self, boundaries) and searchsorted(sorted_sequence, self)
        boundaries = _first(args)
    d = boundaries.shape[-1] if isinstance(boundaries, torch.Tensor) and boundaries.dim() else 1
    return _numel(out) * max(1, math.ceil(math.log2(max(d, 2))))


def _source(position: int) -> Callable:
    def rule(args, kwargs, out):
        src = args[position] if len(args) > position and isinstance(args[position], torch.Tensor) else None
        return src.numel() if src is not None else _numel(out)

    return rule


def _mv(args, kwargs, out) -> int:
    x = _first(args)
    return 2 * x.numel() if x is not None else 0


def _addmv(args, kwargs, out) -> int:
    m = args[1] if len(args) > 1 and isinstance(args[1], torch.Tensor) else None
    return (2 * m.numel() + _numel(out)) if m is not None else 0


def _addbmm(args, kwargs, out) -> int:
    a, b = (args[1], args[2]) if len(args) > 2 else (None, None)
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.dim() != 3 or b.dim() != 3:
        return 0
    return 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2] + _numel(out)


def _trilinear(args, kwargs, out) -> int:
    """_trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim): one multiply-add per point of the broadcast
    product of the three expanded inputs."""
    shapes = []
    for t, expand in zip(args[:3], args[3:6], strict=False):
        if not isinstance(t, torch.Tensor):
            return 0
        shape = list(t.shape)
        for d in sorted(expand):
            shape.insert(d, 1)
        shapes.append(shape)
    try:
        full = torch.broadcast_shapes(*shapes)
    except RuntimeError:
        return 0
    return 2 * math.prod(full)


def _cdist(args, kwargs, out) -> int:
    x = _first(args)
    return 3 * _numel(out) * (x.shape[-1] if x is not None and x.dim() else 1)


def _embedding_bag(args, kwargs, out) -> int:
    weight, indices = args[0], args[1]
    if not isinstance(weight, torch.Tensor) or not isinstance(indices, torch.Tensor) or weight.dim() != 2:
        return 0
    return indices.numel() * weight.shape[1]


def _nll(args, kwargs, out) -> int:
    target = args[1] if len(args) > 1 and isinstance(args[1], torch.Tensor) else None
    return target.numel() if target is not None else 0


_RULES: dict[str, Callable] = {
    **{n: _per_in(k) for n, k in {**_REDUCTION, **_SOFTMAX, **_SCAN, **_LOSS}.items()},
    **{n: _per_out(k) for n, k in {**_INTERPOLATE, **_ELEMENTWISE}.items()},
    **{n: _norm(at) for n, at in _NORMS.items()},
    **{n: _pool for n in _POOL},
    **{n: _per_in(1) for n in _ADAPTIVE},
    "aten.renorm": _per_in(3), "aten.sort": _sort, "aten.searchsorted": _search, "aten.bucketize": _search,
    "aten.index_add": _source(3), "aten.scatter_add": _source(3), "aten.scatter_reduce": _source(3),
    "aten.mv": _mv, "aten.addmv": _addmv, "aten.addbmm": _addbmm, "aten._trilinear": _trilinear,
    "aten._euclidean_dist": _cdist, "aten._cdist_forward": _cdist, "aten._embedding_bag": _embedding_bag,
    "aten._embedding_bag_forward_only": _embedding_bag, "aten.nll_loss_forward": _nll, "aten.nll_loss2d_forward": _nll,
}


def family_rule(func: Any, name: str) -> Callable | None:
    """How to count one overload's FLOPs (called with args, kwargs, out), or None: it counts none here."""
    if name in _MOVES:
        return None
    # reductions of one tensor (sum.dim_IntList) and pointwise binaries of the same name (max.other) differ by tag
    if _POINTWISE in func.tags:
        return _per_out(_POINTWISE_WEIGHT.get(name, 1))
    return _RULES.get(name)


def family_flops(rule: Callable, args: tuple, kwargs: dict, out: Any) -> int:
    """The FLOPs of one call by `family_rule`'s rule (0 where the arguments are not what it expects)."""
    try:
        return int(rule(args, kwargs, out))
    except (TypeError, IndexError, ValueError, AttributeError):
        return 0
