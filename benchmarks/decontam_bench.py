"""Decontamination benchmark: detection quality on disguised KernelBench copies and clean tasks, and scale.

    python benchmarks/decontam_bench.py [--clean PATH.parquet] [--scale 100000] [--trace-timeout 5]

Quality: every KernelBench problem of the main snapshot is disguised six ways (rename, reorder,
swap_forms, sizes, noop_wrap, all at once; benchmarks/disguise.py) and scored against the shipped
index (fingerprints of the same snapshot); clean tasks come from the sampler (operators.sample).
Recall per disguise and detector (and per KernelBench level), false-positive rate on clean tasks per
detector and combined: on all sampler tasks, and on the truly clean ones, since a sampler task whose
normalized ATen signature equals a KernelBench problem's exactly (a lone Softmax, a lone Conv2d) is
contamination by the issue's definition, not a false positive; the share of such exact copies is
reported single-op vs multi-op.
Calibration of the AST measure: distributions of the score for disguised copies, for v0 vs main of
the same problem, and between different KernelBench problems.
Scale: the fingerprints are tiled to `--scale` candidates and compared against the full reference;
fingerprinting and tracing throughput are measured separately. Prints tables and writes
benchmarks/results/decontam_bench.json.
"""

from __future__ import annotations

import argparse
import ast
import json
import platform
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
DETECTORS = ("ast", "op_signature", "minhash")


def _table(headers: list[str], rows: list[list]) -> str:
    from pipeline.outputs.report import format_table

    return format_table(headers, [tuple(r) for r in rows], max_rows=1000)


