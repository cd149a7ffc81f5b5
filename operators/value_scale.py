"""Value-scale rules: draws whose operators cannot matter at the verifier's tolerance (1e-2), or whose output a
rounding would flip, predicted from the catalog's value model (operators/value_model.py) before any task is
screened, so the sampler draws another instead of making a task the shortcut checks (measures/shortcuts.py) drop.

By parameters and shapes:
- renorm(p, dim, maxnorm=1) scales each slice (all dims but `dim`) to norm 1: each value becomes ~n**(-1/p) of
  an n-value slice, below the tolerance once n**(1/p) > RENORM_MAX_SCALE;
- prod over n values in [0, 1) is ~2**-n: it underflows to ~0 past PROD_MAX_VALUES values;
- softmax / softmin over n >= SOFTMAX_MAX_WIDTH values are each ~1/n: a distance or similarity between them and
  another operand hardly sees them;
- local response norm changes its input by ~beta * alpha * E[x**2]: under the tolerance, it is the identity.
By the value model:
- the output moves between draws by less than the tolerance (a fixed output fakes it);
- one input moves the output by less than the tolerance (a dead input);
- one operand of a sum is swamped by the other;
- a normalization of values already ~N(0, 1) over groups of n is the identity within ~sqrt(2 ln G / n);
- a per-slice shift (log_softmax) read only by an operator blind to such shifts (a softmax along the same dim);
- a sign-preserving operator read only for its sign (x > 0, sign, heaviside);
- a step (comparison, rounding, logical op) on continuous values with its threshold inside their bulk, over
  many elements: an honest rounding, or the screen's move scaled to the real size, flips some; one with every
  value on one side of it (log_softmax > 0.5, amax of many values <= 0) or rounding values onto one level is
  constant;
- a saturating function (sigmoid, tanh, erf) of values spread over tens of units sits at its bounds; a pole
  (reciprocal, log) at the exact zeros a real-size torch.rand input holds is not finite; atanh, erfinv and logit
  of values reaching 1 are infinitely steep there;
- heaviside(x, y) on continuous x reads y nowhere; copysign(x, y) with y >= 0 and fmod(x, y) with |x| < y
  never read y's value;
- steps the catalog hides in other operators: a comparison with a learned per-channel tensor (a step at ~0),
  binning (searchsorted, bucketize), hardshrink's and threshold's jumps, fmod wrapping values that reach its
  divisor; a comparison whose operands' difference keeps one sign;
- a hard limit (hardtanh, hardsigmoid, hardswish, relu6, relu) with every value past one bound is a constant, and
  so are softshrink of values inside its dead zone and any / all / count_nonzero of continuous values; logsigmoid
  of values far below 0 is the identity; a max / min whose one operand's range lies past the other's never keeps
  that operand; a spread or norm over the last dim of a layer norm's (an RMS norm's, F.normalize's, an instance
  norm's of (N, C, L) values) output is fixed by it; the diff of a running max or min along its dim is mostly
  zeros (saturated);
- argmax, argmin or argsort of continuous values as the output: over many indices a rounding reorders a near-tie
  somewhere (over a dim of one value, always 0);
- domain edges at a real-size torch.rand input's exact zeros (sqrt, entr, a KL divergence's target) and ones (asin,
  acos), a sample variance over one value, an exp past float32's range, and a one-hot output over many classes
  (saturated) are not finite or degenerate; a loss that tells a +-1 target's labels apart by equality
  (hinge / cosine embedding) flips where a rounding moves the target.
"""

from __future__ import annotations

import math
from typing import Any

from operators.value_model import MAX_Z, Value, propagate, stem

TOL = 1e-2
# the value model's spreads are orders of magnitude: an output or input is taken as not moving only when the
# model puts it this far under the tolerance. At 1.0 the rule agrees with the pre-screen on every h200 draw the
# screen kept but 2 of 834 (1.5 caught fewer of the draws it flags and no more of those it keeps)
MODEL_MARGIN = 1.0
RENORM_MAX_SCALE = 10.0  # each renormed value stays above ~0.1: far from the tolerance
PROD_MAX_VALUES = 4
SOFTMAX_MAX_WIDTH = 64
SOFTMAXES = frozenset({"F.softmax", "F.softmin", "torch.softmax", "Tensor.softmax"})
DISTANCES = frozenset({"F.pairwise_distance", "F.cosine_similarity", "torch.cdist", "torch.dist"})
# a normalization leaves ~N(0, 1) values within this of themselves: taken as the identity (2x the tolerance:
# the estimate is of the typical group's deviation, the check sees the worst)
NORM_IDENTITY = 2 * TOL
# a step over fewer elements than this meets values within rounding of its threshold too rarely to flip
FRAGILE_NUMEL = 2**18
LRN_DEFAULTS = {"alpha": 1e-4, "beta": 0.75, "k": 1.0}
NORMS = frozenset({"batch_norm1d", "batch_norm2d", "batch_norm3d", "batch_norm", "instance_norm1d", "instance_norm2d",
                   "instance_norm3d", "instance_norm", "layer_norm", "group_norm", "rms_norm"})
