"""Fit the GPU calibration (operators/calibration.json) from a profiled run directory.

    python -m pinning.calibrate --run DIR [--out operators/calibration.json]

Every task of the run is traced again on meta at its sizes: its kernels with their roofline times (CostMode, no
calibration) and every ATen call with the bytes live after it (a LiveBytes recorder over the rendered code,
which frees as eager frees). Against the measurements (eager_ms, peak_memory_bytes) three things are fitted,
each only where the data shows it and each entry naming the tasks that show it:

- runtime: the typical measured/roofline ratio is the median over all timed tasks; an ATen op's factor is the
  median, over the tasks where its kernels carry at least RUNTIME_SHARE of the predicted time, of what it must
  cost for the task's measured time (the rest priced at their own factors), over that typical ratio (so a
  calibrated op lands where every other op lands). Backfitted a few rounds, since two slow ops can share a
  task; kept only at >= RUNTIME_SLOW or <= RUNTIME_FAST.
- peak workspace: a task whose measured peak is over PEAK_OVER times the model's is unexplained; each ATen op
  in it implies the input multiple it would have to hold for the task to peak where it did. An op's multiple
  may not exceed what any task holding it implies (that task would have peaked higher). Greedily, the op that
  explains the most unexplained tasks gets the smallest multiple that explains them all; until none is left.
- output share: the largest output, as a share of the sampler's peak cap, of a task that ran through the
  profile worker; pinned only if an eager out-of-memory task had a larger one.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from operators.calibration import CALIBRATION_FILE

RUNTIME_SHARES = (0.5, 0.3)
RUNTIME_SLOW = 3.0
RUNTIME_FAST = 0.34  # measured at half the roofline or less (typical ratio ~1.5)
RUNTIME_SHARE_BOUND = 0.1
PEAK_OVER = 1.2  # the sampler's headroom (0.75) absorbs up to 1.33; an op is calibrated below that
PEAK_TOL = 0.02  # a multiple explains a task if it reproduces its measured peak within this share

# why a fitted entry is plausible (the fit decides whether it is there; this only says what the data points to)
NOTES = {
    "aten._euclidean_dist": "cdist (p=2, matmul path) builds padded copies of both inputs on CUDA: the four cdist "
                            "tasks peaked at exactly twice their inputs",
    "aten.logical_not_": "nanmean/nanquantile sum a bool mask: the CUDA sum of a bool tensor holds an int64 copy "
                         "(8 bytes per mask byte); the meta trace shows the mask's logical_not_ just before it",
    "aten.count_nonzero": "the CUDA count_nonzero sums its bool input through an int64 copy (8 bytes per element)",
    "aten.binary_cross_entropy_with_logits": "ATen's composite BCE-with-logits holds a full-size temporary",
    "aten.sort": "CUB segmented sort: far slower than its bytes when sorting many short or few long rows",
    "aten.kthvalue": "CUDA kthvalue sorts each row (a radix select per slice), two orders off the roofline",
    "aten.topk": "CUDA topk with a large k falls back to a sort per slice",
    "aten.median": "CUDA median sorts each slice",
    "aten.adaptive_max_pool3d": "one thread per output over a variable window, no vectorised reads",
    "aten.adaptive_max_pool2d": "one thread per output over a variable window, no vectorised reads",
    "aten._adaptive_avg_pool3d": "one thread per output over a variable window, no vectorised reads",
    "aten._adaptive_avg_pool2d": "one thread per output over a variable window, no vectorised reads",
    "aten.grid_sampler_2d": "reads four input pixels per output point, not the whole input the roofline charges",
    "aten.index_select": "reads the selected rows only, not the whole input the roofline charges",
    "aten.embedding": "a gather of rows with int64 indices: uncoalesced reads",
}


@dataclass
class Call:
    name: str
    live: int       # bytes live after the call (its outputs included), beyond weights and inputs
    in_bytes: int
    out_bytes: int


@dataclass
class TaskEvidence:
    task_id: str
    ops: list[str]
    predicted_ms: float
    predicted_peak: int
    eager_ms: float | None
    peak: int | None          # measured peak of one forward
    status: str
    error: str
    kernels: list[tuple[str, float]] = field(default_factory=list)  # (ATen op, roofline ms without launch)
    launch_ms: float = 0.0
    resident: int = 0         # weights + inputs
    draw_peak: int = 0        # weights + get_inputs' own peak
    calls: list[Call] = field(default_factory=list)
    out_bytes: int = 0
    records: list[tuple[str, int, int]] = field(default_factory=list)  # CostMode's (op, input bytes, output bytes)


def _calls_recorder():
    from operators.peak import LiveBytes

    class Recorder(LiveBytes):
        """LiveBytes that also keeps each call's name, live bytes after it and its input and output bytes."""

        def __init__(self) -> None:
            super().__init__(workspaces=False)
            self.calls: list[Call] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            from operators.peak import _tensors

            before = self.live
            out = super().__torch_dispatch__(func, types, args, kwargs)
            name = str(func.overloadpacket).replace("::", ".")
            name = name if name.startswith("aten.") else f"aten.{name}"
            in_bytes = sum(t.nbytes for t in _tensors((args, kwargs or {})))  # as workspace_bytes counts them
            self.calls.append(Call(name, self.live, in_bytes, max(0, self.live - before)))
            return out

    return Recorder()


