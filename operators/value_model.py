"""The catalog's value model: for each operator, the range and typical magnitude of its output given its inputs',
and its propagation through a task graph in topological order.

A `Value` describes one tensor of a task: its range (lo, hi), its typical element (`center`), how far an element
moves between two draws of the inputs (`spread`, kept per graph input so a rule can ask what one input
contributes), and a few flags the rules read (iid standard normal, on a few discrete levels, with many exact
zeros, carrying absolute rounding noise from an accumulation or a difference). The numbers are orders of
magnitude, not predictions to the digit: operators/value_scale.py compares them with the verifier's
tolerance (1e-2) with margins.

Rules are looked up by the operator's stem (`torch.tanh`, `F.tanh`, `nn.Tanh` and `Tensor.tanh` share `tanh`);
an operator the tables do not name keeps its primary input's values (shape and indexing ops, pads, most
elementwise functions).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

INF = math.inf
# the largest of many elements sits ~5 of their stds out: an output moves by ~MAX_Z * its spread somewhere
MAX_Z = 5.0


@dataclass(frozen=True)
class Value:
    """One tensor's values (see the module docstring)."""

    lo: float = -INF
    hi: float = INF
    center: float = 0.0
    spread: tuple[tuple[str, float], ...] = ()  # (graph input, element's draw-to-draw std from it)
    gauss: bool = False     # iid ~N(0, 1) per slice: a normalization of it is about the identity
    discrete: bool = False  # a few levels ({0, 1}, signs, integers): a step on it does not flip under rounding
    zeros: bool = False     # many exact zeros (relu, steps, pads): a step at 0 sees them on it, unmoved by rounding
    some_zeros: bool = False  # a few exact zeros (a real-size torch.rand input's): a pole at 0 meets them
    noisy: bool = False     # an accumulation or a difference: rounding noise near 0 is absolute, not relative
    runs: int = 0           # a cumulative op's output: runs of this many neighbours along its dim move together,
    #                         a reduction over them does not average their moves out

    @property
    def s(self) -> float:
        return math.sqrt(sum(v * v for _, v in self.spread))

    @property
    def scale(self) -> float:
        return math.hypot(self.center, self.s)

    def spread_of(self, name: str) -> float:
        return dict(self.spread).get(name, 0.0)

    def scaled(self, k: float, shift: float = 0.0) -> Value:
        """k * values + shift (k may be negative)."""
        lo, hi = sorted((self.lo * k if self.lo > -INF or k == 0 else -INF * k,
                         self.hi * k if self.hi < INF or k == 0 else INF * k))
        return replace(self, lo=_nan0(lo) + shift, hi=_nan0(hi) + shift, center=self.center * k + shift,
                       spread=_times(self.spread, abs(k)), gauss=self.gauss and k == 1 and shift == 0)


def _nan0(v: float) -> float:
    return 0.0 if v != v else v


def _times(spread: tuple[tuple[str, float], ...], k: float) -> tuple[tuple[str, float], ...]:
    return tuple((n, v * k) for n, v in spread)


def _merge(*spreads: tuple[tuple[str, float], ...]) -> tuple[tuple[str, float], ...]:
    """Spreads of independent contributions add in quadrature."""
    out: dict[str, float] = {}
    for sp in spreads:
        for n, v in sp:
            out[n] = math.hypot(out.get(n, 0.0), v)
    return tuple(sorted(out.items()))


def input_value(name: str, draw: str) -> Value:
    """A graph input as get_inputs draws it."""
    if draw == "randn":
        return Value(center=0.0, spread=((name, 1.0),), gauss=True)
    if draw == "rand":  # torch.rand draws multiples of 2**-24: a real-size input holds exact zeros
        return Value(lo=0.0, hi=1.0, center=0.5, spread=((name, 0.29),), some_zeros=True)
    if draw == "rand1":
        return Value(lo=1.0, hi=2.0, center=1.5, spread=((name, 0.29),))
    if draw == "sign":
        return Value(lo=-1.0, hi=1.0, center=0.0, spread=((name, 1.0),), discrete=True)
    # randint: token indices
    return Value(lo=0.0, hi=INF, center=1.0, spread=((name, 1.0),), discrete=True)


