"""Dedupe benchmark: the near-duplicate rule against the former one, with every dropped pair's ops side by side.

    python benchmarks/dedupe_bench.py [--preset h200] [--n 900 3000] [--seed 0] [--run DIR ...]

Task sets: tasks sampled on the CPU with the preset's sample section (operators.sample.sample_tasks, task
indices 0..n-1, so the larger set contains the smaller; cached as parquet under --cache), and any run directory
given with --run (the tasks its earlier stages kept, eager times from its measurements: what the dedupe stage
reads). Sampled sets have no eager times: predicted runtimes pick the representatives.

Rules: `new` is detectors.dedupe.dedupe as the stage runs it. `old` is the former rule, kept only here for the
comparison: exact and structural as now, then MinHash-LSH over the rendered code (identifiers kept) at
dedupe.minhash_threshold, connected clusters by union-find, a task dropped when a kept earlier task is one of
its pairs.

Per set and rule: drops per kind, near clusters and the largest, and near drops whose pair (the dropped task
and the kept task its reason names) differs in its operators; precision is the share of near drops whose pair
has the same operator multiset. Every dropped pair is listed with both op lists and the evidence. Calibration
of the code threshold: de-templated code Jaccard of pairs with the same ops but another graph, and of pairs
with different ops. Prints tables and writes benchmarks/results/dedupe_bench.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
_OTHER = re.compile(r"duplicate of ([0-9A-Za-z_-]+)")


def _table(headers: list[str], rows: list[list]) -> str:
    from pipeline.outputs.report import format_table

    return format_table(headers, [tuple(r) for r in rows], max_rows=100_000)


def sampled_set(preset: str, seed: int, n: int, cache: Path) -> tuple[list[dict], dict]:
    """(tasks, dedupe keyword arguments) for the first n tasks of `preset` at `seed`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.rundir.config import load_preset
    from pipeline.rundir.schema import TASKS, conform
    from pipeline.stages.dedupe import runtime_window

    cfg = load_preset(preset)
    path = cache / f"dedupe_tasks_{preset}_s{seed}_n{n}.parquet"
    if path.exists():
        tasks = pq.read_table(path).to_pylist()
    else:
        from operators.sample import sample_tasks

        t0 = time.time()
        tasks = sample_tasks(cfg.sample, seed, range(n), set())
        print(f"sampled {len(tasks)} {preset} tasks in {time.time() - t0:.0f} s", flush=True)
        cache.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(conform(tasks, TASKS), TASKS), path)
    kw = {"task_ids": [t["task_id"] for t in tasks], "codes": [t["code"] for t in tasks],
          "graph_hashes": [t["graph_hash"] for t in tasks], "graphs": [t["graph"] for t in tasks],
          "ops": [t["ops"] for t in tasks], "eager_ms": [None] * len(tasks),
          "predicted_ms": [t["predicted_ms"] for t in tasks], "window": runtime_window(cfg),
          "code_jaccard": cfg.dedupe.near_code_jaccard}
    return tasks, {"kw": kw, "minhash_threshold": cfg.dedupe.minhash_threshold}


def run_set(run_dir: str) -> tuple[list[dict], dict]:
    from pipeline.rundir.store import RunDir
    from pipeline.stages.dedupe import inputs

    rd = RunDir(Path(run_dir))
    cfg = rd.load_config()
    kw = inputs(rd, cfg)
    tasks = [{"task_id": t, "ops": o} for t, o in zip(kw["task_ids"], kw["ops"], strict=True)]
    return tasks, {"kw": kw, "minhash_threshold": cfg.dedupe.minhash_threshold}


