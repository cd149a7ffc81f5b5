"""Whether refitting the runtime calibration on a large profiled run would predict unseen tasks better than the
pinned one (operators/calibration.json), and which catalog operators the sampler still mis-prices.

    python benchmarks/calibration_heldout.py --run DIR [--out benchmarks/results/calibration_heldout.json]

The run's shards are split by parity: the runtime factors are fitted on the even shards (pinning.calibrate's
fit_runtime, as `python -m pinning.calibrate` would over them) and both calibrations price the odd shards' tasks
from their meta traces (roofline kernels times each factor, times the fit's typical measured/roofline ratio).
Per calibration: |log(measured / predicted)| (median, p90), the share within 2x, and how many tasks outside the
filter's eager window each predicts outside it (what the sampler could have resized) against in-window tasks it
would push out. Per catalog operator (held-out tasks holding it): the measured eager time over the sampler's own
prediction at sampling time, the operators most often rejected for their runtime first. With `--feeders CATALOG_OP=ATEN_OP`
(erfcx by default), over all tasks: that ATen op's implied factor over its roofline (pinning.calibrate.implied_factor,
where its kernels carry >= 5% of the roofline time) by what feeds the catalog operator (an input's draw or the
upstream operator), to see whether one factor can price it. Traces on the CPU (about 10 ms per task); prints the
tables and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from operators.calibration import runtime_factors  # noqa: E402
from pinning import calibrate as cal  # noqa: E402


def split_run(run: Path, into: Path, parity: int) -> Path:
    """A run directory under `into` holding the run's config and the task and measurement shards of one parity."""
    out = into / ("fit" if parity == 0 else "held")
    out.mkdir(parents=True)
    shutil.copy(run / "config.toml", out / "config.toml")
    for table in ("tasks", "measurements"):
        (out / table / "_done").mkdir(parents=True)
        for p in sorted((run / table).glob("part-*.parquet")):
            done = run / table / "_done" / p.stem
            if int(p.stem.split("-")[1]) % 2 == parity and done.exists():
                shutil.copy(p, out / table / p.name)
                shutil.copy(done, out / table / "_done" / p.stem)
    return out


def accuracy(tasks: list, factors: dict[str, float], typical: float, lo: float, hi: float) -> dict:
    timed = cal._timed(tasks)

    def pred(t) -> float:
        return cal.model_ms(t, factors) * typical

    err = sorted(abs(math.log(t.eager_ms / pred(t))) for t in timed)
    slow = [t for t in timed if t.eager_ms > hi]
    fast = [t for t in timed if t.eager_ms < lo]
    inside = [t for t in timed if lo <= t.eager_ms <= hi]
    return {"tasks": len(timed), "median_abs_log_err": round(statistics.median(err), 4),
            "p90_abs_log_err": round(err[int(0.9 * len(err))], 4),
            "within_2x": round(sum(e < math.log(2) for e in err) / len(err), 4),
            "too_slow": len(slow), "too_slow_predicted_over": sum(pred(t) > hi for t in slow),
            "too_fast": len(fast), "too_fast_predicted_under": sum(pred(t) < lo for t in fast),
            "in_window": len(inside), "in_window_predicted_outside": sum(not lo <= pred(t) <= hi for t in inside)}


