"""How many timed runs (and GPU seconds held alone) a median-precision stopping rule would save, replayed on the
runtimes a profiled run recorded, before spending GPU time on it.

Timed runs stop when their IQR is under `profile.iqr_target` of the median (2%), else at `profile.max_runs` (100):
a task whose runs spread wider runs 100 times however well its median is known. `profile.median_precision = p`
also stops once the notch half-width 1.57 * IQR / sqrt(n) (McGill et al. 1978) is under p of the median. This
replays each measured task's eager and compiled timing with its recorded median and IQR, taking the IQR as the one
every batch would have seen (an estimate: the IQR of the first batches is noisier), at the harness's batch
boundaries (5, 10, 15, 22, 33, 49, 73, 100), and sums runs x median (kernel time only; each run's flush and
synchronize come on top).

    python benchmarks/timing_stop_replay.py --run data/releases/opsynth-ops-h200-v1/run [--precision 0.01,0.015,0.02]
        [--out benchmarks/results/timing_stop_replay.json]

Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.gpu.harness import next_batch, timed_enough  # noqa: E402
from pipeline.rundir.config import ProfileSection  # noqa: E402
from pipeline.rundir.store import RunDir  # noqa: E402


def batch_boundaries(s: ProfileSection) -> list[int]:
    """The run counts at which the harness checks whether to stop (pipeline.gpu.harness.Harness._time)."""
    out, n, batch = [], 0, s.min_runs
    while n < s.max_runs:
        n += batch
        out.append(n)
        batch = next_batch(batch, n, s.max_runs)
    return out


def replay(med: float, iqr: float, runs: int, s: ProfileSection) -> int:
    """Runs the rule in `s` would have stopped at, for a task that stopped at `runs` under the recorded settings."""
    for n in batch_boundaries(s):
        if n >= runs or timed_enough(med, iqr, n, s):
            return min(n, runs)
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True)
    ap.add_argument("--precision", default="0.01,0.015,0.02")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/timing_stop_replay.json"))
    a = ap.parse_args()
    base = ProfileSection()
    rows = [r for r in RunDir(a.run).read_rows("measurements")
            if r.get("status") == "ok" and r.get("device") == "cuda" and r.get("eager_runs")]
    exclusive = sum(r.get("gpu_exclusive_s") or 0.0 for r in rows)
    recorded_runs = sum((r.get("eager_runs") or 0) + (r.get("compile_runs") or 0) for r in rows)
    recorded_s = sum(((r.get("eager_runs") or 0) * (r.get("eager_ms") or 0.0)
                      + (r.get("compile_runs") or 0) * (r.get("compile_ms") or 0.0)) / 1e3 for r in rows)
    # what a timed run costs beyond its kernels (L2 flush, synchronize, launch), from the time held alone; the
    # warm-up runs inside the same hold make it an upper bound
    overhead = (exclusive - recorded_s) / max(1, recorded_runs)
    result: dict = {"run": str(a.run), "tasks": len(rows), "gpu_exclusive_s": round(exclusive, 1),
                    "recorded_timed_runs": recorded_runs, "recorded_timed_kernel_s": round(recorded_s, 1),
                    "overhead_ms_per_run": round(overhead * 1e3, 3),
                    "boundaries": batch_boundaries(base), "rules": []}
    print(f"{len(rows)} measured tasks of {a.run}; held the GPU alone {exclusive:.0f} s "
          f"({exclusive / max(1, len(rows)):.3f} s per task); recorded {recorded_runs} timed runs, {recorded_s:.0f} s "
          f"of kernels: {overhead * 1e3:.2f} ms per run beside them")
    print(f"{'median precision':>16} {'eager runs':>10} {'compile runs':>12} {'timed s':>8} {'saved s':>8} "
          f"{'+overhead':>9} {'per task':>8} {'at max_runs':>11}")
    for p in [0.0] + [float(x) for x in a.precision.split(",") if x]:
        s = dataclasses.replace(base, median_precision=p)
        runs = {"eager": 0, "compile": 0}
        timed = 0.0
        at_max = 0
        for r in rows:
            for k in ("eager", "compile"):
                med, iqr, n = r.get(f"{k}_ms"), r.get(f"{k}_iqr_ms"), r.get(f"{k}_runs")
                if not med or n is None or iqr is None or math.isnan(med):
                    continue
                m = replay(med, iqr, int(n), s)
                runs[k] += m
                timed += m * med / 1e3
                at_max += m >= s.max_runs
        if p == 0.0:
            now, now_runs = timed, runs["eager"] + runs["compile"]
        saved = now - timed + (now_runs - runs["eager"] - runs["compile"]) * overhead
        entry = {"median_precision": p, "eager_runs": runs["eager"], "compile_runs": runs["compile"],
                 "timed_kernel_s": round(timed, 1), "saved_kernel_s": round(now - timed, 1),
                 "saved_s_with_overhead": round(saved, 1), "saved_s_per_task": round(saved / max(1, len(rows)), 4),
                 "timings_at_max_runs": at_max}
        result["rules"].append(entry)
        print(f"{p if p else 'off (replayed)':>16} {runs['eager']:>10} {runs['compile']:>12} {timed:>8.0f} "
              f"{now - timed:>8.0f} {saved:>9.0f} {saved / max(1, len(rows)):>8.4f} {at_max:>11}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