# ---- the former rule (comparison only) ---------------------------------------------------------------
def old_rule(kw: dict, threshold: float) -> list[dict]:
    """Exact and structural as the stage does; near: MinHash-LSH pairs at `threshold`, union-find clusters."""
    from datasketch import MinHash, MinHashLSH

    from detectors.contamination import NUM_PERM, minhashes
    from detectors.dedupe import dedupe

    rows = dedupe(kw["task_ids"], kw["codes"], kw["graph_hashes"])  # no graphs or ops: no new near drops
    by_id = {t: c for t, c in zip(kw["task_ids"], kw["codes"], strict=True)}
    ids = [r["task_id"] for r in rows]
    mh = minhashes([by_id[t] or "" for t in ids], normalize_ids=False)
    parent = list(range(len(ids)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    lsh = MinHashLSH(threshold=min(threshold, 0.9), num_perm=NUM_PERM)
    empty = (mh == np.uint32(0xFFFFFFFF)).all(axis=1)
    pairs_of: dict[int, list[tuple[int, float]]] = {}
    for i, hv in enumerate(mh):
        if empty[i]:
            continue
        m = MinHash(num_perm=NUM_PERM, hashvalues=hv.astype(np.uint64), scheme="affine32")
        for j in lsh.query(m):
            jac = float((mh[j] == hv).mean())
            if jac >= threshold:
                pairs_of.setdefault(i, []).append((j, jac))
                ra, rb = find(i), find(j)
                if ra != rb:
                    parent[max(ra, rb)] = min(ra, rb)
        lsh.insert(i, m)
    kept = {p for p, r in enumerate(rows) if r["keep"]}
    for pos, r in enumerate(rows):
        if not r["keep"]:
            continue
        hit = next(((o, j) for o, j in sorted(pairs_of.get(pos, [])) if o in kept), None)
        if hit:
            kept.discard(pos)
            r.update(keep=False, reason=f"near duplicate of {ids[hit[0]]} (minhash jaccard {hit[1]:.3f})")
    roots = [find(p) for p in range(len(ids))]
    sizes = np.bincount(roots, minlength=len(ids)) if ids else np.zeros(0, int)
    for pos, r in enumerate(rows):
        r["near_cluster"] = ids[roots[pos]] if sizes[roots[pos]] > 1 else None
    return rows


# ---- measures ---------------------------------------------------------------------------------------------
def summarize(rows: list[dict], ops: dict[str, list[str] | None], gkeys: dict[str, str | None]) -> dict[str, Any]:
    """Counts and every dropped pair (dropped task, the kept task its reason names) with both op lists."""
    pairs = []
    for r in rows:
        if r["keep"]:
            continue
        kind = r["reason"].split(" duplicate", 1)[0]
        other = _OTHER.search(r["reason"]).group(1)
        a, b = ops.get(r["task_id"]) or [], ops.get(other) or []
        pairs.append({"kind": kind, "dropped": r["task_id"], "kept": other, "reason": r["reason"],
                      "dropped_ops": a, "kept_ops": b, "same_ops": sorted(a) == sorted(b),
                      "same_graph": gkeys.get(r["task_id"]) is not None
                      and gkeys.get(r["task_id"]) == gkeys.get(other)})
    sizes: dict[str, int] = {}
    for r in rows:
        if r["near_cluster"]:
            sizes[r["near_cluster"]] = sizes.get(r["near_cluster"], 0) + 1
    near = [p for p in pairs if p["kind"] == "near"]
    largest = max(sizes, key=lambda k: (sizes[k], k), default=None)
    largest_ops = sorted({"+".join(ops.get(r["task_id"]) or []) for r in rows if largest and r["near_cluster"] == largest})
    return {
        "tasks": len(rows), "dropped": len(pairs),
        **{f"{k}_dropped": sum(p["kind"] == k for p in pairs) for k in ("exact", "structural", "near")},
        "near_clusters": len(sizes), "largest_near_cluster": sizes.get(largest, 0),
        "largest_near_cluster_ops": largest_ops[:50],
        "near_drops_differing_ops": sum(not p["same_ops"] for p in near),
        "near_precision_same_ops": round(sum(p["same_ops"] for p in near) / len(near), 4) if near else None,
        "near_drops_same_graph": sum(p["same_graph"] for p in near),
        "pairs": pairs,
    }


def calibration(kw: dict, threshold: float) -> dict[str, Any]:
    """De-templated code Jaccard over every pair: same op multiset and same canonical graph (what the graph rule
    drops), same multiset but another graph (what the code rule judges), different operators (the template
    alone: the code rule never compares them, this shows how close they come)."""
    from scipy import sparse

    from detectors.dedupe import canonical_graph_key, detemplated_tokens, ops_multiset, shingles

    n = len(kw["task_ids"])
    sh = [shingles(detemplated_tokens(c or "")) for c in kw["codes"]]
    gk = np.array([canonical_graph_key(g) or f"none{i}" for i, g in enumerate(kw["graphs"])])
    ms = np.array([ops_multiset(o) or f"none{i}" for i, o in enumerate(kw["ops"])])
    vocab: dict[str, int] = {}
    cols = [[vocab.setdefault(x, len(vocab)) for x in s] for s in sh]
    x = sparse.csr_matrix((np.ones(sum(map(len, cols)), np.int32), np.concatenate([np.array(c, np.int64) for c in cols])
                           if n else np.zeros(0, np.int64), np.cumsum([0] + [len(c) for c in cols])), shape=(n, len(vocab)))
    inter = (x @ x.T).toarray().astype(np.float64)
    size = np.array([len(s) for s in sh], np.float64)
    union = size[:, None] + size[None, :] - inter
    jac = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
    upper = np.triu(np.ones((n, n), bool), 1)
    same_ms = ms[:, None] == ms[None, :]
    same_g = gk[:, None] == gk[None, :]
    other = np.where(~same_ms, jac, -1.0)
    np.fill_diagonal(other, -1.0)
    nearest_other = other.max(axis=1) if n > 1 else np.zeros(0)

    def dist(xs: np.ndarray) -> dict[str, Any]:
        q = np.percentile(xs, [0, 50, 90, 99, 100]).round(3).tolist() if len(xs) else []
        return {"pairs": int(len(xs)), "min_p50_p90_p99_max": q, "at_or_above": int((xs >= threshold).sum())}

    return {"same_ops_same_graph": dist(jac[upper & same_ms & same_g]),
            "same_ops_other_graph": dist(jac[upper & same_ms & ~same_g]),
            "different_ops": dist(jac[upper & ~same_ms]),
            "nearest_different_ops_task": dist(nearest_other[nearest_other >= 0])}


def bench_set(name: str, tasks: list[dict], spec: dict) -> dict[str, Any]:
    from detectors.dedupe import canonical_graph_key, dedupe

    kw = spec["kw"]
    ops = {t: o for t, o in zip(kw["task_ids"], kw["ops"], strict=True)}
    gkeys = {t: canonical_graph_key(g) for t, g in zip(kw["task_ids"], kw["graphs"], strict=True)}
    t0 = time.perf_counter()
    new = dedupe(**kw)
    t_new = time.perf_counter() - t0
    t0 = time.perf_counter()
    old = old_rule(kw, spec["minhash_threshold"])
    t_old = time.perf_counter() - t0
    reps = {r["task_id"]: r["representative_reason"] for r in new if r["representative_reason"]}
    out = {"set": name, "tasks": len(tasks), "window_ms": list(kw["window"]), "code_jaccard": kw["code_jaccard"],
           "minhash_threshold": spec["minhash_threshold"],
           "new": {**summarize(new, ops, gkeys), "seconds": round(t_new, 2), "representatives": reps},
           "old": {**summarize(old, ops, gkeys), "seconds": round(t_old, 2)},
           "calibration": calibration(kw, kw["code_jaccard"])}
    return out


def report(res: dict[str, Any]) -> None:
    print(f"\n== {res['set']}: {res['tasks']} tasks (window {res['window_ms'][0]:g}-{res['window_ms'][1]:g} ms, "
          f"code jaccard >= {res['code_jaccard']:g}; old: minhash >= {res['minhash_threshold']:g}) ==")
    cols = ["rule", "dropped", "exact", "structural", "near", "near clusters", "largest", "near pairs differing ops",
            "precision (same ops)", "near same graph", "s"]
    rows = [[rule, r["dropped"], r["exact_dropped"], r["structural_dropped"], r["near_dropped"], r["near_clusters"],
             r["largest_near_cluster"], r["near_drops_differing_ops"], r["near_precision_same_ops"],
             r["near_drops_same_graph"], r["seconds"]] for rule in ("old", "new") for r in [res[rule]]]
    print(_table(cols, rows))
    old = res["old"]
    print(f"old rule's largest near cluster ({old['largest_near_cluster']} tasks): "
          + ", ".join(old["largest_near_cluster_ops"][:12]) + (" ..." if len(old["largest_near_cluster_ops"]) > 12 else ""))
    for rule in ("new", "old"):
        pairs = [p for p in res[rule]["pairs"] if rule == "new" or not p["same_ops"]]
        title = ("every drop of the new rule" if rule == "new"
                 else "the old rule's drops whose pair differs in its operators")
        print(f"\n{title} ({len(pairs)}): ops side by side")
        print(_table(["dropped", "dropped ops", "kept", "kept ops", "evidence"],
                     [[p["dropped"], " + ".join(p["dropped_ops"]), p["kept"], " + ".join(p["kept_ops"]),
                       p["reason"].split(": ", 1)[-1] if p["kind"] == "near" else p["kind"]] for p in pairs]))
    print("\nde-templated code jaccard (calibration of the code threshold)")
    print(_table(["pairs", "count", "min / p50 / p90 / p99 / max", f">= {res['code_jaccard']:g}"],
                 [[k, v["pairs"], " / ".join(f"{x:g}" for x in v["min_p50_p90_p99_max"]), v["at_or_above"]]
                  for k, v in res["calibration"].items()]))


def _flat(x: Any) -> bool:
    """A value written on one line: a scalar, or a dict/list of scalars and lists of scalars (one pair)."""
    if isinstance(x, dict | list):
        vals = x.values() if isinstance(x, dict) else x
        return all(not isinstance(v, dict | list) or (isinstance(v, list) and all(not isinstance(w, dict | list)
                                                                                  for w in v)) for v in vals)
    return True


def to_json(x: Any, ind: int = 0) -> str:
    """JSON with one line per pair (the lists of dropped pairs run to thousands)."""
    if _flat(x) and not (isinstance(x, dict) and ("pairs" in x or len(x) > 12)):
        return json.dumps(x)
    pad = " " * (ind + 1)
    if isinstance(x, dict):
        body = ",\n".join(f"{pad}{json.dumps(k)}: {to_json(v, ind + 1)}" for k, v in x.items())
        return "{\n" + body + "\n" + " " * ind + "}"
    return "[\n" + ",\n".join(pad + to_json(v, ind + 1) for v in x) + "\n" + " " * ind + "]"



def headline(results: list[dict], commit: str) -> list[dict]:
    """The figure docs/figures.md shows: the largest set's near-duplicate drops (python -m pipeline.outputs.figures)."""
    if not results:
        return []
    import torch

    big = max(results, key=lambda r: r["tasks"])
    n = big["new"]
    return [{"figure": "near-duplicate drops between different operators (3,000 h200 tasks)" if big["tasks"] == 3000
             else f"near-duplicate drops between different operators ({big['set']})",
             "value": f"{n['near_drops_differing_ops']} ({n['near_dropped']} dropped in {n['near_clusters']} clusters, "
                      f"all the same canonical graph)" if n["near_drops_same_graph"] == n["near_dropped"] else
                      f"{n['near_drops_differing_ops']} ({n['near_dropped']} dropped in {n['near_clusters']} clusters)",
             "target": "0", "command": "python benchmarks/dedupe_bench.py", "hardware": "2-core CPU (no GPU)",
             "torch": torch.__version__, "commit": commit}]

def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="h200")
    ap.add_argument("--n", type=int, nargs="*", default=[900, 3000], help="sampled set sizes (none: only --run)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--run", nargs="*", default=[], help="run directories to read (tasks kept before dedupe)")
    ap.add_argument("--cache", default="/tmp/opsynth_bench", help="folder for sampled task sets")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "dedupe_bench.json"))
    args = ap.parse_args()

    import subprocess

    results = []
    for n in args.n:
        tasks, spec = sampled_set(args.preset, args.seed, n, Path(args.cache))
        results.append(bench_set(f"{args.preset} sampled n={n} seed={args.seed}", tasks, spec))
        report(results[-1])
    for d in args.run:
        tasks, spec = run_set(d)
        results.append(bench_set(f"run {Path(d).name}", tasks, spec))
        report(results[-1])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    out = {"headline": headline(results, commit), "commit": commit, "python": platform.python_version(),
           "sets": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(to_json(out) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
