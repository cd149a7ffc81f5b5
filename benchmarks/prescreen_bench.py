"""How much the sampler's CPU pre-screen costs and how often it flags, and, given a GPU-profiled run, how well
it predicts the GPU's input-insensitive / degenerate / fakeable verdicts.

    python benchmarks/prescreen_bench.py                        # 900 h200 tasks at seed 20261201, pre-screen off
    python benchmarks/prescreen_bench.py --budget-ms 100,400    # the same tasks at several budgets
    python benchmarks/prescreen_bench.py --run DIR              # DIR profiled on a GPU: precision and recall
    python benchmarks/prescreen_bench.py --run DIR --replay     # screen DIR's tasks again with this code
    python benchmarks/prescreen_bench.py --run DIR --by-status  # the GPU's verdicts per recorded screen status
    python benchmarks/prescreen_bench.py --n 150 --sampler-retry-ms 0,4000   # the sampler's CPU per kept task
    python benchmarks/prescreen_bench.py --run DIR --replay --status "over budget" --sample 240 --budget-ms 4000

Without --run it samples `--n` tasks with the pre-screen off (or reads --tasks PARQUET), screens each at every
budget, and screens the first `--compare-n` tasks again at `--compare-budget-ms` (less scaled down) to see
whether scaling changes verdicts. With --run DIR it compares DIR/prescreen/ (a run made with sample.prescreen =
"record", see benchmarks/prescreen_record.toml) or, if DIR has none, fresh screens of DIR's tasks with the
GPU's measurements: precision = share of pre-screen flags whose task the GPU's own output checks reject for
the same family of reason; recall = share of the GPU's input-insensitive / degenerate / fakeable rejections
the pre-screen flagged. Prints a table and writes --out (JSON) and the per-task rows beside it (JSONL).

--replay screens every task of DIR again with the current code and settings (DIR's config; --budget-ms
overrides its budget) and sets each screen beside the filter's verdict on the GPU (DIR/verdicts, stage=filter):
per GPU verdict family the tasks caught (flagged for any reason), missed (a verdict, no flag) and with no
verdict (over budget, error); false flags (the GPU kept the task); precision (flags on tasks the GPU rejected
/ all flags) and recall per family; CPU-ms per task; and how the screen at DIR's recorded draws compares
(DIR/prescreen, the code that sampled DIR). The tasks DIR holds are the draws the pre-screen kept when DIR
was sampled, so the run's own flags are not among them: this measures what a changed screen adds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from filters.base import decide, reason_kind  # noqa: E402
from filters.degenerate import OUTPUT_CHECKS  # noqa: E402
from operators.prescreen import RECORDS_KEY, Budget, prescreen  # noqa: E402
from pipeline.rundir.config import load_preset  # noqa: E402
from pipeline.rundir.store import RunDir  # noqa: E402

FAMILIES = ("input-insensitive", "degenerate output", "fakeable by a fixed output")


def family(reason: str) -> str:
    return reason_kind(reason) if reason else ""


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def sample(cfg, seed: int, n: int) -> tuple[list[dict], float]:
    from operators.sample import sample_tasks

    t0 = time.process_time()
    rows = sample_tasks(replace(cfg.sample, prescreen="off"), seed, range(n), set())
    return rows, time.process_time() - t0


def screen_all(tasks: list[dict], cfg, budget: Budget) -> list[dict]:
    out = []
    for t in tasks:
        r = prescreen(t, cfg, budget)
        out.append({"task_id": t["task_id"], "name": t["name"], "reason": r.reason, "family": family(r.reason),
                    "status": r.status, "scaled": r.scaled, "shapes": r.constants, "cpu_ms": round(r.cpu_ms, 2),
                    "predicted_ms": round(r.predicted_ms, 2),
                    "ratio": r.measurements.get("input_sensitivity_ratio"),
                    "degenerate": r.measurements.get("degenerate"), "fp64_ratio": r.measurements.get("fp64_ratio"),
                    "ratio_screened": r.measurements.get("input_sensitivity_ratio_screened")})
    return out


def summarise(rows: list[dict], budget: Budget) -> dict:
    ok = [r for r in rows if r["status"] == "ok"]
    ms = [r["cpu_ms"] for r in rows]
    fam = Counter(r["family"] for r in ok if r["family"])
    ran = [r for r in ok if r["predicted_ms"] > 0]
    return {"budget_ms": budget.ms, "budget_mb": budget.mb, "tasks": len(rows), "verdicts": len(ok),
            "over_budget": sum(r["status"].startswith("over budget") for r in rows),
            "errors": sum(r["status"].startswith("error") for r in rows),
            "scaled": sum(r["scaled"] for r in ok), "flagged": sum(fam.values()),
            "flagged_share": sum(fam.values()) / len(rows) if rows else 0.0, "flagged_by_family": dict(fam),
            "cpu_ms_mean": statistics.fmean(ms) if ms else 0.0, "cpu_ms_p50": quantile(ms, 0.5),
            "cpu_ms_p90": quantile(ms, 0.9), "cpu_ms_max": max(ms, default=0.0),
            "measured_over_predicted_p50": quantile([r["cpu_ms"] / r["predicted_ms"] for r in ran], 0.5),
            "measured_over_predicted_p90": quantile([r["cpu_ms"] / r["predicted_ms"] for r in ran], 0.9)}


def larger_budget(tasks: list[dict], rows: list[dict], cfg, big: Budget) -> dict:
    """The same tasks screened at a larger budget (less scaled down, often the real shapes): how often the
    verdicts agree where both have one."""
    small = {r["task_id"]: r for r in rows}
    pairs = []
    for r in screen_all(tasks, cfg, big):
        s = small[r["task_id"]]
        if r["status"] == "ok" and s["status"] == "ok":
            pairs.append((s["family"], r["family"], r["name"], s["shapes"] != r["shapes"], not r["scaled"]))
    return {"budget_ms": big.ms, "tasks": len(tasks), "pairs": len(pairs),
            "pairs_at_other_shapes": sum(p[3] for p in pairs), "pairs_real_shapes": sum(p[4] for p in pairs),
            "agree": sum(a == b for a, b, *_ in pairs),
            "agree_at_other_shapes": sum(a == b for a, b, _, other, _ in pairs if other),
            "small_flags_big_keeps": [n for a, b, n, *_ in pairs if a and not b],
            "big_flags_small_keeps": [n for a, b, n, *_ in pairs if b and not a],
            "other_family": [n for a, b, n, *_ in pairs if a and b and a != b]}


def against_gpu(run: Path, cfg, budget: Budget) -> dict:
    """Precision and recall of the pre-screen against the GPU's measurements of the same tasks."""
    rd = RunDir(run)
    rcfg = rd.load_config()
    meas = {m["task_id"]: m for m in rd.read_rows("measurements") if m.get("status") == "ok"}
    verdicts = {v["task_id"]: v for v in rd.read_rows("verdicts") if v["stage"] == "filter"}
    recorded = [r for r in rd.read_rows("prescreen") if not r["resampled"]]
    if recorded:
        source = "DIR/prescreen (record mode)"
        screens = {r["task_id"]: (r["status"], family(r["reason"])) for r in recorded}
    else:
        source = "screened now"
        tasks = [t for t in rd.read_rows("tasks") if t["task_id"] in meas]
        screens = {r["task_id"]: (r["status"], r["family"]) for r in screen_all(tasks, rcfg, budget)}
    gpu = {tid: family(decide(m, OUTPUT_CHECKS, rcfg.filter)[1]) for tid, m in meas.items()}
    both = [tid for tid in gpu if tid in screens]
    flagged = [tid for tid in both if screens[tid][1]]
    same = [tid for tid in flagged if gpu[tid] == screens[tid][1]]
    any_family = [tid for tid in flagged if gpu[tid]]
    gpu_rej = [tid for tid in both if gpu[tid]]
    caught = [tid for tid in gpu_rej if screens[tid][1]]
    with_verdict = [tid for tid in gpu_rej if screens[tid][0] == "ok"]
    filt = Counter(reason_kind(v["reason"]) for v in verdicts.values() if not v["keep"])
    return {"run": str(run), "source": source, "profiled_ok": len(meas), "compared": len(both),
            "prescreen_flagged": len(flagged), "gpu_output_rejections": len(gpu_rej),
            "precision_same_family": len(same) / len(flagged) if flagged else None,
            "precision_any_family": len(any_family) / len(flagged) if flagged else None,
            "recall": len(caught) / len(gpu_rej) if gpu_rej else None,
            "recall_where_screened": (sum(screens[t][1] != "" for t in with_verdict) / len(with_verdict)
                                      if with_verdict else None),
            "gpu_by_family": dict(Counter(gpu[t] for t in gpu_rej)),
            "false_flags": [(t, screens[t][1], gpu[t]) for t in flagged if gpu[t] != screens[t][1]][:50],
            "missed": [(t, screens[t][0]) for t in gpu_rej if not screens[t][1]][:50],
            "filter_rejections": dict(filt)}