LRNS = frozenset({"local_response_norm", "cross_map_lrn2d"})
SHIFTERS = frozenset({"log_softmax", "special_log_softmax"})
SHIFT_BLIND = frozenset({"softmax", "softmin", "log_softmax", "special_log_softmax", "argmax", "argmin",
                         "special_softmax", "diff"})
# smooth rectifiers are within the tolerance of the identity (not exactly it: an exact identity is a fair skip)
# on inputs over ~6
SMOOTH_RECTIFIERS = frozenset({"gelu", "silu", "mish", "softplus"})
# f(x) has x's sign, and is 0 only at 0 (odd-like, monotone through 0)
SIGN_KEEPING = frozenset({"tanh", "atan", "arctan", "asinh", "arcsinh", "sinh", "erf", "softsign", "hardtanh",
                          "leaky_relu", "elu", "selu", "celu", "gelu", "silu", "mish", "tanhshrink", "expm1",
                          "deg2rad", "rad2deg", "sign", "sgn", "local_response_norm", "cross_map_lrn2d", "normalize",
                          "rms_norm", "renorm", "__mul__", "__truediv__"})
# f(x) > 0 exactly where x > 0
POSITIVE_KEEPING = SIGN_KEEPING | {"relu", "relu6", "hardswish"}
ADDS = frozenset({"add", "sub", "rsub", "__add__", "lerp", "addcmul", "addcdiv"})
STEPS_AT_ZERO = frozenset({"logical_and", "logical_or", "logical_xor", "logical_not", "heaviside", "signbit", "sign",
                           "sgn"})
COMPARE_TWO = frozenset({"gt", "lt", "ge", "le", "greater", "less", "greater_equal", "less_equal"})
COMPARE_THRESHOLD = frozenset({"where", "masked_fill"})  # x against params["threshold"]
NEVER_BELOW_LO = frozenset({"lt", "ge"})  # against a threshold at the values' lower bound: constant
# steps the shortcut checks found fragile on most continuous inputs, computed or not (on v1 rows at real sizes)
ALWAYS_FRAGILE = frozenset({"logical_and", "logical_or", "logical_xor", "logical_not", "heaviside", "sign", "sgn",
                            "eq", "ne", "isclose"})
# bounded functions flat (to float32) a few units from 0: on values spread this wide most outputs sit at a bound
SATURATING = frozenset({"sigmoid", "expit", "ndtr", "tanh", "erf", "hardtanh", "hardsigmoid"})
SATURATED = 20.0
# a flip upstream of an average or sum over DAMP_FAN values (a product with a learned weight over MIX_FAN) moves
# the output under the tolerance: the shortcut checks see no fragility through it. A product of two drawn operands
# does not damp: its outputs near 0 keep the absolute tolerance while a flipped term moves them by its own size
DAMPING = frozenset({"mean", "nanmean", "sum", "nansum", "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d",
                     "adaptive_avg_pool2d", "adaptive_avg_pool3d", "var", "std", "var_mean", "std_mean", "norm",
                     "vector_norm", "trapezoid", "trapz", "cosine_similarity", "pairwise_distance"})
MIXING = frozenset({"matmul", "__matmul__", "mm", "bmm", "linear", "einsum", "inner", "tensordot", "vecdot", "mv",
                    "addmm", "baddbmm", "addbmm", "addmv", "multi_dot"})
DAMP_FAN = 256
MIX_FAN = 2048
# a step this many stds from its input's center sees (practically) one side only
ONE_SIDE = 6.0
POLES_AT_ZERO = frozenset({"reciprocal", "rsqrt", "log", "log2", "log10", "digamma", "psi", "lgamma", "gammaln",
                           "polygamma", "mvlgamma", "ndtri", "special_ndtri"})  # ndtri(0) = -inf
