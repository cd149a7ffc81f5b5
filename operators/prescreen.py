"""A CPU pre-screen: run a sampled task on the CPU with the profile worker's own output checks and predict
the filter's input-insensitive / degenerate / fakeable verdicts before any GPU time is spent on it.

The checks are the worker's (measures.tensor_checks.draw_checks over `profile.input_draws` seeded draws, the
same seeds as the worker) and the verdict is the filter's (filters.degenerate.OUTPUT_CHECKS with the config's
filter section), so a reason here reads exactly as the filter's. Determinism is left to the GPU (atomics and
cuDNN algorithms, not the CPU, make a task non-deterministic).

Sizes: tasks sized for an H200 read ~1e8-1e9 values, seconds per draw on one CPU core, so a task runs at its
real shapes only when that fits the budget; otherwise every constant goes to its floor (batch 1, one channel)
if the task still runs there and every reducing ATen call keeps its fan-in (or at least FAN_KEEP values), and
then grows back to the largest sizes that fit (plan_sizes). Candidates are checked on the meta device (the
task must still run there, and its predicted CPU time and peak memory must fit the budget); a task no
candidate fits gets no verdict ("over budget"). What a scaled screen cannot see is put back: the exact zeros
a real-size torch.rand input holds (planted, see RAND_ZERO_P), the larger extremes of a real output's many
elements (the fakeable ratio is extrapolated; with few outputs there is no degenerate verdict but nonfinite,
and input-insensitive only when every element of every draw is equal, see OUT_KEEP and EQUAL_KEEP). With sample.prescreen_fp64, draw 0 also runs in float64 and a float32
output that disagrees with it at the verifier's tolerance is flagged "numerically fragile" (off by default:
on 900 GPU-profiled h200 tasks it flagged none of the compile-vs-eager disagreements, see
benchmarks/prescreen_bench.py --replay). Everything is seeded and single-threaded, and the caller's torch
RNG state and thread count are restored, so the verdict is a function of the task.

Forwards the shortcut checks would repeat are taken from the screen's own: its forward of draw 1 is the skip check's
recording forward, and, for a task with one tensor input, the dead-input check's ratio; a fragility draw whose
fresh model holds the same weights as the screen's (a model without weights) runs the screen's model and reuses its
eager outputs. In drop mode the kinds stop at the first that finds one (any finding drops the draw).
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from measures.cheap_shortcuts import PROPORTIONAL  # the smooth-response band, shared with the cheap check
from measures.shortcuts import FRAGILE_ULP, KINDS, OperatorCalls
from measures.tensor_checks import tensors
from operators.cost import CostMode, _bind
from operators.trace import load_module

# Recorded rows of the draws screened for one task index travel with the row the sampler returns under this
# key (sample_tasks' rows pass through a process pool); the sample stage pops them into DIR/prescreen/.
RECORDS_KEY = "_prescreen"
BATCH = "batch_size"
SPATIAL = ("length", "height", "width", "depth", "seq_len")
MIN_SPATIAL = 4  # the sampler's own floor for a spatial constant in shape variants
# A reduction over n iid values of unit variance differs between draws by ~1.4/sqrt(n): at 2**20 values that
# is ~1e-3, already within the verifier's 1e-2 at the output's extremes. A fan-in that stays at or above
# this keeps a fakeable reduction fakeable, so constants may shrink as long as every reduction keeps
# min(its real fan-in, FAN_KEEP).
FAN_KEEP = 2**20
# the largest fragility move of a scaled screen, in ulps (sample.prescreen_ulp_scale): 2**12 ulps is a relative move
# of 5e-4, past which a smooth output's own sensitivity, not a step, would decide
ULP_STEPS_MAX = 2**12
# The filter's output checks read extremes over the output's elements (all zero, the largest draw-to-draw
# difference): with a handful of outputs, "all zero" or "equal for every draw" is luck, not the task. A scaled
# screen with fewer than min(the real output's elements, OUT_KEEP) gives no input-insensitive verdict and no
# degenerate one but nonfinite; the fakeable ratio measured on fewer elements than the real output has is
# extrapolated (see _extrapolate), so it still decides.
OUT_KEEP = 1024
# ...except that every element equal in every draw is not luck once there are this many element-draw
# comparisons (a fair sign would agree with probability 2**-EQUAL_KEEP): on 3,328 h200 tasks the GPU rejected 36
# of 37 such scaled screens as input-insensitive (the other's screen had an empty output), see
# benchmarks/prescreen_bench.py --replay
EQUAL_KEEP = 8
# torch.rand draws multiples of 2**-24 on the CPU and on CUDA, so an input of n values holds ~n / 2**24 exact
# zeros: a real-size input of 1e9 values ~60 (log, rsqrt, logit and reciprocal make them inf), a scaled one
# almost surely none. A scaled screen plants the real size's expected count (at most PLANT_MAX) at seeded
# places of each [0, 1) input.
RAND_ZERO_P = 2.0**-24
PLANT_MAX = 16
# One CPU core of the 2-core box this was calibrated on (benchmarks/prescreen_bench.py reports predicted
# against measured): fp32 GEMM/conv ~10 GFLOP/s, elementwise with fresh allocations ~0.5 GB/s, and
# torch.randn/rand ~40M values/s. Underestimates on a faster host only make the budget conservative.
CPU_FLOPS = 10e9
CPU_BYTES_S = 0.5e9
CPU_DRAWS_S = 40e6
# a draw that runs this many times over the predicted budget share stops the screen (no verdict): the
# prediction is a roofline guess, and sort/scan-like kernels run far below it on the CPU
HARD_FACTOR = 4.0

# ATen ops that combine values along `dim` (all dims when it is None or empty); others are listed below
_DIM_REDUCTIONS = frozenset({
    "sum", "mean", "amax", "amin", "logsumexp", "_softmax", "_log_softmax", "_safe_softmax", "var", "std",
    "var_mean", "std_mean", "linalg_vector_norm", "norm", "prod", "nansum", "cumsum", "cumprod", "logcumsumexp",
    "cummax", "cummin", "sort", "topk", "kthvalue", "median", "nanmedian", "argmax", "argmin", "max", "min",
    "any", "all", "count_nonzero", "aminmax", "softmax", "log_softmax"})
_CONTRACT_LAST = frozenset({"mm", "bmm", "mv", "matmul", "dot", "vdot", "_euclidean_dist", "_trilinear"})
_CONTRACT_SECOND = frozenset({"addmm", "baddbmm", "addbmm", "addmv"})  # bias first, then the left operand
_ADAPTIVE = frozenset({"_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_max_pool2d",
                       "adaptive_max_pool3d"})
_ATTENTION = frozenset({"_scaled_dot_product_fused_attention", "_scaled_dot_product_flash_attention",
                        "_scaled_dot_product_efficient_attention", "_scaled_dot_product_attention_math",
                        "_scaled_dot_product_flash_attention_for_cpu"})


@dataclass
class Budget:
    """Hard limits of one screen: predicted CPU milliseconds for all draws and peak megabytes."""

    ms: float = 100.0
    mb: float = 256.0


@dataclass
class Result:
    """One screen: the filter's reason ('' when it keeps the task), or no verdict with why (status)."""

    reason: str = ""
    status: str = "ok"  # ok | over budget | error: ...
    constants: dict[str, int] = field(default_factory=dict)
    scaled: bool = False
    predicted_ms: float = 0.0
    cpu_ms: float = 0.0
    measurements: dict[str, Any] = field(default_factory=dict)

    def record(self, task: dict[str, Any], resampled: bool) -> dict[str, Any]:
        """The side table's row (pipeline.rundir.schema.PRESCREEN) for this screen of `task`."""
        m = self.measurements
        return {"task_id": task.get("task_id"), "name": task.get("name"), "code": task.get("code"),
                "graph": task.get("graph"), "seed": task.get("seed"), "reason": self.reason, "status": self.status,
                "resampled": resampled, "shapes": json.dumps(self.constants), "scaled": self.scaled,
                "predicted_ms": self.predicted_ms, "cpu_ms": self.cpu_ms,
                "input_min_pairwise_diff": m.get("input_min_pairwise_diff"),
                "input_sensitivity_ratio": m.get("input_sensitivity_ratio"), "degenerate": m.get("degenerate"),
                "output_numel": m.get("output_numel"),
                **{c: m.get(c) for c in ("shortcut_checks", "dead_inputs", "skippable_ops", "min_input_redraw_ratio",
                                         "min_op_ratio", "input_ratios", "op_ratios", "fragile",
                                         "prescreen_ulp_steps", "prescreen_real_move_ratio")}}