# the filter's reasons the pre-screen can predict, in the filter's order (filters.CHECKS)
TARGETS = ("non-deterministic", "input-insensitive", "degenerate output", "fakeable by a fixed output",
           "compile disagrees with eager")


def gpu_family(verdict: dict | None) -> str:
    """'kept', one of TARGETS, or 'other' (runtime window, memory, compile failures, skipped) for a filter
    verdict; 'non-deterministic (nan)' when two eager runs differed by NaN (a nonfinite output)."""
    if verdict is None or verdict["keep"]:
        return "kept"
    kind = reason_kind(verdict["reason"])
    if kind == "non-deterministic" and verdict["reason"].endswith("differ by nan)"):
        return "non-deterministic (nan)"
    return kind if kind in TARGETS else "other"


def sampler_cost(cfg, seed: int, n: int, retries: list[float]) -> list[dict]:
    """The sampler with the pre-screen resampling, on the same n indices once per `sample.prescreen_retry_ms`:
    CPU-s per kept task (sampling, screening, redraws), screens and flags, draws that got no verdict."""
    from operators.prescreen import Screen
    from operators.sample import sample_tasks

    out = []
    for retry in retries:
        c = replace(cfg, sample=replace(cfg.sample, prescreen="resample", prescreen_retry_ms=retry))
        screen = Screen(c)
        t0 = time.process_time()
        rows = sample_tasks(c.sample, seed, range(n), set(), screen=screen)
        cpu = time.process_time() - t0
        recs = [r for row in rows for r in row.pop(RECORDS_KEY, [])]
        out.append({"prescreen_retry_ms": retry, "tasks": len(rows), "cpu_s_per_task": round(cpu / len(rows), 3),
                    "screens": len(recs), "flagged": sum(bool(r["reason"]) for r in recs),
                    "no_verdict": sum(r["status"] != "ok" for r in recs),
                    "flagged_by_family": dict(Counter(family(r["reason"]) for r in recs if r["reason"]))})
    return out


