"""What the profile stage's shortcut checks cost and drop on a run the GPU profiled with them on
(profile.shortcut_checks): each worker's GPU hold time for the checks against its whole hold, by kind (dead
input, skippable operator, fragility), and the tasks the filter drops for each kind. The shares are ratios within
one run, so they compare across GPUs; the absolute seconds belong to the GPU named with --hardware.

    python benchmarks/shortcut_cost.py --run DIR --hardware "NVIDIA H200" --torch 2.11.0+cu130 --commit C \
        --made-by "opsynth init DIR --preset h200 --n 1500 --seed 23; opsynth sample DIR; ..."
Writes benchmarks/results/shortcut_cost_gpu.json (with "headline")."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.rundir.store import RunDir  # noqa: E402

KINDS = ("dead", "skip", "fragile")
REASON = {"dead": "dead input", "skip": "skippable operator", "fragile": "fragile"}


def summarize(rows: list[dict], verdicts: list[dict]) -> dict:
    """Sums and medians of the hold times over the tasks the checks ran on; filter drops by kind."""
    ran = [r for r in rows if r.get("gpu_busy_shortcut_s") is not None and r.get("gpu_busy_s")]
    busy = sum(r["gpu_busy_s"] for r in ran)
    out: dict = {"tasks_profiled": len(rows), "tasks_checked": len(ran), "gpu_busy_s": busy,
                 "checks_s": sum(r["gpu_busy_shortcut_s"] for r in ran)}
    out["checks_share"] = out["checks_s"] / busy if busy else None
    out["median_checks_s"] = statistics.median(r["gpu_busy_shortcut_s"] for r in ran) if ran else None
    out["median_busy_s"] = statistics.median(r["gpu_busy_s"] for r in ran) if ran else None
    for k in KINDS:
        vals = [r.get(f"gpu_busy_{k}_s") or 0.0 for r in ran]
        out[f"{k}_s"] = sum(vals)
        out[f"{k}_share"] = sum(vals) / busy if busy else None
    drops = Counter()
    for v in verdicts:
        if v["stage"] == "filter" and not v["keep"]:
            for k in KINDS:
                if (v["reason"] or "").startswith(REASON[k]):
                    drops[k] += 1
    out["dropped"] = {k: drops[k] for k in KINDS}
    out["filter_considered"] = sum(1 for v in verdicts if v["stage"] == "filter")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="run directory profiled with profile.shortcut_checks, then filtered")
    ap.add_argument("--hardware", required=True, help="the GPU that profiled it, e.g. 'NVIDIA H200'")
    ap.add_argument("--torch", required=True, help="torch version of the profile call")
    ap.add_argument("--commit", required=True, help="commit the profile call ran")
    ap.add_argument("--made-by", default="", help="how the run was made (its init, sample and profile commands), "
                    "kept in the result so the figure can be made again")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results"))
    a = ap.parse_args()
    rd = RunDir(Path(a.run))
    s = summarize(rd.read_rows("measurements"), rd.read_rows("verdicts"))
    base = {"command": "python benchmarks/shortcut_cost.py --run DIR", "hardware": a.hardware, "torch": a.torch,
            "commit": a.commit}
    shares = ", ".join(f"{k} {100 * s[f'{k}_share']:.1f}%" for k in KINDS)
    n, c = s["filter_considered"], s["dropped"]
    head = [
        {"figure": "shortcut checks' share of the profile workers' GPU hold, fresh h200 tasks",
         "value": f"{100 * s['checks_share']:.1f}% ({shares}; median {s['median_checks_s']:.2f} s of "
                  f"{s['median_busy_s']:.2f} s per task, {s['tasks_checked']} tasks)",
         "target": "<= 10% more profile GPU-s per published task", **base},
        {"figure": "fresh h200 tasks the GPU's shortcut checks drop after the CPU pre-screen",
         "value": f"{sum(c.values())} of {n} ({100 * sum(c.values()) / max(1, n):.1f}%): "
                  + ", ".join(f"{REASON[k]} {c[k]}" for k in KINDS), "target": None, **base},
    ]
    print(f"{'kind':10s} {'hold s':>8s} {'share':>7s} {'dropped':>8s}")
    for k in KINDS:
        print(f"{k:10s} {s[f'{k}_s']:8.1f} {100 * s[f'{k}_share']:6.1f}% {c[k]:8d}")
    print(f"{'all':10s} {s['checks_s']:8.1f} {100 * s['checks_share']:6.1f}% {sum(c.values()):8d}  "
          f"(of {s['gpu_busy_s']:.1f} s held, {s['tasks_checked']} tasks)")
    out = Path(a.out) / "shortcut_cost_gpu.json"
    out.write_text(json.dumps({"headline": head, "run_made_by": a.made_by, **s}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