def _fired(rows: list[dict], det: str | None) -> np.ndarray:
    return np.array([r["contaminated"] if det is None else det in r["detectors_fired"] for r in rows], dtype=bool)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clean", default="/tmp/opsynth_bench/clean_tasks.parquet",
                    help="parquet of sampler tasks (TASKS schema); sampled with seed 12345 if missing")
    ap.add_argument("--n-clean", type=int, default=400)
    ap.add_argument("--scale", type=int, default=100_000)
    ap.add_argument("--trace-timeout", type=float, default=30.0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "decontam_bench.json"))
    ap.add_argument("--glue", action="store_true", help="identity-glue recall only (decontam_bench_glue.json)")
    ap.add_argument("--limit", type=int, default=0, help="with --glue: the first N problems of each level (0: all)")
    ap.add_argument("--levels", default="1,2,3")
    args = ap.parse_args()
    if args.glue:
        return glue_bench(args)

    from benchmarks.disguise import KINDS, disguise
    from detectors.contamination import (
        ast_fingerprint,
        ast_ratio,
        compare,
        difflib_ratio,
        fingerprints,
    )
    from filters.static_check import REFERENCE_IMPORTS, check_task_source
    from pipeline.rundir.reference import load_index, reference_matrix, trace_many

    index = load_index("builtin:main")
    ref = reference_matrix(index)
    main_rows = pq.read_table(SNAP / "kernelbench_main.parquet").to_pylist()
    main_by_key = {f"level{p['level']}/{p['name']}": p for p in main_rows}
    v0_rows = pq.read_table(SNAP / "kernelbench_v0.parquet").to_pylist()

    # ---- disguised set
    kinds = [*KINDS, "all"]
    items = []
    for p in main_rows:
        for k in kinds:
            rng = random.Random(f"level{p['level']}/{p['name']}/{k}")
            code = disguise(p["code"], k, rng)
            items.append({"kind": k, "key": f"level{p['level']}/{p['name']}", "level": p["level"], "code": code,
                          "changed": code.strip() != p["code"].strip()})
    # RNN problems unroll every time step on meta (20-40 s a trace, ~100k ops): only their copies whose text is far
    # from the source (noop_wrap, all) are traced, with room for it; the others share their text and are compared by it
    long_trace = {k for k, o in zip(index.column("key").to_pylist(), index.column("ops").to_pylist(), strict=True)
                  if len(o) > 20000}
    traceable = [i for i, it in enumerate(items) if check_task_source(it["code"], REFERENCE_IMPORTS) is None
                 and it["key"] not in long_trace]
    recurrent = [i for i, it in enumerate(items) if it["key"] in long_trace and it["kind"] in ("noop_wrap", "all")
                 and check_task_source(it["code"], REFERENCE_IMPORTS) is None]
    t0 = time.time()
    traced = trace_many([items[i]["code"] for i in traceable], workers=2, timeout_s=args.trace_timeout)
    trace_s, n_fast = time.time() - t0, len(traceable)
    traced += trace_many([items[i]["code"] for i in recurrent], workers=2, timeout_s=max(args.trace_timeout, 600.0))
    traceable += recurrent
    # a size change can make a program invalid (a LayerNorm shape no longer fits): scale only the batch then
    redo = [i for i, r in zip(traceable, traced, strict=True) if not r.get("ok") and items[i]["kind"] in ("sizes", "all")
            and "timed out" not in r.get("error", "")]
    for i in redo:
        p = main_by_key[items[i]["key"]]
        items[i]["code"] = disguise(p["code"], items[i]["kind"], random.Random(f"{items[i]['key']}/{items[i]['kind']}"),
                                    only_batch=True)
    retraced = dict(zip(redo, trace_many([items[i]["code"] for i in redo], workers=2, timeout_s=args.trace_timeout),
                        strict=True))
    ops, live, shapes = [None] * len(items), [None] * len(items), [None] * len(items)
    trace_errors = {}
    for i, res in zip(traceable, traced, strict=True):
        res = retraced.get(i, res)
        if res.get("ok"):  # scored as decontaminate scores a traced task: with its live ops and input shapes
            ops[i], live[i], shapes[i] = res["ops"], res.get("live_ops"), res.get("inputs")
        else:
            trace_errors[f"{items[i]['kind']}:{items[i]['key']}"] = res.get("error", "")[:120]
    t0 = time.time()
    fp = fingerprints([it["code"] for it in items], ops, live, shapes)
    time.time() - t0
    scored = compare(fp, ref)

    # ---- clean set
    clean_path = Path(args.clean)
    if not clean_path.exists():
        import pyarrow as pa

        from operators.sample import sample_tasks
        from pipeline.rundir.config import load_preset
        from pipeline.rundir.schema import TASKS

        clean_path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(sample_tasks(load_preset("demo").sample, 12345,
                                                         range(args.n_clean), set()), schema=TASKS), clean_path)
    clean = pq.read_table(clean_path).to_pylist()[: args.n_clean]
    cfp = fingerprints([c["code"] for c in clean], [c["aten_ops"] for c in clean])
    cscored = compare(cfp, ref)

    # ---- quality tables
    recall_rows = []
    result: dict = {"recall": {}, "false_positive": {}}
    for k in kinds:
        sel = [s for s, it in zip(scored, items, strict=True) if it["kind"] == k]
        row = [k, len(sel)]
        result["recall"][k] = {"n": len(sel)}
        for det in (*DETECTORS, None):
            rate = float(_fired(sel, det).mean())
            row.append(f"{100 * rate:.1f}%")
            result["recall"][k][det or "combined"] = rate
        recall_rows.append(row)
    allsel = scored
    row = ["every disguise", len(allsel)]
    result["recall"]["overall"] = {"n": len(allsel)}
    for det in (*DETECTORS, None):
        rate = float(_fired(allsel, det).mean())
        row.append(f"{100 * rate:.1f}%")
        result["recall"]["overall"][det or "combined"] = rate
    recall_rows.append(row)
    result["recall_by_level"] = {}
    for level in sorted({it["level"] for it in items}):
        sel = [s for s, it in zip(scored, items, strict=True) if it["level"] == level]
        result["recall_by_level"][f"level{level}"] = {"n": len(sel), **{det or "combined": float(_fired(sel, det).mean())
                                                                         for det in (*DETECTORS, None)}}
    result["op_signature_by_text"] = sum(s["_op_signature_via"] is not None and s["_op_signature_via"].startswith("text:")
                                         for s in scored)
    missed = [(it["kind"], it["key"], s["kb_ast_similarity"], s["kb_minhash_jaccard"], ops[i] is not None)
              for i, (s, it) in enumerate(zip(scored, items, strict=True)) if not s["contaminated"]]
    result["missed"] = missed
    result["trace_errors"] = trace_errors
    # which disguised copies point at the right problem
    right = np.mean([s["kb_nearest"] == it["key"] for s, it in zip(scored, items, strict=True) if s["contaminated"]])
    result["nearest_is_source"] = float(right)

    n_ops = np.array([c["num_ops"] or 0 for c in clean])
    # an exact ordered ATen-signature match is contamination by definition, so those tasks are not clean
    copy = np.array([bool(o) and tuple(o) in ref.sig_t for o in cfp["ops"]])
    result["exact_signature_copies"] = {
        label: {"n": int(mask.sum()), "copies": int((copy & mask).sum()),
                "share": float((copy & mask).sum() / max(1, mask.sum()))}
        for label, mask in (("all", n_ops >= 0), ("single-op", n_ops == 1), ("multi-op", n_ops >= 2))}
    result["exact_signature_copies"]["copied_problems"] = sorted(
        {s["kb_op_signature_nearest"] for s, c in zip(cscored, copy, strict=True) if c})
    fp_rows = []
    for label, mask in (("all clean", n_ops >= 0), ("single-op", n_ops == 1), ("2+ ops", n_ops >= 2),
                        ("truly clean (no exact signature copy)", ~copy),
                        ("truly clean, single-op", ~copy & (n_ops == 1)), ("truly clean, 2+ ops", ~copy & (n_ops >= 2))):
        sel = [s for s, m in zip(cscored, mask, strict=True) if m]
        row = [label, len(sel)]
        result["false_positive"][label] = {"n": len(sel)}
        for det in (*DETECTORS, None):
            rate = float(_fired(sel, det).mean()) if sel else 0.0
            row.append(f"{100 * rate:.2f}%")
            result["false_positive"][label][det or "combined"] = rate
        fp_rows.append(row)
    flagged_clean = [(c["name"], s["detectors_fired"], s["kb_nearest"], s["kb_ast_similarity"], s["kb_minhash_jaccard"])
                     for c, s in zip(clean, cscored, strict=True) if s["contaminated"]]
    result["clean_flagged"] = flagged_clean
    result["truly_clean_flagged"] = [
        {"name": c["name"], "num_ops": c["num_ops"], "detectors": s["detectors_fired"], "nearest": s["kb_nearest"],
         "ast": s["kb_ast_similarity"], "ast_nearest": s["kb_ast_nearest"], "minhash": s["kb_minhash_jaccard"],
         "minhash_nearest": s["kb_minhash_nearest"], "ops": list(o)}
        for c, s, o, cp in zip(clean, cscored, cfp["ops"], copy, strict=True) if s["contaminated"] and not cp]

    # ---- calibration of the AST score
    fps = {f"level{r['level']}/{r['name']}": ast_fingerprint(r["code"]) for r in main_rows}
    keys = list(fps)
    other_max = []
    for k in keys:
        other_max.append(max(ast_ratio(fps[k], fps[o]) for o in keys if o != k))
    other_max = np.array(other_max)
    v0_same = []
    mains = {(r["level"], r["problem_id"]): r for r in main_rows}
    for r in v0_rows:
        m = mains[(r["level"], r["problem_id"])]
        if m["name"] == r["name"]:
            v0_same.append(ast_ratio(ast_fingerprint(r["code"]), ast_fingerprint(m["code"])))
    v0_same = np.array(v0_same)

    def pct(a: np.ndarray) -> list[str]:
        return [f"{np.percentile(a, q):.3f}" for q in (5, 25, 50, 75, 95)] + [f"{100 * np.mean(a >= 0.9):.1f}%"]

    cal_rows = [["v0 vs main, same problem", len(v0_same), *pct(v0_same)],
                ["KB problem vs nearest OTHER KB problem", len(other_max), *pct(other_max)],
                ["clean sampler task vs nearest KB", len(cscored), *pct(np.array([s["kb_ast_similarity"] for s in cscored]))]]
    for k in kinds:
        a = np.array([s["kb_ast_similarity"] for s, it in zip(scored, items, strict=True) if it["kind"] == k])
        cal_rows.append([f"disguise: {k}", len(a), *pct(a)])
    # the same threshold under difflib's ratio (the usual Python "AST similarity"): do the two agree at 0.9?
    pairs = [(fp["ast"][i], fps[it["key"]]) for i, it in enumerate(items)]
    pairs += [(cfp["ast"][i], fps[s["kb_ast_nearest"]]) for i, s in enumerate(cscored) if s["kb_ast_nearest"] in fps]
    lcs_r = np.array([ast_ratio(a, b) for a, b in pairs])
    dl_r = np.array([difflib_ratio(a, b) for a, b in pairs])
    agree = float(np.mean((lcs_r >= 0.9) == (dl_r >= 0.9)))
    result["difflib_agreement_at_0.9"] = {"pairs": len(pairs), "agree": agree,
                                          "lcs_only": int(np.sum((lcs_r >= 0.9) & (dl_r < 0.9))),
                                          "difflib_only": int(np.sum((lcs_r < 0.9) & (dl_r >= 0.9))),
                                          "mean_gap": float(np.mean(lcs_r - dl_r))}
    result["calibration"] = {r[0]: dict(zip(["n", "p5", "p25", "p50", "p75", "p95", "share>=0.9"], r[1:],
                                            strict=True)) for r in cal_rows}
    result["kb_pairs_over_0.9"] = [(keys[i], float(other_max[i])) for i in np.nonzero(other_max >= 0.9)[0]]

    # ---- scale
    n_unique = len(items) + len(clean)
    codes_all = [it["code"] for it in items] + [c["code"] for c in clean]
    t0 = time.time()
    fingerprints(codes_all, None)
    fp_all_s = time.time() - t0
    reps = -(-args.scale // n_unique)
    big = {"ast": (fp["ast"] + cfp["ast"]) * reps,
           "minhash": np.tile(np.concatenate([fp["minhash"], cfp["minhash"]]), (reps, 1)),
           "ops": (fp["ops"] + cfp["ops"]) * reps, "text_sig": (fp["text_sig"] + cfp["text_sig"]) * reps}
    big = {k: v[: args.scale] for k, v in big.items()}
    t0 = time.time()
    big_scored = compare(big, ref, workers=2)
    compare_s = time.time() - t0
    result["scale"] = {"candidates": args.scale, "unique_candidates": n_unique, "reference_problems": len(ref.keys),
                       "compare_s": round(compare_s, 2),
                       "contaminated_share": float(np.mean([s["contaminated"] for s in big_scored])),
                       "fingerprint_ast_minhash_per_s": round(n_unique / fp_all_s, 1),
                       "trace_per_s_2_workers": round(n_fast / trace_s, 2),
                       "trace_timeout_s": args.trace_timeout, "traced_ok": int(sum(o is not None for o in ops)),
                       "text_only_rnn_copies": sum(it["key"] in long_trace for it in items) - len(recurrent),
                       "traced_rnn_copies": len(recurrent),
                       "traced_attempted": len(traceable)}

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    import torch

    result["meta"] = {"command": " ".join(["python", *sys.argv]), "machine": platform.platform(),
                      "cpus": __import__("os").cpu_count(), "torch": torch.__version__, "git_commit": commit,
                      "reference": sorted(set(index.column("source").to_pylist())),
                      "ast_threshold": 0.9, "minhash_threshold": 0.7, "clean_tasks": str(clean_path)}
    common = {"command": " ".join(["python", "benchmarks/decontam_bench.py", *sys.argv[1:]]),
              "hardware": "2-core CPU (no GPU)", "torch": torch.__version__, "commit": commit}
    fp_all = result["false_positive"]["all clean"]
    result = {"headline": [
        *({"figure": f"recall on disguised KernelBench copies: {k}", "value": f"{100 * v['combined']:.1f}% (n={v['n']})",
           "target": "unchanged or better", **common} for k, v in result["recall"].items()),
        {"figure": "false positives on clean sampled tasks", "value": f"{100 * fp_all['combined']:.2f}% "
         f"(n={fp_all['n']})", "target": "<= 0.5%", **common}], **result}
    hdr = ["set", "n", "ast", "op_signature", "minhash", "combined"]
    print("Recall on disguised KernelBench copies (main snapshot, all 4 levels)")
    print(_table(hdr, recall_rows))
    print(_table(["level", *hdr[1:]], [[lv, r["n"], *(f"{100 * r[d]:.1f}%" for d in (*DETECTORS, "combined"))]
                                        for lv, r in result["recall_by_level"].items()]))
    print(f"op signature fired by a transformers model id (text) on {result['op_signature_by_text']} copies")
    print(f"\nnearest problem is the disguised source in {100 * right:.1f}% of detections")
    print(f"missed ({len(missed)}): {missed[:40]}")
    print(f"trace errors ({len(trace_errors)}): {list(trace_errors.items())[:15]}")
    print("\nFalse-positive rate on clean sampler tasks (demo preset, seed 12345)")
    print(_table(hdr, fp_rows))
    print(f"exact ATen-signature copies of a KernelBench problem among sampler tasks: "
          f"{json.dumps({k: v for k, v in result['exact_signature_copies'].items() if k != 'copied_problems'})}")
    print(f"flagged clean tasks: {flagged_clean[:30]}")
    print(f"flagged truly clean tasks: {result['truly_clean_flagged']}")
    print("\nCalibration of the AST score (2*LCS/total over normalized AST tokens)")
    print(_table(["pairs", "n", "p5", "p25", "p50", "p75", "p95", ">=0.9"], cal_rows))
    print(f"LCS ratio vs difflib ratio at 0.9: {result['difflib_agreement_at_0.9']}")
    print("\nScale")
    print(_table(list(result["scale"]), [list(result["scale"].values())]))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str))
    print(f"\nwrote {out}")


