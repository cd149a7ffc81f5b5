"""Decontamination on third-party derivative forms of KernelBench and on real non-KernelBench modules.

    python benchmarks/decontam_real_bench.py [--index builtin:main] [--ops6k N] [--trace-timeout 60]

Positives (benchmarks/derivatives.py, generated from the main snapshot, never copied): functional rewrites,
CUDA-graph wrappers, backend-flag wrappers, reformatted, lightly edited (renamed + reordered), resized, and
history versions (v0 sources of problems main kept under the same name). Each is scored against the shipped
main index (history versions also against `builtin`, main and v0: the product's default) the way `opsynth audit FILE --stages decontaminate` scores a row (static check, isolated trace,
fingerprints, compare); recall per form, per detector, per op normalization.
Negatives (benchmarks/negatives.py), per kind: `kb_style` compositions, `module_db` modules, `attention`
variants, and `ops6k` rows that compute no KernelBench problem (a seeded sample of CUDA-Agent-Ops-6K without the
rows whose exact op signature, live ops or numbered name are a problem's; skipped with a note when the copy is
absent). Prints tables and writes benchmarks/results/decontam_real_bench.json.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# the reference copies live in a `shared/` folder beside the checkout (or beside its parent, for a worktree)
SHARED = next((d / "shared" for d in (ROOT.parent, ROOT.parent.parent) if (d / "shared" / "reference").exists()),
              ROOT.parent / "shared")
SNAP = SHARED / "reference" / "kernelbench"
OPS6K = SHARED / "reference" / "ops6k" / "cuda_agent_ops_6k.parquet"


def _table(headers: list[str], rows: list[list]) -> str:
    from pipeline.outputs.report import format_table

    return format_table(headers, [tuple(r) for r in rows], max_rows=1000)


def _tracer_digest() -> str:
    """Hash of the code a trace result depends on: a cached trace is reused only while it is unchanged."""
    import hashlib

    h = hashlib.sha256()
    for f in ("operators/trace.py", "filters/static_check.py", "pipeline/stages/decontaminate.py"):
        h.update((ROOT / f).read_bytes())
    return h.hexdigest()[:16]


def _traces(codes: list[str], todo: list[int], trace_timeout: float, cache: Path | None) -> dict[int, tuple]:
    """(ops, source, live ops, shapes) per index in `todo`, traced as decontaminate traces them; with `cache`
    (a jsonl file) results of an unchanged tracer are reused and new ones appended (timeouts are not kept:
    they depend on the host's load)."""
    import hashlib

    from pipeline.stages.decontaminate import task_signatures

    digest = _tracer_digest()
    keyed = {i: hashlib.sha256((digest + codes[i]).encode()).hexdigest() for i in todo}
    known: dict[str, tuple] = {}
    if cache is not None and cache.exists():
        for line in cache.read_text().splitlines():
            r = json.loads(line)
            known[r["key"]] = (r["ops"], r["src"], r["live"], r["shapes"])
    missing = [i for i in todo if keyed[i] not in known]
    detail: dict = {}
    o, s = task_signatures([{"code": codes[i]} for i in missing], 2, trace_timeout, detail)
    fresh = {keyed[i]: (o[k], s[k], detail["live_ops"][k], detail["shapes"][k]) for k, i in enumerate(missing)}
    if cache is not None and fresh:
        cache.parent.mkdir(parents=True, exist_ok=True)
        with cache.open("a") as f:
            for key, (ops, src, live, shapes) in fresh.items():
                if "timed out" not in src:
                    f.write(json.dumps({"key": key, "ops": ops, "src": src, "live": live, "shapes": shapes}) + "\n")
    known.update(fresh)
    return {i: known[keyed[i]] for i in todo}


def score(codes: list[str], ref, trace_timeout: float, skip_trace: set[int] | None = None,
          cache: Path | None = None) -> tuple[list[dict], list[str], dict]:
    """compare() rows, op sources and fingerprints of sources, traced as decontaminate traces them."""
    from detectors.contamination import compare, fingerprints

    todo = [i for i in range(len(codes)) if i not in (skip_trace or set())]
    ops, src = [None] * len(codes), ["text-only: long recurrent trace skipped"] * len(codes)
    live, shapes = [None] * len(codes), [None] * len(codes)
    for i, (o, s, lv, sh) in _traces(codes, todo, trace_timeout, cache).items():
        ops[i], src[i], live[i], shapes[i] = o, s, lv, sh
    fp = fingerprints(codes, ops, live, shapes)
    return compare(fp, ref), src, fp


def _write_details(path: Path, ref, keys: list[str], items: list[dict], scored: list[dict], src: list[str], pfp: dict,
                   neg: list[dict], nscored: list[dict], nsrc: list[str], nfp: dict) -> None:
    """One jsonl line per scored source: what fired, at which normalization, and how far its core ops are from the
    problem it came from (positives) or the nearest problem (negatives)."""
    from detectors.contamination import op_overlap

    pos = {k: i for i, k in enumerate(keys)}
    with path.open("w") as f:
        for role, rows, scores, srcs, fp in (("positive", items, scored, src, pfp), ("negative", neg, nscored, nsrc, nfp)):
            for i, (it, s, o) in enumerate(zip(rows, scores, srcs, strict=True)):
                target = it.get("key") or s["kb_nearest"]
                r = pos.get(target, -1)
                f.write(json.dumps({
                    "role": role, "group": it.get("form") or it.get("kind"), "name": it.get("key") or it.get("name"),
                    "note": it.get("note", ""), "op_source": o[:80], "fired": s["detectors_fired"],
                    "nearest": s["kb_nearest"], "normalization": s["kb_op_normalization"],
                    "ast": s["kb_ast_similarity"], "minhash": s["kb_minhash_jaccard"], "core": list(fp["core"][i][:300]), "core_len": len(fp["core"][i]),
                    "shape": fp["shape"][i], "target": target, "target_core": list(ref.core[r][:300]) if r >= 0 else None,
                    "overlap": round(op_overlap(fp["core"][i], ref.core[r]), 3) if r >= 0 else None}) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", default="builtin:main")
    ap.add_argument("--ops6k", type=int, default=400, help="Ops-6K rows sampled for the ops6k negatives")
    ap.add_argument("--trace-timeout", type=float, default=180.0)
    ap.add_argument("--limit", type=int, default=0, help="problems per level (0: all), for a quick run")
    ap.add_argument("--trace-cache", default="", help="jsonl file that keeps trace results between runs (reused "
                    "only while operators/trace.py, the static check and the decontaminate stage are unchanged)")
    ap.add_argument("--details", default="", help="jsonl file for one line per positive and negative (detectors, "
                    "nearest problem, core ops and their overlap with it)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "decontam_real_bench.json"))
    args = ap.parse_args()

    from benchmarks.derivatives import FORMS, derive
    from benchmarks.negatives import attention_tasks, kb_style, module_db_tasks
    from detectors.contamination import compare, op_overlap
    from pipeline.rundir.reference import load_index, reference_matrix
    from pipeline.stages.decontaminate import name_matches

    t_start = time.time()
    index = load_index(args.index)
    ref = reference_matrix(index)
    keys = index.column("key").to_pylist()
    long_trace = {k for k, o in zip(keys, index.column("ops").to_pylist(), strict=True) if len(o) > 20000}
    main_rows = pq.read_table(SNAP / "kernelbench_main.parquet").to_pylist()
    if args.limit:
        main_rows = [r for r in main_rows if r["problem_id"] <= args.limit]
    v0_rows = pq.read_table(SNAP / "kernelbench_v0.parquet").to_pylist()
    main_by = {(r["level"], r["problem_id"]): r for r in main_rows}

    # ---- positives
    items: list[dict] = []
    not_applicable: Counter = Counter()
    for p in main_rows:
        key = f"level{p['level']}/{p['name']}"
        for form in FORMS:
            try:
                code, note = derive(p["code"], form, random.Random(f"{key}/{form}"))
            except (ValueError, SyntaxError):
                not_applicable[form] += 1
                continue
            items.append({"form": form, "key": key, "level": p["level"], "code": code, "note": note})
    for r in v0_rows:
        m = main_by.get((r["level"], r["problem_id"]))
        if m is not None and m["name"] == r["name"]:
            items.append({"form": "history", "key": f"level{m['level']}/{m['name']}", "level": r["level"],
                          "code": r["code"], "note": "identical" if r["code"].strip() == m["code"].strip() else "changed"})
    # recurrent problems unroll every time step on meta (20-40 s a trace): traced only in the forms whose text is
    # far from the source (functional, cuda_graph) and in history versions that changed; the others share their
    # text and are compared by it
    skip = {i for i, it in enumerate(items) if it["key"] in long_trace
            and not (it["form"] in ("functional", "cuda_graph") or it["note"] == "changed")}
    cache = Path(args.trace_cache) if args.trace_cache else None
    t0 = time.time()
    scored, src, pfp = score([it["code"] for it in items], ref, args.trace_timeout, skip, cache)
    pos_s = time.time() - t0
    # history versions again, against the product's default reference set (`builtin`: main and v0): a v0 version of
    # a problem main changed computes something main does not, and only the v0 index holds it
    hist = [i for i, it in enumerate(items) if it["form"] == "history"]
    hist_fp = {k: (v[hist] if hasattr(v, "shape") else [v[i] for i in hist]) for k, v in pfp.items()}
    by_form = {form: [(it, s, o) for it, s, o in zip(items, scored, src, strict=True) if it["form"] == form]
               for form in (*FORMS, "history")}
    by_form["history (main + v0)"] = list(zip([items[i] for i in hist], compare(hist_fp, reference_matrix(
        load_index("builtin"))), [src[i] for i in hist], strict=True))

    # ---- negatives
    rng = random.Random(7)
    neg: list[dict] = []
    for p in main_rows:
        if p["level"] == 2:
            code = kb_style(p["code"], random.Random(p["name"]))
            if code:
                neg.append({"kind": "kb_style", "name": f"from level2/{p['name']}", "code": code,
                            "source": f"level2/{p['name']}"})
    neg += [{"kind": "module_db", "name": n, "code": c} for n, c in module_db_tasks()]
    neg += [{"kind": "attention", "name": n, "code": c} for n, c in attention_tasks(rng)]
    ops6k_note = ""
    if OPS6K.exists():
        rows = pq.read_table(OPS6K).to_pylist()
        pick = sorted(random.Random(11).sample(range(len(rows)), min(args.ops6k, len(rows))))
        neg += [{"kind": "ops6k", "name": f"row {i}", "code": rows[i]["code"]} for i in pick]
    else:
        ops6k_note = f"skipped: {OPS6K.name} not found (CUDA-Agent-Ops-6K copy absent)"
    t0 = time.time()
    nscored, nsrc, nfp = score([n["code"] for n in neg], ref, args.trace_timeout, cache=cache)
    neg_s = time.time() - t0
    named = name_matches([None] * len(neg), index.column("name").to_pylist(), keys)
    excluded: Counter = Counter()
    excluded_rows: list[tuple[str, str]] = []
    keep_neg = []
    for n, s, o, nm, core, ops in zip(neg, nscored, nsrc, named, nfp["core"], nfp["ops"], strict=True):
        n["op_source"] = o
        # the exact detectors: the whole normalized ATen signature of a problem (whatever the shapes), its name
        if n["kind"] == "ops6k" and ((ops and tuple(ops) in ref.sig_t) or nm):
            excluded["ops6k: flagged by an exact detector"] += 1
            continue
        # what its output depends on is a problem's whole computation (dead code such as an unused mask aside):
        # the row computes that problem, as a row with its exact signature does
        if n["kind"] == "ops6k" and s["kb_op_normalization"] == "core":
            excluded["ops6k: its live ops are a problem's (op detector at core)"] += 1
            excluded_rows.append((n["name"], s["kb_nearest"]))
            continue
        if n["kind"] == "kb_style":
            src_i = keys.index(n["source"])
            # a composition that still computes a KernelBench problem is not a negative
            if s["kb_op_signature_match"]:
                excluded["kb_style: computes a KernelBench problem (op match)"] += 1
                continue
            if not o.startswith("traced"):
                excluded["kb_style: did not trace"] += 1
                continue
            if op_overlap(core, ref.core[src_i]) >= 0.5:
                excluded["kb_style: shares half its ops with its source problem"] += 1
                continue
        keep_neg.append((n, s))

    if args.details:
        _write_details(Path(args.details), ref, keys, items, scored, src, pfp, neg, nscored, nsrc, nfp)

    # ---- tables
    result: dict = {"recall": {}, "false_positive": {}, "not_applicable": dict(not_applicable),
                    "negatives_excluded": dict(excluded), "ops6k_live_op_copies": excluded_rows,
                    "ops6k_note": ops6k_note}
    rec_rows = []
    for form, sel in by_form.items():
        if not sel:
            continue
        n = len(sel)
        hit = sum(s["contaminated"] for _, s, _ in sel)
        right = sum(s["contaminated"] and s["kb_nearest"] == it["key"] for it, s, _ in sel)
        det = {d: sum(d in s["detectors_fired"] for _, s, _ in sel) / n for d in ("ast", "op_signature", "minhash")}
        norm = Counter(s["kb_op_normalization"] or ("text" if s["kb_op_signature_match"] else "-") for _, s, _ in sel)
        traced = sum(o.startswith("traced") for _, _, o in sel)
        result["recall"][form] = {"n": n, "recall": hit / n, "nearest_is_source": right / max(1, hit),
                                  "traced": traced, **det, "op_normalization": dict(norm),
                                  "notes": dict(Counter(it["note"] for it, _, _ in sel if it["note"])),
                                  "missed": [(it["key"], it["note"], s["kb_ast_similarity"], s["kb_minhash_jaccard"], o[:80])
                                             for it, s, o in sel if not s["contaminated"]]}
        rec_rows.append([form, n, f"{100 * hit / n:.1f}%", f"{100 * det['ast']:.1f}%", f"{100 * det['op_signature']:.1f}%",
                         f"{100 * det['minhash']:.1f}%", f"{traced}/{n}",
                         ", ".join(f"{k} {v}" for k, v in norm.most_common(4))])
    alln = len(items)
    allhit = sum(s["contaminated"] for s in scored)
    result["recall"]["all forms"] = {"n": alln, "recall": allhit / alln, "index": args.index}
    rec_rows.append(["all forms", alln, f"{100 * allhit / alln:.1f}%", "", "", "", "", ""])
    fp_rows = []
    for kind in ("kb_style", "module_db", "attention", "ops6k"):
        sel = [(n, s) for n, s in keep_neg if n["kind"] == kind]
        if not sel:
            continue
        k = len(sel)
        flagged = [(n["name"], s["detectors_fired"], s["kb_nearest"], s["kb_op_normalization"], s["kb_ast_similarity"],
                    s["kb_minhash_jaccard"]) for n, s in sel if s["contaminated"]]
        det = {d: sum(d in s["detectors_fired"] for _, s in sel) / k for d in ("ast", "op_signature", "minhash")}
        traced = sum(n["op_source"].startswith("traced") for n, _ in sel)
        result["false_positive"][kind] = {"n": k, "rate": len(flagged) / k, **det, "traced": traced, "flagged": flagged}
        fp_rows.append([kind, k, f"{100 * len(flagged) / k:.2f}%", f"{100 * det['ast']:.2f}%",
                        f"{100 * det['op_signature']:.2f}%", f"{100 * det['minhash']:.2f}%", f"{traced}/{k}"])
    alln = len(keep_neg)
    allfp = sum(s["contaminated"] for _, s in keep_neg)
    result["false_positive"]["all kinds"] = {"n": alln, "rate": allfp / max(1, alln)}
    fp_rows.append(["all kinds", alln, f"{100 * allfp / max(1, alln):.2f}%", "", "", "", ""])

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    result["meta"] = {"command": " ".join(["python", *sys.argv]), "git_commit": commit, "index": args.index,
                      "reference": sorted(set(index.column("source").to_pylist())),
                      "positives_s": round(pos_s, 1), "negatives_s": round(neg_s, 1),
                      "total_s": round(time.time() - t_start, 1),
                      "long_recurrent_copies_text_only": len(skip)}
    result = {"headline": headline(result, commit, " ".join(["python", "benchmarks/decontam_real_bench.py",
                                                             *sys.argv[1:]])), **result}
    print("Recall on third-party derivative forms of KernelBench (main snapshot)")
    print(_table(["form", "n", "recall", "ast", "op_signature", "minhash", "traced", "op normalization"], rec_rows))
    for form, r in result["recall"].items():
        if r.get("missed"):
            print(f"  missed {form}: {r['missed'][:10]}")
    print(f"not applicable: {dict(not_applicable)}")
    print("\nFalse positives on real non-KernelBench modules")
    print(_table(["kind", "n", "flagged", "ast", "op_signature", "minhash", "traced"], fp_rows))
    for kind, r in result["false_positive"].items():
        if r.get("flagged"):
            print(f"  flagged {kind}: {r['flagged'][:10]}")
    print(f"excluded from the negatives: {dict(excluded)} {ops6k_note}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str))
    print(f"\nwrote {out}")


def headline(result: dict, commit: str, command: str) -> list[dict]:
    """The figures page's rows: recall per derivative form, the false-positive rate over all negatives."""
    import torch

    common = {"command": command, "hardware": "2-core CPU (no GPU)", "torch": torch.__version__, "commit": commit}
    rows = [{"figure": f"recall on {form} copies of KernelBench", "value": f"{100 * r['recall']:.1f}% (n={r['n']})",
             "target": "100% of those that load" if form == "functional" else "unchanged or better", **common}
            for form, r in result["recall"].items()]
    fp = result["false_positive"]["all kinds"]
    rows.append({"figure": "false positives on all negative sets", "value": f"{100 * fp['rate']:.2f}% (n={fp['n']})",
                 "target": "<= 0.5%", **common})
    return rows


if __name__ == "__main__":
    main()
