"""Where one sampled task's time goes, and the ceiling that evaluating ops on the meta device puts on throughput.

    python benchmarks/sampling_floor.py [--preset h200] [--n 600] [--seed 1]

One process, one intra-op thread, after a warm-up (as sampling_bench.py's throughput). Part 1 samples `n`
tasks with a timer around each evaluation of an op's call on meta (operators.graph._run_call, torch's meta
kernels under the cost mode, already memoized where the sampler can) and splits the time: evaluations
while the graph is built (each op as it is added, tries that fail included), at the solved size, at the
shape variants; the rest of the sampler (drawing, sizing, hashing, rendering, label check). Part 2 takes the
tasks sampled and runs each graph once more on meta at its final sizes with every memo cleared first: one
evaluation per op, the least any sampler that propagates shapes on meta must spend on that task (no failed
try, no re-run, no variant). Its inverse is a ceiling on tasks per second that no bookkeeping speed-up can
pass. Part 3 samples the same tasks once more in the same process: every node then replays from the memo, so
its rate is what the sampler's own bookkeeping allows if meta evaluations cost nothing; that time plus part
2's with the variants is a sampler with this bookkeeping doing the least meta work the issue requires. Prints a table and writes benchmarks/results/sampling_floor.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _phase(frame) -> str:
    """Which step of sample_one asked for this evaluation (the nearest sampler function on the stack)."""
    while frame is not None:
        name = frame.f_code.co_name
        if name == "_variants":
            return "variants"
        if name == "build_graph":
            return "build"
        if name == "sample_one":
            return "solved_size"
        frame = frame.f_back
    return "other"


@contextlib.contextmanager
def timed_meta_evaluations() -> Iterator[tuple[Counter, Counter]]:
    """Inside: every evaluation of an op's call on meta (operators.graph._run_call) is timed; yields (seconds,
    evaluations), both counted by the sampler step that asked (see _phase)."""
    from operators import graph

    spent, calls = Counter(), Counter()
    real = graph._run_call

    def timed(key, call, ns, mode):
        t = time.perf_counter()
        try:
            return real(key, call, ns, mode)
        finally:
            phase = _phase(sys._getframe(1))
            spent[phase] += time.perf_counter() - t
            calls[phase] += 1

    graph._run_call = timed
    try:
        yield spent, calls
    finally:
        graph._run_call = real


def sample_with_timer(cfg, seed: int, n: int) -> tuple[list[dict], float, Counter, Counter]:
    """(rows, wall seconds, meta seconds by phase, evaluations by phase)."""
    from operators.sample import sample_tasks

    with timed_meta_evaluations() as (spent, calls):
        t = time.perf_counter()
        rows = sample_tasks(cfg, seed, range(n), set())
        wall = time.perf_counter() - t
    return rows, wall, spent, calls


def one_evaluation_per_op(rows: list[dict], variants: bool = False) -> tuple[float, int]:
    """(seconds, evaluations) to run every task's graph once on meta at its sizes, memos cleared first;
    `variants`: then at each of its recorded shape variants too (memos kept within the task, so a batch-only
    variant derives from the first run where batch scaling can)."""
    from operators import batch_scale, graph
    from operators.cost import CostMode
    from operators.render import as_graph

    graphs = [(as_graph(r["graph"]), r) for r in rows]
    with timed_meta_evaluations() as (spent, calls):
        for g, r in graphs:
            graph._MEMO.clear()
            batch_scale._MEMO.clear()
            consts = dict(g.graph["constants"])
            graph.execute(g, consts, CostMode())
            for v in json.loads(r["shape_variants"]) if variants else ():
                graph.execute(g, {**consts, **v}, CostMode())
    return sum(spent.values()), sum(calls.values())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="h200")
    ap.add_argument("--n", type=int, default=600)
    ap.add_argument("--seed", type=int, default=1)  # the seed of sampling_bench.py's throughput runs
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "sampling_floor.json"))
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(1)
    from benchmarks.sampling_bench import provenance
    from operators.sample import sample_tasks
    from pipeline.rundir.config import load_preset

    cfg = load_preset(args.preset).sample
    load0 = [round(v, 2) for v in os.getloadavg()]
    sample_tasks(cfg, 999_999, range(20), set())  # warm-up: imports, first calls
    rows, wall, spent, calls = sample_with_timer(cfg, args.seed, args.n)
    t = time.perf_counter()
    sample_tasks(cfg, args.seed, range(args.n), set())  # the same tasks again: every node replays from the memo
    warm_wall = time.perf_counter() - t
    floor_s, floor_evals = one_evaluation_per_op(rows)
    with_variants_s, with_variants_evals = one_evaluation_per_op(rows, variants=True)
    n = len(rows)
    ms = {k: round(v / n * 1e3, 3) for k, v in spent.items()}
    meta = sum(spent.values())
    per_task = {
        "total": round(wall / n * 1e3, 3),
        "meta_build": ms.get("build", 0.0),
        "meta_solved_size": ms.get("solved_size", 0.0),
        "meta_variants": ms.get("variants", 0.0),
        "rest": round((wall - meta) / n * 1e3, 3),
        "one_evaluation_per_op": round(floor_s / n * 1e3, 3),
        "one_evaluation_per_op_and_variant": round(with_variants_s / n * 1e3, 3),
        "same_tasks_again_memo_warm": round(warm_wall / n * 1e3, 3),
    }
    result = {
        **provenance(load0),
        "preset": args.preset, "tasks": n, "ops_per_task": round(statistics.mean(r["num_ops"] for r in rows), 2),
        "tasks_per_s": round(n / wall, 1),
        "ms_per_task": per_task,
        "meta_evaluations_per_task": {k: round(v / n, 2) for k, v in calls.items()},
        "one_evaluation_per_op_evaluations_per_task": round(floor_evals / n, 2),
        "one_evaluation_per_op_and_variant_evaluations_per_task": round(with_variants_evals / n, 2),
        "ceiling_tasks_per_s": {
            "sampler_meta_evaluations_only": round(1e3 / (per_task["total"] - per_task["rest"]), 1),
            "build_evaluations_only": round(1e3 / per_task["meta_build"], 1),
            "one_evaluation_per_op": round(1e3 / per_task["one_evaluation_per_op"], 1),
            "one_evaluation_per_op_and_variant": round(1e3 / per_task["one_evaluation_per_op_and_variant"], 1),
            # the sampler's bookkeeping (the memo-warm pass) plus the least meta work: no failed try, no re-run
            "bookkeeping_plus_one_evaluation_per_op_and_variant": round(
                1e3 / (per_task["same_tasks_again_memo_warm"] + per_task["one_evaluation_per_op_and_variant"]), 1),
        },
        "same_tasks_again_memo_warm_tasks_per_s": round(n / warm_wall, 1),
    }
    print(f"{n} tasks ({args.preset}), one process: {result['tasks_per_s']} tasks/s, {per_task['total']} ms per task")
    print(f"  {'ms per task':34s} {'ms':>7s} {'evals':>6s}")
    for key, label in [("meta_build", "meta: building (failed tries too)"), ("meta_solved_size", "meta: at the solved size"),
                       ("meta_variants", "meta: shape variants"), ("rest", "everything else")]:
        evals = result["meta_evaluations_per_task"].get(key.removeprefix("meta_"), "")
        print(f"  {label:34s} {per_task[key]:7.3f} {evals!s:>6s}")
    print(f"  {'one evaluation per op, memos cold':34s} {per_task['one_evaluation_per_op']:7.3f} "
          f"{result['one_evaluation_per_op_evaluations_per_task']:>6}")
    print(f"  {'... and per shape variant':34s} {per_task['one_evaluation_per_op_and_variant']:7.3f} "
          f"{result['one_evaluation_per_op_and_variant_evaluations_per_task']:>6}")
    print(f"  {'the same tasks again, memo warm':34s} {per_task['same_tasks_again_memo_warm']:7.3f}   "
          f"({result['same_tasks_again_memo_warm_tasks_per_s']} tasks/s: every meta evaluation replayed)")
    print("ceiling in tasks/s if everything else were free: " + ", ".join(
        f"{k} {v}" for k, v in result["ceiling_tasks_per_s"].items()))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
