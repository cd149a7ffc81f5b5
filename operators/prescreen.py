"""A CPU pre-screen: run a sampled task on the CPU with the profile worker's own output checks and predict
the filter's input-insensitive / degenerate / fakeable verdicts before any GPU time is spent on it.

The checks are the worker's (pipeline.tensor_checks.draw_checks over `profile.input_draws` seeded draws, the
same seeds as the worker) and the verdict is the filter's (filters.degenerate.OUTPUT_CHECKS with the config's
filter section), so a reason here reads exactly as the filter's. Determinism is left to the GPU (atomics and
cuDNN algorithms, not the CPU, make a task non-deterministic).

Sizes: tasks sized for an H200 read ~1e8-1e9 values, seconds per draw on one CPU core, so a task runs at its
real shapes only when that fits the budget; otherwise at smaller `batch_size` and spatial constants. What
makes a task fakeable is how many values a reduction, softmax or normalisation combines (its fan-in), so a
scaled size is used only if every reducing ATen call keeps its fan-in, or at least FAN_KEEP values: the
constants a reduction runs over stay at full size where possible. Candidates are checked on the meta device
first (the task must still run there, and its predicted CPU time and peak memory must fit the budget); a
task no candidate fits gets no verdict ("over budget"). Everything is seeded and single-threaded, and the
caller's torch RNG state and thread count are restored, so the verdict is a function of the task.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

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
        """The side table's row (pipeline.schema.PRESCREEN) for this screen of `task`."""
        m = self.measurements
        return {"task_id": task.get("task_id"), "name": task.get("name"), "code": task.get("code"),
                "graph": task.get("graph"), "seed": task.get("seed"), "reason": self.reason, "status": self.status,
                "resampled": resampled, "shapes": json.dumps(self.constants), "scaled": self.scaled,
                "predicted_ms": self.predicted_ms, "cpu_ms": self.cpu_ms,
                "input_min_pairwise_diff": m.get("input_min_pairwise_diff"),
                "input_sensitivity_ratio": m.get("input_sensitivity_ratio"), "degenerate": m.get("degenerate"),
                "output_numel": m.get("output_numel")}


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


def _trace(ns: dict[str, Any], consts: dict[str, int], draws: int) -> _Plan:
    """Run the task on meta at `consts`: its reducing calls' fan-in, predicted CPU ms for `draws` draws and
    the peak bytes (inputs, weights and every intermediate alive at once, as the sampler bounds it)."""
    ns.update(consts)
    with torch.device("meta"), torch.no_grad():
        model = ns["Model"](*ns["get_init_inputs"]())
        inputs = ns["get_inputs"]()
        cost, fan = CostMode(), _FanMode()
        with cost, fan:
            model(*inputs)
    ins = [t for t in inputs if isinstance(t, torch.Tensor)]
    weights = [*model.parameters(), *model.buffers()]
    in_n, w_n = sum(t.numel() for t in ins), sum(t.numel() for t in weights)
    flops = sum(r.flops for r in cost.records)
    moved = sum(r.act_bytes + r.fixed_bytes for r in cost.records)
    per_draw = in_n / CPU_DRAWS_S + moved / CPU_BYTES_S + flops / CPU_FLOPS
    peak = sum(t.numel() * t.element_size() for t in [*ins, *weights]) + sum(r.out_bytes for r in cost.records)
    return _Plan(dict(consts), 1e3 * (draws * per_draw + w_n / CPU_DRAWS_S), peak, fan.fans)


def _keeps_fans(plan: _Plan, real: _Plan) -> bool:
    return len(plan.fans) == len(real.fans) and all(
        f >= min(r, FAN_KEEP) for f, r in zip(plan.fans, real.fans, strict=True))