def by_recorded_status(run: Path) -> dict:
    """Per status of DIR's recorded screens (ok, over budget, error): tasks the GPU measured, how many its filter
    rejected for a target family (input-insensitive, degenerate, fakeable) and the seconds their measurement held
    the GPU lock (gpu_busy_s: shared holds of many workers overlap, so these add up to more than the GPU's own
    seconds; compare them as shares): where the pre-screen's missing verdicts cost GPU time."""
    import duckdb

    target = f"NOT v.keep AND regexp_matches(v.reason, '^({'|'.join(FAMILIES)})')"
    con = duckdb.connect()
    rows = con.sql(f"""
        WITH p AS (SELECT task_id, CASE WHEN status LIKE 'error%' THEN 'error'
                                        WHEN status LIKE 'over budget%' THEN 'over budget' ELSE status END AS status
                   FROM read_parquet('{run}/prescreen/*.parquet') WHERE NOT resampled),
             v AS (SELECT task_id, keep, reason FROM read_parquet('{run}/verdicts/*.parquet') WHERE stage = 'filter'),
             m AS (SELECT task_id, gpu_busy_s FROM read_parquet('{run}/measurements/*.parquet'))
        SELECT p.status, count(*) AS tasks,
               count(*) FILTER (WHERE {target}) AS target_rejections,
               round(sum(m.gpu_busy_s) FILTER (WHERE {target}), 1) AS target_lock_held_s,
               round(sum(m.gpu_busy_s), 1) AS lock_held_s
        FROM p JOIN v USING (task_id) JOIN m USING (task_id) GROUP BY p.status ORDER BY tasks DESC""").fetchall()
    cols = ("status", "tasks", "target_rejections", "target_lock_held_s", "lock_held_s")
    out = [dict(zip(cols, r, strict=True)) for r in rows]
    for r in out:
        r["target_rejection_rate"] = round(r["target_rejections"] / r["tasks"], 4) if r["tasks"] else None
    return {"run": str(run), "by_recorded_status": out}


