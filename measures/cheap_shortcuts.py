"""The shortcut checks in a few forwards per task: the measurements the cheap checks decide from.

- Fragility: the float64 reference and one input move on draw 0, the move `scale` times the real one
  (profile.shortcut_ulp_steps), so that one draw meets as many values within rounding of a step as the
  exhaustive check's draws do together. A smooth output answers such a move in proportion; where the scaled move
  flags the task, the real move is measured too, and a response in proportion to the move is a smooth output's.
  A task with a step operator (a comparison, rounding, argmax, sort...) that the scaled move passes runs the
  exhaustive check's draws too: a step that one value of one draw meets (a tie, a weight among the values under
  one weight draw) does not grow with the move.
- Skippable operators: every operator at reduced sizes (the batch cut, the weights unchanged), and at the real size
  only those whose reduced ratio is under a margin.
- Dead inputs: at the real size, as the exhaustive check (one forward per tensor input).
torch and stdlib only: the GPU worker runs it."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from measures.shortcuts import (
    FRAGILE_F64,
    FRAGILE_ULP,
    _ulp_move,
    batch_chunks,
    fragility,
    skippable_ops,
    ulp_finding,
)
from measures.tensor_checks import flatten, tolerance_ratio

BATCH = "batch_size"
BATCH_CUT = 16  # the reduced skip check's batch: the real one over this, at least 1
# operators whose output steps (is not continuous in their input), by the last part of the catalog's name
STEP_OPS = frozenset({
    "gt", "lt", "ge", "le", "eq", "ne", "greater", "less", "greater_equal", "less_equal", "isclose", "isin", "equal",
    "heaviside", "sign", "sgn", "signbit", "round", "floor", "ceil", "trunc", "fix", "frac", "remainder", "fmod",
    "floor_divide", "argmax", "argmin", "max", "min", "sort", "argsort", "msort", "topk", "kthvalue", "median",
    "nanmedian", "mode", "searchsorted", "bucketize", "threshold", "Threshold", "hardshrink", "Hardshrink",
    "logical_and", "logical_or", "logical_xor", "logical_not", "where", "masked_fill", "one_hot", "unique",
    "unique_consecutive", "nonzero", "count_nonzero", "histc", "histogram", "cummax", "cummin", "any", "all", "bool",
    "long", "int", "__gt__", "__lt__", "__ge__", "__le__", "__eq__", "__ne__", "__and__", "__or__", "__xor__",
    "__invert__", "__mod__", "__floordiv__", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"})


def has_step(ops: Sequence[str] | None) -> bool:
    """Whether a task's operators (the catalog's names: `torch.gt`, `Tensor.max`, `nn.Threshold`) hold a step.
    Unknown operators (None) count as holding one; a JSON list string (a published row's `ops`) is read."""
    if isinstance(ops, str):
        import json

        ops = json.loads(ops)
    return ops is None or any(str(o).rsplit(".", 1)[-1] in STEP_OPS for o in ops)


# a scaled move's flag gives way only where the output moved in proportion to the move, within this factor either
# way (the CPU pre-screen's scaled move uses it too): a smooth output's response is linear in so small a move (0.93
# to 1.05 times in proportion on v1 rows); a step met makes it grow far past proportion (24 and 330 times), one
# already crossed by the real move stays under it (0.14 and 0.53 times, both fragile at the real size)
PROPORTIONAL = 1.25


def scaled_verdict(f64: float | None, scaled: float, real: float | None, scale: int, ulp_steps: int,
                   band: float = PROPORTIONAL) -> tuple[str, float]:
    """The cheap fragility check's finding ("" none) and the ratio it names, from draw 0's float64 ratio, its ratio
    under the scaled move (ulp_steps * scale ulps) and, where that one is 1 or more, under the real move (ulp_steps).
    A response in proportion to the move is a smooth output's: the real move's verdict stands. Otherwise a step was
    met, and one of the draws the scaled move stands for would meet it."""
    if f64 is not None and f64 >= 1:
        return FRAGILE_F64, f64
    if scaled < 1:
        return "", scaled / scale
    if real is None:
        raise ValueError("a scaled move's flag needs the real move's ratio")
    if real >= 1:
        return ulp_finding(ulp_steps), real
    if 1 / band <= scaled / max(real * scale, 1e-300) <= band:
        return "", real
    return ulp_finding(ulp_steps * scale), scaled


def scaled_fragility(model: Any, draw: Callable[[int], tuple], tol: float, sub0: Any, stride: int, ulp_steps: int,
                     scale: int, band: float = PROPORTIONAL, f64_chunks: int = 1) -> dict[str, Any]:
    """The fragility check in two or three forwards on draw 0 (see the module doc), as the exhaustive check's
    columns; fragile_weights "scaled" says how it was measured. f64_chunks: see measures.shortcuts.fragility."""
    x0 = draw(0)  # drawn once: the float64 forward and both moves read the same inputs
    ref = fragility(model, lambda _k, x=x0: x, tol, draws=1, subs=[sub0], stride=stride, checks=(FRAGILE_F64,),
                    f64_chunks=f64_chunks)
    f64 = ref["fragile_f64_ratio"]
    scaled, real = 0.0, None
    if f64 is None or f64 < 1:
        scaled = moved_ratio(model, x0, sub0, stride, tol, ulp_steps * scale)
        if scaled >= 1:
            real = moved_ratio(model, x0, sub0, stride, tol, ulp_steps)
    del x0
    found, ratio = scaled_verdict(f64, scaled, real, scale, ulp_steps, band)
    return {"fragile": found, "fragile_ulp_ratio": ratio if found != FRAGILE_F64 else None,
            "fragile_f64_ratio": f64, "fragile_f64_error": ref["fragile_f64_error"], "fragile_ulp_steps": ulp_steps,
            "fragile_weights": "scaled",
            "fragile_scaled_ratio": scaled}


def reduced_batch(ns: dict[str, Any]) -> int | None:
    """The batch the reduced skip check uses, or None when the task has no batch constant to cut."""
    b = ns.get(BATCH)
    if type(b) is not int or b <= 1:
        return None
    return max(1, b // BATCH_CUT)


def _model_draw(ns: dict[str, Any], seed: int, dev: str, batch: int) -> tuple[Any, Callable[[int], tuple]]:
    """The model (weights seeded `seed`, as the profile worker's) and its seeded draws, with the module's batch
    constant set to `batch` while they are made."""
    real = ns[BATCH]

    def patched(fn: Callable[[], Any]) -> Any:
        ns[BATCH] = batch
        try:
            return fn()
        finally:
            ns[BATCH] = real

    def draw(k: int) -> tuple:
        torch.manual_seed(seed + 1 + k)
        with torch.device(dev):
            got = patched(lambda: ns["get_inputs"]())
        return tuple(t.to(dev) if isinstance(t, torch.Tensor) else t for t in got)

    torch.manual_seed(seed)
    with torch.device(dev):
        model = patched(lambda: ns["Model"](*ns["get_init_inputs"]())).to(dev)
    return model, draw


def reduced_op_ratios(ns: dict[str, Any], seed: int, tol: float, dev: str) -> dict[str, float] | None:
    """Every operator call's skip ratio at the reduced batch (skippable_ops, every call measured), or None when
    the task has no batch to cut or does not run at it."""
    batch = reduced_batch(ns)
    if batch is None:
        return None
    try:
        model, draw = _model_draw(ns, seed, dev, batch)
        ref = flatten(model(*draw(0)))
        if ref is None:
            return None
        return skippable_ops(model, draw, ref.clone(), tol, stop_first=False)["op_ratios"]
    except RuntimeError:  # a shape the task cannot take at that batch: the real size decides every call
        return None


def cheap_fragility(model: Any, draw: Callable[[int], tuple], tol: float, subs: Sequence[Any], stride: int,
                    ulp_steps: int, scale: int, steps: bool, draws: int,
                    model_for: Callable[[int], Any] | None = None, f64_chunks: int = 1) -> dict[str, Any]:
    """The cheap fragility check: scaled_fragility, and for a task with a step operator (`steps`) that it passes,
    the exhaustive check's `draws` draws with the real move (each after the first with its own weights)."""
    got = scaled_fragility(model, draw, tol, subs[0], stride, ulp_steps, scale, f64_chunks=f64_chunks)
    if got["fragile"] or not steps:
        return got
    full = fragility(model, draw, tol, draws, subs, stride, checks=(FRAGILE_ULP,), ulp_steps=ulp_steps,
                     model_for=model_for)
    got["fragile_weights"] = full["fragile_weights"]
    got["fragile_ulp_ratio"] = max(got["fragile_ulp_ratio"] or 0.0, full["fragile_ulp_ratio"] or 0.0)
    if full["fragile"]:
        got["fragile"] = full["fragile"]
        got["fragile_ulp_ratio"] = full["fragile_ulp_ratio"]
    return got


def moved_ratio(model: Any, x0: Sequence[Any], sub0: Any, stride: int, tol: float, steps: int) -> float:
    """Draw 0's output with every floating input moved `steps` ulps (each element up or down at random), as the
    verifier's ratio against its unmoved output."""
    return tolerance_ratio(flatten(model(*_ulp_move(x0, steps)))[::stride], sub0, tol)


def cheap_measure(model: Any, draw: Callable[[int], tuple], ref0: Any, sub0: Any, stride: int, tol: float, *,
                  ns: dict[str, Any], seed: int, dev: str, known_ratio: float | None = None,
                  moves: Sequence[int] = (16, 80), seconds: dict[str, float] | None = None,
                  sync: Callable[[], None] = lambda: None,
                  fresh_model: Callable[[int], Any] | None = None, f64_chunks: int = 4) -> dict[str, Any]:
    """What the cheap checks decide from, for benchmarks/shortcut_agreement.py: draw 0's float64 ratio, its
    ratios under each move in `moves`, and every operator's ratio at the reduced batch; `seconds` gets each part's.
    Where the rows are computed apart (batch_chunks at `f64_chunks`), draw 0's float64 ratio again with the batch in
    slices (`f64_sliced_ratio`); on CUDA each float64 forward's peak bytes over what was held before it."""
    secs = seconds if seconds is not None else {}

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        sync()
        t = time.perf_counter()
        out = fn()
        sync()
        secs[name] = time.perf_counter() - t
        return out

    got: dict[str, Any] = {}

    def peak_of(name: str, fn: Callable[[], Any]) -> Any:
        cuda = str(dev).startswith("cuda")
        if cuda:
            sync()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
        out = timed(name, fn)
        if cuda:
            got[f"{name}_peak_bytes"] = int(torch.cuda.max_memory_allocated() - before)
        return out

    f64 = peak_of("f64", lambda: fragility(model, lambda _k: draw(0), tol, draws=1, subs=[sub0], stride=stride,
                                           checks=(FRAGILE_F64,))["fragile_f64_ratio"])
    got["f64_ratio"] = f64
    chunks = batch_chunks(model, draw(0), ref0, tol, f64_chunks)
    got["f64_chunks"] = chunks
    if chunks > 1:
        got["f64_sliced_ratio"] = peak_of("f64_sliced", lambda: fragility(
            model, lambda _k: draw(0), tol, draws=1, subs=[sub0], stride=stride, checks=(FRAGILE_F64,),
            f64_chunks=chunks)["fragile_f64_ratio"])
    x0 = draw(0)
    for s in moves:
        got[f"move{s}"] = timed(f"move{s}", lambda s=s, x=x0: moved_ratio(model, x, sub0, stride, tol, s))
    del x0
    if fresh_model is not None:  # draw 1 with its own weights, the largest move: the weights' thresholds move too
        def fresh() -> float:
            mdl, x1 = fresh_model(1), draw(1)
            ref1 = flatten(mdl(*x1))[::stride]
            return moved_ratio(mdl, x1, ref1, stride, tol, max(moves))
        got[f"fresh1_move{max(moves)}"] = timed("fresh1", fresh)
    got["reduced_batch"] = reduced_batch(ns)
    got["reduced_op_ratios"] = timed("skip_reduced", lambda: reduced_op_ratios(ns, seed, tol, dev))
    got["fragile_checks"] = [FRAGILE_ULP, FRAGILE_F64]
    return got
