"""How far the sampler's runtime and peak-memory predictions are from a GPU run, per ATen op and per catalog op,
and what the pinned calibration (operators/calibration.json) is predicted to change.

    python benchmarks/calibration_bench.py --run DIR [--resample] [--baseline REF] [--reps 2]

Per ATen op and per catalog op over the run's tasks: measured/predicted eager time and peak memory, from
single-op tasks (the clean signal) and from multi-op tasks by attribution (an op's implied time factor over the
tasks where its kernels carry >= 30% of the roofline time, the rest at the run's typical ratio; its implied
workspace as a multiple of its inputs, see pinning/calibrate.py). Prints the worst offenders.

With --resample, the run's config (same preset, n and seed) is sampled again by this tree and by the tree of
`--baseline` (git archive; the commit before the calibration), alternating `--reps` times (tasks/s and per
CPU-second, median). The GPU cannot be asked again, so the GPU outcome of the new tasks is a prediction: a task
whose task_id is in the run keeps its measurement; another is priced by the per-op measured factors (every op's
implied factor, the typical ratio where none) and by the calibrated workspaces on its meta trace, and checked
against the filter's window, the 8 GiB cap and the largest output the worker ran. Writes
benchmarks/results/calibration_bench.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

ATTRIBUTION_SHARE = 0.3


def _q(v: list[float]) -> dict:
    v = sorted(v)
    return {"n": len(v), "min": round(v[0], 3), "median": round(statistics.median(v), 3), "max": round(v[-1], 3)}


def per_op(tasks, typical: float) -> dict:
    """Per ATen op and per catalog op: time and peak ratios, single-op and attributed."""
    from pinning.calibrate import implied_factor, implied_in_multiple, share

    aten_t: dict[str, list[float]] = collections.defaultdict(list)
    aten_p: dict[str, list[float]] = collections.defaultdict(list)
    cat_t: dict[str, list[float]] = collections.defaultdict(list)
    cat_p: dict[str, list[float]] = collections.defaultdict(list)
    single: dict[str, dict] = {}
    for t in tasks:
        ratio_t = t.eager_ms / t.predicted_ms if t.eager_ms else None
        ratio_p = t.peak / t.predicted_peak if t.peak else None
        if len(t.ops) == 1:
            s = single.setdefault(t.ops[0], {"time": [], "peak": []})
            if ratio_t:
                s["time"].append(ratio_t)
            if ratio_p:
                s["peak"].append(ratio_p)
        for o in set(t.ops):
            if ratio_t:
                cat_t[o].append(ratio_t)
            if ratio_p:
                cat_p[o].append(ratio_p)
        names = {n for n, ms in t.kernels if ms > 0}
        for n in names:
            if t.eager_ms and share(t, n, {}) >= ATTRIBUTION_SHARE:
                aten_t[n].append(implied_factor(t, n, {}, typical) * typical)
        if t.peak and t.predicted_peak and t.peak > 1.05 * t.predicted_peak:
            for n in {r[0] for r in t.records}:
                w = implied_in_multiple(t, n, 0.0)
                if w is not None and 0 < w <= 64:  # beyond that the op's inputs are too small to hold it
                    aten_p[n].append(w)
    return {
        "aten_time_factor": {k: _q(v) for k, v in sorted(aten_t.items())},
        "aten_peak_in_multiple_where_over": {k: _q(v) for k, v in sorted(aten_p.items())},
        "catalog_time_ratio": {k: _q(v) for k, v in sorted(cat_t.items())},
        "catalog_peak_ratio": {k: _q(v) for k, v in sorted(cat_p.items())},
        "single_op": {k: {m: _q(v) for m, v in d.items() if v} for k, d in sorted(single.items())},
    }


def _offenders(table: dict, n: int = 12, low: bool = False) -> list[tuple[str, dict]]:
    items = [(k, v) for k, v in table.items()]
    items.sort(key=lambda kv: kv[1]["median"], reverse=not low)
    return items[:n]


def _print_table(title: str, rows: list[tuple[str, dict]]) -> None:
    print(f"\n{title}")
    print(f"  {'op':38s} {'n':>4s} {'min':>8s} {'median':>8s} {'max':>8s}")
    for k, v in rows:
        print(f"  {k:38s} {v['n']:4d} {v['min']:8.3f} {v['median']:8.3f} {v['max']:8.3f}")


def gpu_outcome(task: dict, measured: dict | None, time_factor: dict[str, float], typical: float, cfg, fcfg,
                share_ran: float | None) -> dict:
    """The filter-relevant GPU outcome of a sampled task: measured if the run holds it, else predicted."""
    from operators.peak import workspaces
    from pinning.calibrate import Call, TaskEvidence, model_peak, trace_task  # noqa: F401

    cap = fcfg.max_peak_memory_gb * 2**30
    sample_cap = cfg.max_peak_memory_gb * cfg.peak_headroom * 2**30
    if measured is not None:
        m = measured
        slow = bool(m["eager_ms"] and m["eager_ms"] > fcfg.max_eager_ms)
        fast = bool(m["eager_ms"] and m["eager_ms"] < fcfg.min_eager_ms)
        over = bool(m["peak_memory_bytes"] and m["peak_memory_bytes"] > cap)
        oom = m["status"] == "oom" and (m["error"] or "").startswith("OutOfMemoryError")
        return {"source": "measured", "too_slow": slow, "too_fast": fast, "over_cap": over, "eager_oom": oom,
                "ms": m["eager_ms"]}
    kern, launch, resident, drawn, calls, out_bytes, records = trace_task(task, cfg)
    ms = sum(v * time_factor.get(n, typical) for n, v in kern) + launch
    ev = TaskEvidence(task["task_id"], list(task["ops"]), task["predicted_ms"], task["predicted_peak_bytes"],
                      None, None, "", "", kern, launch, resident, drawn, calls, out_bytes, records)
    peak = model_peak(ev, workspaces())
    oom = share_ran is not None and out_bytes / sample_cap > share_ran
    return {"source": "predicted", "too_slow": ms > fcfg.max_eager_ms, "too_fast": ms < fcfg.min_eager_ms,
            "over_cap": peak > cap, "eager_oom": oom, "ms": ms}


def _counts(outcomes: list[dict]) -> dict:
    c = {k: sum(o[k] for o in outcomes) for k in ("too_slow", "too_fast", "over_cap", "eager_oom")}
    c["by_source"] = dict(collections.Counter(o["source"] for o in outcomes))
    c["measured_off"] = {k: sum(o[k] for o in outcomes if o["source"] == "measured")
                         for k in ("too_slow", "too_fast", "over_cap", "eager_oom")}
    return c


def resample(run: Path, baseline: str, reps: int) -> dict:
    from refsig_bench import _checkout, _sample

    from pipeline.rundir.store import RunDir

    cfg = RunDir(run).load_config()
    preset, n, seed = cfg.name, cfg.run.n, cfg.run.seed
    base_root = _checkout(baseline)
    out: dict = {"preset": preset, "n": n, "seed": seed, "this": [], "baseline": []}
    dirs = {}
    for _ in range(reps):
        for label, root in (("baseline", base_root), ("this", str(ROOT))):
            d = Path(tempfile.mkdtemp(prefix=f"calib_{label}_")) / "run"
            r = _sample(root, preset, n, seed, d)
            out[label].append({"wall_s": round(r["wall_s"], 2), "cpu_s": round(r["cpu_s"], 2),
                               "tasks_per_s": round(n / r["wall_s"], 2), "tasks_per_cpu_s": round(n / r["cpu_s"], 2)})
            dirs.setdefault(label, d)
    for label in ("this", "baseline"):
        out[f"{label}_median_tasks_per_s"] = statistics.median(x["tasks_per_s"] for x in out[label])
        out[f"{label}_median_tasks_per_cpu_s"] = statistics.median(x["tasks_per_cpu_s"] for x in out[label])
    out["dirs"] = {k: str(v) for k, v in dirs.items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--resample", action="store_true")
    ap.add_argument("--baseline", default="HEAD~1")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "calibration_bench.json"))
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    from operators.calibration import calibration
    from pinning.calibrate import load_evidence, typical_ratio
    from pipeline.rundir.store import RunDir

    run = Path(a.run)
    tasks, cfg = load_evidence(run)
    typical = typical_ratio(tasks)
    ops = per_op(tasks, typical)
    print(f"{len(tasks)} tasks, typical measured/roofline time ratio {typical:.3f}")
    _print_table("slowest ATen ops against the roofline (measured/roofline, attributed)",
                 _offenders(ops["aten_time_factor"]))
    _print_table("fastest ATen ops against the roofline", _offenders(ops["aten_time_factor"], 8, low=True))
    _print_table("ATen ops in tasks over their predicted peak (implied workspace, x inputs)",
                 _offenders(ops["aten_peak_in_multiple_where_over"], 10))
    _print_table("catalog ops by measured/predicted time (tasks holding them)", _offenders(ops["catalog_time_ratio"]))
    _print_table("catalog ops by measured/predicted peak", _offenders(ops["catalog_peak_ratio"], 10))
    result: dict = {"run": str(run.name), "typical_time_ratio": round(typical, 4), "per_op": ops}

    if a.resample:
        rd = RunDir(run)
        rcfg = rd.load_config()
        meas = {m["task_id"]: m for m in rd.read_rows("measurements")}
        old = {t["task_id"]: t for t in rd.read_rows("tasks", ["task_id", "ops"])}
        time_factor = {k: v["median"] for k, v in ops["aten_time_factor"].items()}
        cal = calibration()
        share_ran = cal["output_share"]["share"] if cal.get("output_share") else None
        rs = resample(run, a.baseline, a.reps)
        cols = ["task_id", "ops", "graph", "code", "predicted_ms", "predicted_peak_bytes", "aten_ops"]
        res = {}
        for label in ("this", "baseline"):
            new = RunDir(rs["dirs"][label]).read_rows("tasks", cols)
            outs = [gpu_outcome(t, meas.get(t["task_id"]), time_factor, typical, rcfg.sample, rcfg.filter, share_ran)
                    for t in new]
            calibrated = set(cal["runtime"]) | set(cal["peak_workspace"])
            plain = [t for t in new if not calibrated & set(t["aten_ops"])]
            res[label] = {"tasks": len(new), "same_task_id_as_run": sum(t["task_id"] in old for t in new),
                          "tasks_without_calibrated_ops": len(plain),
                          "of_those_same_as_run": sum(t["task_id"] in old for t in plain),
                          "gpu_outcome": _counts(outs),
                          "predicted_ms_p10_p50_p90": [round(statistics.quantiles([t["predicted_ms"] for t in new],
                                                                                   n=10)[i], 3) for i in (0, 4, 8)]}
        rs.pop("dirs")
        result["resample"] = {**rs, "tasks": res}
        print("\nre-sampled the run's config (same preset, n, seed); GPU outcome measured where the task_id is in "
              "the run, predicted otherwise")
        print(f"  {'tree':9s} {'tasks/s':>8s} {'/CPU-s':>7s} {'same id':>8s} {'slow':>5s} {'fast':>5s} {'>cap':>5s} "
              f"{'oom':>4s}")
        for label in ("baseline", "this"):
            r, g = res[label], res[label]["gpu_outcome"]
            print(f"  {label:9s} {rs[label + '_median_tasks_per_s']:8.1f} {rs[label + '_median_tasks_per_cpu_s']:7.1f} "
                  f"{r['same_task_id_as_run']:8d} {g['too_slow']:5d} {g['too_fast']:5d} {g['over_cap']:5d} "
                  f"{g['eager_oom']:4d}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    result["commit"] = commit.strip()
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nwrote {a.out}")


if __name__ == "__main__":
    main()