# and at -1 / 0: unbounded slope at the edge (asin and acos are not defined past it: a rounding up is nan)
POLES_AT_ONE = frozenset({"atanh", "arctanh", "erfinv", "logit", "asin", "arcsin", "acos", "arccos"})
# defined on x >= 0 only: at the exact zeros of a real-size torch.rand input a rounding below 0 is not finite
EDGES_AT_ZERO = frozenset({"entr", "sqrt"})
# linear between two bounds, constant past them: (lower, upper) of the linear part, by stem
HARD_RANGES = {"hardtanh": (-1.0, 1.0), "hardsigmoid": (-3.0, 3.0), "hardswish": (-3.0, math.inf),
               "relu6": (0.0, 6.0), "relu": (0.0, math.inf)}
# a step between values and learned per-channel thresholds (~N(0, 0.1)): a step at about 0
LEARNED_THRESHOLD = 0.0
# how far from 0 a learned per-channel threshold reaches (~ONE_SIDE of its 0.1 std)
LEARNED_REACH = 0.6
# losses that tell their +-1 target's labels apart by equality: a target a rounding moves matches neither
LABEL_EQUALITY = frozenset({"hinge_embedding_loss", "cosine_embedding_loss"})
# bin edges inside the values' bulk: a step at each
BINNING = frozenset({"searchsorted", "bucketize"})
# choose one operand per element: (operator, True when it keeps the larger)
CHOOSERS = {"maximum": True, "fmax": True, "minimum": False, "fmin": False}
# whether any / all / how many values are nonzero: on continuous values (never exactly 0) a constant
NONZERO_TESTS = frozenset({"any", "all", "count_nonzero"})
# indices of the largest, the smallest or the order along a dim: as the output, a rounding that reorders two
# near-tied values moves an index by whole positions. Every h200 draw with one over this many indices was flagged
INDEX_OUTPUTS = frozenset({"argmax", "argmin", "argsort"})
INDEX_FRAGILE_NUMEL = 2**12
# a running max / min over n continuous values changes ~ln(n) times: its diff along that dim is over 99% zeros
RUNNING_EXTREME_MIN = 1024
SAMPLE_VARIANCES = frozenset({"var", "std", "var_mean", "std_mean"})
# exp of more than this overflows float32 (soft_margin_loss is log(1 + exp(-y * x)))
EXP_OVERFLOW = 88.0
OVERFLOWING = frozenset({"exp", "expm1", "cosh", "sinh", "soft_margin_loss"})
# the degenerate-output check calls an output saturated past this share of one value
SATURATED_SHARE = 0.99
ROUNDING = frozenset({"round", "floor", "ceil", "trunc", "fix", "frac", "eq", "ne"})
LEVELS = ROUNDING - {"frac"}  # onto integer levels (eq and ne compare rounded values)


def normalizes_normal(op: str) -> bool:
    """`op` standardizes its input (mean 0, std 1 per group): on ~N(0, 1) values it is about the identity."""
    return stem(op) in NORMS


def pole_at_zero(op: str) -> bool:
    """`op` is infinite at 0 (reciprocal, log): the exact zeros of a real-size torch.rand input make it so."""
    return stem(op) in POLES_AT_ZERO


def _in_shape(g: Any, values: dict, n: str) -> tuple[int, ...] | None:
    preds = [u for u, _, e in g.in_edges(n, data=True) if e.get("arg", "x") == "x"] or list(g.predecessors(n))
    return tuple(values[preds[0]].shape) if preds else None


def _arg(g: Any, n: str, key: str) -> str | None:
    return next((u for u, _, e in g.in_edges(n, data=True) if e.get("arg", "x") == key), None)


def _parameter_rules(g: Any, values: dict) -> str:
    """The rules read from an operator's parameters and its input's shape."""
    for n, d in g.nodes(data=True):
        if d.get("kind") != "op":
            continue
        op, p = d["op"], d.get("params") or {}
        shape = _in_shape(g, values, n)
        if not shape or "dim" not in p or not -len(shape) <= int(p["dim"]) < len(shape):
            continue
        width = shape[int(p["dim"])]
        if op == "torch.renorm":
            slice_n = math.prod(shape) // max(width, 1)
            if slice_n ** (1 / float(p.get("p", 2))) > RENORM_MAX_SCALE:
                return f"renorm p={p.get('p')} over {slice_n} values per slice scales each to ~{slice_n ** (-1 / float(p.get('p', 2))):.2g}"
        elif op in ("torch.prod", "Tensor.prod") and width > PROD_MAX_VALUES:
            return f"prod over {width} values in [0, 1) underflows (~2**-{width})"
        elif op in SOFTMAXES and width >= SOFTMAX_MAX_WIDTH and any(g.nodes[s].get("op") in DISTANCES
                                                                   for s in g.successors(n)):
            return f"{op} over {width} values (each ~{1 / width:.2g}) feeds a distance"
    return ""