def trace_task(task: dict, cfg) -> tuple:
    """(kernels, launch ms, resident bytes, draw peak bytes, calls, output bytes, records) of a sampled task on
    meta: `records` are what the sampler's peak prediction reads (CostMode, views left out)."""
    import torch

    from operators.cost import CostMode, kernels
    from operators.graph import execute
    from operators.peak import draw_peak
    from operators.render import as_graph
    from operators.trace import load_module

    g = as_graph(task["graph"])
    mode = CostMode()
    out, _ = execute(g, g.graph["constants"], mode)
    ks = []
    for flops, act, fixed, _f in kernels(mode.records, calibrated=False):
        ks.append((flops / (cfg.tflops_fp32 * 1e12), (act + fixed) / (cfg.bandwidth_gbps * 1e9)))
    names = [r.name for r in mode.records if not r.view]
    kern = [(n, max(c, b) * 1e3) for n, (c, b) in zip(names, ks, strict=True)]
    launch = len(kern) * cfg.launch_overhead_us * 1e-3
    ns = load_module(task["code"])
    draws = [n["draw"] for n in json.loads(task["graph"])["nodes"] if n["kind"] == "input"]
    with warnings.catch_warnings(), torch.device("meta"), torch.no_grad():
        warnings.simplefilter("ignore")
        model = ns["Model"](*ns["get_init_inputs"]())
        x = ns["get_inputs"]()
        fixed = sum(t.nbytes for t in [*model.parameters(), *model.buffers()])
        rec = _calls_recorder()
        with rec:
            model(*x)
    resident = fixed + sum(t.nbytes for t in x)
    drawn = fixed + draw_peak([(d, t.numel(), t.element_size()) for d, t in zip(draws, x, strict=True)])
    records = [(r.name, r.act_bytes - r.out_bytes + r.fixed_bytes, r.out_bytes) for r in mode.records if not r.view]
    return kern, launch, resident, drawn, rec.calls, out.nbytes, records


def load_evidence(run_dir: str | Path) -> tuple[list[TaskEvidence], Any]:
    """Every task of a profiled run with its measurement and its meta trace; and the run's sample config."""
    from opsynth.errors import OpsynthError
    from pipeline.rundir.store import RunDir

    rd = RunDir(run_dir)
    if not rd.config_path.exists():
        raise OpsynthError(f"{run_dir} is not a run directory (no config.toml); pass the folder `opsynth run` wrote")
    cfg = rd.load_config().sample
    meas = {m["task_id"]: m for m in rd.read_rows("measurements")}
    if not meas:
        raise OpsynthError(f"{run_dir} has no measurements; run `opsynth profile {run_dir}` on a GPU first")
    out = []
    for t in rd.read_rows("tasks", ["task_id", "ops", "graph", "code", "predicted_ms", "predicted_peak_bytes"]):
        m = meas.get(t["task_id"])
        if m is None or m["status"] == "skipped":
            continue
        ev = TaskEvidence(t["task_id"], list(t["ops"]), t["predicted_ms"], t["predicted_peak_bytes"],
                          m["eager_ms"], m["peak_memory_bytes"], m["status"], m["error"] or "")
        ev.kernels, ev.launch_ms, ev.resident, ev.draw_peak, ev.calls, ev.out_bytes, ev.records = trace_task(t, cfg)
        out.append(ev)
    return out, cfg


# ---- runtime -------------------------------------------------------------------------------------------------

def _timed(tasks: list[TaskEvidence]) -> list[TaskEvidence]:
    return [t for t in tasks if t.eager_ms and t.kernels]


def model_ms(t: TaskEvidence, factors: dict[str, float]) -> float:
    return sum(ms * factors.get(n, 1.0) for n, ms in t.kernels) + t.launch_ms