def offenders(tasks: list, lo: float, hi: float, top: int = 15) -> list[dict]:
    """Catalog operators by how many of their held-out tasks fell outside the eager window."""
    by_op: dict[str, list] = defaultdict(list)
    for t in cal._timed(tasks):
        if t.predicted_ms:
            for op in set(t.ops):
                by_op[op].append(t)
    rows = []
    for op, ts in by_op.items():
        ratios = sorted(t.eager_ms / t.predicted_ms for t in ts)
        out = sum(not lo <= t.eager_ms <= hi for t in ts)
        rows.append({"op": op, "tasks": len(ts), "outside_window": out, "outside_share": round(out / len(ts), 3),
                     "measured_over_predicted_q50": round(ratios[len(ratios) // 2], 2),
                     "measured_over_predicted_q90": round(ratios[int(0.9 * len(ratios))], 2)})
    return sorted(rows, key=lambda r: (-r["outside_window"], -r["outside_share"]))[:top]


def by_feeder(tasks: list, graphs: dict[str, dict], catalog_op: str, aten_op: str, typical: float) -> list[dict]:
    """`aten_op`'s implied factor by what feeds `catalog_op` (`input:DRAW` or the upstream operator)."""
    factors: dict[str, list[float]] = defaultdict(list)
    for t in cal._timed(tasks):
        g = graphs.get(t.task_id)
        if g is None or catalog_op not in t.ops or cal.share(t, aten_op, {}) < 0.05:
            continue
        nodes = {n["id"]: n for n in g["nodes"]}
        for e in g["edges"]:
            if nodes[e["target"]].get("op") == catalog_op and e["arg"] == "x":
                src = nodes[e["source"]]
                feeder = f"input:{src.get('draw')}" if src["kind"] == "input" else src.get("op")
                factors[feeder].append(cal.implied_factor(t, aten_op, {}, typical))
    rows = [{"feeder": k, "tasks": len(v), "implied_q50": round(statistics.median(v), 1),
             "implied_min": round(min(v), 1), "implied_max": round(max(v), 1)} for k, v in factors.items()]
    return sorted(rows, key=lambda r: (-r["tasks"], -r["implied_q50"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, required=True, help="a profiled run directory")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "calibration_heldout.json")
    ap.add_argument("--feeders", default="torch.special.erfcx=aten.special_erfcx", help="CATALOG_OP=ATEN_OP")
    a = ap.parse_args()
    from pipeline.rundir.store import RunDir

    f = RunDir(a.run).load_config().filter
    lo, hi = f.min_eager_ms, f.max_eager_ms
    with tempfile.TemporaryDirectory() as tmp:
        fit_tasks, _ = cal.load_evidence(split_run(a.run, Path(tmp), 0))
        held, _ = cal.load_evidence(split_run(a.run, Path(tmp), 1))
    runtime, typical = cal.fit_runtime(fit_tasks)
    pinned = runtime_factors()
    refit = {k: v["factor"] for k, v in runtime.items()}
    res = {"command": "benchmarks/calibration_heldout.py " + " ".join(sys.argv[1:]), "run": str(a.run),
           "fit_tasks": len(fit_tasks), "held_out_tasks": len(held), "window_ms": [lo, hi],
           "typical_ratio": round(typical, 4),
           "pinned": {"factors": len(pinned), **accuracy(held, pinned, typical, lo, hi)},
           "refit": {"factors": len(refit), **accuracy(held, refit, typical, lo, hi)},
           "factors": {k: {"pinned": pinned.get(k), "refit": refit.get(k),
                           "refit_tasks": len(runtime[k]["tasks"]) if k in runtime else 0}
                       for k in sorted(set(pinned) | set(refit))},
           "offenders": offenders(held, lo, hi)}
    catalog_op, _, aten_op = a.feeders.partition("=")
    graphs = {r["task_id"]: json.loads(r["graph"]) for r in RunDir(a.run).read_rows("tasks", ["task_id", "ops", "graph"])
              if catalog_op in (r["ops"] or [])}
    res["feeders"] = {"catalog_op": catalog_op, "aten_op": aten_op,
                      "rows": by_feeder(fit_tasks + held, graphs, catalog_op, aten_op, typical)}
    print(f"{len(fit_tasks)} tasks fitted, {len(held)} held out; window {lo:g}-{hi:g} ms")
    print(f"{'calibration':<12}{'factors':>8}{'med|log|':>10}{'p90|log|':>10}{'<2x':>7}{'slow hit':>10}{'fast hit':>10}"
          f"{'pushed out':>11}")
    for name in ("pinned", "refit"):
        r = res[name]
        print(f"{name:<12}{r['factors']:>8}{r['median_abs_log_err']:>10}{r['p90_abs_log_err']:>10}{r['within_2x']:>7}"
              f"{r['too_slow_predicted_over']:>6}/{r['too_slow']:<3}{r['too_fast_predicted_under']:>6}/{r['too_fast']:<3}"
              f"{r['in_window_predicted_outside']:>11}")
    print("catalog operators by held-out tasks outside the window (measured / sampler's prediction):")
    for r in res["offenders"]:
        print(f"  {r['op']:<28}{r['outside_window']:>4} of {r['tasks']:<5} q50 {r['measured_over_predicted_q50']:>7}"
              f"  q90 {r['measured_over_predicted_q90']:>7}")
    print(f"{aten_op} implied factor over its roofline by what feeds {catalog_op} (q50, min-max):")
    for r in res["feeders"]["rows"]:
        print(f"  {r['feeder']:<28}{r['tasks']:>4}  {r['implied_q50']:>7}  {r['implied_min']}-{r['implied_max']}")
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