@dataclass
class Ctx:
    """What a rule sees of one operator: its input values by argument, its parameters and shapes."""

    op: str
    params: dict[str, Any]
    args: dict[str, Value]
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]

    @property
    def x(self) -> Value:
        return self.args["x"]

    @property
    def others(self) -> list[Value]:
        return [v for k, v in self.args.items() if k != "x"]

    @property
    def fan(self) -> int:
        """How many input elements each output element combines, when the op shrinks the tensor."""
        n_in, n_out = math.prod(self.in_shape or (1,)), math.prod(self.out_shape or (1,))
        return max(1, n_in // max(n_out, 1))

    def dim_size(self, default: int = 1) -> int:
        d = self.params.get("dim")
        if isinstance(d, int) and not isinstance(d, bool) and self.in_shape and -len(self.in_shape) <= d < len(
                self.in_shape):
            return self.in_shape[d]
        return default


Rule = Callable[[Ctx], Value]


def stem(op: str) -> str:
    """`nn.LogSoftmax` -> `log_softmax`, `torch.special.expit` -> `expit`, `Tensor.__mul__` -> `__mul__`."""
    from operators.spec import _snake

    last = op.rsplit(".", 1)[-1]
    return last if last.startswith("__") else _snake(last).replace("re_lu", "relu").replace("si_lu", "silu")


# ---- rules: families of operators sharing one


def _same(c: Ctx) -> Value:
    """x's values; other operands (an index, a mask, a target) still move them."""
    if not c.others:
        return c.x
    return replace(c.x, spread=_merge(c.x.spread, *(o.spread for o in c.others)))


def _join_values(c: Ctx) -> Value:
    """Values taken from every operand (cat, stack, maximum, where): the widest range, all spreads."""
    vs = list(c.args.values())
    return Value(lo=min(v.lo for v in vs), hi=max(v.hi for v in vs), center=sum(v.center for v in vs) / len(vs),
                 spread=_merge(*(v.spread for v in vs)), gauss=all(v.gauss for v in vs),
                 discrete=all(v.discrete for v in vs), zeros=any(v.zeros for v in vs), noisy=any(v.noisy for v in vs))


def _add(c: Ctx) -> Value:
    vs = list(c.args.values())
    sign = -1.0 if stem(c.op) in ("sub", "rsub") else 1.0
    center = vs[0].center + sign * sum(v.center for v in vs[1:])
    return Value(center=center, spread=_merge(*(v.spread for v in vs)), noisy=True)


def _mul(c: Ctx) -> Value:
    if len(c.args) == 1:  # by a constant
        k = float(c.params.get("scale", c.params.get("value", 1.0)))
        if stem(c.op) == "__truediv__":
            k = 1.0 / float(c.params.get("divisor", 1.0))
        return c.x.scaled(k)
    a, b = c.x, c.others[0]
    div = stem(c.op) in ("div", "true_divide")
    bs = (1.0 / max(abs(b.center), 1e-3)) if div else b.scale
    spread = _merge(_times(a.spread, bs), _times(b.spread, a.scale * (bs * bs if div else 1.0)))
    return Value(center=a.center * (1.0 / b.center if div and b.center else b.center), spread=spread,
                 zeros=a.zeros or b.zeros)


def _bounded(lo: float, hi: float, slope: float) -> Rule:
    """A saturating function onto [lo, hi] with slope `slope` at the center of its input's values."""
    def rule(c: Ctx) -> Value:
        k = slope / max(1.0, c.x.scale)  # a wide input spends much of its mass in the flat tails
        mid = (lo + hi) / 2 if lo > -INF and hi < INF else 0.0
        f = _MONOTONE.get(stem(c.op))
        # the slope across the bulk of the values: far from 0 (log_softmax's ~-10) the function is flat there
        if f is not None and (across := _slope(f, c.x)) is not None:
            k = min(k, across)
        return Value(lo=lo, hi=hi, center=mid, spread=_times(c.x.spread, k), noisy=c.x.noisy)
    return rule


# rectifiers that are the identity on values >= 0 (relu6 up to 6)
_IDENTITY_ABOVE_0 = frozenset({"relu", "relu6", "leaky_relu", "elu", "celu", "prelu"})


def _rectify(zero_below: bool) -> Rule:
    def rule(c: Ctx) -> Value:
        x = c.x
        s = stem(c.op)
        if s in _IDENTITY_ABOVE_0 and x.lo >= 0 and (s != "relu6" or x.hi <= 6.0):
            return replace(x, gauss=False)
        return Value(lo=0.0 if zero_below else -INF, hi=x.hi, center=0.4 * x.scale, spread=_times(x.spread, 0.6),
                     zeros=zero_below or x.zeros, noisy=x.noisy)
    return rule


def _carried(c: Ctx) -> Value | None:
    """A monotone function's values (_MONOTONE) carried through it: f(center), each move scaled by its slope
    across the bulk; None where the bulk leaves its domain or does not move."""
    f = _MONOTONE.get(stem(c.op))
    k = _slope(f, c.x) if f is not None else None
    return None if k is None else Value(center=f(c.x.center), spread=_times(c.x.spread, k), noisy=c.x.noisy)


def _soft_rectify(c: Ctx) -> Value:
    """softplus (ln 2 at 0, >= 0) and tanhshrink (~x**3 / 3 near 0): smooth, carried through their slope."""
    v = _carried(c)
    if v is None:
        return _rectify(False)(c)
    return replace(v, lo=0.0) if stem(c.op) == "softplus" else v


def _shrink(c: Ctx) -> Value:
    """softshrink, hardshrink: 0 on a band about 0, x (shrunk) outside it, on both sides."""
    x = c.x
    return Value(lo=min(x.lo, 0.0), hi=max(x.hi, 0.0), center=x.center, spread=_times(x.spread, 0.6), zeros=True,
                 noisy=x.noisy)


def _unit_steps(c: Ctx) -> Value:
    """Comparisons and logical ops: {0, 1}."""
    s = max(c.x.s, 1e-30)
    spread = _merge(*(_times(v.spread, 0.5 / max(v.s, 1e-30)) for v in c.args.values()))
    return Value(lo=0.0, hi=1.0, center=0.5, spread=spread or _times(c.x.spread, 0.5 / s), discrete=True, zeros=True)


def _one_hot(c: Ctx) -> Value:
    """One 1 among C classes: ~1/C, each element's std ~sqrt(1/C)."""
    classes = int(c.params.get("num_embeddings") or c.params.get("num_classes") or 0) or max(c.out_shape[-1:] or (2,))
    share = 1.0 / max(classes, 1)
    return Value(lo=0.0, hi=1.0, center=share, spread=_times(c.x.spread, math.sqrt(share) / max(c.x.s, 1e-30)),
                 discrete=True, zeros=True)


def _levels(c: Ctx) -> Value:
    """sign, round, floor...: a few discrete levels, moving as their input does when it spans several."""
    x = c.x
    return replace(x, discrete=True, zeros=True, gauss=False, spread=_times(x.spread, min(1.0, x.scale)))


def _normalize(c: Ctx) -> Value:
    """Batch, instance, layer and group norms: ~N(0, 1) per group, a bounded input's bounds moved and scaled alike.
    An RMS norm divides by the root mean square and subtracts nothing: values of one sign keep their center."""
    x = c.x
    if stem(c.op) == "rms_norm":
        k = 1.0 / max(x.scale, 1e-30)
        return Value(lo=x.lo * k, hi=x.hi * k, center=x.center * k, spread=_times(x.spread, k),
                     gauss=abs(x.center) * k < 0.1, noisy=True)
    k = 1.0 / max(x.s, 1e-30)
    return Value(lo=(x.lo - x.center) * k, hi=(x.hi - x.center) * k, center=0.0, spread=_times(x.spread, k),
                 gauss=True, noisy=True)


def _p_normalize(c: Ctx) -> Value:
    n = c.dim_size(c.in_shape[1] if len(c.in_shape) > 1 else 1)
    k = n ** (-1.0 / float(c.params.get("p", 2.0))) / max(c.x.scale, 1e-30)
    return replace(c.x.scaled(k), noisy=True)


def _softmax(c: Ctx) -> Value:
    n = c.dim_size(c.in_shape[1] if len(c.in_shape) > 1 else 1)
    x = c.x
    if n == 1:  # over one value: 1 everywhere
        return Value(lo=1.0, hi=1.0, center=1.0, discrete=True)
    up, down = x.hi - x.center, x.center - x.lo
    if stem(c.op) == "softmin":
        up, down = down, up
    # each output is ~e**(x - mean) / n and moves by that times its input's move: the largest sit where the input
    # is highest, ~3 stds up for an unbounded input (~20x the typical 1/n), at its bound for a bounded one
    k = min(1.0, math.exp(min(up, 3.0 * x.s, 30.0)) / n)
    if math.isfinite(up) and math.isfinite(down) and x.s <= 1.0:
        # a bounded input: an element moves at most from the highest output to the lowest, e**(x - center) at the
        # bounds over n * E[e**(x - center)] (~e**(s**2 / 2) for s <= 1); the spread is that move over MAX_Z, so
        # that the rules' "MAX_Z spreads somewhere" is the move itself
        move = (math.exp(up) - math.exp(-down)) / (n * math.exp(0.5 * x.s ** 2))
        k = min(k, move / (MAX_Z * max(x.s, 1e-30)))
    return Value(lo=0.0, hi=1.0, center=1.0 / n, spread=_times(x.spread, k), noisy=True)


def _log_softmax(c: Ctx) -> Value:
    n = c.dim_size(c.in_shape[1] if len(c.in_shape) > 1 else 1)
    if n == 1:  # over one value: 0 everywhere
        return Value(lo=0.0, hi=0.0, center=0.0, discrete=True)
    # x - logsumexp(x): blind to x's own center, ~ln n plus half the variance below 0
    return Value(hi=0.0, center=-math.log(max(n, 1)) - 0.5 * c.x.s ** 2, spread=c.x.spread, noisy=True)


def _independent(c: Ctx) -> int:
    """How many independently moving values a reduction of c.fan values averages: one per run when the reduced
    values hold whole runs of a cumulative op's output (its run length divides the fan), else each value."""
    runs, fan = c.x.runs, c.fan
    return max(fan // runs, 1) if runs > 1 and fan % runs == 0 else fan


def _mean(c: Ctx) -> Value:
    k = _independent(c)
    return Value(lo=c.x.lo, hi=c.x.hi, center=c.x.center, spread=_times(c.x.spread, 1.0 / math.sqrt(k)),
                 noisy=True)


def _cumulative(c: Ctx) -> Value:
    """cummax, cummin, logcumsumexp: runs of neighbours that move together."""
    return replace(c.x, gauss=False, runs=c.dim_size(1))


def _sum(c: Ctx) -> Value:
    if stem(c.op) in ("cumsum", "cumulative_trapezoid"):  # the first elements sum one value, the last all k
        return Value(center=c.x.center, spread=_times(c.x.spread, math.sqrt(c.dim_size(1))), noisy=True,
                     runs=c.dim_size(1))
    k = c.fan
    if (free := _independent(c)) < k:  # whole runs that move together: each moves as one value times its length
        return Value(center=c.x.center * k, spread=_times(c.x.spread, k / math.sqrt(free)), noisy=True)
    if stem(c.op) in ("trapz", "trapezoid"):  # n points, n - 1 steps of 1: over one point, 0
        k -= 1
        if k == 0:
            return Value(lo=0.0, hi=0.0, center=0.0, discrete=True)
    return Value(center=c.x.center * k, spread=_times(c.x.spread, math.sqrt(k)), noisy=True)


def _cumprod(c: Ctx) -> Value:
    """The first elements of a cumulative product are its input's; the later ones may vanish or grow."""
    return replace(c.x, gauss=False, noisy=True, runs=c.dim_size(1))


def _xlogy(c: Ctx) -> Value:
    """x * log(y) (xlog1py: log1p(y))."""
    x, y = c.x, c.others[0] if c.others else Value(center=math.e)
    ly = math.log(max(abs(y.center) + (1.0 if stem(c.op) == "xlog1py" else 0.0), 1e-3))
    return Value(center=x.center * ly, spread=_merge(_times(x.spread, max(abs(ly), 0.1)),
                                                     _times(y.spread, x.scale / max(abs(y.center), 1e-3))),
                 zeros=x.zeros, noisy=x.noisy)


def _extreme(c: Ctx) -> Value:
    """max, min, median, quantiles over k values: an order statistic moves less than one value; the max of k
    sits ~sqrt(2 ln k) stds up (the min as far down)."""
    k = max(c.fan, 2)
    up = math.sqrt(2 * math.log(k))
    s = stem(c.op)
    shift = up if s in ("amax", "max", "aminmax", "logsumexp", "special_logsumexp") or s.startswith(
        ("max_pool", "adaptive_max_pool")) else -up if s in ("amin", "min") else 0.0
    x = c.x
    center = x.center + shift * x.s
    if s in ("logsumexp", "special_logsumexp"):
        center = x.center + 0.5 * x.s ** 2 + math.log(k)
        if x.s <= 1.0:  # log of a sum of k comparable terms: moves as their mean, by ~sqrt(e**(s**2) - 1) / sqrt(k)
            return Value(center=center, spread=_times(x.spread, math.sqrt(math.expm1(x.s ** 2) / k) / max(x.s, 1e-30)),
                         noisy=True)
    elif center >= x.hi or center <= x.lo:  # the extreme of k bounded values sits at the bound, ~range/k off it
        width = (x.hi - x.lo) / k
        return Value(lo=x.lo, hi=x.hi, center=x.hi if center >= x.hi else x.lo,
                     spread=_times(x.spread, width / max(x.s, 1e-30)), noisy=x.noisy)
    if s in _INNER_ORDER:  # an order statistic inside the bulk moves like a mean: ~1.25 / sqrt(k) of one value
        return Value(lo=x.lo, hi=x.hi, center=center, spread=_times(x.spread, 1.25 / math.sqrt(k)), noisy=x.noisy)
    return Value(lo=x.lo, hi=x.hi, center=center, spread=_times(x.spread, 1.0 / up), noisy=x.noisy)


_INNER_ORDER = frozenset({"median", "nanmedian", "quantile", "nanquantile"})


def _spread_stat(c: Ctx) -> Value:
    """var, std, norms over k values: their center grows with the values', their spread shrinks as 1/sqrt(k). A sum
    of k squares moves by sqrt(k) * std(x**2) (4 c**2 s**2 + 2 s**4 for values c +- s): relatively half that for its
    root (std, the 2-norm); a 1-norm sums |x|. The 2 s**4 is (kurtosis - 1) s**4 of normal values: bounded ones
    (uniform-like, kurtosis 1.8) spread their squares less. Over runs that move together (a cumulative op's
    output) the moves do not average out: they shrink as over one value per run."""
    x, n = c.x, max(c.fan, 1)
    k = max(_independent(c), 1)
    st = stem(c.op)
    c2, s2 = x.center ** 2, x.s ** 2
    tails = 0.8 if math.isfinite(x.lo) and math.isfinite(x.hi) else 2.0
    if st in ("norm", "vector_norm") and c.params.get("p") == 1:
        mean_abs = math.sqrt(c2 + 2.0 / math.pi * s2)  # E|x|: 0.8 s at c = 0, |c| far from 0
        center, rel = n * mean_abs, x.s / max(mean_abs * math.sqrt(k), 1e-30)
    else:
        sq_rel = math.sqrt(4.0 * c2 * s2 + tails * s2 * s2) / max(c2 + s2, 1e-30) / math.sqrt(k)
        if st == "var":
            center, rel = s2, math.sqrt(tails / k)
        elif st in ("norm", "vector_norm"):
            center, rel = math.sqrt(n) * x.scale, sq_rel / 2
        else:
            center, rel = x.s, math.sqrt(tails / (4 * k))
    return Value(lo=0.0, center=center, spread=_times(x.spread, center * rel / max(x.s, 1e-30)), noisy=True)


def _product(c: Ctx) -> Value:
    k, x = c.dim_size(c.fan), c.x
    if x.hi <= 1.0 and x.lo >= 0.0:  # values in [0, 1): ~2**-k
        center = 2.0 ** -k
    else:
        center = x.scale ** k
    return Value(lo=0.0 if x.lo >= 0 else -INF, center=center, spread=_times(x.spread, center / max(x.s, 1e-30)),
                 noisy=True)


def _linear_mix(c: Ctx) -> Value:
    """matmul, linear, conv, attention: sums of products; a learned weight (kaiming-uniform) keeps ~0.6 of the
    scale, a drawn operand multiplies it by sqrt(fan) times its own."""
    fan = c.in_shape[-1] if c.in_shape else 1
    if not c.others:
        return Value(center=0.0, spread=_times(c.x.spread, 0.6), noisy=True)
    parts = [_times(c.x.spread, math.sqrt(fan) * max(o.scale for o in c.others))]
    parts += [_times(o.spread, math.sqrt(fan) * c.x.scale) for o in c.others]
    # two drawn operands with means (positive values) add fan products of them: a center far from 0
    center = fan * c.x.center * c.others[0].center if stem(c.op) in _DOTS and len(c.others) == 1 else 0.0
    return Value(center=center, spread=_merge(*parts), noisy=True)


# products of two drawn operands over their last dim (x's last against y's last or first-but-last)
_DOTS = frozenset({"matmul", "__matmul__", "mm", "bmm", "vecdot", "inner", "mv"})


def _attention(c: Ctx) -> Value:
    """A softmax-weighted mean over L keys: ~e**0.5 / sqrt(L) of the values' spread."""
    length = c.in_shape[-2] if len(c.in_shape) >= 2 else 1
    return Value(center=0.0, spread=_times(_merge(*(v.spread for v in c.args.values())), 1.65 / math.sqrt(length)),
                 noisy=True)


def _exp(c: Ctx) -> Value:
    x = c.x
    m = math.exp(min(x.center + 0.5 * x.s ** 2, 80.0))
    return Value(lo=0.0, center=m, spread=_times(x.spread, m), noisy=x.noisy)


def _log(c: Ctx) -> Value:
    x = c.x
    if (v := _carried(c)) is not None:  # inside its domain
        return v
    return Value(center=math.log(max(x.scale, 1e-30)), spread=_times(x.spread, 1.0 / max(x.scale, 1e-3)),
                 noisy=x.noisy)


def _neg(c: Ctx) -> Value:
    return c.x.scaled(-1.0)


def _clamp(c: Ctx) -> Value:
    lo, hi = float(c.params.get("lo", -INF)), float(c.params.get("hi", INF))
    if stem(c.op) == "clamp_min":
        hi = INF
    elif stem(c.op) == "clamp_max":
        lo = -INF
    x = c.x
    if x.center - 3 * x.s >= hi or x.center + 3 * x.s <= lo:  # all beyond one bound: that bound
        return Value(lo=hi if x.center > hi else lo, hi=hi if x.center > hi else lo, center=min(max(x.center, lo), hi),
                     spread=_times(x.spread, 1e-3), discrete=True)
    return replace(x, lo=max(x.lo, lo), hi=min(x.hi, hi), center=min(max(x.center, lo), hi), gauss=False)


def _embedding(c: Ctx) -> Value:
    return Value(center=0.0, spread=_times(c.x.spread, 1.0 / max(c.x.s, 1e-30)), gauss=True)


def _loss(c: Ctx) -> Value:
    """A loss compares its operands elementwise and averages over what it reduces."""
    k = c.fan
    sp = _merge(*(v.spread for v in c.args.values()))
    return Value(lo=0.0, center=max(c.x.scale, 0.5), spread=_times(sp, 1.0 / math.sqrt(k)), noisy=True)


def _log_sigmoid(c: Ctx) -> Value:
    return Value(hi=0.0, center=-0.7, spread=_times(c.x.spread, 0.5), noisy=c.x.noisy)


def _abs(c: Ctx) -> Value:
    return replace(c.x, lo=0.0, center=abs(c.x.center) + 0.8 * c.x.s, spread=_times(c.x.spread, 0.6), gauss=False)


def _square(c: Ctx) -> Value:
    x = c.x
    return Value(lo=0.0, center=x.scale ** 2, spread=_times(x.spread, 1.4 * x.scale), zeros=x.zeros, noisy=x.noisy)


def _reciprocal(c: Ctx) -> Value:
    """1/x on values of one sign: the range inverted, moves scaled by 1/x**2; across 0 the pole leaves it unbounded."""
    x = c.x
    if not (x.lo > 0 or x.hi < 0):
        return replace(x, lo=-INF, hi=INF, gauss=False)
    center = 1.0 / x.center if x.center else 1.0 / max(abs(x.lo), abs(x.hi))
    return Value(lo=min(1.0 / x.lo, 1.0 / x.hi), hi=max(1.0 / x.lo, 1.0 / x.hi), center=center,
                 spread=_times(x.spread, center * center), noisy=x.noisy)


def _periodic(c: Ctx) -> Value:
    return Value(lo=-1.0, hi=1.0, center=0.0, spread=_times(c.x.spread, min(1.0, 0.7 / max(c.x.s, 1e-30))),
                 noisy=c.x.noisy)


def _diff(c: Ctx) -> Value:
    return Value(center=0.0, spread=_times(c.x.spread, math.sqrt(2.0)), noisy=True)


def _integer(c: Ctx) -> Value:
    return Value(lo=0.0, center=1.0, spread=_times(c.x.spread, 1.0 / max(c.x.s, 1e-30)), discrete=True)


def _cosine(c: Ctx) -> Value:
    """The cosine of two n-vectors moves as their sample covariance does: by ~a * b / sqrt(n), a and b each vector's
    varying share of its norm (1 for zero-mean values). A move along a mean both share changes the dot product
    and the norms alike, so values of one sign (positive ones) give a cosine that hardly moves."""
    n = c.dim_size(c.in_shape[1] if len(c.in_shape) > 1 else 1)
    vs = list(c.args.values())[:2]
    shares = [v.s / max(v.scale, 1e-30) for v in vs]
    moves = math.prod(shares) / math.sqrt(n) if len(vs) > 1 else shares[0] / math.sqrt(n)
    center = math.prod(v.center / max(v.scale, 1e-30) for v in vs) if len(vs) > 1 else 0.0
    sp = _merge(*(v.spread for v in vs))
    total = math.sqrt(sum(x * x for _, x in sp))
    return Value(lo=-1.0, hi=1.0, center=center, spread=_times(sp, moves / max(total, 1e-30)), noisy=True)


def _distance(c: Ctx) -> Value:
    n = c.dim_size(c.in_shape[-1] if c.in_shape else 1)
    sp = _merge(*(v.spread for v in c.args.values()))
    s = math.sqrt(sum(v * v for _, v in sp))
    vs = list(c.args.values())
    gap = vs[0].center - vs[1].center if len(vs) > 1 else vs[0].center  # the operands' mean difference
    return Value(lo=0.0, center=math.sqrt(n * (gap * gap + s * s)), spread=_times(sp, 0.7), noisy=True)


_FAMILIES: dict[Rule, tuple[str, ...]] = {
    _join_values: ("cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack", "maximum", "minimum",
                   "fmax", "fmin", "where", "index_add", "index_copy", "scatter", "scatter_add", "scatter_reduce",
                   "lerp", "copysign"),
    _add: ("add", "sub", "rsub", "__add__", "logaddexp", "logaddexp2", "hypot", "addcmul", "addcdiv"),
    _mul: ("mul", "__mul__", "__truediv__", "div", "true_divide"),
    _bounded(0.0, 1.0, 0.25): ("sigmoid", "expit", "ndtr"),
    _bounded(0.0, 1.0, 1 / 6): ("hardsigmoid",),
    _bounded(-1.0, 1.0, 1.0): ("tanh", "softsign", "hardtanh", "erf", "atan", "arctan"),
    _rectify(True): ("relu", "relu6", "threshold"),
    _shrink: ("softshrink", "hardshrink"),
    _rectify(False): ("leaky_relu", "elu", "selu", "celu", "gelu", "silu", "mish", "hardswish", "prelu", "glu"),
    _soft_rectify: ("softplus", "tanhshrink"),
    _log_sigmoid: ("log_sigmoid", "logsigmoid"),
    _unit_steps: ("gt", "lt", "ge", "le", "greater", "less", "greater_equal", "less_equal", "eq", "ne", "isclose",
                  "signbit", "logical_and", "logical_or", "logical_xor", "logical_not", "heaviside"),
    _one_hot: ("one_hot",),
    _levels: ("sign", "sgn", "round", "floor", "ceil", "trunc", "fix"),
    _normalize: ("batch_norm1d", "batch_norm2d", "batch_norm3d", "instance_norm1d", "instance_norm2d",
                 "instance_norm3d", "layer_norm", "group_norm", "rms_norm", "batch_norm", "instance_norm",
                 "transformer_encoder_layer"),  # post-norm: its last step is a layer norm
    _p_normalize: ("normalize",),
    _softmax: ("softmax", "softmin", "softmax2d"),
    _log_softmax: ("log_softmax", "special_log_softmax"),
    _mean: ("mean", "nanmean", "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d",
            "adaptive_avg_pool2d", "adaptive_avg_pool3d"),
    _sum: ("sum", "nansum", "cumsum", "cumulative_trapezoid", "trapezoid", "trapz", "embedding_bag", "lp_pool1d",
           "lp_pool2d", "lp_pool3d"),  # the trapezoid rule's step is 1
    _extreme: ("amax", "amin", "max", "min", "median", "nanmedian", "quantile", "nanquantile", "kthvalue", "topk",
               "aminmax", "logsumexp", "special_logsumexp"),
    _spread_stat: ("var", "std", "var_mean", "std_mean", "norm", "vector_norm"),
    _product: ("prod",),
    _cumprod: ("cumprod",),
    _cumulative: ("cummax", "cummin", "logcumsumexp"),
    _xlogy: ("xlogy", "xlog1py"),
    _linear_mix: ("linear", "bilinear", "matmul", "__matmul__", "mm", "bmm", "baddbmm", "addmm", "addbmm", "einsum",
                  "inner", "tensordot", "multi_dot", "mv", "addmv", "vecdot", "outer", "conv1d", "conv2d", "conv3d",
                  "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "unfold"),
    _attention: ("scaled_dot_product_attention", "multihead_attention"),
    _exp: ("exp", "exp2", "expm1", "cosh", "sinh"),
    _log: ("log", "log2", "log10", "log1p", "lgamma", "gammaln", "digamma", "psi", "logit"),
    _abs: ("abs", "absolute"),
    _square: ("square", "pow", "float_power"),
    _periodic: ("sin", "cos"),
    _diff: ("diff",),
    _neg: ("neg", "negative"),
    _reciprocal: ("reciprocal",),
    _clamp: ("clamp", "clip", "clamp_min", "clamp_max"),
    _embedding: ("embedding",),
    _integer: ("argmax", "argmin", "argsort", "bucketize", "searchsorted", "count_nonzero", "all", "any"),
    _cosine: ("cosine_similarity",),
    _distance: ("pairwise_distance", "cdist", "dist"),
}
RULES: dict[str, Rule] = {name: rule for rule, names in _FAMILIES.items() for name in names}

# elementwise functions monotone on each side of 0 (even ones fall to their value at 0 there): on a bounded input
# the output's range is the image of the input's, which a rule's center and spread alone do not give (the largest
# of many cosh(x**2) of values in [0, 1) sits at cosh(1), not ~5 stds up)
_MONOTONE: dict[str, Callable[[float], float]] = {
    "exp": math.exp, "exp2": lambda v: 2.0 ** v, "expm1": math.expm1, "sinh": math.sinh, "cosh": math.cosh,
    "square": lambda v: v * v, "sqrt": math.sqrt, "rsqrt": lambda v: 1.0 / math.sqrt(v), "log": math.log,
    "log2": math.log2, "log10": math.log10, "log1p": math.log1p, "atan": math.atan, "arctan": math.atan,
    "asinh": math.asinh, "arcsinh": math.asinh, "tanh": math.tanh, "erf": math.erf,
    "sigmoid": lambda v: 1.0 / (1.0 + math.exp(-v)), "expit": lambda v: 1.0 / (1.0 + math.exp(-v)),
    "ndtr": lambda v: 0.5 * math.erfc(-v / math.sqrt(2.0)),
    "softsign": lambda v: v / (1.0 + abs(v)),
    "softplus": lambda v: v + math.log1p(math.exp(-v)) if v > 0 else math.log1p(math.exp(v)),
    "tanhshrink": lambda v: v - math.tanh(v),
}
_EVEN = frozenset({"cosh", "square"})


def _special(name: str) -> Callable[[float], float]:
    def f(v: float) -> float:
        import torch

        return float(getattr(torch.special, name)(torch.tensor(v, dtype=torch.float64)))
    return f


# smooth elementwise functions whose moves _through carries (the monotone ones and a few even or periodic ones)
_SMOOTH: dict[str, Callable[[float], float]] = {
    **_MONOTONE, "sin": math.sin, "cos": math.cos,
    "sinc": lambda v: math.sin(math.pi * v) / (math.pi * v) if v else 1.0,
    "i0": _special("i0"), "special_i0": _special("i0"), "bessel_j0": _special("bessel_j0"),
    "bessel_j1": _special("bessel_j1"),
}
_RANGES = {"sin": (-1.0, 1.0), "cos": (-1.0, 1.0), "sinc": (-0.22, 1.0), "i0": (1.0, INF), "special_i0": (1.0, INF),
           "bessel_j0": (-0.41, 1.0), "bessel_j1": (-0.59, 0.59)}
# saturating functions whose rule puts the center mid-range: on a bounded input it is the image of the input's
_CENTERED = frozenset({"tanh", "erf", "sigmoid", "expit", "ndtr", "softsign", "atan", "arctan"})


def _image(s: str, x: Value, v: Value) -> Value:
    """v with its range cut to the image of x's bounded range under the monotone (or even) function `s`."""
    f = _MONOTONE[s]
    if not (math.isfinite(x.lo) and math.isfinite(x.hi)) or x.hi - x.lo > 80:
        return v
    ends = [x.lo, x.hi, *([0.0] if s in _EVEN and x.lo < 0 < x.hi else [])]
    try:
        ys = [f(e) for e in ends]
    except (ArithmeticError, ValueError):  # outside the domain (log of a value <= 0): the rule's range stands
        return v
    lo, hi = max(v.lo, min(ys)), min(v.hi, max(ys))
    if lo > hi:
        return v
    center = f(x.center) if s in _CENTERED else v.center
    return replace(v, lo=lo, hi=hi, center=min(max(center, lo), hi))


def _slope(f: Callable[[float], float], x: Value) -> float | None:
    """How far f moves over one std either side of x's center (inside x's range), per unit: the slope for a
    monotone f, next to nothing at the flat center of an even one. None when x does not move or the bulk leaves
    f's domain (sqrt of values below 0)."""
    a, b = max(x.center - x.s, x.lo), min(x.center + x.s, x.hi)
    if not (0.0 < x.s < INF and math.isfinite(a) and math.isfinite(b) and b > a):
        return None
    try:
        c = f(x.center)
        return (abs(f(b) - c) + abs(c - f(a))) / (b - a)
    except (ArithmeticError, ValueError):
        return None


def _through(s: str, x: Value, v: Value) -> Value:
    """v (x's values, kept by an unnamed rule) with its center and moves carried through the smooth function `s`:
    the center is f(center), each move scaled by how far f moves over one std either side of it (inside the
    function's domain): the slope for a monotone function, next to nothing at the flat center of an even one
    (cos, sinc, i0 of values near 0)."""
    f = _SMOOTH[s]
    k = _slope(f, x)
    if k is None:
        return v
    center = f(x.center)
    # a monotone function's range is the image of x's, which _image sets: x's own bounds say nothing of f's
    lo, hi = _RANGES.get(s, (-INF, INF))
    return replace(v, lo=lo, hi=hi, center=center, spread=_times(x.spread, k), gauss=False)


def rule_for(op: str) -> Rule:
    """The value rule of catalog operator `op` (its primary input's values when the tables do not name it)."""
    s = stem(op)
    if s.startswith(("max_pool", "adaptive_max_pool")):
        return _extreme
    if s.startswith(("conv", "conv_transpose")):
        return _linear_mix
    if s.endswith("_loss") or s in ("kl_div", "binary_cross_entropy", "binary_cross_entropy_with_logits",
                                    "cross_entropy", "multilabel_soft_margin_loss"):
        return _loss
    return RULES.get(s, _same)


def _category(d: dict) -> str:
    if "category" in d:
        return d["category"]
    from operators.catalog import REGISTRY

    spec = REGISTRY.get(d.get("op", ""))
    return spec.category if spec else ""


def propagate(g: Any, values: dict) -> dict[str, Value]:
    """Each node's Value, in topological order of graph `g` (node attrs kind, draw, op, params, args; `values`:
    each node's output tensor, meta is enough, for shapes)."""
    import networkx as nx

    out: dict[str, Value] = {}
    for n in nx.topological_sort(g):
        d = g.nodes[n]
        if d.get("kind") == "input":
            out[n] = input_value(n, d.get("draw", "randn"))
            continue
        args = {e.get("arg", "x"): out[u] for u, _, e in g.in_edges(n, data=True)}
        if "x" not in args and args:
            args["x"] = next(iter(args.values()))
        if not args:
            out[n] = Value()
            continue
        x_node = next((u for u, _, e in g.in_edges(n, data=True) if e.get("arg", "x") == "x"), None)
        in_shape = tuple(values[x_node].shape) if x_node in values else ()
        out_shape = tuple(values[n].shape) if n in values else in_shape
        ctx = Ctx(op=d["op"], params=d.get("params") or {}, args=args, in_shape=in_shape, out_shape=out_shape)
        rule = rule_for(d["op"])
        try:
            v = rule(ctx)
        except (ArithmeticError, ValueError):  # an order-of-magnitude model: a value it cannot form is unknown
            v = replace(ctx.x, gauss=False)
        if stem(d["op"]) in _SMOOTH and len(args) == 1 and rule in (_same, _periodic):
            v = _through(stem(d["op"]), ctx.x, v)
        if stem(d["op"]) in _MONOTONE and len(args) == 1:
            v = _image(stem(d["op"]), ctx.x, v)
        if rule is _same and v.gauss and _category(d) not in ("shape", "indexing"):
            v = replace(v, gauss=False)  # an unnamed elementwise function reshapes the distribution
        out[n] = v
    return out
