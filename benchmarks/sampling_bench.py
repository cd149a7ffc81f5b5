"""Sampler benchmark: throughput (one process, a process pool) and the composition of 10,000 sampled tasks.

    python benchmarks/sampling_bench.py [--preset h200] [--n 10000] [--throughput-n 300] [--procs 1 2]
                                        [--baseline GIT_REF --reps 3]

Throughput counts sampling + sizing + variants + rendering + label check (everything `sample_tasks`
does), after a warm-up, in tasks per second. The 10,000 tasks are drawn by a pool of processes (each
index is deterministic, so the split does not change them); then every rendered task is traced again
from its code (operators.trace.trace_code on meta) and its labels checked against that trace.
`--baseline REF` also times the operators/ package of an older commit, alternating with this one, so a
shared machine's load hits both alike; the JSON then holds both and the speed-up (median ratio).
Prints tables and writes benchmarks/results/sampling_bench.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _cfg(preset: str):
    from pipeline.rundir.config import load_preset

    return load_preset(preset).sample


def _warm(preset: str, code_root: str = "") -> None:
    """Worker start: one intra-op thread (meta ops compute nothing; threads only contend), the operators
    package from `code_root` when given (a baseline checkout), imports and a few draws done."""
    import warnings

    import torch

    torch.set_num_threads(1)
    if code_root and sys.path[0] != code_root:
        sys.path.insert(0, code_root)
    warnings.filterwarnings("ignore")
    from operators.sample import sample_tasks

    sample_tasks(_cfg(preset), 999_999, range(5), set())


def _sample_chunk(args: tuple) -> tuple[list[dict], dict, float]:
    preset, seed, start, stop = args
    from operators.sample import Stats, sample_tasks

    stats = Stats()
    t, cpu = time.perf_counter(), time.process_time()
    rows = sample_tasks(_cfg(preset), seed, range(start, stop), set(), stats)
    return _slim(rows), {**vars(stats), "cpu_s": time.process_time() - cpu}, time.perf_counter() - t


def _slim(rows: list[dict]) -> list[dict]:
    keep = ("task_id", "name", "ops", "categories", "num_ops", "is_dag", "graph_hash", "aten_ops", "predicted_ms",
            "predicted_peak_bytes", "flops", "bytes_moved", "code")
    out = []
    for r in rows:
        g = json.loads(r["graph"])
        fanout = collections.Counter(e["source"] for e in g["edges"])
        n_inputs = sum(1 for n in g["nodes"] if n["kind"] == "input")
        out.append({**{k: r[k] for k in keep}, "branching": max(fanout.values()) > 1, "inputs": n_inputs})
    return out


def _redraw(preset: str, seed: int, index: int, seen: set[str]) -> dict:
    from operators.sample import sample_tasks

    return _slim(sample_tasks(_cfg(preset), seed, range(index, index + 1), seen))[0]


def _trace_chunk(rows: list[dict]) -> list[dict]:
    import warnings

    warnings.filterwarnings("ignore")
    from operators.labels import check_labels
    from operators.trace import trace_code

    out = []
    for r in rows:
        try:
            traced = trace_code(r["code"])
            out.append({"same_trace": traced == r["aten_ops"], "problems": check_labels(r["ops"], traced)})
        except Exception as e:  # noqa: BLE001 - a task that does not run is a disagreement
            out.append({"same_trace": False, "problems": [f"trace failed: {type(e).__name__}: {e}"]})
    return out


def _chunks(n: int, k: int) -> list[tuple[int, int]]:
    step = max(1, n // k)
    return [(i, min(n, i + step)) for i in range(0, n, step)]


def _checkout(ref: str) -> str:
    """The operators/ package as of git `ref`, extracted into a temporary folder (for an old-vs-new run)."""
    import tempfile

    root = tempfile.mkdtemp(prefix="opsynth_baseline_")
    archive = subprocess.run(["git", "archive", ref, "operators"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", root], input=archive, check=True)
    return root


def _pid_after(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def _barrier(pool, procs: int) -> None:
    """Return once every worker has answered: a worker takes tasks only after its initializer (the warm-up),
    so a plain map can be served by the first worker ready while another is still warming up in the timing."""
    seen: set[int] = set()
    while len(seen) < procs:
        seen.update(pool.map(_pid_after, [0.2] * procs, chunksize=1))


def provenance(load0: list[float]) -> dict:
    """Command, machine (with the load average at start and now: other jobs skew timings), torch, commit."""
    import torch

    return {
        "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_at_start": load0, "load_average_at_end": [round(v, 2) for v in os.getloadavg()]},
        "torch_version": torch.__version__,
        "git_commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip(),
    }


def throughput(preset: str, n: int, procs: int, ctx, code_root: str = "") -> dict:
    with ctx.Pool(procs, initializer=_warm, initargs=(preset, code_root)) as pool:
        _barrier(pool, procs)
        t = time.perf_counter()
        parts = pool.map(_sample_chunk, [(preset, 1, a, b) for a, b in _chunks(n * procs, procs * 4)])
        wall = time.perf_counter() - t
    done = sum(len(p[0]) for p in parts)
    attempts = sum(p[1]["attempts"] for p in parts)
    cpu = sum(p[1]["cpu_s"] for p in parts)  # CPU seconds the workers used: other jobs' load does not inflate it
    return {"processes": procs, "tasks": done, "wall_s": round(wall, 2), "tasks_per_s": round(done / wall, 1),
            "tasks_per_cpu_s": round(done / cpu, 1), "attempts_per_task": round(attempts / done, 2)}



def headline(result: dict) -> list[dict]:
    """The figures docs/figures.md shows (python -m pipeline.outputs.figures reads them)."""
    common = {"command": result.get("command", "python benchmarks/sampling_bench.py"), "hardware": "2-core CPU (no GPU)",
              "torch": str(result.get("torch_version")), "commit": str(result.get("git_commit", ""))[:7]}
    by_procs: dict[int, list[float]] = collections.defaultdict(list)
    for t in result.get("throughput", []):
        by_procs[t["processes"]].append(t["tasks_per_s"])
    one, two = (statistics.median(by_procs[k]) if by_procs.get(k) else None for k in (1, 2))
    rows = []
    if one is not None:
        rows.append({"figure": "sampling throughput, h200 preset, one process",
                     "value": f"{one:.1f} tasks/s" + (f" ({two:.1f} with two processes)" if two else ""),
                     "target": ">= 500 tasks/s", **common})
    if "duplicate_canonical_graphs" in result:
        rows.append({"figure": "10,000 sampled h200 tasks: duplicate graphs, label/trace disagreements",
                     "value": f"{result['duplicate_canonical_graphs']} and {result['label_trace_disagreements']}",
                     "target": None, **common})
    return rows

def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="h200")
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--throughput-n", type=int, default=300, help="tasks per process for the throughput runs")
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--baseline", default="", help="git ref: also time its operators/ package, interleaved")
    ap.add_argument("--reps", type=int, default=1, help="throughput repetitions (interleaved with the baseline)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "sampling_bench.json"))
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    load0 = [round(v, 2) for v in os.getloadavg()]  # other jobs on the machine skew the throughput


    from operators.catalog import CATEGORIES, REGISTRY, sampleable

    base_root = _checkout(args.baseline) if args.baseline else ""
    tp, base = [], []
    for p in args.procs:  # new and baseline alternate, so load from other jobs hits both alike
        for _ in range(args.reps):
            tp.append(throughput(args.preset, args.throughput_n, p, ctx))
            if base_root:
                base.append({**throughput(args.preset, args.throughput_n, p, ctx, base_root),
                             "code": args.baseline})
    print("throughput (sample + size + variants + render + label check)")
    for r in tp + base:
        print(f"  {r.get('code', 'this commit'):12s} {r['processes']} process(es): {r['tasks_per_s']:7.1f} tasks/s  "
              f"({r['tasks_per_cpu_s']} per CPU-second; {r['tasks']} tasks, {r['wall_s']} s, "
              f"{r['attempts_per_task']} draws per task)")
    speedup = {}
    for p in args.procs if base else ():
        new = statistics.median(r["tasks_per_s"] for r in tp if r["processes"] == p)
        old = statistics.median(r["tasks_per_s"] for r in base if r["processes"] == p)
        new_cpu = statistics.median(r["tasks_per_cpu_s"] for r in tp if r["processes"] == p)
        old_cpu = statistics.median(r["tasks_per_cpu_s"] for r in base if r["processes"] == p)
        speedup[p] = {"wall": round(new / old, 2), "cpu": round(new_cpu / old_cpu, 2)}
        print(f"  {p} process(es): median {new:.1f} vs {old:.1f} tasks/s at {args.baseline}: x{speedup[p]['wall']} "
              f"(per CPU-second {new_cpu:.1f} vs {old_cpu:.1f}: x{speedup[p]['cpu']})")

    workers = max(args.procs)
    t = time.perf_counter()
    with ctx.Pool(workers, initializer=_warm, initargs=(args.preset, "")) as pool:
        parts = pool.map(_sample_chunk, [(args.preset, args.seed, a, b) for a, b in _chunks(args.n, workers * 8)])
        rows = [r for p in parts for r in p[0]]
        # workers dedupe within their chunk; across chunks, resolve in index order with one `seen` set,
        # as the sample stage does across shards (a duplicate is redrawn from its next attempt)
        seen: set[str] = set()
        cross_dups = 0
        for i, r in enumerate(rows):
            if r["task_id"] in seen:
                cross_dups += 1
                rows[i] = _redraw(args.preset, args.seed, i, seen)
            seen.add(rows[i]["task_id"])
        t_sample = time.perf_counter() - t
        checks = [c for part in pool.map(_trace_chunk, [rows[i:i + 250] for i in range(0, len(rows), 250)]) for c in part]
    stats = collections.Counter()
    rejected = collections.Counter()
    for _, st, _ in parts:
        stats.update({k: st[k] for k in ("attempts", "duplicates", "label_mismatches")})
        rejected.update(st["rejected"] or {})

    n = len(rows)
    used = collections.Counter(op for r in rows for op in r["ops"])
    pool_ops = {s.name for s in sampleable()}
    depth = collections.Counter(r["num_ops"] for r in rows)
    cats = collections.Counter(c for r in rows for c in r["categories"])
    ms = sorted(r["predicted_ms"] for r in rows)
    dup_ids = n - len({r["task_id"] for r in rows})
    dup_graphs = n - len({r["graph_hash"] for r in rows})
    trace_diff = sum(not c["same_trace"] for c in checks)
    label_bad = sum(bool(c["problems"]) for c in checks)
    cfg = _cfg(args.preset)
    bins = [cfg.target_min_ms * (cfg.target_max_ms / cfg.target_min_ms) ** (i / 6) for i in range(7)]
    hist = [sum(bins[i] <= m < bins[i + 1] or (i == 5 and m == bins[6]) for m in ms) for i in range(6)]
    result = {
        **provenance(load0),
        "preset": args.preset,
        "catalog": {"total": len(REGISTRY), "sampleable": len(pool_ops), "categories": len(CATEGORIES)},
        "throughput": tp,
        "baseline": {"ref": args.baseline, "throughput": base, "speedup_by_processes": speedup} if base else None,
        "tasks": n,
        "sample_wall_s": round(t_sample, 1),
        "distinct_operators_used": len(used),
        "sampleable_operators_never_used": sorted(pool_ops - set(used)),
        "share_by_depth": {k: round(depth[k] / n, 4) for k in sorted(depth)},
        "share_3plus_ops": round(sum(v for k, v in depth.items() if k >= 3) / n, 4),
        "share_dag": round(sum(r["is_dag"] for r in rows) / n, 4),
        "share_branching": round(sum(r["branching"] for r in rows) / n, 4),
        "share_by_inputs": {k: round(v / n, 4) for k, v in sorted(collections.Counter(r["inputs"] for r in rows).items())},
        "tasks_by_category": dict(sorted(cats.items())),
        "duplicates_across_processes_redrawn": cross_dups,
        "duplicate_task_ids": dup_ids,
        "duplicate_canonical_graphs": dup_graphs,
        "label_trace_disagreements": label_bad,
        "retrace_differs_from_recorded_aten_ops": trace_diff,
        "draws": dict(stats), "rejected_draws": dict(rejected.most_common()),
        "predicted_ms": {"min": ms[0], "p10": ms[n // 10], "median": statistics.median(ms), "p90": ms[9 * n // 10],
                         "max": ms[-1], "log_bins_ms": [round(b, 2) for b in bins], "histogram": hist},
        "predicted_peak_gb_max": round(max(r["predicted_peak_bytes"] for r in rows) / 2**30, 2),
    }
    print(f"\n{n} tasks ({args.preset}) sampled in {t_sample:.0f} s by {workers} processes")
    print(f"  distinct operators used     {len(used)} of {len(pool_ops)} sampleable")
    print("  share by depth              " + "  ".join(f"{k}:{v:.1%}" for k, v in result["share_by_depth"].items()))
    print(f"  3+ operators                {result['share_3plus_ops']:.1%}")
    print(f"  DAGs                        {result['share_dag']:.1%}  (a tensor feeding 2+ ops: "
          f"{result['share_branching']:.1%}; by input count {result['share_by_inputs']})")
    print(f"  duplicate canonical graphs  {dup_graphs}  (duplicate task ids {dup_ids}; {cross_dups} drawn twice by "
          "different processes were redrawn)")
    print(f"  label/trace disagreements   {label_bad}  (re-trace differs from recorded aten_ops: {trace_diff})")
    print(f"  predicted ms                p10 {ms[n // 10]:.2f}  median {statistics.median(ms):.2f}  p90 {ms[9 * n // 10]:.2f}"
          f"  (window {cfg.target_min_ms}-{cfg.target_max_ms})")
    print(f"  histogram over log bins     {hist}")
    print(f"  draws per task              {stats['attempts'] / n:.2f}; rejected: {dict(rejected.most_common(6))}")
    result = {"headline": headline(result), **result}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
