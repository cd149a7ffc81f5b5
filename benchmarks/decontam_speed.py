"""Decontamination compare speed against a baseline commit, interleaved in one run (a shared CPU is noisy).

    python benchmarks/decontam_speed.py --baseline REF [--scale 100000] [--rounds 3] [--workers 2]

Candidates: every main-snapshot problem, plain and disguised three ways (benchmarks/disguise.py), with the
ops its index row records, tiled to `--scale`. The baseline's detectors/contamination.py (filters/ before it moved) and shipped main index
are read from git at REF; each round times the baseline's compare and this tree's on their own fingerprints
of the same candidates, alternating. Prints a table and writes benchmarks/results/decontam_speed.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# the reference copies live in a `shared/` folder beside the checkout (or beside its parent, for a worktree)
SHARED = next((d / "shared" for d in (ROOT.parent, ROOT.parent.parent) if (d / "shared" / "reference").exists()),
              ROOT.parent / "shared")
SNAP = SHARED / "reference" / "kernelbench"


def _git(ref: str, path: str) -> bytes:
    return subprocess.run(["git", "show", f"{ref}:{path}"], capture_output=True, check=True, cwd=ROOT).stdout


def _baseline(ref: str):
    """(contamination module, ReferenceMatrix) of the baseline commit."""
    spec = importlib.util.spec_from_loader("baseline_contamination", loader=None)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["baseline_contamination"] = mod  # the worker pool pickles its functions by module name
    try:
        src = _git(ref, "detectors/contamination.py")
    except subprocess.CalledProcessError:  # a commit from before the detectors package
        src = _git(ref, "filters/contamination.py")
    exec(compile(src, "baseline_contamination", "exec"), mod.__dict__)  # noqa: S102
    d = pq.read_table(io.BytesIO(_git(ref, "data/reference/kernelbench_main.index.parquet"))).to_pydict()
    mat = mod.ReferenceMatrix(d["key"], [np.asarray(a, dtype=np.uint32) for a in d["ast"]],
                              np.asarray(d["minhash"], dtype=np.uint32).reshape(len(d["key"]), -1),
                              [tuple(o or ()) for o in d["ops"]], [tuple(t or ()) for t in d.get("text_sig", [[]] * len(d["key"]))])
    return mod, mat


def _tile(fp: dict, n: int) -> dict:
    m = len(fp["ast"])
    reps = -(-n // m)
    out = {}
    for k, v in fp.items():
        out[k] = (np.tile(v, (reps, 1)) if isinstance(v, np.ndarray) else list(v) * reps)[:n]
    return out


def _fp_part(part: tuple[list[str], list]) -> dict:
    from detectors import contamination as new

    return new.fingerprints(part[0], part[1])


def release_check(release: Path, workers: int) -> dict:
    """Every task of a release's run (its tasks table: code and recorded ATen ops) scored by this tree against the
    shipped indexes, next to the verdicts the release recorded (run/contamination): which tasks change, and how."""
    import multiprocessing as mp

    from detectors import contamination as new
    from pipeline.rundir.reference import load_index, reference_matrix

    tasks = pq.read_table(release / "run" / "tasks", columns=["task_id", "code", "aten_ops"]).to_pylist()
    before = {r["task_id"]: r for r in pq.read_table(release / "run" / "contamination").to_pylist()}
    published = set(pq.read_table(release / "data", columns=["task_id"]).column("task_id").to_pylist())
    ref = reference_matrix(load_index("builtin"))
    codes = [t["code"] or "" for t in tasks]
    ops = [list(t["aten_ops"]) if t["aten_ops"] else None for t in tasks]
    step = -(-len(codes) // (workers * 4))
    with mp.get_context("fork").Pool(workers) as pool:
        parts = pool.map(_fp_part, [(codes[i:i + step], ops[i:i + step]) for i in range(0, len(codes), step)])
    fp = {k: ([x for p in parts for x in p[k]] if k != "minhash" else np.concatenate([p[k] for p in parts]))
          for k in parts[0]}
    scored = new.compare(fp, ref, workers=workers)
    changed = [{"task_id": t["task_id"], "published": t["task_id"] in published,
                "before": before[t["task_id"]]["contaminated"], "after": s["contaminated"],
                "after_detectors": s["detectors_fired"], "after_nearest": s["kb_nearest"]}
               for t, s in zip(tasks, scored, strict=True)
               if t["task_id"] in before and before[t["task_id"]]["contaminated"] != s["contaminated"]]
    return {"tasks": len(tasks), "published": len(published),
            "contaminated_before": sum(r["contaminated"] for r in before.values()),
            "contaminated_after": sum(s["contaminated"] for s in scored),
            "published_changed": sum(c["published"] for c in changed), "changed": changed[:50]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", required=True)
    ap.add_argument("--release", default="", help="also score this release's tasks (decontam_speed_release.json)")
    ap.add_argument("--scale", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "decontam_speed.json"))
    args = ap.parse_args()

    if args.release:
        import torch

        got = release_check(Path(args.release), args.workers)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=ROOT).stdout.strip()
        got = {"headline": [{"figure": "release v1 tasks whose contamination verdict changes",
                             "value": f"{len(got['changed'])} of {got['tasks']} ({got['published_changed']} of "
                                      f"{got['published']} published rows); contaminated {got['contaminated_before']}"
                                      f" before, {got['contaminated_after']} after",
                             "target": "0 published rows", "command": " ".join(
                                 ["python", "benchmarks/decontam_speed.py", *sys.argv[1:]]),
                             "hardware": "2-core CPU (no GPU)", "torch": torch.__version__, "commit": commit}], **got}
        out = Path(args.out).with_name("decontam_speed_release.json")
        out.write_text(json.dumps(got, indent=1))
        print(json.dumps(got["headline"][0]["value"]))
        print(f"wrote {out}")
        return

    from benchmarks.disguise import disguise
    from detectors import contamination as new
    from pipeline.rundir.reference import load_index, reference_matrix

    old, old_ref = _baseline(args.baseline)
    index = load_index("builtin:main")
    new_ref = reference_matrix(index)
    ops_by_key = dict(zip(index.column("key").to_pylist(), index.column("ops").to_pylist(), strict=True))
    codes, ops = [], []
    for p in pq.read_table(SNAP / "kernelbench_main.parquet").to_pylist():
        key = f"level{p['level']}/{p['name']}"
        for kind in ("plain", "rename", "noop_wrap", "all"):
            codes.append(p["code"] if kind == "plain" else disguise(p["code"], kind, random.Random(f"{key}/{kind}")))
            ops.append(["aten." + o for o in ops_by_key.get(key, [])])
    t0 = time.time()
    fp_old = old.fingerprints(codes, ops)
    old_fp_s = time.time() - t0
    t0 = time.time()
    fp_new = new.fingerprints(codes, ops)
    new_fp_s = time.time() - t0
    big_old, big_new = _tile(fp_old, args.scale), _tile(fp_new, args.scale)
    rows, times = [], {"baseline": [], "this tree": []}
    for r in range(args.rounds):
        for label, mod, fp, ref in (("baseline", old, big_old, old_ref), ("this tree", new, big_new, new_ref)):
            t0 = time.time()
            res = mod.compare(fp, ref, workers=args.workers)
            dt = time.time() - t0
            times[label].append(dt)
            rows.append([r, label, f"{dt:.1f}", f"{np.mean([x['contaminated'] for x in res]):.3f}"])
    ratio = [n / b for b, n in zip(times["baseline"], times["this tree"], strict=True)]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    result = {"candidates": args.scale, "unique": len(codes), "workers": args.workers, "seconds": times,
              "ratio_this_over_baseline": ratio, "fingerprint_s_unique": {"baseline": round(old_fp_s, 2),
                                                                       "this tree": round(new_fp_s, 2)},
              "meta": {"command": " ".join(["python", *sys.argv]), "git_commit": commit, "baseline": args.baseline}}
    import torch

    cmd = " ".join(["python", "benchmarks/decontam_speed.py", *sys.argv[1:]])
    result = {"headline": [
        {"figure": f"decontamination compare, {args.scale:,} candidates, {args.workers} workers: this tree / "
                   f"{args.baseline}", "value": " and ".join(f"{x:.2f}" for x in ratio) + " (" + ", ".join(
                       f"{b:.1f} s vs {n:.1f} s" for b, n in zip(times["baseline"], times["this tree"], strict=True))
                   + ")", "target": "<= 1.20", "command": cmd, "hardware": "2-core CPU (no GPU)",
         "torch": torch.__version__, "commit": commit}], **result}
    from pipeline.outputs.report import format_table

    print(format_table(["round", "version", "compare s", "flagged share"], [tuple(r) for r in rows], max_rows=100))
    print(f"ratio this/baseline per round: {[round(x, 2) for x in ratio]}; fingerprints of {len(codes)} unique "
          f"sources: baseline {old_fp_s:.1f} s, this tree {new_fp_s:.1f} s")
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