def typical_ratio(tasks: list[TaskEvidence]) -> float:
    return statistics.median(t.eager_ms / model_ms(t, {}) for t in _timed(tasks))


def op_ms(t: TaskEvidence, name: str) -> float:
    return sum(ms for n, ms in t.kernels if n == name)


def implied_factor(t: TaskEvidence, name: str, factors: dict[str, float], typical: float) -> float:
    """What `name` must cost (over its roofline, over the typical ratio) for `t` to take its measured time."""
    own = op_ms(t, name)
    rest = model_ms(t, factors) - own * factors.get(name, 1.0)
    return max(0.01, (t.eager_ms / typical - rest) / own)


def share(t: TaskEvidence, name: str, factors: dict[str, float]) -> float:
    return op_ms(t, name) * factors.get(name, 1.0) / model_ms(t, factors)


def fit_runtime(tasks: list[TaskEvidence]) -> tuple[dict[str, dict], float]:
    timed = _timed(tasks)
    typical = typical_ratio(tasks)
    names = sorted({n for t in timed for n, ms in t.kernels if ms > 0})
    factors: dict[str, float] = {}
    evidence: dict[str, list[TaskEvidence]] = {}
    for min_share in RUNTIME_SHARES:  # ops that dominate tasks first; then, with those priced, the rest
        found = {}
        for name in names:
            if name in factors:
                continue
            ev = [t for t in timed if op_ms(t, name) > 0 and share(t, name, factors) >= min_share]
            if not ev:
                continue
            f = statistics.median(implied_factor(t, name, factors, typical) for t in ev)
            # faster than the roofline is a byte count the model gets wrong (a gather reads a few rows): only
            # from tasks the op dominates
            fast = f <= RUNTIME_FAST and min_share == RUNTIME_SHARES[0]
            # slower: no task holding the op may show it at the typical ratio or under (a pointwise op beside a
            # slow one is not slow)
            others = [implied_factor(t, name, factors, typical) for t in timed
                      if op_ms(t, name) > 0 and share(t, name, factors) >= RUNTIME_SHARE_BOUND]
            slow = f >= RUNTIME_SLOW and min(others) > 1.0
            if fast or slow:
                found[name] = (float(f"{f:.2g}"), ev)
        for name, (f, ev) in found.items():
            factors[name], evidence[name] = f, ev
    out = {}
    for name in sorted(factors):
        ev = evidence[name]
        rest = {k: v for k, v in factors.items() if k != name}
        imp = [implied_factor(t, name, rest, typical) for t in ev]
        f = statistics.median(imp)
        if RUNTIME_FAST < f < RUNTIME_SLOW:  # with every other factor in place, its tasks are explained
            continue
        out[name] = {"factor": factors[name], "why": NOTES.get(name, ""), "tasks": sorted(t.task_id for t in ev),
                     "implied_min": round(min(imp), 3), "implied_max": round(max(imp), 3),
                     "catalog_ops": sorted({o for t in ev for o in t.ops})}
    return out, typical


# ---- peak ----------------------------------------------------------------------------------------------------

def model_peak(t: TaskEvidence, table: dict[str, tuple[float, float]]) -> int:
    """The task's forward peak from its recorded calls with workspace `table` (as LiveBytes with workspaces):
    what eager holds, the measured side's model."""
    top = 0
    for c in t.calls:
        w = table.get(c.name)
        top = max(top, c.live + (int(w[0] * c.in_bytes + w[1] * c.out_bytes) if w else 0))
    return max(t.resident + top, t.draw_peak)


def sampler_peak(t: TaskEvidence, table: dict[str, tuple[float, float]]) -> int:
    """operators.peak.activation_peak over CostMode's records with workspace `table`, beside the weights: what
    the sampler predicts (it holds every output, in-place results too, so it is at or above `model_peak`)."""
    held = top = t.resident  # weights + inputs
    for name, in_b, out_b in t.records:
        held += out_b
        w = table.get(name)
        if w:
            top = max(top, held + int(w[0] * in_b + w[1] * out_b))
    return max(top, held, t.draw_peak)


def implied_in_multiple(t: TaskEvidence, name: str, base_out: float) -> float | None:
    """The input multiple `name` would have to hold for `t` to peak at its measured peak (the smallest over its
    calls: one call reaching it suffices, and none may go beyond it)."""
    ws = [(t.peak - t.resident - c.live - base_out * c.out_bytes) / c.in_bytes
          for c in t.calls if c.name == name and c.in_bytes > 0]
    return min(ws) if ws else None


