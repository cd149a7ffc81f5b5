"""Shortcut measurements: which inputs and operators of a task matter at the verifier's tolerance, and whether its
output survives an honest rounding change. torch and stdlib only (the GPU worker and the CPU pre-screen run it).

A shortcut is a part of the work a kernel may leave out and still pass the verifier (allclose at atol = rtol =
tol). Three kinds are measured, each against the eager output of draw 0 (`ref0`, already computed by the caller):
- dead input: one tensor input redrawn alone (the others kept) leaves the output within tolerance;
- skippable operator: one operator call's output replaced by a constant known in advance (its mean on another
  draw) or skipped (returning its first tensor argument of the output's shape and dtype) leaves the output
  within tolerance. An operator is a call made by the model's own forward: a torch function, a tensor method or
  a submodule; calls inside a submodule (BatchNorm's running-statistics `add_`, say) belong to that submodule.
  A replacement that leaves the operator's output bit-identical (a reshape skipped, ones replaced by 1) tests
  nothing and is not a finding;
- fragile: on `draws` seeded draws, the output moves beyond tolerance when every floating input moves by one
  ulp, or when the reference is recomputed in float64. Each draw may bring its own weights (`model_for`), as the
  verifier's draws do: a threshold weight (`le(softmax(x), w)`) can sit far from every value under one draw of
  the weights and among them under the next.
Ratios are the verifier's: max |changed - ref| / (tol + tol * |ref|); < 1 means the change passes. The functions
return measurements only (names, ratios); filters/shortcut_checks.py decides with the config's thresholds.
Each kind stops at its first finding unless `stop_first` is off: a task with one shortcut is out already.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from measures.tensor_checks import flatten, out_of_memory, tensors, tolerance_ratio

KINDS = ("dead", "skip", "fragile")
FRAGILE_ULP = "one-ulp input move"  # the ulp check's name; a finding names its move (ulp_finding)
FRAGILE_F64 = "float64 reference"
# calls that move or relabel values and compute nothing: skipping one is no shortcut a kernel could take
GLUE = frozenset({
    "__getitem__", "__setitem__", "__get__", "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten",
    "contiguous", "clone", "permute", "transpose", "t", "squeeze", "unsqueeze", "expand", "expand_as", "to",
    "float", "double", "half", "bfloat16", "type", "type_as", "detach", "size", "dim", "numel", "chunk", "split",
    "unbind", "narrow", "movedim", "moveaxis", "swapaxes", "swapdims", "__len__", "__bool__", "item", "tolist",
    "requires_grad_", "cpu", "cuda", "__format__", "__repr__", "stride", "data_ptr", "element_size",
})
Draw = Callable[[int], Sequence[Any]]
ModelFor = Callable[[int], Any]


def input_names(model: Any, n: int) -> list[str]:
    """Names of forward's first n positional parameters (`input<i>` past them or for *args)."""
    names: list[str] = []
    try:
        for p in inspect.signature(model.forward).parameters.values():
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                names.append(p.name)
    except (TypeError, ValueError):
        pass
    return [names[i] if i < len(names) else f"input{i}" for i in range(n)]


def _ratio(out: Any, ref: Any, tol: float) -> float:
    """The verifier's ratio of a forward's output against the flat reference (inf for another shape)."""
    flat = flatten(out)
    return math.inf if flat is None else tolerance_ratio(flat, ref, tol)