def glue_bench(args: argparse.Namespace) -> None:
    """Recall on copies with identity glue, per glue kind alone and combined with every other disguise, over
    KernelBench levels 1-3 (the first `--limit` problems of each): traced, fingerprinted and compared as
    decontaminate does it. Writes benchmarks/results/decontam_bench_glue.json."""
    import torch

    from benchmarks.disguise import GLUE_KINDS, disguise
    from detectors.contamination import compare, fingerprints
    from filters.static_check import REFERENCE_IMPORTS, check_task_source
    from pipeline.rundir.reference import load_index, reference_matrix, trace_many

    index = load_index("builtin:main")
    ref = reference_matrix(index)
    long_trace = {k for k, o in zip(index.column("key").to_pylist(), index.column("ops").to_pylist(), strict=True)
                  if len(o) > 20000}  # RNNs unroll every step on meta: compared by text here
    levels = {int(x) for x in args.levels.split(",")}
    rows = [p for p in pq.read_table(SNAP / "kernelbench_main.parquet").to_pylist() if p["level"] in levels]
    if args.limit:
        rows = [p for lv in sorted(levels) for p in [r for r in rows if r["level"] == lv][:args.limit]]
    kinds = [f"glue_{k}{c}" for k in [*GLUE_KINDS, "all"] for c in ("", "+all")]
    items = []
    for p in rows:
        key = f"level{p['level']}/{p['name']}"
        for k in kinds:
            code = disguise(p["code"], k, random.Random(f"{key}/{k}"))
            items.append({"kind": k, "key": key, "level": p["level"], "code": code})
    # idempotent and spelling glue apply only where the source has a relu/abs or a torch.matmul: others are skipped
    plain_by_key = {f"level{p['level']}/{p['name']}": p["code"] for p in rows}
    for it in items:
        base = it["kind"].partition("+")[0][len("glue_"):]
        if base in ("idempotent", "spelling"):
            alone = disguise(plain_by_key[it["key"]], f"glue_{base}", random.Random(0))
            it["applies"] = ast.dump(ast.parse(alone)) != ast.dump(ast.parse(plain_by_key[it["key"]]))
        else:
            it["applies"] = True
    items = [it for it in items if it["applies"]]
    loads = [check_task_source(it["code"], REFERENCE_IMPORTS) is None for it in items]
    todo = [i for i, it in enumerate(items) if loads[i] and it["key"] not in long_trace]
    # a recurrent copy whose text is far from its source (every glue kind, or every disguise) is traced, with room
    recurrent = [i for i, it in enumerate(items) if loads[i] and it["key"] in long_trace
                 and (it["kind"].endswith("+all") or it["kind"] == "glue_all")]
    t0 = time.time()
    traced = trace_many([items[i]["code"] for i in todo], workers=2, timeout_s=args.trace_timeout)
    traced += trace_many([items[i]["code"] for i in recurrent], workers=2, timeout_s=600.0)
    todo += recurrent
    # a resize can make a program invalid (a LayerNorm shape no longer fits): scale only the batch then
    redo = [i for i, r in zip(todo, traced, strict=True) if not r.get("ok") and items[i]["kind"].endswith("+all")
            and "timed out" not in r.get("error", "")]
    for i in redo:
        it = items[i]
        it["code"] = disguise(plain_by_key[it["key"]], it["kind"], random.Random(f"{it['key']}/{it['kind']}"),
                              only_batch=True)
    retraced = dict(zip(redo, trace_many([items[i]["code"] for i in redo], workers=2, timeout_s=args.trace_timeout),
                        strict=True))
    traced = [retraced.get(i, r) for i, r in zip(todo, traced, strict=True)]
    trace_s = time.time() - t0
    ops, live, shapes = [None] * len(items), [None] * len(items), [None] * len(items)
    failed = {}
    for i, r in zip(todo, traced, strict=True):
        if r.get("ok"):
            ops[i], live[i], shapes[i] = r["ops"], r.get("live_ops"), r.get("inputs")
        else:
            failed[f"{items[i]['kind']}:{items[i]['key']}"] = r.get("error", "")[:120]
    scored = compare(fingerprints([it["code"] for it in items], ops, live, shapes), ref)
    table, by_kind = [], {}
    for k in kinds:
        idx = [i for i, it in enumerate(items) if it["kind"] == k]
        if not idx:
            continue
        hit = sum(scored[i]["contaminated"] for i in idx)
        right = sum(scored[i]["kb_nearest"] == items[i]["key"] for i in idx)
        dets = {d: sum(d in scored[i]["detectors_fired"] for i in idx) for d in DETECTORS}
        by_kind[k] = {"n": len(idx), "caught": hit, "recall": round(hit / len(idx), 4), "nearest_is_source": right,
                      "by_detector": dets, "missed": [items[i]["key"] for i in idx if not scored[i]["contaminated"]]}
        table.append([k, len(idx), hit, f"{100 * hit / len(idx):.1f}%", *(dets[d] for d in DETECTORS)])
    print(_table(["glue kind", "copies", "caught", "recall", *DETECTORS], table))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    cmd = " ".join(["python", "benchmarks/decontam_bench.py", *sys.argv[1:]])
    hw = "2-core CPU (no GPU)"
    headline = [{"figure": f"recall on identity-glue copies, {k.replace('glue_', '').replace('+all', ' + all disguises')}",
                 "value": f"{100 * v['recall']:.1f}% ({v['caught']}/{v['n']})", "target": ">= 99.5%",
                 "command": cmd, "hardware": hw, "torch": torch.__version__, "commit": commit}
                for k, v in by_kind.items()]
    out = Path(args.out).with_name("decontam_bench_glue.json")
    out.write_text(json.dumps({"headline": headline, "by_kind": by_kind, "problems": len(rows),
                               "levels": sorted(levels), "trace_s": round(trace_s, 1), "trace_failed": failed},
                              indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