def fit_peak(tasks: list[TaskEvidence]) -> dict[str, dict]:
    from operators.peak import WORKSPACE

    peaked = [t for t in tasks if t.peak and t.calls]
    table = dict(WORKSPACE)
    fitted: dict[str, dict] = {}
    while True:
        # unexplained: measured beyond what the sampler's headroom absorbs
        todo = [t for t in peaked if t.peak > PEAK_OVER * sampler_peak(t, table)]
        best = None
        # candidates: ops the sampler's trace prices (eager's own calls may add bookkeeping ops it never sees)
        for name in sorted({r[0] for t in todo for r in t.records}):
            base_in, base_out = table.get(name, (0.0, 0.0))
            bound = min((w for t in peaked if (w := implied_in_multiple(t, name, base_out)) is not None),
                        default=None)
            if bound is None or bound <= base_in:
                continue
            trial = {**table, name: (bound, base_out)}
            explained = [t for t in todo if model_peak(t, trial) >= t.peak * (1 - PEAK_TOL)]
            if not explained:
                continue
            need = max(implied_in_multiple(t, name, base_out) * (1 - PEAK_TOL) for t in explained)
            # the op explaining most tasks; between equals, the one that needs the least hidden memory per byte
            if best is None or (-len(explained), need) < (-len(best[1]), best[4]):
                best = (name, explained, base_out, bound, need)
        if best is None:
            break
        name, explained, base_out, bound, need = best
        w = min(bound, math.ceil(need * 20) / 20)
        table[name] = (w, base_out)
        fitted[name] = {"in": w, "out": base_out, "why": NOTES.get(name, ""),
                        "replaces": list(WORKSPACE.get(name, (0.0, 0.0))),
                        "tasks": sorted(t.task_id for t in explained), "bound": round(bound, 3),
                        "catalog_ops": sorted({o for t in explained for o in t.ops})}
    return fitted


# ---- output share --------------------------------------------------------------------------------------------

def eager_oom(t: TaskEvidence) -> bool:
    return t.status == "oom" and t.error.startswith("OutOfMemoryError")


def fit_output_share(tasks: list[TaskEvidence], cap: int) -> dict | None:
    ran = [t.out_bytes / cap for t in tasks if t.status == "ok"]
    ooms = sorted((t.out_bytes / cap, t.task_id) for t in tasks if eager_oom(t))
    if not ran or not ooms or ooms[-1][0] <= max(ran):
        return None
    share_ = math.floor(max(ran) * 100) / 100
    return {"share": share_, "largest_ran": round(max(ran), 4),
            "tasks": [tid for s, tid in ooms if s > share_], "smallest_oom": round(ooms[0][0], 4)}


def fit(run_dir: str | Path) -> dict:
    """The calibration of a profiled run (what operators/calibration.json holds)."""
    import torch

    from operators.peak import WORKSPACE

    tasks, cfg = load_evidence(run_dir)
    cap = int(cfg.max_peak_memory_gb * cfg.peak_headroom * 2**30)
    runtime, typical = fit_runtime(tasks)
    peak = fit_peak(tasks)
    gpus = sorted({m["gpu"] for m in _rows(run_dir, "measurements", ["gpu"]) if m["gpu"]})
    torches = sorted({m["torch_version"] for m in _rows(run_dir, "measurements", ["torch_version"])
                      if m["torch_version"]})
    return {
        "regenerate": "python -m pinning.calibrate --run DIR",
        "run": {"tasks": len(tasks), "timed": len(_timed(tasks)), "gpu": gpus, "torch": torches,
                "seed": _seed(run_dir), "typical_ratio": round(typical, 4)},
        "fitted_with": {"torch": torch.__version__.split("+")[0],
                        "workspace": {k: list(v) for k, v in sorted(WORKSPACE.items())}},
        "runtime": runtime, "peak_workspace": peak, "output_share": fit_output_share(tasks, cap),
    }


def _rows(run_dir, table: str, cols: list[str]) -> list[dict]:
    from pipeline.rundir.store import RunDir

    return RunDir(run_dir).read_rows(table, cols)


def _seed(run_dir) -> int:
    from pipeline.rundir.store import RunDir

    return int(RunDir(run_dir).load_config().run.seed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="a profiled run directory")
    ap.add_argument("--out", default=str(CALIBRATION_FILE))
    a = ap.parse_args()
    cal = fit(a.run)
    Path(a.out).write_text(json.dumps(cal, indent=1) + "\n")
    print(f"wrote {a.out}: {len(cal['runtime'])} runtime factors, {len(cal['peak_workspace'])} workspaces, "
          f"output share {cal['output_share'] and cal['output_share']['share']}")


if __name__ == "__main__":
    main()