def replay(run: Path, budget_ms: float | None, limit: int = 0, fp64: bool | None = None, status: str = "",
           sample_k: int = 0, seed: int = 0) -> tuple[dict, list[dict]]:
    """Screen DIR's tasks again and compare with the GPU's filter verdicts; see the module docstring. status: only
    the tasks whose recorded screen's status starts with it; sample_k: a random K of those (seeded)."""
    rd = RunDir(run)
    cfg = rd.load_config()
    if fp64 is not None:
        cfg = replace(cfg, sample=replace(cfg.sample, prescreen_fp64=fp64))
    budget = Budget(budget_ms or cfg.sample.prescreen_ms, cfg.sample.prescreen_mb)
    verdicts = {v["task_id"]: v for v in rd.read_rows("verdicts") if v["stage"] == "filter"}
    recorded = {r["task_id"]: r for r in rd.read_rows("prescreen") if not r["resampled"]}
    tasks = [t for t in rd.read_rows("tasks") if t["task_id"] in verdicts]
    if status:
        tasks = [t for t in tasks if (recorded.get(t["task_id"]) or {}).get("status", "").startswith(status)]
    if sample_k:
        import random

        tasks = sorted(random.Random(seed).sample(tasks, min(sample_k, len(tasks))), key=lambda t: t["task_id"])
    tasks = tasks[:limit] if limit else tasks
    prescreen(tasks[0], cfg, Budget(1.0, 1.0))  # one-time costs (first meta dispatch) out of the figures
    rows = []
    for t, s in zip(tasks, screen_all(tasks, cfg, budget), strict=True):
        rec = recorded.get(t["task_id"])
        rows.append({**s, "gpu": gpu_family(verdicts[t["task_id"]]),
                     "gpu_reason": verdicts[t["task_id"]]["reason"][:120],
                     "recorded_status": rec["status"] if rec else None,
                     "recorded_family": family(rec["reason"]) if rec else None})
    return replay_summary(rows, budget, str(run)) | {"prescreen_fp64": cfg.sample.prescreen_fp64,
                                                     "recorded_status": status or None, "sample": sample_k or None}, rows


def _outcome(r: dict) -> str:
    return "caught" if r["family"] else "missed" if r["status"] == "ok" else "no verdict"


def replay_summary(rows: list[dict], budget: Budget, run: str) -> dict:
    table: dict[str, Counter] = {}
    for r in rows:
        table.setdefault(r["gpu"], Counter())[_outcome(r)] += 1
    flagged = [r for r in rows if r["family"]]
    rejected = [r for r in rows if r["gpu"] != "kept"]
    target = [r for r in rows if r["gpu"] not in ("kept", "other")]
    ms = [r["cpu_ms"] for r in rows]
    rec = [r for r in rows if r["recorded_status"] is not None]
    return {"run": run, "budget_ms": budget.ms, "budget_mb": budget.mb, "tasks": len(rows),
            "by_gpu_verdict": {k: {o: c[o] for o in ("caught", "missed", "no verdict")} | {"tasks": c.total()}
                               for k, c in sorted(table.items())},
            "flagged": len(flagged), "flagged_by_family": dict(Counter(r["family"] for r in flagged)),
            "false_flags": sum(r["gpu"] == "kept" for r in flagged),
            "flags_on_other_rejections": sum(r["gpu"] == "other" for r in flagged),
            "precision": (sum(r["gpu"] != "kept" for r in flagged) / len(flagged)) if flagged else None,
            "recall_targets": (sum(bool(r["family"]) for r in target) / len(target)) if target else None,
            "recall_all_rejections": (sum(bool(r["family"]) for r in rejected) / len(rejected)) if rejected else None,
            "no_verdict": sum(r["status"] != "ok" for r in rows),
            "errors": sum(r["status"].startswith("error") for r in rows),
            "cpu_ms_mean": statistics.fmean(ms) if ms else 0.0, "cpu_ms_p50": quantile(ms, 0.5),
            "cpu_ms_p90": quantile(ms, 0.9), "cpu_ms_max": max(ms, default=0.0),
            # the share of unflagged tasks the filter keeps: what resampling the flags would make of the filter's
            # pass rate, if redraws fare like the unflagged tasks
            "filter_pass_rate_now": sum(r["gpu"] == "kept" for r in rows) / len(rows) if rows else None,
            "filter_pass_rate_unflagged": (sum(r["gpu"] == "kept" and not r["family"] for r in rows)
                                           / max(1, sum(not r["family"] for r in rows))),
            "recorded_agree": sum((r["recorded_status"] == "ok") == (r["status"] == "ok")
                                  and r["recorded_family"] == r["family"] for r in rec),
            "recorded_compared": len(rec),
            "false_flag_tasks": [(r["name"], r["family"], r["gpu"]) for r in flagged if r["gpu"] == "kept"][:40]}