def dead_inputs(model: Any, draw: Draw, ref0: Any, tol: float, stop_first: bool = True,
                known_ratio: float | None = None, given: dict[str, float] | None = None) -> dict[str, Any]:
    """Redraw each tensor input alone (from draw 1, the rest from draw 0) and measure the output's move.
    known_ratio: the caller's ratio of draw 1 against draw 0 when the task has one tensor input (then redrawing
    it alone is redrawing all: no forward is spent). given: ratios known from elsewhere (the pre-screen's, for
    inputs far from tolerance), taken as they are: those inputs spend no forward."""
    x0 = list(draw(0))
    names = input_names(model, len(x0))
    slots = [i for i, t in enumerate(x0) if isinstance(t, torch.Tensor)]
    ratios: dict[str, float] = {}
    screened: list[str] = []
    for i in slots:
        if len(slots) == 1 and known_ratio is not None:
            ratios[names[i]] = known_ratio
            break
        if given and names[i] in given:
            ratios[names[i]] = given[names[i]]
            screened.append(names[i])
            continue
        fresh = draw(1)[i]  # the other tensors of that draw go at once: one extra input in memory, not a set
        if fresh.shape == x0[i].shape and torch.equal(fresh, x0[i]):
            continue  # a constant input: every draw holds the same values, so there is nothing to redraw
        x = list(x0)
        x[i] = fresh
        ratios[names[i]] = _ratio(model(*x), ref0, tol)
        del x, fresh
        if stop_first and ratios[names[i]] < 1:
            break
    return {"input_redraw_ratios": ratios, "screened": screened, "dead_inputs": [n for n, r in ratios.items() if r < 1],
            "inputs_that_matter": [n for n, r in ratios.items() if r >= 1]}


def _short(func: Any) -> str:
    return getattr(func, "__name__", None) or str(func)


def _qualname(func: Any) -> str:
    name = _short(func)
    mod = getattr(func, "__module__", None) or ""
    if mod == "torch.nn.functional":
        return f"F.{name}"
    if mod.startswith("torch") and not getattr(func, "__self__", None) and "Tensor" not in getattr(
            func, "__qualname__", ""):
        return f"torch.{name}"
    return f"Tensor.{name}"


class OperatorCalls(TorchFunctionMode):
    """Numbers the operator calls of one forward of `root` (see the module doc) and, for call `target`, returns
    `how(call_index, output, args)` in place of its output. Records (name, output numel, a skip candidate exists)
    per call, and each floating output's mean when `record_means`."""

    def __init__(self, root: Any, target: int | None = None,
                 how: Callable[[int, Any, tuple], Any] | None = None, record_means: bool = False) -> None:
        super().__init__()
        self.root, self.target, self.how, self.record_means = root, target, how, record_means
        self.calls: list[str] = []
        self.means: list[float | None] = []
        self.skip_ok: list[bool] = []
        self.depth = 0
        self._busy = False  # inside _visit: its own torch calls (mean, full_like) are not the model's
        self._handles: list[Any] = []

    def __enter__(self) -> OperatorCalls:
        from torch.nn.modules import module as nn_module

        def pre(mod: Any, args: tuple) -> None:
            if mod is not self.root:
                self.depth += 1

        def post(mod: Any, args: tuple, out: Any) -> Any:
            if mod is self.root:
                return None
            self.depth -= 1
            if self.depth == 0 and isinstance(out, torch.Tensor):
                return self._visit(f"nn.{type(mod).__name__}", args, out)
            return None

        self._handles = [nn_module.register_module_forward_pre_hook(pre),
                         nn_module.register_module_forward_hook(post)]
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        for h in self._handles:
            h.remove()
        return super().__exit__(*exc)

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = _short(func)
        if (self._busy or self.depth or name in GLUE or not isinstance(out, torch.Tensor) or not tensors(list(args))
                or (name.endswith("_") and not name.endswith("__")) or name.startswith("__i")):
            return out  # in-place calls return what they changed: replacing the result would not undo them
        return self._visit(_qualname(func), args, out)

    def _visit(self, name: str, args: tuple, out: Any) -> Any:
        self._busy = True
        try:
            return self._record(name, args, out)
        finally:
            self._busy = False

    def _record(self, name: str, args: tuple, out: Any) -> Any:
        i = len(self.calls)
        self.calls.append(f"{i}:{name}")
        self.skip_ok.append(_skip_source(args, out) is not None)
        if self.record_means:
            self.means.append(float(out.mean(dtype=torch.float64)) if out.is_floating_point() and out.numel() else None)
        if i == self.target and self.how is not None:
            return self.how(i, out, args)
        return out