class _FanMode(TorchDispatchMode):
    """Records, per ATen call in order, how many values each output element combines (1: none)."""

    def __init__(self) -> None:
        super().__init__()
        self.fans: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        with contextlib.suppress(Exception):  # an op this does not understand combines nothing it can see
            self.fans.append(_fan_in(func, args, kwargs))
        return out


def _fan_in(func: Any, args: tuple, kwargs: dict) -> int:
    name = func.overloadpacket.__name__
    x = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if name in _DIM_REDUCTIONS and x is not None and x.dim():
        b = _bind(func, args, kwargs)
        dim = b.get("dim")
        if dim is None or dim == [] or dim == ():
            if name in ("sort", "topk", "kthvalue", "_softmax", "_log_softmax", "softmax", "log_softmax"):
                dim = -1
            else:
                return x.numel()
        dims = [dim] if isinstance(dim, int) else list(dim)
        return math.prod(x.shape[d] for d in dims)
    if name in _CONTRACT_LAST and x is not None and x.dim():
        return x.shape[-1]
    if name in _CONTRACT_SECOND and len(args) > 1 and isinstance(args[1], torch.Tensor):
        return args[1].shape[-1]
    if name == "convolution" and x is not None and x.dim() > 1:
        w = args[1]
        return x.shape[1] * math.prod(w.shape[2:]) // max(1, int(args[8]) if len(args) > 8 else 1)
    if name == "native_layer_norm" and x is not None:
        return math.prod(x.shape[x.dim() - len(args[1]):])
    if name == "native_group_norm" and x is not None:
        return x.numel() // (x.shape[0] * int(args[6]))
    if name in ("native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional") \
            and x is not None:
        b = _bind(func, args, kwargs)
        return x.numel() // x.shape[1] if b.get("training") else 1
    if name in _ADAPTIVE and x is not None:
        out = args[1]
        spatial = x.shape[x.dim() - len(out):]
        return math.prod(-(-n // o) for n, o in zip(spatial, out, strict=True))
    if name in _ATTENTION and len(args) > 1:
        return args[1].shape[-2] * args[0].shape[-1]
    return 1


@dataclass
class _Plan:
    consts: dict[str, int]
    ms: float
    peak: int
    fans: list[int]
    out_numel: int = 0
    in_numels: list[int] = field(default_factory=list)


def _trace(ns: dict[str, Any], consts: dict[str, int], draws: int) -> _Plan:
    """Run the task on meta at `consts`: its reducing calls' fan-in, predicted CPU ms for `draws` draws and
    the peak bytes (inputs, weights and every intermediate alive at once, as the sampler bounds it)."""
    ns.update(consts)
    with torch.device("meta"), torch.no_grad():
        model = ns["Model"](*ns["get_init_inputs"]())
        inputs = ns["get_inputs"]()
        cost, fan = CostMode(), _FanMode()
        with cost, fan:
            out = model(*inputs)
    ins = [t for t in inputs if isinstance(t, torch.Tensor)]
    weights = [*model.parameters(), *model.buffers()]
    in_n, w_n = sum(t.numel() for t in ins), sum(t.numel() for t in weights)
    flops = sum(r.flops for r in cost.records)
    moved = sum(r.act_bytes + r.fixed_bytes for r in cost.records)
    per_draw = in_n / CPU_DRAWS_S + moved / CPU_BYTES_S + flops / CPU_FLOPS
    peak = sum(t.numel() * t.element_size() for t in [*ins, *weights]) + sum(r.out_bytes for r in cost.records)
    return _Plan(dict(consts), 1e3 * (draws * per_draw + w_n / CPU_DRAWS_S), peak, fan.fans,
                 sum(t.numel() for t in tensors(out)), [t.numel() for t in inputs if isinstance(t, torch.Tensor)])


def _keeps_fans(plan: _Plan, real: _Plan) -> bool:
    return len(plan.fans) == len(real.fans) and all(
        f >= min(r, FAN_KEEP) for f, r in zip(plan.fans, real.fans, strict=True))


def plan_sizes(code: str, draws: int, budget: Budget, only: tuple[str, ...] = (),
               pin_literals: bool = False) -> tuple[_Plan | None, _Plan]:
    """(the largest sizes that fit the budget and keep every reduction's fan-in, or None; the real sizes' plan).

    Every constant that can go to its floor (batch 1, one channel or head, MIN_SPATIAL) while the task still
    runs on meta and every reduction keeps its fan-in goes there, batch first, each in turn; if even that
    does not fit, there is no verdict. Otherwise the other constants grow back towards their real values by
    one common geometric step, the largest that fits, and then the batch does: the screen runs as close to
    the real shapes as the budget allows (more outputs per draw make an output's extremes, which the
    filter's checks read, more like the real task's). `only` limits the constants that may shrink, and
    `pin_literals` keeps those whose value the code also spells as a literal (an index drawn below it, a
    randperm of its length: meta checks shapes, not index values)."""
    ns = load_module(code, "prescreen_meta")
    # the module-level integer size constants get_inputs and get_init_inputs read
    constants = {k: v for k, v in ns.items() if not k.startswith("_") and type(v) is int}
    real = _trace(ns, constants, draws)

    def fits(p: _Plan | None) -> bool:
        return p is not None and p.ms <= budget.ms and p.peak <= budget.mb * 2**20

    if fits(real):
        return real, real

    def attempt(consts: dict[str, int]) -> _Plan | None:
        try:
            p = _trace(ns, consts, draws)
        except Exception:  # noqa: BLE001 - sizes the task cannot take are not a candidate
            return None
        return p if _keeps_fans(p, real) else None

    literals = _int_literals(code) if pin_literals else set()
    low, floors = dict(constants), {}
    plan: _Plan | None = None
    for c in sorted(only or constants, key=lambda c: c != BATCH):
        v = constants.get(c, 0)
        floor = MIN_SPATIAL if c in SPATIAL else 1
        if v <= floor or v in literals:
            continue
        for size in (floor, max(floor, v // 2)):  # some ops need more than the floor (groups, kernel sizes)
            p = attempt({**low, c: size})
            if p is not None:
                low[c], floors[c], plan = size, size, p
                break
    if not fits(plan):
        return None, real
    rest = [c for c in floors if c != BATCH]

    def grown(a: float, batch: int) -> dict[str, int]:
        consts = {**low, **{c: max(floors[c], round(floors[c] * (constants[c] / floors[c]) ** a)) for c in rest}}
        return {**consts, BATCH: batch} if BATCH in floors else consts

    best = plan
    lo, hi = (0.0 if rest else 1.0), 1.0  # the common step of the other constants, on a log scale from their floors
    if rest:
        for _ in range(5):
            p = attempt(grown((lo + hi) / 2, floors.get(BATCH, 1)))
            if fits(p):
                lo, best = (lo + hi) / 2, p
            else:
                hi = (lo + hi) / 2
        if hi == 1.0 and fits(p := attempt(grown(1.0, floors.get(BATCH, 1)))):
            lo, best = 1.0, p
    if BATCH in floors and lo == 1.0:
        # costs and peaks grow about linearly with the batch: solve for the largest that fits between batch 1
        # (best) and the real plan, then step down while the meta run says it does not fit
        b1, n = best, constants[BATCH]
        per_ms, per_b = (real.ms - b1.ms) / (n - 1), (real.peak - b1.peak) / (n - 1)
        cap = min(n if per_ms <= 0 else (budget.ms - b1.ms) / per_ms,
                  n if per_b <= 0 else (budget.mb * 2**20 - b1.peak) / per_b)
        batch = min(n - 1, int(cap) + 1)
        for _ in range(4):
            if batch <= 1:
                break
            if fits(p := attempt(grown(1.0, batch))):
                best = p
                break
            batch = int(batch * 0.7)
    return best, real


def _int_literals(code: str) -> set[int]:
    """Integer literals of the task's code outside its module-level constant assignments."""
    import ast

    tree = ast.parse(code)
    body = [n for n in tree.body if not (isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant))]
    return {n.value for b in body for n in ast.walk(b) if isinstance(n, ast.Constant) and type(n.value) is int}


def prescreen(task: Any, cfg: Any, budget: Budget | None = None) -> Result:
    """Screen one task (a task row with `code`, or a graph: nx.DiGraph, node-link dict or JSON) on the CPU with
    the config's filter thresholds, input draws and seed; see the module docstring. A task no size fits within
    `budget` is screened again within sample.prescreen_retry_ms when that is larger."""
    budget = budget or Budget(cfg.sample.prescreen_ms, cfg.sample.prescreen_mb)
    code = task["code"] if isinstance(task, dict) and "code" in task else _render(task)
    ops = _task_ops(task)
    t0 = time.process_time()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one core per sampler process; restored below, so the caller keeps its own
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a probe at half size may broadcast a loss's target: torch warns
            res = _screen(code, cfg, budget, ops=ops)
            retry = cfg.sample.prescreen_retry_ms
            if res.status.startswith("over budget") and retry > budget.ms:
                # no size fits: a larger budget for this draw alone (the others keep theirs: a budget is also
                # the size every screen grows to, so raising it for all costs every draw its share)
                budget = Budget(retry, budget.mb)
                res = _screen(code, cfg, budget, ops=ops)
            # an index drawn for a real size (a literal in the code) can fall outside a shrunk one, which meta
            # does not see: keep constants the code spells as literals, then shrink the batch alone
            for kw in ({"pin_literals": True}, {"only": (BATCH,)}):
                if not (res.scaled and res.status.startswith("error")):
                    break
                res = _screen(code, cfg, budget, ops=ops, **kw)
    finally:
        torch.set_num_threads(threads)
    res.cpu_ms = 1e3 * (time.process_time() - t0)
    return res


def _screen(code: str, cfg: Any, budget: Budget, only: tuple[str, ...] = (), pin_literals: bool = False,
            ops: Any = None) -> Result:
    from filters.base import decide
    from filters.degenerate import OUTPUT_CHECKS
    from measures.tensor_checks import draw_checks, flatten, sample_stride

    draws, seed = int(cfg.profile.input_draws), int(cfg.run.seed)
    tol = float(cfg.filter.compile_tolerance)
    fp64 = bool(cfg.sample.prescreen_fp64)
    res = Result()
    try:
        # the float64 run of draw 0 costs about two float32 draws
        plan, real = plan_sizes(code, draws + 2 * fp64, budget, only, pin_literals)
        if plan is None:
            return Result(status="over budget", constants=real.consts, predicted_ms=real.ms)
        res = Result(constants=plan.consts, scaled=plan is not real, predicted_ms=plan.ms)
        ns = load_module(code, "prescreen")
        ns.update(plan.consts)
        plant = [min(PLANT_MAX, round(n * RAND_ZERO_P)) if res.scaled else 0 for n in real.in_numels]

        drawn: dict[int, tuple[list[Any], Any]] = {}

        def draw(k: int) -> list[Any]:
            # each check draws the same seeded inputs again: the first draw is kept and copied (a copy costs a tenth
            # of torch.randn's CPU time), with the generator's state after it, so a forward that draws random
            # numbers of its own draws the same ones as after a fresh draw
            if k not in drawn:
                torch.manual_seed(seed + 1 + k)
                xs = _plant_zeros(ns["get_inputs"](), plant, seed + 1 + k)
                drawn[k] = ([x.clone() if isinstance(x, torch.Tensor) else x for x in xs], torch.get_rng_state())
                return xs
            xs, state = drawn[k]
            torch.set_rng_state(state)
            return [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]

        t0, hard_s = time.process_time(), HARD_FACTOR * budget.ms / 1e3
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            # the profile worker's seeds: weights from `seed`, draw k from seed + 1 + k
            torch.manual_seed(seed)
            model = ns["Model"](*ns["get_init_inputs"]())
            subs: list[Any] = []
            ref0, stride, full1, rec = None, 1, None, None
            shortcuts = getattr(cfg.sample, "prescreen_shortcuts", "off") != "off"
            for k in range(draws):
                xs = draw(k)  # drawn outside the recording: the planted zeros' torch calls are no operators
                if k == 1 and shortcuts and "skip" in (tuple(cfg.profile.shortcut_checks) or KINDS):
                    # the skip check's recording forward of draw 1 is this one (measures.shortcuts.skippable_ops)
                    with OperatorCalls(model, record_means=True) as rec:
                        out = model(*xs)
                else:
                    out = model(*xs)
                flat = flatten(out)
                del xs, out
                if flat is None:
                    raise ValueError("forward returned no tensor")
                if ref0 is None:
                    ref0, stride = flat.clone(), sample_stride(flat.numel())
                    flat = ref0
                if k == 1 and shortcuts:
                    full1 = flat  # draw 1's whole output: the dead-input check's ratio of a task with one input
                subs.append(flat[::stride])
                if time.process_time() - t0 > hard_s and k < draws - 1:
                    res.status = f"over budget (draw {k + 1} of {draws} past {hard_s:g} s)"
                    return res
            m = res.measurements = draw_checks(ref0, subs, tol)
            r = m["input_sensitivity_ratio"]
            if res.scaled and real.out_numel > ref0.numel() and math.isfinite(r):
                m["input_sensitivity_ratio_screened"] = r
                m["input_sensitivity_ratio"] = r * _extrapolate(ref0.numel(), real.out_numel)
            if ref0.numel() < min(real.out_numel, OUT_KEEP):
                m["few_outputs"] = {"input_min_pairwise_diff": m["input_min_pairwise_diff"],
                                    "degenerate": m["degenerate"]}
                m["degenerate"] = m["degenerate"] if m["degenerate"] == "nonfinite" else ""
                if m["input_min_pairwise_diff"] != 0 or ref0.numel() * (draws - 1) < EQUAL_KEEP:
                    m["input_min_pairwise_diff"] = math.inf
                    if r == 0:  # equal draws at one or two outputs: the same luck as input-insensitive
                        m["input_sensitivity_ratio"] = math.inf
            res.reason = decide(m, OUTPUT_CHECKS, cfg.filter)[1]
            if fp64 and not res.reason:
                m["fp64_ratio"] = _fp64_ratio(model, draw(0), ref0, tol)
                if m["fp64_ratio"] is not None and m["fp64_ratio"] > 1:
                    res.reason = (f"numerically fragile: float32 and float64 disagree (ratio "
                                  f"{m['fp64_ratio']:.3g} > 1 at the verifier tolerance {tol:g})")
            if getattr(cfg.sample, "prescreen_shortcuts", "off") != "off" and not res.reason:
                steps = ulp_steps(real.in_numels, plan.in_numels) if getattr(cfg.sample, "prescreen_ulp_scale", False) else 1
                # the real-size check's own move (profile.shortcut_ulp_steps), scaled the same way
                steps = min(ULP_STEPS_MAX, steps * cfg.profile.shortcut_ulp_steps)
                known = _redraw_ratio(drawn, full1, ref0, tol)
                del full1
                _screen_shortcuts(model, draw, ref0, subs, stride, cfg, res, steps,
                                  _fresh_models(ns, seed, model) if cfg.profile.shortcut_fresh_weights else None, ops,
                                  known, rec)
    except Exception as e:  # noqa: BLE001 - whatever the task does on the CPU is a result, not a verdict
        res.status = f"error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
    return res


def ulp_steps(real_numels: list[int], screened_numels: list[int]) -> int:
    """The fragility check's input move at screened shapes (sample.prescreen_ulp_scale): the real input element count
    over the screened one, 1 to ULP_STEPS_MAX. Values near a step are spread about evenly over a few ulps, so a
    screen with 1/n of the elements meets as many within n ulps as the real size meets within one."""
    n = sum(screened_numels)
    return max(1, min(ULP_STEPS_MAX, round(sum(real_numels) / n))) if n else 1


def _redraw_ratio(drawn: dict[int, tuple[list[Any], Any]], full1: Any, ref0: Any, tol: float) -> float | None:
    """The dead-input check's ratio for a task with one tensor input, from the screen's own forward of draw 1
    (`full1`, its whole output): redrawing that input alone is drawing 1 again. None (the check runs its forward)
    when there is another tensor input, the input is the same in both draws (a constant: nothing to redraw), or
    a non-tensor input differs."""
    from measures.tensor_checks import tolerance_ratio

    if full1 is None or 0 not in drawn or 1 not in drawn:
        return None
    x0, x1 = drawn[0][0], drawn[1][0]
    slots = [i for i, t in enumerate(x0) if isinstance(t, torch.Tensor)]
    if len(slots) != 1 or len(x0) != len(x1) or not isinstance(x1[slots[0]], torch.Tensor):
        return None
    i = slots[0]
    try:
        if any(not (a is b or a == b) for j, (a, b) in enumerate(zip(x0, x1, strict=True)) if j != i):
            return None
    except Exception:  # noqa: BLE001 - inputs that do not compare: the check measures
        return None
    if x0[i].shape == x1[i].shape and torch.equal(x0[i], x1[i]):
        return None
    return tolerance_ratio(full1, ref0, tol)


def _fresh_models(ns: dict, seed: int, model: Any = None) -> Any:
    """Draw k's own model for the fragility check, seeded as the profile worker's (profile.shortcut_fresh_weights).
    A fresh model whose weights and buffers (and plain tensor and number attributes) equal `model`'s is the same
    function (a model without weights): model_for answers None and the check runs `model`, whose eager outputs of
    the screen's draws it already has."""
    def model_for(k: int) -> Any:
        torch.manual_seed(seed * 1000 + k)
        fresh = ns["Model"](*ns["get_init_inputs"]())
        return None if model is not None and _same_state(fresh, model) else fresh
    return model_for


def _same_state(a: Any, b: Any) -> bool:
    """Whether two modules of one class hold equal tensors (parameters, buffers, plain tensor attributes) and equal
    plain number, string and tuple attributes, module by module."""
    if type(a) is not type(b):
        return False
    ma, mb = dict(a.named_modules(remove_duplicate=False)), dict(b.named_modules(remove_duplicate=False))
    if ma.keys() != mb.keys():
        return False
    for name, x in ma.items():
        y = mb[name]
        if type(x) is not type(y):
            return False
        tx = {**x._parameters, **x._buffers, **{k: v for k, v in vars(x).items() if isinstance(v, torch.Tensor)}}
        ty = {**y._parameters, **y._buffers, **{k: v for k, v in vars(y).items() if isinstance(v, torch.Tensor)}}
        if tx.keys() != ty.keys():
            return False
        for k, t in tx.items():
            u = ty[k]
            if (t is None) != (u is None) or (t is not None and (t.dtype != u.dtype or t.shape != u.shape
                                                                 or not torch.equal(t, u))):
                return False
        plain = (bool, int, float, str, tuple, list, type(None))
        vx = {k: v for k, v in vars(x).items() if not k.startswith("_") and isinstance(v, plain)}
        vy = {k: v for k, v in vars(y).items() if not k.startswith("_") and isinstance(v, plain)}
        if vx.keys() != vy.keys() or any(_differ(vx[k], vy[k]) for k in vx):
            return False
    return True


def _differ(a: Any, b: Any) -> bool:
    try:
        return bool(a != b)
    except Exception:  # noqa: BLE001 - values that do not compare (tensors in a list): taken as different
        return True


def _screen_shortcuts(model: Any, draw: Any, ref0: Any, subs: list, stride: int, cfg: Any, res: Result,
                      steps: int = 1, model_for: Any = None, ops: Any = None, redraw_ratio: float | None = None,
                      recorded: Any = None) -> None:
    """measures/shortcuts.py at the screened shapes, the profile worker's kinds and draws (all three kinds when the
    profile runs none), the fragility move `steps` ulps; with sample.prescreen_shortcuts = "drop" a finding is the
    screen's reason. With profile.shortcut_mode = "cheap" the fragility check is the cheap one (_cheap_fragility)."""
    from filters.shortcut_checks import no_shortcuts
    from measures.shortcuts import KINDS, measure, ulp_finding

    p, m = cfg.profile, res.measurements
    tol = float(cfg.filter.compile_tolerance)
    kinds = tuple(p.shortcut_checks) or KINDS
    cheap = getattr(p, "shortcut_mode", "exhaustive") == "cheap" and "fragile" in kinds
    known = float(m["input_sensitivity_ratio"]) if stride == 1 and len(subs) == 2 else redraw_ratio
    run = tuple(k for k in KINDS if k in kinds and (k != "fragile" or not cheap))
    # in drop mode any one finding drops the draw: with stop_first the kinds run one at a time, in order, and stop
    # at the first that finds one (record mode measures every kind, to be compared with the GPU's)
    one_by_one = p.shortcut_stop_first and cfg.sample.prescreen_shortcuts == "drop"
    ran: list[str] = []
    for part in ([(k,) for k in run] if one_by_one else [run]):
        m.update(measure(model, draw, ref0, tol, kinds=part, draws=p.shortcut_draws, subs=subs, stride=stride,
                         stop_first=p.shortcut_stop_first, known_ratio=known, ulp_steps=steps, model_for=model_for,
                         f64_draws=p.shortcut_f64_draws, recorded=recorded))
        ran += part
        if one_by_one and (m.get("dead_inputs") or m.get("skippable_ops") or m.get("fragile")):
            break
    m["shortcut_checks"] = ",".join(ran)
    m["prescreen_ulp_steps"] = steps
    found = m.get("dead_inputs") or m.get("skippable_ops")
    if cheap and not (found and p.shortcut_stop_first):
        _cheap_fragility(model, draw, subs, stride, cfg, res, steps, model_for, ops)
        m["shortcut_checks"] = ",".join(k for k in KINDS if k in kinds)
    elif not cheap and steps > p.shortcut_ulp_steps and m.get("fragile") == ulp_finding(steps):
        _scaled_flag_or_real_move(model, draw, subs, stride, cfg, res, steps, model_for)
    if cfg.sample.prescreen_shortcuts == "drop":
        res.reason = no_shortcuts(m, cfg.filter) or ""


def _cheap_fragility(model: Any, draw: Any, subs: list, stride: int, cfg: Any, res: Result, steps: int,
                     model_for: Any, ops: Any) -> None:
    """The cheap fragility check (measures/cheap_shortcuts.py) at the screened shapes: draw 0 in float64 and under
    one move of `steps` ulps (the real move scaled to the real element count) times profile.shortcut_move_scale, at
    most ULP_STEPS_MAX, a flag measured again with the real move and given way where the output moved in
    proportion. A task with a step operator that passes is screened as in exhaustive mode: a step that one value of
    one draw meets does not grow with the move."""
    from measures.cheap_shortcuts import has_step, scaled_fragility
    from measures.shortcuts import fragility, ulp_finding

    p, m, tol = cfg.profile, res.measurements, float(cfg.filter.compile_tolerance)
    real = p.shortcut_ulp_steps
    scale = max(1, min(ULP_STEPS_MAX, steps * p.shortcut_move_scale) // real)
    got = scaled_fragility(model, draw, tol, subs[0], stride, real, scale)
    got.pop("fragile_scaled_ratio")
    m.update(got)
    if got["fragile"] or not has_step(ops):
        return
    m.update(fragility(model, draw, tol, p.shortcut_draws, subs, stride, p.shortcut_stop_first, checks=(FRAGILE_ULP,),
                       ulp_steps=steps, model_for=model_for), fragile_f64_ratio=got["fragile_f64_ratio"])
    if steps > real and m.get("fragile") == ulp_finding(steps):
        _scaled_flag_or_real_move(model, draw, subs, stride, cfg, res, steps, model_for)


def _task_ops(task: Any) -> list[str] | None:
    """The catalog operators of a task row (`ops`) or graph, None when unknown (then it counts as holding a step)."""
    if isinstance(task, dict) and "ops" in task:
        return task["ops"]
    try:
        import networkx as nx

        g = task if isinstance(task, nx.DiGraph) else nx.node_link_graph(
            json.loads(task) if isinstance(task, str) else task, directed=True, edges="edges")
        return [d["op"] for _, d in g.nodes(data=True) if d.get("kind") == "op"]
    except Exception:  # noqa: BLE001 - a task without a readable graph: every operator may step
        return None


def _scaled_flag_or_real_move(model: Any, draw: Any, subs: list, stride: int, cfg: Any, res: Result, steps: int,
                              model_for: Any = None) -> None:
    """A scaled move (n times the real one) meets the steps the real size meets, and also multiplies a smooth
    output's own response n times: a smooth output with a moderate condition number then reads as fragile at the
    screened shapes and not at the real ones. So a scaled flag is measured again with the real move
    (profile.shortcut_ulp_steps, `prescreen_real_move_ratio`). A response in proportion to the move (the scaled
    ratio n times the real one, within PROPORTIONAL either way) is a smooth output's, and the real move's verdict
    is the screen's; otherwise (a step met, or crossed) the flag stands."""
    from measures.shortcuts import fragility

    m, p = res.measurements, cfg.profile
    real = fragility(model, draw, float(cfg.filter.compile_tolerance), p.shortcut_draws, subs, stride,
                     p.shortcut_stop_first, ulp_steps=p.shortcut_ulp_steps, model_for=model_for,
                     f64_draws=p.shortcut_f64_draws)
    m["prescreen_real_move_ratio"] = r = real["fragile_ulp_ratio"]
    if real["fragile"] or not r:
        return
    # kept beside the record (not a prescreen/ column): what benchmarks/shortcuts.py --scaled-flags reads
    m["prescreen_move_proportion"] = proportion = m["fragile_ulp_ratio"] / (r * steps / p.shortcut_ulp_steps)
    if 1 / PROPORTIONAL <= proportion <= PROPORTIONAL:
        m.update(real)


def _extrapolate(screened: int, real: int) -> float:
    """How much larger the largest of `real` draw-to-draw differences is than the largest of `screened`, for
    Gaussian-like differences (the expected maximum of n grows as sqrt(2 ln n)): the fakeable ratio of a
    scaled screen times this is what the real output would show, so fewer outputs do not read as fakeable."""
    return math.sqrt(math.log(2 * real) / math.log(2 * max(1, screened)))


def _plant_zeros(inputs: list[Any], counts: list[int], seed: int) -> list[Any]:
    """Set counts[i] seeded places of each [0, 1) float input (a torch.rand draw) to exactly 0."""
    gen = torch.Generator().manual_seed(seed)
    ts = iter(counts)
    for t in inputs:
        if not isinstance(t, torch.Tensor):
            continue
        k = next(ts, 0)
        if k and t.is_floating_point() and t.numel() and float(t.min()) >= 0 and float(t.max()) < 1:
            t.view(-1)[torch.randint(0, t.numel(), (k,), generator=gen)] = 0.0
    return inputs


def _fp64_ratio(model: Any, inputs: list[Any], ref0: Any, tol: float) -> float | None:
    """The verifier's ratio (measures.tensor_checks.tolerance_ratio) of draw 0's float32 output against the same
    model and inputs in float64: > 1 means a kernel that rounds differently (a compiler reordering a sum, a
    fused softmax) may flip a comparison or an integer part and fail allclose. None if float64 does not run."""
    from measures.tensor_checks import flatten, tolerance_ratio

    try:
        out = flatten(copy.deepcopy(model).double()(
            *[t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]))
    except Exception:  # noqa: BLE001 - an op without float64 (or a float32 literal it meets) says nothing
        return None
    if out is None or out.shape != ref0.shape:
        return None
    return tolerance_ratio(ref0.double(), out, tol)


def _render(graph: Any) -> str:
    from operators.render import render

    return render(graph)


class Screen:
    """The sampler's hook (operators.sample.sample_tasks(screen=...)): `screen(row)` returns a reason to resample
    the draw ('' to keep it) and attaches the records of every draw screened for that index to the row it keeps
    (RECORDS_KEY). mode "resample" redraws what the pre-screen flags; "record" keeps it and records the verdict
    (so the GPU's verdict on the same tasks can be compared)."""

    def __init__(self, cfg: Any, mode: str | None = None) -> None:
        self.cfg, self.mode = cfg, mode or cfg.sample.prescreen
        self.pending: list[dict[str, Any]] = []

    def __call__(self, row: dict[str, Any]) -> str:
        from filters.base import reason_kind

        res = prescreen(row, self.cfg)
        resample = bool(res.reason) and self.mode == "resample"
        self.pending.append(res.record(row, resample))
        if resample:
            return reason_kind(res.reason)
        row[RECORDS_KEY], self.pending = self.pending, []
        return ""
