"""Can the CPU tell, before any GPU second, which tasks the GPU will reject as "compile disagrees with eager"?
Two candidate predictors, measured against the GPU verdicts of a profiled run:

- a static rule on the operator graph: a step operator (a comparison, sign, floor/round, argsort, ...) with a
  reduction-like operator (reduction, normalization, softmax, scan, matmul, convolution, loss, attention,
  pooling) among its ancestors, whose rounding a compiler may reorder;
- a near-tie count on the CPU: the task run once at the pre-screen's sizes (operators.prescreen.plan_sizes),
  counting at every step op's inputs the elements within t (relative to the inputs' mean magnitude, exact ties
  apart) of the step, extrapolated to the real sizes and to a rounding scale r.

    python benchmarks/compile_disagreement_bench.py --run data/releases/opsynth-ops-h200-v1/run \
        [--kept-sample 300] [--processes 2] [--out benchmarks/results/compile_disagreement_bench.json]

The near-tie part screens every task the GPU found disagreeing that has a step op, and a seeded sample of the
kept ones with a step op. Prints a table and writes JSON. A predictor is worth adding to the pre-screen only if
it flags far more of the disagreeing tasks than of the kept ones.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import warnings
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STEP_NAMES = frozenset({"gt", "lt", "ge", "le", "greater", "less", "greater_equal", "less_equal", "eq", "ne",
                        "heaviside", "isclose", "signbit", "sign", "sgn", "ceil", "floor", "round", "trunc", "fix",
                        "frac", "hardshrink", "threshold", "argsort", "argmax", "argmin", "sort", "bucketize",
                        "searchsorted", "count_nonzero", "one_hot", "mode", "kthvalue", "topk", "median"})
REORDERING = frozenset({"reduction", "normalization", "softmax", "scan", "matmul_linear", "convolution", "loss",
                        "attention_embedding", "pooling"})
TIE_T = 1e-4  # window the density is counted in at the screened sizes
ROUNDING = (1e-7, 1e-6, 1e-5)  # relative rounding scales the density is extrapolated down to
FLAG_AT = (1, 10, 100)  # expected near-ties at the real sizes that flag a task


def is_step(op: str) -> bool:
    base = op.rsplit(".", 1)[-1].lower()
    return base in STEP_NAMES or base.startswith("logical_")


def static_rule(graph_json: str) -> tuple[bool, bool]:
    """(has a step op, has a step op downstream of a reordering op)."""
    import networkx as nx

    g = json.loads(graph_json)
    nodes = {n["id"]: n for n in g["nodes"]}
    dag = nx.DiGraph()
    dag.add_nodes_from(nodes)
    dag.add_edges_from((e["source"], e["target"]) for e in g.get("links", g.get("edges", [])))
    steps = [i for i, n in nodes.items() if n.get("kind") == "op" and is_step(n["op"])]
    downstream = any(nodes[a].get("kind") == "op" and nodes[a].get("category") in REORDERING
                     for s in steps for a in nx.ancestors(dag, s))
    return bool(steps), downstream


def _near_ties(task: tuple[str, str, str]) -> dict:
    """Screen one task on the CPU: per step op, elements and near-ties (0 < gap < TIE_T * scale)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from operators.prescreen import Budget, plan_sizes
    from operators.trace import load_module

    aten = torch.ops.aten
    cmp = {getattr(aten, n).Tensor for n in ("gt", "lt", "ge", "le", "eq", "ne")} | {
        getattr(aten, n).Scalar for n in ("gt", "lt", "ge", "le", "eq", "ne")}
    sign = {aten.sign.default, aten.sgn.default, aten.signbit.default, aten.heaviside.default}
    integer = {aten.floor.default, aten.ceil.default, aten.round.default, aten.trunc.default, aten.frac.default}
    order = {aten.argmax.default, aten.argmin.default, aten.sort.default, aten.sort.stable, aten.topk.default,
             aten.kthvalue.default, aten.median.dim, aten.argsort.default, aten.argsort.stable}

    class Ties(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[tuple[int, int]] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            a = args[0] if args else None
            if not (isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel()):
                return out
            a = a.detach().double()
            if func in cmp:
                b = args[1]
                b = b.detach().double() if isinstance(b, torch.Tensor) else torch.tensor(float(b), dtype=a.dtype)
                gap, scale = (a - b).abs(), a.abs().mean() + b.abs().mean()
            elif func in sign:
                gap, scale = a.abs(), a.abs().mean()
            elif func in integer:
                x = a + 0.5 if func == aten.round.default else a
                frac = x - x.floor()
                gap, scale = torch.minimum(frac, 1 - frac), a.abs().mean().clamp(min=1.0)
            elif func in order:
                dim = args[1] if len(args) > 1 and isinstance(args[1], int) else (kwargs or {}).get("dim", -1)
                s = a.reshape(-1).sort().values if dim is None else a.sort(dim=dim).values
                gap, scale = (s.diff() if dim is None else s.diff(dim=dim)), a.abs().mean()
            else:
                return out
            g = gap.reshape(-1)
            sc = float(scale) if float(scale) > 0 else 1.0
            self.ops.append((g.numel(), int(((g > 0) & (g < TIE_T * sc)).sum())))
            return out

    tid, code, seed = task
    t0 = time.process_time()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    try:
        plan, real = plan_sizes(code, 1, Budget(1000.0, 1024.0))
        if plan is None:
            return {"task_id": tid, "status": "over budget"}
        ns = load_module(code, "screen")
        ns.update(plan.consts)
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(int(seed))
            model = ns["Model"](*ns["get_init_inputs"]())
            torch.manual_seed(int(seed) + 1)
            ties = Ties()
            with ties:
                model(*ns["get_inputs"]())
        grow = sum(real.in_numels) / max(1, sum(plan.in_numels))
        return {"task_id": tid, "status": "ok", "ops": ties.ops, "grow": grow, "cpu_s": time.process_time() - t0}
    except Exception as e:  # noqa: BLE001 - a task that fails on the CPU says nothing either way
        return {"task_id": tid, "status": f"error: {type(e).__name__}"}


def expected_ties(r: dict, rounding: float) -> float:
    """The most near-ties one step op would hold at the real sizes within `rounding` of its step."""
    return max((ties * r["grow"] * rounding / TIE_T for _, ties in r["ops"]), default=0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, required=True)
    ap.add_argument("--kept-sample", type=int, default=300)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/compile_disagreement_bench.json"))
    a = ap.parse_args()
    from pipeline.rundir.config import load_file
    from pipeline.rundir.store import RunDir

    rd = RunDir(a.run)
    cfg = load_file(rd.path / "config.toml")
    verdict = {v["task_id"]: v for v in rd.read_rows("verdicts") if v["stage"] == "filter"}
    tasks = {t["task_id"]: t for t in rd.read_rows("tasks", ["task_id", "graph", "code"]) if t["task_id"] in verdict}
    label = {t: ("disagrees" if "compile disagrees" in (v["reason"] or "") else "kept" if v["keep"] else "other")
             for t, v in verdict.items() if not (v["reason"] or "").startswith("skipped")}
    rule = {t: static_rule(tasks[t]["graph"]) for t in label}
    out: dict = {"command": "python " + " ".join(sys.argv), "machine": "CPU (one core per process)",
                 "run": str(a.run), "tasks": len(label), "static_rule": {}}
    print(f"{'predictor':44} {'flags disagreeing':>20} {'flags kept':>16}")
    for name, i in (("any step op", 0), ("step op after a reordering op", 1)):
        d = sum(rule[t][i] for t in label if label[t] == "disagrees")
        k = sum(rule[t][i] for t in label if label[t] == "kept")
        nd, nk = sum(v == "disagrees" for v in label.values()), sum(v == "kept" for v in label.values())
        out["static_rule"][name] = {"disagreeing_flagged": d, "disagreeing": nd, "kept_flagged": k, "kept": nk}
        print(f"{name:44} {f'{d} / {nd}':>20} {f'{k} / {nk}':>16}")
    dis = sorted(t for t in label if label[t] == "disagrees" and rule[t][0])
    kept = sorted(t for t in label if label[t] == "kept" and rule[t][0])
    kept = random.Random(a.seed).sample(kept, min(a.kept_sample, len(kept)))
    jobs = [(t, tasks[t]["code"], cfg.run.seed) for t in dis + kept]
    t0 = time.time()
    with Pool(a.processes) as pool:
        screened = {r["task_id"]: r for r in pool.imap_unordered(_near_ties, jobs, chunksize=4)}
    ok = [r for r in screened.values() if r["status"] == "ok"]
    out["near_ties"] = {"screened": len(jobs), "with_verdict": len(ok), "wall_s": round(time.time() - t0, 1),
                        "kept_sample_seed": a.seed, "rows": []}
    nd, nk = sum(label[r["task_id"]] == "disagrees" for r in ok), sum(label[r["task_id"]] == "kept" for r in ok)
    print(f"\nnear ties ({len(ok)} of {len(jobs)} screened within budget: {nd} disagreeing, {nk} kept)")
    for rounding in ROUNDING:
        for flag in FLAG_AT:
            hit = [r for r in ok if expected_ties(r, rounding) >= flag]
            d = sum(label[r["task_id"]] == "disagrees" for r in hit)
            k = len(hit) - d
            out["near_ties"]["rows"].append({"rounding": rounding, "flag_at": flag, "disagreeing_flagged": d,
                                             "disagreeing": nd, "kept_flagged": k, "kept": nk})
            print(f"rounding {rounding:g}, >= {flag:3} expected ties {f'{d} / {nd}':>20} {f'{k} / {nk}':>16}")
    a.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"\nwrote {a.out}")


if __name__ == "__main__":
    main()
