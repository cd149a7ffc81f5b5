"""The shortcut checks' verdicts, exhaustive against cheap, on random rows of a release at their real sizes.

    python benchmarks/shortcut_agreement.py measure --device cuda --n 600 --seed 0 --workers 8 \
        --rows runs/agreement.rows.jsonl --max-minutes 8
    python benchmarks/shortcut_agreement.py report --rows runs/agreement.rows.jsonl \
        --hardware "NVIDIA H100 80GB HBM3" --torch 2.11.0+cu130 --commit C

`measure` runs, per row and in a pool of processes sharing the device, every kind of the exhaustive checks
(measures/shortcuts.py with the profile defaults: 5 draws, each after the first with its own weights, every
floating input moved 16 ulps, float64 on draw 0; every input and operator at the real size), each kind apart so
each has its own verdict, and the measurements the cheap checks decide from (measures/cheap_shortcuts.py), with the
seconds of each part, and how near draw 0's step operators come to their steps in float32-vs-float64 differences
(measures/step_margins.py). Rows are appended to --rows as they finish; a second call skips the rows already there,
so the work resumes across calls. `report` compares the verdicts per kind (rows the exhaustive checks drop and the
cheap ones keep, and the reverse), splits the rows that run the exhaustive fragility draws by whether any element
lies near a step (data for a cheaper check of them), prints a table and writes
benchmarks/results/shortcut_agreement.json."""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RELEASE = ROOT / "data" / "releases" / "opsynth-ops-h200-v1"
KINDS = ("dead", "skip", "fragile")
from measures.cheap_shortcuts import scaled_verdict  # noqa: E402

MOVES = (160,)  # draw-0 moves (ulps) beside the exhaustive check's 16, which the cheap fragility check may choose from


def sample_rows(n: int, seed: int, release: Path = RELEASE) -> list[dict]:
    """n rows of the release's train split drawn at random (seeded), with their code."""
    import pyarrow.parquet as pq

    rows = [r for p in sorted((release / "data").glob("train-*.parquet"))
            for r in pq.read_table(p, columns=["task_id", "code"]).to_pylist()]
    return random.Random(seed).sample(rows, min(n, len(rows)))


def _sync(dev: str) -> None:
    import torch

    if dev.startswith("cuda"):
        torch.cuda.synchronize()