def _skip_source(args: tuple, out: Any) -> Any:
    """The first tensor argument a skipped call would pass on: same shape and dtype as its output."""
    for a in tensors(list(args)):
        if a.shape == out.shape and a.dtype == out.dtype:
            return a
    return None


def skippable_ops(model: Any, draw: Draw, ref0: Any, tol: float, stop_first: bool = True,
                  given: dict[str, float] | None = None, recorded: OperatorCalls | None = None) -> dict[str, Any]:
    """Replace each operator call's output by its mean on draw 1 and, where a tensor argument has its shape,
    skip it; measure on draw 0 against ref0. One recording forward plus at most two per call. given: ratios
    known from elsewhere (the pre-screen's) for calls far from tolerance, taken as they are (no forwards); they
    apply only when every call they name (index:name) is one this forward records, else every call is measured.
    recorded: the caller's OperatorCalls(model, record_means=True) of a forward of draw 1 it ran anyway (the
    pre-screen's draw-1 forward), in place of the recording forward."""
    rec = recorded
    if rec is None:
        # draws are made outside the recording: a draw's own torch calls (the pre-screen's planted zeros) would
        # otherwise be numbered as operators and shift every index against the measuring forwards
        x1 = draw(1)
        with OperatorCalls(model, record_means=True) as rec:
            model(*x1)
        del x1
    ops, means, skip_ok = rec.calls, rec.means, rec.skip_ok
    x0 = draw(0)
    ratios: dict[str, float] = {}
    by: dict[str, str] = {}
    noop = [True]

    def run(i: int, how: Callable[[int, Any, tuple], Any]) -> float | None:
        noop[0] = True  # until `how` replaces call i: a forward that never reaches it changed nothing
        with OperatorCalls(model, target=i, how=how):
            out = model(*x0)
        return None if noop[0] else _ratio(out, ref0, tol)

    def skipped(i: int, out: Any, args: tuple) -> Any:
        src = _skip_source(args, out)
        noop[0] = src is None or torch.equal(src, out)
        return out if noop[0] else src

    def constant(i: int, out: Any, args: tuple) -> Any:
        c = torch.full_like(out, means[i])
        noop[0] = torch.equal(c, out)
        return out if noop[0] else c

    if given and set(given) - set(ops):
        given = None  # the pre-screen numbered other calls (a shape-dependent branch): measure every call
    for i, op in enumerate(ops):
        if given and op in given:
            ratios[op], by[op] = given[op], "screen"
            continue
        tried = []
        if skip_ok[i]:
            tried.append(("skipped", run(i, skipped)))
        if means[i] is not None and math.isfinite(means[i]):
            tried.append(("mean", run(i, constant)))
        tried = [(how, r) for how, r in tried if r is not None]
        if not tried:
            continue  # no change either way could make: nothing measured for this call
        how, r = min(tried, key=lambda t: t[1])
        ratios[op], by[op] = r, how
        if stop_first and r < 1:
            break
    return {"op_ratios": ratios, "screened": [o for o, how in by.items() if how == "screen"], "skippable_ops": [o for o, r in ratios.items() if r < 1],
            "skippable_by": [by[o] for o, r in ratios.items() if r < 1],
            "ops_that_matter": [o for o, r in ratios.items() if r >= 1], "ops_seen": ops}


ULP_SIGN_SEED = 0  # the moves' directions: the same on every run on one kind of device


