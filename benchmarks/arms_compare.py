"""Profile settings side by side on the same tasks, measured one after another on one machine (arms): per arm the
worker time per task and where it went, the throughput it implies, and each arm's eager and compiled medians
over the first arm's on the same tasks (eager: run-to-run noise, as no setting changes eager code; compiled:
that noise plus what the setting changed in inductor's choices).

    python benchmarks/arms_compare.py --arm base=DIR_A --arm mps=DIR_B [--workers 16 | --workers base=16,w20=20] [--out JSON]

Each DIR holds measurement parquet files (a run's `measurements/`, or the rows kept of it). Only tasks measured
in every arm count, so an arm cut short by its time limit compares on what all arms finished. pyarrow and stdlib.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline_yield import WAITS, ratio_stats, time_breakdown  # noqa: E402


def read_arm(folder: Path) -> dict[str, dict]:
    """Measured rows by task id (skipped and unmeasured rows left out)."""
    rows: dict[str, dict] = {}
    for f in sorted(folder.glob("*.parquet")):
        for r in pq.read_table(f).to_pylist():
            if r.get("status") != "skipped" and r.get("wall_s") is not None:
                rows[r["task_id"]] = r
    return rows


def compare(arms: dict[str, dict[str, dict]], workers: int | dict[str, int]) -> dict:
    """The table: arms in order, the first the reference; workers per GPU, the same in every arm or per arm."""
    names = list(arms)
    common = sorted(set.intersection(*(set(a) for a in arms.values())))
    first = arms[names[0]]
    out = {"tasks": len(common), "workers": workers, "arms": []}
    for name in names:
        rows = [arms[name][t] for t in common]
        tb = time_breakdown(rows, 0.0) or {}
        w = workers[name] if isinstance(workers, dict) else workers
        ok = [t for t in common if first[t]["status"] == "ok" and arms[name][t]["status"] == "ok"]
        out["arms"].append({
            "arm": name, "workers": w, **{k: tb.get(k) for k in WAITS},
            # with every worker busy all the time (no start-up, no tail), one task per this many seconds
            "s_per_task_at_full_occupancy": round(tb["wall_s"] / w, 4) if tb else None,
            "ok": sum(arms[name][t]["status"] == "ok" for t in common),
            "eager_over_first": ratio_stats([(first[t]["eager_ms"], arms[name][t]["eager_ms"]) for t in ok]),
            "compile_over_first": ratio_stats([(first[t].get("compile_ms"), arms[name][t].get("compile_ms"))
                                               for t in ok]),
        })
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", action="append", required=True, help="NAME=DIR of measurement parquet files")
    ap.add_argument("--workers", default="16", help="workers per GPU: N in every arm, or NAME=N,... per arm")
    ap.add_argument("--label", default="")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    arms = {}
    for spec in a.arm:
        name, _, folder = spec.partition("=")
        if not folder or not Path(folder).is_dir():
            sys.exit(f"error: --arm {spec!r}: give NAME=DIR with DIR a folder of measurement parquet files")
        arms[name] = read_arm(Path(folder))
    workers: int | dict[str, int]
    try:
        workers = int(a.workers) if "=" not in a.workers else {
            k: int(v) for k, _, v in (item.partition("=") for item in a.workers.split(","))}
    except ValueError:
        sys.exit(f"error: --workers {a.workers!r}: give N or NAME=N,NAME=N")
    if isinstance(workers, dict) and set(workers) != set(arms):
        sys.exit(f"error: --workers names {sorted(workers)}, the arms are {sorted(arms)}")
    res = {"label": a.label, "command": "benchmarks/arms_compare.py " + " ".join(sys.argv[1:]),
           **compare(arms, workers)}
    print(f"{res['tasks']} tasks measured in every arm ({a.label})")
    print(f"{'arm':<10} {'wall/task':>9} {'s/task@full':>11} {'cpu':>6} {'lock':>6} {'budget':>6} {'busy':>6} "
          f"{'excl':>6} {'eager/1st':>9} {'|d| p90':>7} {'compile/1st':>11} {'|d| p90':>7}")
    for r in res["arms"]:
        e, c = r["eager_over_first"], r["compile_over_first"]
        print(f"{r['arm']:<10} {r['wall_s']:>9.3f} {r['s_per_task_at_full_occupancy']:>11.4f} {r['cpu_s']:>6.2f} "
              f"{r['lock_wait_s']:>6.2f} {r['budget_wait_s']:>6.2f} {r['gpu_busy_s']:>6.2f} {r['gpu_exclusive_s']:>6.3f} "
              f"{e.get('median_ratio', float('nan')):>9.4f} {e.get('p90_abs_dev', float('nan')):>7.4f} "
              f"{c.get('median_ratio', float('nan')):>11.4f} {c.get('p90_abs_dev', float('nan')):>7.4f}")
    if a.out:
        a.out.write_text(json.dumps(res, indent=1) + "\n")
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