def _moves(v: Value, spread: float) -> bool:
    """A spread of `spread` in an element of `v` reaches the tolerance somewhere among many elements."""
    return MAX_Z * spread >= TOL * (1.0 + abs(v.center))


def _norm_group(s: str, shape: tuple[int, ...], p: dict) -> int:
    """How many values one normalization statistic reads."""
    numel = math.prod(shape)
    if s.startswith("batch_norm"):
        return numel // max(shape[1], 1) if len(shape) > 1 else numel
    if s.startswith("instance_norm"):
        return math.prod(shape[2:]) if len(shape) > 2 else 1
    if s == "group_norm":
        return numel // max(shape[0] * int(p.get("num_groups", 1)), 1)
    return shape[-1]  # layer_norm, rms_norm over the last dim


def _dim(p: dict, rank: int) -> int | None:
    d = p.get("dim")
    if isinstance(d, bool) or not isinstance(d, int) or not -rank <= d < rank:
        return None
    return d % rank


def _step_input(s: str, g: Any, n: str, d: dict, vals: dict) -> tuple[Value, float] | None:
    """(the values a step operator thresholds, the threshold), or None when `n` is no step."""
    x = vals[_arg(g, n, "x")]
    p = d.get("params") or {}
    if s in STEPS_AT_ZERO:
        return x, 0.0
    if s in ("gt", "lt", "ge", "le") and "threshold" in p:
        return x, float(p["threshold"])
    if s in COMPARE_THRESHOLD and "threshold" in p:
        return x, float(p["threshold"])
    if s in BINNING:
        return x, x.center
    if s == "hardshrink":  # jumps from 0 to +-lambd at |x| = lambd
        return x, float(p.get("lambd", 0.5))
    if s == "threshold" and float(p.get("value", 0.0)) != float(p.get("threshold", 0.0)):  # jumps value -> threshold
        return x, float(p.get("threshold", 0.0))
    if s in COMPARE_TWO or s == "isclose":
        y = _arg(g, n, "y")
        if y is None:  # compared with a learned tensor
            return (x, LEARNED_THRESHOLD) if s in COMPARE_TWO else None
        yv = vals[y]
        diff = Value(center=x.center - yv.center, spread=tuple({**dict(x.spread), **dict(yv.spread)}.items()),
                     noisy=x.noisy or yv.noisy, discrete=x.discrete and yv.discrete)
        return diff, float(p.get("atol", 0.0))
    if s in ROUNDING:  # steps at integers (half-integers for round): one sits inside any bulk wider than ~0.3
        return x, x.center
    return None