def _ulp_move(x: Sequence[Any], steps: int = 1) -> tuple:
    """Every floating tensor with each element moved `steps` of its upward ulp, up or down at random. Rounding
    a correct kernel does differently has both signs: a sum over N moved elements then moves as rounding noise
    does, about sqrt(N) of them, where moving all one way would add N and flag a long reduction into a threshold
    that no reordering of the sum could flip. The directions come from a fixed seed (the device's own generator:
    a CPU and a GPU draw different directions, as they draw different inputs); one stream per call, so two inputs
    of one shape move independently, as their rounding does. Infinities and the largest finite values stay where
    they are. Two tensors of the input's size at a time: the inputs are the real ones."""
    gens: dict[torch.device, torch.Generator] = {}

    def move(t: torch.Tensor) -> torch.Tensor:
        g = gens.get(t.device) or gens.setdefault(t.device, torch.Generator(device=t.device).manual_seed(ULP_SIGN_SEED))
        d = torch.nextafter(t, torch.tensor(math.inf, dtype=t.dtype, device=t.device))
        d.sub_(t).nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)  # each element's upward ulp
        if t.device.type == "cpu":  # random bytes: a third of bernoulli_'s CPU time (the pre-screen moves often)
            sign = torch.randint(0, 2, t.shape, generator=g, dtype=torch.int8).to(t.dtype).mul_(-2).add_(1)
        else:  # the GPU's stream as the agreement baseline drew it
            sign = torch.empty_like(t).bernoulli_(0.5, generator=g).mul_(-2).add_(1)  # -1 or +1
        d.mul_(sign)
        del sign
        if steps != 1:
            d.mul_(steps)
        return d.add_(t)
    return tuple(move(t) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in x)


def _cast_model(model: Any, dtypes: dict[int, torch.dtype] | None) -> dict[int, torch.dtype]:
    """Floating parameters and buffers to float64 (dtypes None; their dtypes are returned) or back to `dtypes`.
    In place: float32 -> float64 -> float32 is exact, so no copy of the weights is held."""
    saved: dict[int, torch.dtype] = {}
    for t in [*model.parameters(), *model.buffers()]:
        if not t.is_floating_point():
            continue
        if dtypes is None:
            saved[id(t)] = t.dtype
            t.data = t.data.double()
        elif id(t) in dtypes:
            t.data = t.data.to(dtypes[id(t)])
    return saved


def ulp_finding(steps: int) -> str:
    """The ulp check's finding as a row and a drop reason name it: the move it made."""
    return FRAGILE_ULP if steps == 1 else f"{steps}-ulp input move"


def _one_line(e: BaseException) -> str:
    """An error as one line of at most 200 characters: its type and its message's first line."""
    first = next((line for line in str(e).splitlines() if line.strip()), "")
    return f"{type(e).__name__}: {first.strip()}"[:200]


# the float32 forward of a batch's first rows against the whole batch's first output rows, as the verifier's ratio:
# at most this, and the rows are computed apart from each other. A GEMM picking another algorithm for fewer rows
# differs by rounding (about 1e-5); a batch norm's statistics over fewer rows, by far more.
BATCH_SPLIT_RATIO = 1e-3


def _batch_rows(x: Sequence[Any]) -> int | None:
    """The batch every tensor input leads with (their common first dimension), or None when they share none."""
    firsts = {t.shape[0] if t.dim() else None for t in x if isinstance(t, torch.Tensor)}
    return firsts.pop() if len(firsts) == 1 and None not in firsts else None


