"""What the sampler sends on that the CPU could have rejected: reference op-signature copies and low peak-memory
predictions, for this tree and a baseline commit, on the same seed.

    python benchmarks/refsig_bench.py [--preset h200] [--n 900] [--seed 20261201] [--baseline main] [--reps 2]

Each sampler (this tree, and the whole tree of `--baseline` extracted with git archive) runs the sample stage
(pipeline.stages.sample.run, one process) into a fresh run directory, alternating `--reps` times so a shared
machine's load hits both alike; tasks/s is the median. The first run of each is then decontaminated with this
tree's stage (counts per detector), and every task's eager peak is worked out on the meta device from its code
alone: the weights, then the larger of get_inputs' own peak and the inputs plus what the forward's ATen calls
hold (operators.peak.LiveBytes, freed as eager frees them, with WORKSPACE bytes), over the task's
predicted_peak_bytes. Prints a table and writes benchmarks/results/refsig_bench.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SAMPLE = """
import json, sys, time, warnings
from dataclasses import replace
sys.path.insert(0, {root!r})
warnings.filterwarnings("ignore")
import torch
torch.set_num_threads(1)
from pipeline.rundir.config import load_preset
from pipeline.stages import sample
from pipeline.rundir.store import RunDir
cfg = load_preset({preset!r})
cfg = replace(cfg, run=replace(cfg.run, n={n}, seed={seed}))
rd = RunDir({out!r})
rd.init(cfg)
t, cpu = time.perf_counter(), time.process_time()
sample.run(rd, cfg, processes=1)
print(json.dumps({{"wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - cpu}}))
"""


def _checkout(ref: str) -> str:
    root = tempfile.mkdtemp(prefix="opsynth_baseline_")
    archive = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", root], input=archive, check=True)
    return root


def _sample(root: str, preset: str, n: int, seed: int, out: Path) -> dict:
    code = SAMPLE.format(root=root, preset=preset, n=n, seed=seed, out=str(out))
    res = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def eager_peak(code: str, graph: str) -> int:
    """The task's eager peak on meta: weights, then the larger of the draws' peak and inputs + forward."""
    import torch

    from operators.peak import LiveBytes, draw_peak
    from operators.trace import load_module

    ns = load_module(code)
    draws = [n["draw"] for n in json.loads(graph)["nodes"] if n["kind"] == "input"]
    with torch.device("meta"), torch.no_grad():
        model = ns["Model"](*ns["get_init_inputs"]())
        x = ns["get_inputs"]()
        fixed = sum(t.nbytes for t in [*model.parameters(), *model.buffers()])
        with LiveBytes(workspaces=True) as fwd:
            model(*x)
    drawn = draw_peak([(d, t.numel(), t.element_size()) for d, t in zip(draws, x, strict=True)])
    return max(fixed + drawn, fixed + sum(t.nbytes for t in x) + fwd.peak)


def _quantiles(v: list[float]) -> dict:
    v = sorted(v)
    q = lambda p: round(v[min(len(v) - 1, int(p * len(v)))], 3)  # noqa: E731
    return {"p50": q(0.5), "p90": q(0.9), "p95": q(0.95), "max": round(v[-1], 3), "share_over_1": round(
        sum(x > 1.001 for x in v) / len(v), 3)}


def evaluate(rd_path: Path, preset: str, cap_gb: float) -> dict:
    from pipeline.rundir.config import load_preset
    from pipeline.rundir.store import RunDir
    from pipeline.stages import decontaminate

    rd = RunDir(rd_path)
    cfg = load_preset(preset)
    counts = decontaminate.run(rd, cfg)
    tasks = rd.read_rows("tasks", ["code", "graph", "predicted_peak_bytes", "num_ops"])
    ratios, over = [], 0
    for t in tasks:
        peak = eager_peak(t["code"], t["graph"])
        ratios.append(peak / t["predicted_peak_bytes"])
        over += peak > cap_gb * 2**30
    return {"tasks": counts["tasks"], "contaminated": counts["contaminated"], "by_detector": counts["by_detector"],
            "single_op_tasks": sum(t["num_ops"] == 1 for t in tasks),
            "meta_peak_over_predicted": _quantiles(ratios), "meta_peak_over_cap": over}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="h200")
    ap.add_argument("--n", type=int, default=900)
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--baseline", default="main")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "refsig_bench.json"))
    a = ap.parse_args()
    from pipeline.rundir.config import load_preset

    base_root = _checkout(a.baseline)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    base_commit = subprocess.run(["git", "rev-parse", "--short", a.baseline], cwd=ROOT, capture_output=True,
                                 text=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="opsynth_refsig_"))
    runs: dict[str, list[dict]] = {"new": [], "baseline": []}
    for rep in range(a.reps):
        for which, root in (("baseline", base_root), ("new", str(ROOT))) if rep % 2 == 0 else (
                ("new", str(ROOT)), ("baseline", base_root)):
            runs[which].append(_sample(root, a.preset, a.n, a.seed, work / f"{which}{rep}"))
    cap = load_preset(a.preset).filter.max_peak_memory_gb
    result = {"command": " ".join(sys.argv), "commit": commit, "baseline": f"{a.baseline} ({base_commit})",
              "preset": a.preset, "n": a.n, "seed": a.seed, "filter_max_peak_memory_gb": cap}
    for which in ("baseline", "new"):
        t0 = time.perf_counter()
        ev = evaluate(work / f"{which}0", a.preset, cap)
        ev["tasks_per_s"] = round(statistics.median(a.n / r["wall_s"] for r in runs[which]), 1)
        ev["tasks_per_cpu_s"] = round(statistics.median(a.n / r["cpu_s"] for r in runs[which]), 1)
        ev["runs"] = runs[which]
        ev["evaluate_s"] = round(time.perf_counter() - t0, 1)
        result[which] = ev
    b, n = result["baseline"], result["new"]
    result["throughput_ratio"] = round(n["tasks_per_s"] / b["tasks_per_s"], 3)
    print(f"{'':34s} {'baseline ' + base_commit:>18s} {'this tree ' + commit:>18s}")
    for label, key in (("contaminated", "contaminated"), ("single-op tasks", "single_op_tasks")):
        print(f"{label:34s} {b[key]:>18} {n[key]:>18}")
    for d in b["by_detector"]:
        print(f"{'  by ' + d:34s} {b['by_detector'][d]:>18} {n['by_detector'][d]:>18}")
    for q in ("p50", "p90", "p95", "max", "share_over_1"):
        print(f"{'meta peak / predicted ' + q:34s} {b['meta_peak_over_predicted'][q]:>18} "
              f"{n['meta_peak_over_predicted'][q]:>18}")
    print(f"{'meta peak over the filter cap':34s} {b['meta_peak_over_cap']:>18} {n['meta_peak_over_cap']:>18}")
    print(f"{'tasks/s (median of reps)':34s} {b['tasks_per_s']:>18} {n['tasks_per_s']:>18}")
    print(f"{'tasks/CPU-s':34s} {b['tasks_per_cpu_s']:>18} {n['tasks_per_cpu_s']:>18}")
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