def print_replay(s: dict) -> None:
    print(f"replay of {s['tasks']} tasks at {s['budget_ms']:g} ms / {s['budget_mb']:g} MB")
    print(f"{'GPU verdict':34} {'tasks':>6} {'caught':>7} {'missed':>7} {'no verdict':>10}")
    for k, c in s["by_gpu_verdict"].items():
        print(f"{k:34} {c['tasks']:>6} {c['caught']:>7} {c['missed']:>7} {c['no verdict']:>10}")
    print(f"flagged {s['flagged']} {s['flagged_by_family']}; false flags (GPU kept) {s['false_flags']}; "
          f"precision {s['precision'] if s['precision'] is None else round(s['precision'], 3)}; recall "
          f"(target families) {s['recall_targets'] and round(s['recall_targets'], 3)}; no verdict "
          f"{s['no_verdict']} ({s['errors']} errors)")
    print(f"CPU ms per task mean {s['cpu_ms_mean']:.1f} p50 {s['cpu_ms_p50']:.1f} p90 {s['cpu_ms_p90']:.1f} "
          f"max {s['cpu_ms_max']:.0f}; filter pass rate {s['filter_pass_rate_now']:.3f} -> "
          f"{s['filter_pass_rate_unflagged']:.3f} among unflagged; same verdict as recorded "
          f"{s['recorded_agree']}/{s['recorded_compared']}")



def headline(out: dict) -> list[dict]:
    """The figure docs/figures.md shows: the first budget's flag rate and CPU cost (python -m pipeline.outputs.figures)."""
    import subprocess

    import torch

    b = out["budgets"][0]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    return [{"figure": f"CPU pre-screen, {b['budget_ms']:g} ms budget, {b['tasks']} {out['preset']} tasks",
             "value": f"{b['flagged']} flagged ({100 * b['flagged_share']:.1f}%), {b['cpu_ms_mean']:.0f} CPU-ms per task",
             "target": None, "command": "python " + out["command"], "hardware": "2-core CPU (no GPU)",
             "torch": torch.__version__, "commit": commit.strip()}]