def measure_row(row: dict, seed: int, tol: float, dev: str) -> dict:
    """Every exhaustive kind and the cheap checks' measurements for one row, with each part's seconds."""
    import torch

    from measures.cheap_shortcuts import cheap_measure
    from measures.shortcuts import FRAGILE_F64, FRAGILE_ULP, dead_inputs, fragility, skippable_ops
    from measures.tensor_checks import flatten, sample_stride, tolerance_ratio
    from operators.trace import load_module

    secs: dict[str, float] = {}

    def timed(name, fn):
        _sync(dev)
        t = time.perf_counter()
        out = fn()
        _sync(dev)
        secs[name] = time.perf_counter() - t
        return out

    ns = load_module(row["code"], "agreement")

    def draw(k: int) -> tuple:
        torch.manual_seed(seed + 1 + k)
        with torch.device(dev):
            return tuple(t.to(dev) if isinstance(t, torch.Tensor) else t for t in ns["get_inputs"]())

    def model_for(k: int):
        torch.manual_seed(seed * 1000 + k if k else seed)
        with torch.device(dev):
            return ns["Model"](*ns["get_init_inputs"]()).to(dev)

    out: dict = {"task_id": row["task_id"], "status": "ok"}
    with torch.no_grad():
        model = timed("build", lambda: model_for(0))
        ref0 = timed("ref0", lambda: flatten(model(*draw(0))).clone())
        stride = sample_stride(ref0.numel())
        sub0 = ref0[::stride]
        sub1 = timed("draw1", lambda: flatten(model(*draw(1)))[::stride].clone())
        known = tolerance_ratio(sub1, sub0, tol) if stride == 1 else None
        d = timed("dead", lambda: dead_inputs(model, draw, ref0, tol, stop_first=True, known_ratio=known))
        s = timed("skip", lambda: skippable_ops(model, draw, ref0, tol, stop_first=False))
        per: list[float] = []
        r64 = None

        def frag() -> None:
            nonlocal r64
            for k in range(5):  # fragility()'s own loop, one draw at a time so each draw's ratio is kept
                mdl = model if k == 0 else model_for(k)
                checks = (FRAGILE_ULP, FRAGILE_F64) if k == 0 else (FRAGILE_ULP,)
                f = fragility(mdl, lambda _j, k=k: draw(k), tol, draws=1, subs=[sub0] if k == 0 else None,
                              stride=stride, checks=checks, ulp_steps=16)
                per.append(f["fragile_ulp_ratio"])
                if k == 0:
                    r64 = f["fragile_f64_ratio"]
                if max(per) >= 1 or (r64 or 0) >= 1:
                    break
        timed("fragile", frag)
        out["exhaustive"] = {
            "dead": d["dead_inputs"], "input_ratios": d["input_redraw_ratios"],
            "skip": [o for o, r in s["op_ratios"].items() if r < 1], "op_ratios": s["op_ratios"],
            "fragile": max(per) >= 1 or (r64 or 0) >= 1, "ulp_ratios": per, "f64_ratio": r64}
        cheap_secs: dict[str, float] = {}
        out["cheap"] = cheap_measure(model, draw, ref0, sub0, stride, tol, ns=ns, seed=seed, dev=dev,
                                     known_ratio=known, moves=MOVES, seconds=cheap_secs, sync=lambda: _sync(dev),
                                     fresh_model=model_for)
        out["cheap_seconds"] = cheap_secs
        try:  # data for a cheaper check of the step rows: how near their steps come, in honest roundings
            from measures.step_margins import step_margins

            out["step_margins"] = timed("margins", lambda: step_margins(model, draw(0)))
        except Exception as e:  # noqa: BLE001 - out of memory beside the other workers, say: the rest stands
            out["step_margins"] = {"error": f"{type(e).__name__}: {e}"[:200]}
    out["seconds"] = secs
    return out


def _worker_row(item: tuple) -> dict:
    row, seed, tol, dev, inflight = item
    import os

    mark = Path(inflight) / str(os.getpid())
    mark.write_text(row["task_id"])  # read by the parent if this process dies on the row
    t = time.perf_counter()
    try:
        r = measure_row(row, seed, tol, dev)
    except Exception as e:  # noqa: BLE001 - a row that fails is counted, not fatal
        r = {"task_id": row["task_id"], "status": f"error: {type(e).__name__}: {e}"[:300]}
    finally:
        import gc

        gc.collect()
        try:
            import torch

            torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001
            pass
    r["wall_s"] = time.perf_counter() - t
    mark.unlink(missing_ok=True)
    return r