def plan_sizes(code: str, draws: int, budget: Budget, only: tuple[str, ...] = (),
               pin_literals: bool = False) -> tuple[_Plan | None, _Plan]:
    """(the largest sizes that fit the budget and keep every reduction's fan-in, or None; the real sizes' plan).

    Batch shrinks first (few ops reduce over it), then every other constant no reduction needs at full size
    (each probed alone at half size), by one common factor; `only` limits the constants that may shrink, and
    `pin_literals` keeps those whose value the code also spells as a literal (an index drawn below it, a
    randperm of its length: meta checks shapes, not index values)."""
    ns = load_module(code, "prescreen_meta")
    # the module-level integer size constants get_inputs and get_init_inputs read
    constants = {k: v for k, v in ns.items() if not k.startswith("_") and type(v) is int}
    real = _trace(ns, constants, draws)

    def fits(p: _Plan) -> bool:
        return p.ms <= budget.ms and p.peak <= budget.mb * 2**20

    if fits(real):
        return real, real

    def attempt(consts: dict[str, int]) -> _Plan | None:
        try:
            p = _trace(ns, consts, draws)
        except Exception:  # noqa: BLE001 - sizes the task cannot take are not a candidate
            return None
        return p if _keeps_fans(p, real) else None

    literals = _int_literals(code) if pin_literals else set()
    free = []
    for c in sorted(only or constants, key=lambda c: c != BATCH):
        v = constants.get(c, 0)
        floor = MIN_SPATIAL if c in SPATIAL else 1
        if v > floor and v not in literals and attempt({**constants, c: max(floor, v // 2)}) is not None:
            free.append(c)
    ratio = budget.ms / real.ms if real.ms > 0 else 1.0
    ratio = min(ratio, budget.mb * 2**20 / real.peak) if real.peak > 0 else ratio
    consts = dict(constants)
    if BATCH in free:
        consts[BATCH] = max(1, int(constants[BATCH] * ratio))
        ratio = ratio * constants[BATCH] / consts[BATCH]
    rest = [c for c in free if c != BATCH]
    for _ in range(6):  # costs are not exactly proportional to sizes: shrink a little more until it fits
        if rest and ratio < 1:
            f = ratio ** (1 / len(rest))
            consts.update({c: max(MIN_SPATIAL if c in SPATIAL else 1, int(constants[c] * f)) for c in rest})
        p = attempt(consts)
        if p is not None and fits(p):
            return p, real
        if BATCH in free and consts[BATCH] > 1:
            consts[BATCH] = max(1, consts[BATCH] // 2)
        elif rest:
            ratio = min(ratio, 1.0) / 2
        else:
            break
    return None, real


def _int_literals(code: str) -> set[int]:
    """Integer literals of the task's code outside its module-level constant assignments."""
    import ast

    tree = ast.parse(code)
    body = [n for n in tree.body if not (isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant))]
    return {n.value for b in body for n in ast.walk(b) if isinstance(n, ast.Constant) and type(n.value) is int}


def prescreen(task: Any, cfg: Any, budget: Budget | None = None) -> Result:
    """Screen one task (a task row with `code`, or a graph: nx.DiGraph, node-link dict or JSON) on the CPU with
    the config's filter thresholds, input draws and seed; see the module docstring."""
    budget = budget or Budget(cfg.sample.prescreen_ms, cfg.sample.prescreen_mb)
    code = task["code"] if isinstance(task, dict) and "code" in task else _render(task)
    t0 = time.process_time()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one core per sampler process; restored below, so the caller keeps its own
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a probe at half size may broadcast a loss's target: torch warns
            res = _screen(code, cfg, budget)
            # an index drawn for a real size (a literal in the code) can fall outside a shrunk one, which meta
            # does not see: keep constants the code spells as literals, then shrink the batch alone
            for kw in ({"pin_literals": True}, {"only": (BATCH,)}):
                if not (res.scaled and res.status.startswith("error")):
                    break
                res = _screen(code, cfg, budget, **kw)
    finally:
        torch.set_num_threads(threads)
    res.cpu_ms = 1e3 * (time.process_time() - t0)
    return res


def _screen(code: str, cfg: Any, budget: Budget, only: tuple[str, ...] = (), pin_literals: bool = False) -> Result:
    from filters.base import decide
    from filters.degenerate import OUTPUT_CHECKS
    from pipeline.tensor_checks import draw_checks, flatten, sample_stride

    draws, seed = int(cfg.profile.input_draws), int(cfg.run.seed)
    res = Result()
    try:
        plan, real = plan_sizes(code, draws, budget, only, pin_literals)
        if plan is None:
            return Result(status="over budget", constants=real.consts, predicted_ms=real.ms)
        res = Result(constants=plan.consts, scaled=plan is not real, predicted_ms=plan.ms)
        ns = load_module(code, "prescreen")
        ns.update(plan.consts)
        t0, hard_s = time.process_time(), HARD_FACTOR * budget.ms / 1e3
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            # the profile worker's seeds: weights from `seed`, draw k from seed + 1 + k
            torch.manual_seed(seed)
            model = ns["Model"](*ns["get_init_inputs"]())
            subs: list[Any] = []
            ref0, stride = None, 1
            for k in range(draws):
                torch.manual_seed(seed + 1 + k)
                flat = flatten(model(*ns["get_inputs"]()))
                if flat is None:
                    raise ValueError("forward returned no tensor")
                if ref0 is None:
                    ref0, stride = flat.clone(), sample_stride(flat.numel())
                    flat = ref0
                subs.append(flat[::stride])
                if time.process_time() - t0 > hard_s and k < draws - 1:
                    res.status = f"over budget (draw {k + 1} of {draws} past {hard_s:g} s)"
                    return res
        res.measurements = draw_checks(ref0, subs, float(cfg.filter.compile_tolerance))
        res.reason = decide(res.measurements, OUTPUT_CHECKS, cfg.filter)[1]
    except Exception as e:  # noqa: BLE001 - whatever the task does on the CPU is a result, not a verdict
        res.status = f"error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
    return res


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
