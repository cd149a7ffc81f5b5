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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", required=True)
    ap.add_argument("--scale", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "decontam_speed.json"))
    args = ap.parse_args()

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
    from pipeline.outputs.report import format_table

    print(format_table(["round", "version", "compare s", "flagged share"], [tuple(r) for r in rows], max_rows=100))
    print(f"ratio this/baseline per round: {[round(x, 2) for x in ratio]}; fingerprints of {len(codes)} unique "
          f"sources: baseline {old_fp_s:.1f} s, this tree {new_fp_s:.1f} s")
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