def measure_cmd(a: argparse.Namespace) -> None:
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    from pipeline.rundir.config import load_preset

    cfg = load_preset("h200")
    tol, seed = float(cfg.filter.compile_tolerance), int(cfg.run.seed)
    rows_path = Path(a.rows)
    rows_path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.loads(line) for line in rows_path.read_text().splitlines()] if rows_path.exists() else []
    # a row that failed (out of memory beside the other processes, say) is measured again with --retry-failed
    done = {r["task_id"] for r in lines if r["status"] == "ok" or not a.retry_failed}
    todo = [r for r in sample_rows(a.n, a.seed) if r["task_id"] not in done]
    print(f"{len(done)} rows already measured, {len(todo)} to go", flush=True)
    box = time.time() + 60 * a.max_minutes
    t0 = time.time()
    n = 0
    import tempfile
    from concurrent.futures.process import BrokenProcessPool

    inflight = tempfile.mkdtemp(prefix="agreement-inflight-")
    with rows_path.open("a") as f:
        while todo and time.time() < box:  # a new pool after a worker that died took the pool with it
            with ProcessPoolExecutor(a.workers, mp_context=mp.get_context("spawn")) as pool:
                jobs = {pool.submit(_worker_row, (r, seed, tol, a.device, inflight)): r for r in todo}
                pending = set(jobs)
                broken = False
                while pending and time.time() < box and not broken:
                    fin, pending = wait(pending, timeout=max(0.1, box - time.time()), return_when=FIRST_COMPLETED)
                    for j in fin:
                        try:
                            got = j.result()
                        except BrokenProcessPool:
                            broken = True
                            continue
                        f.write(json.dumps(got) + "\n")
                        f.flush()
                        n += 1
                        todo = [r for r in todo if r["task_id"] != got["task_id"]]
                for j in pending:
                    j.cancel()
                for p in list((getattr(pool, "_processes", None) or {}).values()):
                    p.kill()
            if broken:  # each row a process had taken runs again alone: the one that kills its process is recorded
                suspects = [m.read_text() for m in Path(inflight).iterdir()]
                for m in Path(inflight).iterdir():
                    m.unlink()
                print(f"a worker died; {len(suspects)} rows in flight run again one at a time", flush=True)
                for tid in suspects:
                    row = next(r for r in todo if r["task_id"] == tid)
                    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as alone:
                        try:
                            got = alone.submit(_worker_row, (row, seed, tol, a.device, inflight)).result()
                        except BrokenProcessPool:
                            got = {"task_id": tid, "status": "crashed: the worker process died"}
                    f.write(json.dumps(got) + "\n")
                    f.flush()
                    n += 1
                    todo = [r for r in todo if r["task_id"] != tid]
    print(f"measured {n} rows in {time.time() - t0:.0f} s ({n / max(1e-9, time.time() - t0):.2f} rows/s)", flush=True)