def batch_chunks(model: Any, x: Sequence[Any], out: Any, tol: float, chunks: int) -> int:
    """How many slices of the batch a float64 forward may run in: `chunks` when every tensor input leads with the
    same batch of at least `chunks` rows and the forward of the first slice's rows gives the whole output's first
    rows (flat `out`, within BATCH_SPLIT_RATIO), else 1. Each row's output then depends on its own inputs alone, and
    the float64 reference of the slices is the whole batch's, in 1/chunks of the memory."""
    rows = _batch_rows(x)
    if chunks <= 1 or rows is None or rows < chunks:
        return 1
    first = -(-rows // chunks)
    try:
        part = flatten(model(*(t[:first] if isinstance(t, torch.Tensor) else t for t in x)))
    except RuntimeError as e:  # a forward that takes only the whole batch (a view on the module's batch constant)
        if out_of_memory(e):
            raise
        return 1
    if part is None or out.numel() % rows or part.numel() != first * (out.numel() // rows):
        return 1
    return chunks if tolerance_ratio(part, out[:part.numel()], tol) <= BATCH_SPLIT_RATIO else 1


def _float64_sample(model: Any, x: Sequence[Any], stride: int, chunks: int) -> Any:
    """The flat float64 output's even `stride` sample (the model already cast), the batch run in `chunks` slices
    (batch_chunks said they may be), each slice's inputs cast alone."""
    rows = _batch_rows(x) if chunks > 1 else None
    if rows is None:
        x64 = tuple(t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in x)
        return flatten(model(*x64))[::stride]
    step, parts, start = -(-rows // chunks), [], 0  # start: the flat index the slice's output begins at
    for r in range(0, rows, step):
        xs = tuple((t[r:r + step].double() if t.is_floating_point() else t[r:r + step])
                   if isinstance(t, torch.Tensor) else t for t in x)
        out = flatten(model(*xs))
        del xs
        first = -start % stride  # the slice's first sampled element
        parts.append(out[first::stride].clone())
        start += out.numel()
        del out
    return torch.cat(parts)


def fragility(model: Any, draw: Draw, tol: float, draws: int = 5, subs: Sequence[Any] | None = None,
              stride: int = 1, stop_first: bool = True, checks: Sequence[str] = (FRAGILE_ULP, FRAGILE_F64),
              ulp_steps: int = 1, model_for: ModelFor | None = None, f64_draws: int | None = None,
              f64_chunks: int = 1) -> dict[str, Any]:
    """On draws 0..draws-1: the eager output (subs[k], an even `stride` sample, when the caller has it) against
    the output with every floating input moved ulp_steps ulps (each element up or down, see _ulp_move), and
    against the float64 reference. A screen at 1/n of the real element count moves n times as far: it sees as many
    values within n ulps of a step as the real size has within one (operators/prescreen.py).
    model_for(k): draw k's own model (fresh weights) for k >= 1; draw 0 keeps `model`. The caller's subs were
    computed with `model`, so a draw with its own model computes its eager output again (one forward more).
    f64_draws: the float64 reference only on the first this many draws (None: every draw); it is the dearest
    forward, and what it finds (float32 accumulation far from the exact value) belongs to the computation more
    than to one draw's values. f64_chunks: draw 0's float64 forward (with `model`) runs in that many slices of the
    batch (the caller found with batch_chunks that it may)."""
    worst: dict[str, float | None] = {c: 0.0 for c in checks}
    f64_error = None
    found = ""
    for k in range(draws):
        x = draw(k)
        own = model_for(k) if model_for is not None and k > 0 else None
        mdl = model if own is None else own
        if own is None and subs is not None and k < len(subs):
            ref = subs[k]
        else:
            ref = flatten(mdl(*x))[::stride]
            del x
            x = draw(k)  # the same values again: a forward may change its inputs in place
        if FRAGILE_ULP in worst:
            worst[FRAGILE_ULP] = max(worst[FRAGILE_ULP], tolerance_ratio(
                flatten(mdl(*_ulp_move(x, ulp_steps)))[::stride], ref, tol))
        if FRAGILE_F64 in worst and worst[FRAGILE_F64] is not None and (f64_draws is None or k < f64_draws):
            saved = _cast_model(mdl, None)
            try:
                out64 = _float64_sample(mdl, x, stride, f64_chunks if k == 0 and own is None else 1)
            except RuntimeError as e:  # a float32 tensor the forward makes itself meets float64: no float64 reference
                if out_of_memory(e):  # want of memory is the harness's to resolve (a larger reservation), no verdict
                    raise
                out64, f64_error = None, _one_line(e)
            finally:
                _cast_model(mdl, saved)
            if out64 is None or out64.shape != ref.shape:
                worst[FRAGILE_F64] = None
                if out64 is not None:
                    f64_error = f"float64 output sample of shape {tuple(out64.shape)} against {tuple(ref.shape)}"
            else:
                # the float32 reference as a candidate against the float64 truth: what an exact kernel would see
                worst[FRAGILE_F64] = max(worst[FRAGILE_F64], tolerance_ratio(ref.double(), out64, tol))
            del out64
        del x, own, mdl
        found = next((c for c in checks if worst[c] is not None and worst[c] >= 1), "")
        if stop_first and found:
            break
    return {"fragile": ulp_finding(ulp_steps) if found == FRAGILE_ULP else found,
            "fragile_ulp_ratio": worst.get(FRAGILE_ULP), "fragile_f64_ratio": worst.get(FRAGILE_F64),
            "fragile_f64_error": f64_error,
            "fragile_ulp_steps": ulp_steps if FRAGILE_ULP in worst else None,
            "fragile_weights": "fresh" if model_for is not None and draws > 1 else "one"}


def _ratio_map(ratios: dict[str, float]) -> str:
    """{input or operator: ratio} as JSON (a ratio past 1e300, another shape's inf included, as 1e300): how far
    each part is from mattering, so a later check can judge how close a part came."""
    import json

    return json.dumps({k: (v if math.isfinite(v) else 1e300) for k, v in ratios.items()})


def screened_far(ratio_map: str | None, margin: float) -> dict[str, float]:
    """The parts of a pre-screen ratio map (input_ratios / op_ratios JSON) at or over `margin`: those a check
    takes from the screen instead of measuring again."""
    import json

    if not ratio_map or margin <= 0:
        return {}
    return {k: v for k, v in json.loads(ratio_map).items() if v >= margin}


def measure(model: Any, draw: Draw, ref0: Any, tol: float, kinds: Sequence[str] = KINDS, draws: int = 5,
            subs: Sequence[Any] | None = None, stride: int = 1, stop_first: bool = True,
            known_ratio: float | None = None, ulp_steps: int = 1, given_inputs: dict[str, float] | None = None,
            given_ops: dict[str, float] | None = None, model_for: ModelFor | None = None,
            f64_draws: int | None = None, recorded: OperatorCalls | None = None, f64_chunks: int = 1) -> dict[str, Any]:
    """Every kind asked for, as measurement columns (see pipeline/rundir/schema.py SHORTCUTS); `shortcut_checks`
    names the kinds that ran. ref0: draw 0's flat eager output; subs: the caller's even samples of draws'
    outputs (subs[0] of ref0), reused by the fragility check. given_inputs / given_ops: ratios taken from the
    pre-screen (`screened_far`), not measured; `shortcut_screened` lists the ones used. model_for: the
    fragility check's fresh weights per draw (see `fragility`); recorded: the skip check's recording of draw 1, when
    the caller has one (see `skippable_ops`)."""
    m: dict[str, Any] = {"shortcut_checks": ",".join(k for k in KINDS if k in kinds)}
    screened: list[str] = []
    if "dead" in kinds:
        d = dead_inputs(model, draw, ref0, tol, stop_first, known_ratio, given_inputs)
        screened += d.pop("screened")
        ratios = d.pop("input_redraw_ratios")
        m.update(d, min_input_redraw_ratio=min(ratios.values(), default=None), input_ratios=_ratio_map(ratios))
    if "skip" in kinds:
        s = skippable_ops(model, draw, ref0, tol, stop_first, given_ops, recorded)
        screened += s.pop("screened")
        ratios = s.pop("op_ratios")
        s.pop("ops_seen")
        m.update(s, min_op_ratio=min(ratios.values(), default=None), op_ratios=_ratio_map(ratios))
    if "fragile" in kinds:
        m.update(fragility(model, draw, tol, draws, subs, stride, stop_first, ulp_steps=ulp_steps,
                           model_for=model_for, f64_draws=f64_draws, f64_chunks=f64_chunks))
    if given_inputs is not None or given_ops is not None:
        m["shortcut_screened"] = screened
    return m