def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="h200")
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--n", type=int, default=900)
    ap.add_argument("--tasks", default="", help="a tasks parquet to screen instead of sampling")
    ap.add_argument("--budget-ms", default="", help="comma-separated budgets (default: the preset's)")
    ap.add_argument("--compare-n", type=int, default=150)
    ap.add_argument("--compare-budget-ms", type=float, default=1000.0)
    ap.add_argument("--run", default="", help="a GPU-profiled run directory: precision and recall")
    ap.add_argument("--replay", action="store_true", help="with --run: screen DIR's tasks again (this code)")
    ap.add_argument("--fp64", action=argparse.BooleanOptionalAction, default=None,
                    help="with --replay: sample.prescreen_fp64 on or off (default: DIR's config)")
    ap.add_argument("--limit", type=int, default=0, help="with --replay: only the first K tasks")
    ap.add_argument("--status", default="", help="with --replay: only tasks whose recorded screen had this status")
    ap.add_argument("--sample", type=int, default=0, help="with --replay: a random K of them (seeded by --seed)")
    ap.add_argument("--sampler-retry-ms", default="",
                    help="comma-separated sample.prescreen_retry_ms values: the sampler's cost per kept task with each "
                         "(--n indices of --preset at --seed)")
    ap.add_argument("--by-status", action="store_true",
                    help="with --run: the GPU's target rejections and GPU time per recorded screen status")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if a.sampler_retry_ms:
        cfg = load_preset(a.preset)
        rows = sampler_cost(cfg, a.seed, a.n, [float(x) for x in a.sampler_retry_ms.split(",")])
        out = Path(a.out or ROOT / "benchmarks" / "results" / "prescreen_sampler_cost.json")
        out.write_text(json.dumps({"command": " ".join(sys.argv), "preset": a.preset, "seed": a.seed,
                                   "budget_ms": cfg.sample.prescreen_ms, "rows": rows}, indent=2))
        for r in rows:
            print(r)
        return
    if a.by_status:
        if not a.run:
            raise SystemExit("--by-status needs --run DIR (a GPU-profiled run directory sampled with the pre-screen)")
        summary = {"command": " ".join(sys.argv), **by_recorded_status(Path(a.run))}
        out = Path(a.out or ROOT / "benchmarks" / "results" / "prescreen_by_status.json")
        out.write_text(json.dumps(summary, indent=2, default=str))
        print(f"{'recorded status':16} {'tasks':>7} {'target rejections':>18} {'rate':>7} {'their lock-s':>12} {'all lock-s':>10}")
        for r in summary["by_recorded_status"]:
            print(f"{r['status']:16} {r['tasks']:>7} {r['target_rejections']:>18} {r['target_rejection_rate']:>7} "
                  f"{r['target_lock_held_s']!s:>12} {r['lock_held_s']!s:>10}")
        return
    if a.replay:
        if not a.run:
            raise SystemExit("--replay needs --run DIR (a GPU-profiled run directory)")
        budget = float(a.budget_ms.split(",")[0]) if a.budget_ms else None
        summary, rows = replay(Path(a.run), budget, a.limit, a.fp64, a.status, a.sample, a.seed)
        out = Path(a.out or ROOT / "benchmarks" / "results" / "prescreen_replay.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"command": " ".join(sys.argv), **summary}, indent=2, default=str))
        with open(out.with_suffix("").as_posix() + "_rows.jsonl", "w") as f:
            for r in rows:
                f.write(json.dumps(r, default=str) + "\n")
        print_replay(summary)
        return
    a.out = a.out or str(ROOT / "benchmarks" / "results" / "prescreen_bench.json")
    cfg = load_preset(a.preset)
    cfg = replace(cfg, run=replace(cfg.run, seed=a.seed))
    budgets = [Budget(float(b), cfg.sample.prescreen_mb) for b in a.budget_ms.split(",") if b] or [
        Budget(cfg.sample.prescreen_ms, cfg.sample.prescreen_mb)]
    out: dict = {"command": " ".join(sys.argv), "preset": a.preset, "seed": a.seed}
    all_rows: dict = {}
    if a.run:
        out["gpu"] = against_gpu(Path(a.run), cfg, budgets[0])
    else:
        if a.tasks:
            import pyarrow.parquet as pq

            tasks, sample_s = pq.read_table(a.tasks).to_pylist()[: a.n], None
        else:
            tasks, sample_s = sample(cfg, a.seed, a.n)
        out["sample_cpu_ms_per_task"] = 1e3 * sample_s / len(tasks) if sample_s else None
        prescreen(tasks[0], cfg, Budget(1.0, 1.0))  # one-time costs (first meta dispatch) out of the figures
        out["budgets"] = []
        for b in budgets:
            rows = screen_all(tasks, cfg, b)
            all_rows[b.ms] = rows
            s = summarise(rows, b)
            if b is budgets[0] and a.compare_n:
                s["larger_budget"] = larger_budget(tasks[: a.compare_n], rows, cfg,
                                                   Budget(a.compare_budget_ms, 4 * b.mb))
            out["budgets"].append(s)
    if out.get("budgets"):
        out = {"headline": headline(out), **out}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=2, default=str))
    if all_rows:
        with open(Path(a.out).with_suffix("").as_posix() + "_rows.jsonl", "w") as f:
            for ms, rows in all_rows.items():
                for r in rows:
                    f.write(json.dumps({"budget_ms": ms, **r}, default=str) + "\n")
    print_table(out)


def print_table(out: dict) -> None:
    if "gpu" in out:
        for k, v in out["gpu"].items():
            if not isinstance(v, list):
                print(f"{k:28} {v}")
        return
    cols = ["budget_ms", "tasks", "verdicts", "over_budget", "errors", "scaled", "flagged", "flagged_share",
            "cpu_ms_mean", "cpu_ms_p50", "cpu_ms_p90", "cpu_ms_max", "measured_over_predicted_p50"]
    print(" | ".join(f"{c:>10.10}" for c in cols))
    for s in out["budgets"]:
        print(" | ".join(f"{s[c]:>10.4g}" if isinstance(s[c], float) else f"{s[c]:>10}" for c in cols))
        print("   flagged by family:", s["flagged_by_family"])
        if "larger_budget" in s:
            f = s["larger_budget"]
            print(f"   vs {f['budget_ms']:g} ms on {f['tasks']} tasks: {f['agree']}/{f['pairs']} verdicts agree "
                  f"({f['agree_at_other_shapes']}/{f['pairs_at_other_shapes']} run at other shapes, "
                  f"{f['pairs_real_shapes']} at real shapes); flagged only at {s['budget_ms']:g} ms: "
                  f"{f['small_flags_big_keeps']}; only at {f['budget_ms']:g} ms: {f['big_flags_small_keeps']}")
    if out.get("sample_cpu_ms_per_task"):
        print(f"sampling alone: {out['sample_cpu_ms_per_task']:.1f} CPU-ms per task")


if __name__ == "__main__":
    main()