def cheap_verdicts(r: dict, move: int = 160, band: float = 1.25, margin: float = 10.0,
                   fresh: bool = False, steps: bool = True) -> dict:
    """The cheap checks' verdict per kind for one measured row, and the parts they would run at the real size:
    - dead: the exhaustive check's own (it runs as it is);
    - skip: operators whose reduced ratio is at least `margin` matter; the rest are measured at the real size (their
      exhaustive ratios); every operator is, when the reduced forward numbered other calls or did not run;
    - fragile: float64 on draw 0, then draw 0 moved `move` ulps (and draw 1 with its own weights, `fresh`); a flag
      measured again with the real move (16 ulps) gives way when the response is in proportion to the move, within
      `band` either way; a task with a step operator (`steps`, r["steps"]) that passes runs the exhaustive
      fragility draws too, so their finding is the cheap check's."""
    ex, ch = r["exhaustive"], r["cheap"]
    real_ops = ex["op_ratios"]
    reduced = ch.get("reduced_op_ratios")
    if reduced is None or set(reduced) != set(real_ops):
        remeasured = list(real_ops)
    else:
        remeasured = [o for o in real_ops if reduced[o] < margin]
    skip = [o for o in remeasured if real_ops[o] < 1]
    r16 = ex["ulp_ratios"][0]
    found, _ = scaled_verdict(ex["f64_ratio"], ch[f"move{move}"], r16, move // 16, 16, band)
    fragile = bool(found)
    if fresh and not fragile and ch[f"fresh1_move{max(MOVES)}"] >= 1:
        fragile = True  # draw 1 with its own weights is not measured with the real move: its flag stands
    again = (ex["f64_ratio"] or 0.0) < 1 and ch[f"move{move}"] >= 1
    full = steps and not fragile and r.get("steps", True)
    fragile = fragile or (full and bool(ex["fragile"]))
    return {"dead": bool(ex["dead"]), "skip": bool(skip), "fragile": fragile, "ops_remeasured": len(remeasured),
            "ops": len(real_ops), "move_again": again, "full_fragility": full}


def exhaustive_verdicts(r: dict) -> dict:
    ex = r["exhaustive"]
    return {"dead": bool(ex["dead"]), "skip": bool(ex["skip"]), "fragile": bool(ex["fragile"])}


def agreement(rows: list[dict], **rule) -> dict:
    """Per kind: rows the exhaustive checks drop, the cheap ones drop, and the two disagreements (share of rows)."""
    n = len(rows)
    out: dict = {"rows": n, "rule": rule}
    pairs = [(exhaustive_verdicts(r), cheap_verdicts(r, **rule)) for r in rows]
    for k in (*KINDS, "any"):
        def v(d: dict, k: str = k) -> bool:
            return any(d[x] for x in KINDS) if k == "any" else d[k]
        missed = [r["task_id"] for r, (e, c) in zip(rows, pairs, strict=True) if v(e) and not v(c)]
        extra = [r["task_id"] for r, (e, c) in zip(rows, pairs, strict=True) if v(c) and not v(e)]
        out[k] = {"exhaustive_drops": sum(v(e) for e, _ in pairs), "cheap_drops": sum(v(c) for _, c in pairs),
                  "exhaustive_drop_cheap_keep": len(missed), "cheap_drop_exhaustive_keep": len(extra),
                  "missed_share": len(missed) / n if n else None, "extra_share": len(extra) / n if n else None,
                  "missed": missed[:20], "extra": extra[:20]}
    out["ops_remeasured_share"] = (sum(c["ops_remeasured"] for _, c in pairs) /
                                   max(1, sum(c["ops"] for _, c in pairs)))
    out["move_again_share"] = sum(c["move_again"] for _, c in pairs) / n if n else None
    out["full_fragility_share"] = sum(c["full_fragility"] for _, c in pairs) / n if n else None
    return out


def float64_slices(rows: list[dict]) -> dict:
    """Draw 0's float64 check with the batch in slices against the whole batch at once: rows sliced (their rows
    computed apart), verdicts that differ, the largest ratio difference and the float64 forwards' peak bytes."""
    sliced = [r for r in rows if (r["cheap"].get("f64_chunks") or 1) > 1 and r["cheap"].get("f64_ratio") is not None]
    differ = [r["task_id"] for r in sliced
              if ((r["cheap"]["f64_ratio"] or 0) >= 1) != ((r["cheap"].get("f64_sliced_ratio") or 0) >= 1)]
    gaps = [abs((r["cheap"].get("f64_sliced_ratio") or 0) - r["cheap"]["f64_ratio"]) for r in sliced]
    peaks = [(r["cheap"]["f64_sliced_peak_bytes"], r["cheap"]["f64_peak_bytes"]) for r in sliced
             if r["cheap"].get("f64_sliced_peak_bytes") is not None and r["cheap"].get("f64_peak_bytes")]
    ratios = sorted(a / b for a, b in peaks)
    return {"rows": len(rows), "sliced": len(sliced), "verdicts_differ": len(differ), "differ": differ[:20],
            "largest_ratio_gap": max(gaps, default=None),
            "sliced_over_whole_peak_median": ratios[len(ratios) // 2] if ratios else None,
            "with_peaks": len(ratios)}


def costs(rows: list[dict], rule: dict) -> dict:
    """Seconds per row of each part, summed over rows, and the cheap checks' seconds under `rule` (the skip check's
    real-size seconds in proportion to the operators measured again; the real move's where a flag is measured
    again)."""
    part = {}
    for r in rows:
        for k, v in {**r["seconds"], **{f"cheap_{k}": v for k, v in r["cheap_seconds"].items()}}.items():
            part[k] = part.get(k, 0.0) + v
    n = len(rows)
    exhaustive = sum(part.get(k, 0.0) for k in ("dead", "skip", "fragile"))
    move, cheap = rule.get("move", 160), 0.0
    for r in rows:
        c = cheap_verdicts(r, **rule)
        s, cs = r["seconds"], r["cheap_seconds"]
        if c["full_fragility"]:  # the exhaustive draws without draw 0's float64 forward
            cheap += max(0.0, s["fragile"] - cs["f64"])
        cheap += s["dead"] + cs["skip_reduced"] + s["skip"] * c["ops_remeasured"] / max(1, c["ops"])
        cheap += cs["f64"] + cs[f"move{move}"] + (cs["fresh1"] if rule.get("fresh") else 0.0)
        cheap += cs[f"move{move}"] if c["move_again"] else 0.0  # the real move costs a forward as the scaled one
    return {"rows": n, "seconds_per_row": {k: v / n for k, v in sorted(part.items())},
            "exhaustive_checks_s_per_row": exhaustive / n, "cheap_checks_s_per_row": cheap / n,
            "eager_forward_s_per_row": part.get("ref0", 0.0) / n}


RULES = [dict(move=m, band=b, margin=g, fresh=f, steps=st) for m in MOVES for b in (1.25, 2.0) for g in (3.0, 10.0)
         for f in (False, True) for st in (False, True)]
CHOSEN = dict(move=160, band=1.25, margin=10.0, fresh=False, steps=True)  # profile's defaults (cheap mode)


def step_margin_table(rows: list[dict], rule: dict) -> dict:
    """Over the rows whose cheap verdict runs the exhaustive fragility draws (a step operator the scaled move
    passed), per k of measures/step_margins.NEAR_K: rows with no element within k honest roundings of a step, and
    how many of those the exhaustive draws still find fragile; rows with some, and how many of those are not."""
    from measures.step_margins import NEAR_K

    full = [r for r in rows if cheap_verdicts(r, **rule)["full_fragility"]
            and "near" in (r.get("step_margins") or {}) and "error" not in r["step_margins"]]
    out = {"rows": len(full)}
    for k in NEAR_K:
        clear = [r for r in full if r["step_margins"]["near"][str(k)] < 1]
        near = [r for r in full if r["step_margins"]["near"][str(k)] >= 1]
        out[str(k)] = {"clear": len(clear), "clear_but_fragile": sum(bool(r["exhaustive"]["fragile"]) for r in clear),
                       "near": len(near), "near_not_fragile": sum(not r["exhaustive"]["fragile"] for r in near)}
    return out


def _with_steps(rows: list[dict]) -> None:
    """Each row's `steps`: whether its task has a step operator (measures/cheap_shortcuts.has_step), from the
    release's `ops`."""
    import pyarrow.parquet as pq

    from measures.cheap_shortcuts import has_step

    ops = {r["task_id"]: r["ops"] for p in sorted((RELEASE / "data").glob("train-*.parquet"))
           for r in pq.read_table(p, columns=["task_id", "ops"]).to_pylist()}
    for r in rows:
        r["steps"] = has_step(ops.get(r["task_id"]))


def report_cmd(a: argparse.Namespace) -> None:
    # the last row of each task counts: a failed row measured again is replaced
    rows_all = list({r["task_id"]: r for r in map(json.loads, Path(a.rows).read_text().splitlines())}.values())
    rows = [r for r in rows_all if r["status"] == "ok"]
    _with_steps(rows)
    chosen = dict(CHOSEN, **json.loads(a.rule)) if a.rule else CHOSEN
    table = [agreement(rows, **rule) for rule in RULES]
    main_ = agreement(rows, **chosen)
    cost = costs(rows, chosen)
    slices = float64_slices(rows)
    print(f"{len(rows)} rows measured ({len(rows_all) - len(rows)} failed)")
    print(f"{'kind':8} {'exh drops':>9} {'cheap drops':>11} {'exh-only':>9} {'cheap-only':>10}")
    for k in (*KINDS, "any"):
        g = main_[k]
        print(f"{k:8} {g['exhaustive_drops']:9d} {g['cheap_drops']:11d} {g['missed_share']:9.2%} "
              f"{g['extra_share']:10.2%}")
    print(f"checks' seconds per row: exhaustive {cost['exhaustive_checks_s_per_row']:.3f}, cheap "
          f"{cost['cheap_checks_s_per_row']:.3f}, one eager forward {cost['eager_forward_s_per_row']:.4f}")
    for t in table:
        print(t["rule"], {k: (t[k]["exhaustive_drop_cheap_keep"], t[k]["cheap_drop_exhaustive_keep"])
                          for k in (*KINDS, "any")}, f"ops again {t['ops_remeasured_share']:.2f}")
    head = [{"figure": f"{k}: rows the exhaustive checks drop and the cheap ones keep / the reverse",
             "value": f"{main_[k]['missed_share']:.2%} / {main_[k]['extra_share']:.2%} of {len(rows)} rows "
                      f"(exhaustive drops {main_[k]['exhaustive_drops']}, cheap {main_[k]['cheap_drops']})",
             "target": "<= 0.5% (no dead input missed) / <= 3%"} for k in KINDS]
    head.append({"figure": "the checks' seconds per row, exhaustive against cheap (same processes, same GPU)",
                 "value": f"{cost['exhaustive_checks_s_per_row']:.3f} s against {cost['cheap_checks_s_per_row']:.3f} s "
                          f"({cost['exhaustive_checks_s_per_row'] / max(1e-9, cost['cheap_checks_s_per_row']):.1f}x)",
                 "target": "10x cheaper"})
    if slices["sliced"]:
        med = slices["sliced_over_whole_peak_median"]
        head.append({"figure": "float64 check with the batch in slices against the whole batch: verdicts that differ",
                     "value": f"{slices['verdicts_differ']} of {slices['sliced']} rows sliced ({len(rows)} measured)"
                              + (f"; float64 forward's peak {med:.2f}x the whole batch's (median)" if med else ""),
                     "target": "0"})
        print(head[-1]["figure"], head[-1]["value"])
    for h in head:
        h.update(command=f"python benchmarks/shortcut_agreement.py measure --device cuda --n {a.n} --seed 0 "
                         f"--workers 6 (--retry-failed with 3 for rows out of memory), then report",
                 hardware=a.hardware, torch=a.torch, commit=a.commit)
    # each row's findings, exhaustive then cheap (d: dead input, s: skippable operator, f: fragile; - none), so a
    # later change of the cheap checks can be judged against the same exhaustive verdicts
    flags = {r["task_id"]: "".join(c for c, k in zip("dsf", KINDS, strict=True) if exhaustive_verdicts(r)[k]) or "-"
             for r in rows}
    cheap_flags = {r["task_id"]: "".join(c for c, k in zip("dsf", KINDS, strict=True)
                                         if cheap_verdicts(r, **chosen)[k]) or "-" for r in rows}
    margins = step_margin_table(rows, chosen)
    if margins["rows"]:
        print("step rows by elements within k honest roundings of a step:", margins)
    out = {"headline": head, "measure_commit": a.measure_commit or a.commit, "chosen_rule": chosen,
           "step_margins": margins,
           "agreement": main_, "costs": cost, "float64_slices": slices, "rules": table,
           "verdicts": {t: f"{flags[t]}/{cheap_flags[t]}" for t in sorted(flags)},
           "failed": [{"task_id": r["task_id"], "status": r["status"]} for r in rows_all if r["status"] != "ok"]}
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {a.out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--device", default="cuda")
    m.add_argument("--n", type=int, default=600)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--workers", type=int, default=8)
    m.add_argument("--rows", required=True)
    m.add_argument("--max-minutes", type=float, default=8.0)
    m.add_argument("--retry-failed", action="store_true", help="measure again the rows whose status is not ok")
    r = sub.add_parser("report")
    r.add_argument("--rows", required=True)
    r.add_argument("--hardware", required=True)
    r.add_argument("--torch", required=True)
    r.add_argument("--commit", required=True)
    r.add_argument("--measure-commit", default="", help="the commit the measure calls ran (default: --commit)")
    r.add_argument("--n", type=int, default=640, help="the sample size the measure calls used (for the record)")
    r.add_argument("--rule", default="", help="JSON overriding the chosen rule's fields")
    r.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "shortcut_agreement.json"))
    a = ap.parse_args()
    if a.cmd == "measure":
        measure_cmd(a)
    else:
        report_cmd(a)


if __name__ == "__main__":
    main()