def _value_rules(g: Any, values: dict) -> str:
    vals = propagate(g, values)
    out_node = g.graph.get("output") or next(n for n in g.nodes if g.out_degree(n) == 0)
    out = vals[out_node]
    if not out.discrete and not _moves(out, MODEL_MARGIN * out.s):
        return f"the output moves ~{out.s:.2g} between draws (center ~{out.center:.2g}): a fixed output fakes it"
    for n, d in g.nodes(data=True):
        if d.get("kind") == "input" and g.out_degree(n) and not _moves(out, MODEL_MARGIN * out.spread_of(n)):
            return f"input {n} moves the output by ~{out.spread_of(n):.2g}: dead"
    last = g.nodes[out_node]
    classes = int((last.get("params") or {}).get("num_embeddings", 0) or 0)
    if stem(last.get("op", "")) == "one_hot" and classes and 1 - 1 / classes > SATURATED_SHARE:
        return f"{last['op']} over {classes} classes is {1 - 1 / classes:.1%} zeros: a saturated output"
    for n, d in g.nodes(data=True):
        if d.get("kind") != "op":
            continue
        s, p = stem(d["op"]), d.get("params") or {}
        x_node = _arg(g, n, "x")
        x = vals[x_node] if x_node else Value()
        shape = tuple(values[x_node].shape) if x_node in values else ()
        succ = list(g.successors(n))
        if s in ADDS and len(list(g.predecessors(n))) > 1:
            parts = [(k, vals[u]) for u, _, e in g.in_edges(n, data=True) for k in [e.get("arg", "x")]]
            big = max(v.scale for _, v in parts)
            for k, v in parts:
                if MAX_Z * v.s + abs(v.center) < TOL * max(1.0, big):
                    return f"{d['op']}: operand {k} (~{v.scale:.2g}) is swamped by ~{big:.2g}"
        if s in NORMS and x.gauss and shape:
            n_group = _norm_group(s, shape, p)
            groups = max(math.prod(shape) // max(n_group, 1), 2)
            dev = math.sqrt(2 * math.log(groups) / max(n_group, 1)) / (math.sqrt(2) if s == "rms_norm" else 1)
            if dev < NORM_IDENTITY:
                return f"{d['op']} of ~N(0, 1) values over groups of {n_group}: the identity within ~{dev:.2g}"
        if s in LRNS:
            q = {**LRN_DEFAULTS, **{k: float(v) for k, v in p.items() if k in LRN_DEFAULTS}}
            change = q["beta"] * q["alpha"] * x.scale ** 2 / q["k"]
            if change < TOL:
                return f"{d['op']} (alpha={q['alpha']:g}) changes values of ~{x.scale:.2g} by ~{change:.2g}"
        if s in SHIFTERS and len(succ) == 1 and shape:
            t = g.nodes[succ[0]]
            here, there = _dim(p, len(shape)), _dim(t.get("params") or {}, len(shape))
            if stem(t.get("op", "")) in SHIFT_BLIND and here is not None and here == there:
                return f"{d['op']} shifts each slice along dim {here}; {t['op']} along it does not see shifts"
        if s in SMOOTH_RECTIFIERS and x.center - 3 * x.s > 6.0:
            return f"{d['op']} of values ~{x.center:.2g} +- {x.s:.2g} is about the identity"
        if s in POSITIVE_KEEPING and succ and all(_reads_sign(g, n, t, s) for t in succ):
            return f"{d['op']} keeps its input's sign and is read only for it"
        if (step := _step_input(s, g, n, d, vals)) is not None:
            v, t = step
            if v.zeros and t == v.lo:  # x > 0 on relu-like values: the ones on the step are exact zeros, unmoved
                if s in NEVER_BELOW_LO and "threshold" in p:  # x < lo never holds, x >= lo always does
                    return f"{d['op']} at {t:g} on values >= {t:g}: a constant"
                continue
            learned = s in COMPARE_TWO and "threshold" not in p and _arg(g, n, "y") is None
            if learned and (v.hi <= -LEARNED_REACH or v.lo >= LEARNED_REACH
                            or abs(v.center) > ONE_SIDE * v.s + LEARNED_REACH):
                return (f"{d['op']} compares values ~{v.center:.2g} +- {v.s:.2g} with a learned tensor (~0 +- 0.1): "
                        "one side only")
            if s in COMPARE_TWO and _arg(g, n, "y") is not None and abs(v.center - t) > ONE_SIDE * v.s:
                return (f"{d['op']} compares operands whose difference is ~{v.center:.2g} +- {v.s:.2g}: "
                        "one side only")
            if s not in ROUNDING and s not in BINNING and s not in ("hardshrink", "threshold") and (
                    s not in COMPARE_TWO or "threshold" in p) and s != "isclose" and (
                    v.hi <= t or v.lo >= t or abs(t - v.center) > ONE_SIDE * v.s):
                return f"{d['op']} steps at {t:g} on values ~{v.center:.2g} +- {v.s:.2g} in [{v.lo:g}, {v.hi:g}]: one side only"
            if s in LEVELS and not (s in ("eq", "ne") and v.discrete) and (
                    span := _bulk(v)) and _level(s, span[0]) == _level(s, span[1]):
                return f"{d['op']} of values in [{span[0]:.3g}, {span[1]:.3g}]: one level"
            numel = math.prod(values[n].shape) if n in values else 0
            if s in ROUNDING:  # a step every unit: values of size ~m meet m times as many steps as one threshold
                numel *= max(1.0, abs(v.center), v.s)
            if not v.discrete and numel >= FRAGILE_NUMEL and not _damped(g, n, values, out_node) \
                    and abs(t - v.center) < ONE_SIDE * v.s and (s not in ROUNDING or _meets_level(s, v)):
                return (f"{d['op']} steps at {t:g} on continuous values (~{v.center:.2g} +- {v.s:.2g}) over {numel} "
                        "elements: a rounding flips some")
        if s in INDEX_OUTPUTS and n == out_node and not x.discrete and shape \
                and (k := _dim(p, len(shape))) is not None:
            if shape[k] == 1:
                return f"{d['op']} over a dim of one value: always 0"
            if (indices := math.prod(values[n].shape)) >= INDEX_FRAGILE_NUMEL:
                return (f"{d['op']} of continuous values as the output ({indices} indices): a rounding reorders a "
                        "near-tie somewhere and the index jumps")
        if s in HARD_RANGES and (bound := _past_bound(s, p, x)) is not None:
            return f"{d['op']} of values ~{x.center:.2g} +- {x.s:.2g}: every value past its bound {bound:g}, a constant"
        if s in ("log_sigmoid", "logsigmoid") and x.center + 3 * x.s < -6.0:
            return f"{d['op']} of values ~{x.center:.2g} +- {x.s:.2g} is about the identity"
        if s in EDGES_AT_ZERO and x.some_zeros and x.lo <= 0.0:
            return f"{d['op']} of values with exact zeros: a rounding below 0 is not finite"
        if s in ("kl_div", "kl_div_loss") and (t := _arg(g, n, "y")) is not None and (vals[t].zeros or vals[t].some_zeros) \
                and vals[t].lo <= 0.0:
            return f"{d['op']}: its target has exact zeros, where a rounding below 0 makes the log not finite"
        if s in ("fmod", "remainder") and (jump := _wraps(g, n, p, x, vals)) and not x.discrete \
                and math.prod(values[n].shape) >= FRAGILE_NUMEL and not _damped(g, n, values, out_node):
            return f"{d['op']} wraps values ~{x.center:.2g} +- {x.s:.2g} at +-{jump:g}: a rounding there jumps by it"
        if s in LABEL_EQUALITY and (t := _arg(g, n, "z" if s == "cosine_embedding_loss" else "y")) is not None \
                and g.nodes[t].get("kind") == "input" and g.nodes[t].get("draw") == "sign":
            return f"{d['op']} tells its +-1 target's labels apart by equality: a target moved by a rounding is neither"
        if s == "softshrink" and (span := _bulk(x)) and -float(p.get("lambd", 0.5)) < span[0] \
                and span[1] < float(p.get("lambd", 0.5)):
            return f"{d['op']} of values in [{span[0]:.3g}, {span[1]:.3g}]: inside its dead zone, a constant 0"
        if s in CHOOSERS and (unread := _never_chosen(g, n, vals, CHOOSERS[s])):
            return f"{d['op']} never keeps its operand {unread}: the other is always the {'larger' if CHOOSERS[s] else 'smaller'}"
        if (why := _stat_of_normalized(g, n, s, p, shape)):
            return why
        if s == "diff" and x_node is not None and shape and stem(g.nodes[x_node].get("op", "")) in ("cummax", "cummin") \
                and (k := _dim(p, len(shape))) is not None \
                and k == _dim(g.nodes[x_node].get("params") or {}, len(shape)) and shape[k] >= RUNNING_EXTREME_MIN:
            return (f"{d['op']} of a running {stem(g.nodes[x_node]['op'])[3:]} along its dim of {shape[k]}: it changes "
                    f"~ln {shape[k]} times, the rest are zeros (saturated)")
        if s in NONZERO_TESTS and not (x.discrete or x.zeros or x.some_zeros):
            return f"{d['op']} of continuous values (never exactly 0): a constant"
        if s in SAMPLE_VARIANCES and shape and (k := _dim(p, len(shape))) is not None and shape[k] == 1 \
                and p.get("correction", p.get("unbiased", 1)) not in (0, False):
            return f"{d['op']} over 1 value with Bessel's correction: nan"
        if s in OVERFLOWING and _overflows(s, x):
            return f"{d['op']} of values ~{x.center:.2g} +- {x.s:.2g}: exp overflows float32 (not finite)"
        if s in SATURATING and (x.s > SATURATED or abs(x.center) - 3 * x.s > SATURATED / 2):
            return f"{d['op']} of values ~{x.center:.2g} +- {x.s:.2g}: saturated"
        if s in POLES_AT_ZERO and (x.zeros or x.some_zeros) and x.lo <= 0.0 <= x.hi:
            return f"{d['op']} of values with exact zeros: not finite"
        if s in POLES_AT_ONE and x.hi >= 1.0 and not x.discrete:
            return f"{d['op']} of values up to {x.hi:g}: infinitely steep there, a rounding moves it past the tolerance"
        if s in ("tril", "triu") and len(shape) >= 2:
            r, cols = shape[-2], shape[-1]
            lower = (min(r, cols) * (min(r, cols) + 1) / 2 + max(0, r - cols) * cols) / (r * cols)
            kept = lower if s == "tril" else 1 - lower + min(r, cols) / (r * cols)
            if kept < 0.01:
                return f"{d['op']} of a {r}x{cols} matrix keeps {kept:.2%} of it: the rest is 0"
        if s == "heaviside" and not (x.discrete or x.zeros):
            return f"{d['op']} on continuous values reads its y nowhere"
        y_node = _arg(g, n, "y")
        if y_node is not None:
            y = vals[y_node]
            if s == "copysign" and y.lo >= 0 and g.nodes[y_node].get("kind") == "input" and g.out_degree(y_node) == 1:
                return f"{d['op']}: y >= 0, its sign is always +"
            if s in ("fmod", "remainder") and x.lo > -math.inf and x.hi < math.inf \
                    and max(abs(x.lo), abs(x.hi)) <= y.lo and (s == "fmod" or x.lo >= 0):
                return f"{d['op']}: |x| <= {max(abs(x.lo), abs(x.hi)):g} < y: x as it is"
    return ""


def _past_bound(s: str, p: dict, x: Any) -> float | None:
    """The bound of hard-limited `s` (hardtanh, relu6...) that every value of `x` lies past (~3 stds), or None."""
    lo, hi = HARD_RANGES[s]
    if s == "hardtanh":
        lo, hi = float(p.get("min_val", lo)), float(p.get("max_val", hi))
    if x.hi <= lo or x.center + 3 * x.s <= lo:
        return lo
    if x.lo >= hi or x.center - 3 * x.s >= hi:
        return hi
    return None


# the statistics over the last dim that a normalization over it fixes: layer norm fixes the spread (and the norm),
# RMS norm and F.normalize the norm
# (an instance norm fixes them over all dims after the channel: the last one alone on (N, C, L))
_SPREADS = frozenset({"std", "var", "var_mean", "std_mean", "norm", "vector_norm"})
FIXED_STATS = {"layer_norm": _SPREADS, "instance_norm": _SPREADS, "instance_norm1d": _SPREADS,
               "rms_norm": frozenset({"norm", "vector_norm"}), "normalize": frozenset({"norm", "vector_norm"})}


def _stat_of_normalized(g: Any, n: str, s: str, p: dict, shape: tuple) -> str:
    """'' or why statistic `s` at node `n` is a constant: it reduces the last dim of a layer norm's, RMS norm's or
    F.normalize's output over that dim (an instance norm's of a (N, C, L) input)."""
    x_node = _arg(g, n, "x")
    if x_node is None or g.nodes[x_node].get("kind") != "op" or not shape:
        return ""
    src = g.nodes[x_node]
    src_stem, src_p = stem(src.get("op", "")), src.get("params") or {}
    if s not in FIXED_STATS.get(src_stem, ()) or _dim(p, len(shape)) != len(shape) - 1:
        return ""
    if src_stem == "normalize" and _dim(src_p, len(shape)) != len(shape) - 1:
        return ""
    if src_stem.startswith("instance_norm") and len(shape) != 3:
        return ""
    return f"{g.nodes[n]['op']} over the last dim of {src['op']}'s output, which fixes it there: a constant"


def _never_chosen(g: Any, n: str, vals: dict, larger: bool) -> str:
    """The operand of max / min `n` whose every value (by range) loses to every value of the other, or ''."""
    parts = [(e.get("arg", "x"), vals[u]) for u, _, e in g.in_edges(n, data=True)]
    if len(parts) != 2:
        return ""
    (ka, a), (kb, b) = parts
    if larger:
        return kb if b.hi <= a.lo else ka if a.hi <= b.lo else ""
    return kb if b.lo >= a.hi else ka if a.lo >= b.hi else ""


def _overflows(s: str, x: Any) -> bool:
    """Some value of `x` takes exp-like `s` past float32's largest (both signs for cosh, sinh, soft_margin_loss)."""
    top = x.center + 3 * x.s if s in ("exp", "expm1") else abs(x.center) + 3 * x.s
    reach = x.hi if s in ("exp", "expm1") else max(abs(x.lo), abs(x.hi))
    return top > EXP_OVERFLOW and reach > EXP_OVERFLOW


def _wraps(g: Any, n: str, p: dict, x: Any, vals: dict) -> float:
    """The divisor fmod / remainder wraps x's values at, when the values reach it (0: they never do)."""
    y = _arg(g, n, "y")
    div = vals[y].lo if y is not None else abs(float(p.get("value", 0.0)))
    if not div > 0.0:
        return 0.0
    bounded = math.isfinite(x.lo) and math.isfinite(x.hi)
    reach = max(abs(x.lo), abs(x.hi)) if bounded else abs(x.center) + 3 * x.s
    return div if reach > div else 0.0


def _damped(g: Any, n: str, values: dict, out_node: str) -> bool:
    """Every path from `n` to the output passes an average or sum over many values: one flipped element moves the
    output by ~1/fan of its scale, under the tolerance."""
    import networkx as nx

    if n == out_node:
        return False
    on_path = nx.descendants(g, n) & (nx.ancestors(g, out_node) | {out_node})
    sub = g.subgraph(on_path | {n})
    blockers = set()
    for m in on_path:
        d = g.nodes[m]
        x = _arg(g, m, "x")
        if x is None or x not in values or m not in values:
            continue
        s, shape = stem(d.get("op", "")), tuple(values[x].shape)
        fan = math.prod(shape) // max(math.prod(values[m].shape), 1)
        learned = len(list(g.predecessors(m))) == 1  # the other operand is a weight, not a drawn tensor
        if s in DAMPING and fan >= DAMP_FAN or s in MIXING and learned and shape and shape[-1] >= MIX_FAN:
            blockers.add(m)
    if not blockers:
        return False
    if out_node in blockers:
        return True
    return not nx.has_path(sub.subgraph(set(sub) - blockers), n, out_node)


def _meets_level(s: str, v: Value) -> bool:
    """The bulk of `v` holds a step of rounding op `s` (integers; half-integers for round, and for eq / ne, which
    compare rounded values)."""
    lo, hi = _bulk_range(v)
    off = 0.5 if s in ("round", "eq", "ne") else 0.0
    return math.floor(lo - off) + 1 + off <= hi


def _level(s: str, v: float) -> float:
    return {"floor": math.floor, "ceil": math.ceil, "round": round, "eq": round, "ne": round}.get(s, math.trunc)(v)


def _bulk_range(v: Any) -> tuple[float, float]:
    """Where (practically) every value of `v` lies: its range cut to ONE_SIDE stds about its center."""
    return max(v.lo, v.center - ONE_SIDE * v.s), min(v.hi, v.center + ONE_SIDE * v.s)


def _bulk(v: Any) -> tuple[float, float] | None:
    """_bulk_range just inside its ends (a value at a bound the range only approaches, as torch.rand's 1, is not
    held); None when unbounded."""
    lo, hi = _bulk_range(v)
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
        return None
    return lo + 1e-9 * (hi - lo), hi - 1e-9 * (hi - lo)


def _reads_sign(g: Any, n: str, t: str, s: str) -> bool:
    """Successor `t` reads producer `n`'s output only through its sign (only through x > 0 when `s` keeps just
    the positive part)."""
    d = g.nodes[t]
    ts, p = stem(d.get("op", "")), d.get("params") or {}
    keys = {e.get("arg", "x") for u, v, e in g.in_edges(t, data=True) if u == n}
    sign_only = s in SIGN_KEEPING
    if ts in ("logical_and", "logical_or", "logical_xor", "logical_not"):
        return True
    if ts in ("gt", "le") and float(p.get("threshold", 1.0)) == 0.0 and keys == {"x"}:
        return True
    if sign_only and ts in ("lt", "ge") and float(p.get("threshold", 1.0)) == 0.0 and keys == {"x"}:
        return True
    if sign_only and ts in ("sign", "sgn", "signbit", "heaviside") and keys == {"x"}:
        return True
    return sign_only and ts == "copysign" and keys == {"y"}


def cannot_matter(g: Any, values: dict) -> str:
    """'' or why one operator or input of graph `g` (node attrs op, params; `values`: each node's output tensor,
    meta is enough) cannot matter at the verifier's tolerance, or why its output would flip under a rounding."""
    return _parameter_rules(g, values) or _value_rules(g, values)
