"""Yield and cost of a whole run: what was sampled, what each stage dropped and why, what the GPU spent per
published task, whether labels and dedupe drops were true, and whether a second profile of the same tasks
publishes the same set.

    python benchmarks/pipeline_yield.py --run DIR [--repeat DIR2] [--smi nvidia_smi.csv ...] [--gpus 1]
        [--since-index N] [--until-index M] [--profile-seconds S] [--call K] [--out benchmarks/results/pipeline_yield.json]

DIR is a run directory after publish (sample, decontaminate, profile, filter, dedupe have run). `--repeat`
is a second run directory whose profile measured the same tasks again (a copy of DIR with those measurement
shards removed, filtered and deduped): for the judged tasks, the published sets side by side and the paired
eager and compiled timings (second / first), which say the run-to-run noise or what other `--set` settings
changed. `--smi` is the CSV of
`nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv -lms 500` taken during the
profile stage; given once per call where the stage ran as several, it reports each call's figures and the mean
over all their samples. `--since-index N` judges only the tasks sampled at index N and later (a run grown with
`opsynth sample DIR --n`; `--until-index M`: before index M, e.g. the tasks one profile call measured), and only those a stage has decided (a time-boxed profile leaves the rest for later);
`--profile-seconds` gives the profile time of those tasks when the manifest's figure covers other calls too.
With the worker diagnostics in the measurements (cpu_s, lock and budget waits), it also says where each
worker's wall time went. Prints a table per measure and writes everything to JSON.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import statistics
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from filters.base import decide  # noqa: E402
from filters.checks import UNTIMED_CHECKS  # noqa: E402
from pipeline.rundir.config import load_file  # noqa: E402
from pipeline.rundir.selection import accepted_task_ids, first_rejection  # noqa: E402
from pipeline.rundir.store import RunDir  # noqa: E402

TASK_ID = re.compile(r"\b[0-9a-f]{16}\b")


def reason_kind(reason: str) -> str:
    """A reason without its numbers and parenthesised details: the family it belongs to."""
    return re.sub(r"\d+(\.\d+)?", "N", TASK_ID.sub("<task>", reason.split(" (")[0]))[:90]


STEADY_AFTER_S = 60.0  # the workers' start (imports, first compiles) lies within a call's first minute
# the run's tail (no task left to start: the last ones finish one by one, workers exit) lies within its last 30 s of
# busy samples (call 57: 76%, 59% and 8% in its last three 20-s bins against 81-97% before)
TAIL_S = 30.0


def _smi_time(stamp: str) -> float | None:
    """Seconds of an nvidia-smi timestamp (2026/12/02 09:03:48.123), or None when it is not one."""
    try:
        return datetime.strptime(stamp.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
    except ValueError:
        return None


PROJECT_MINUTES = (15, 60)  # call lengths the whole-call figure is projected to


def call_length_projection(vals: list[int], when: list[float | None],
                           minutes: tuple[float, ...] = PROJECT_MINUTES) -> dict:
    """What this call's whole-call utilisation would read at other lengths: its first minute and last TAIL_S seconds
    as they were (fixed costs: the start, the tail), the time between at this call's mean over that middle. A model,
    not a measurement: it assumes the middle holds as long as the call goes on. Empty without timestamps or without a
    middle."""
    if not when or None in when or len(vals) < 2:
        return {}
    t0, t1 = when[0], when[-1]
    dt = (t1 - t0) / (len(vals) - 1)  # the sampling period
    head = [v for v, t in zip(vals, when, strict=True) if t - t0 < STEADY_AFTER_S]
    tail = [v for v, t in zip(vals, when, strict=True) if t - t0 >= STEADY_AFTER_S and t1 - t < TAIL_S]
    body = [v for v, t in zip(vals, when, strict=True) if t - t0 >= STEADY_AFTER_S and t1 - t >= TAIL_S]
    if not body:
        return {}
    fixed_s = (len(head) + len(tail)) * dt
    fixed_busy = sum(head + tail) / 100 * dt
    middle = statistics.mean(body) / 100
    out = {"first_minute_idle_gpu_s": round(sum(100 - v for v in head) / 100 * dt, 1),
           "last_seconds_idle_gpu_s": round(sum(100 - v for v in tail) / 100 * dt, 1),
           "middle_mean": round(100 * middle, 1)}
    for m in minutes:
        length = 60.0 * m
        if length > fixed_s:
            out[f"projected_mean_all_{m:g}_min"] = round(100 * (fixed_busy + middle * (length - fixed_s)) / length, 1)
    return out


def smi_utilisation(path: Path | None) -> dict | None:
    """Mean GPU utilisation over the samples between the first and last busy one (start-up and tail idle
    are the run's, not the GPU's, so they are reported apart), over that span less its first minute, and less its
    last TAIL_S seconds as well (the steady state: what a run of many calls' length holds, where start and tail
    weigh nothing; where timestamps say when a sample was taken; of one call's file only)."""
    if not path or not path.exists():
        return None
    vals, mem, when = [], [], []
    with open(path) as f:
        for row in csv.reader(f):
            if len(row) < 3 or not row[2].strip().split(" ")[0].isdigit():
                continue
            vals.append(int(row[2].strip().split(" ")[0]))
            mem.append(int(row[3].strip().split(" ")[0]) if len(row) > 3 else 0)
            when.append(_smi_time(row[0]))
    if not vals:
        return None
    busy = [i for i, v in enumerate(vals) if v > 0]
    span = slice(busy[0], busy[-1] + 1) if busy else slice(None)
    inner, used = vals[span], sorted(mem[span])
    start = when[span][0]
    end = when[span][-1]
    steady = [v for v, t in zip(inner, when[span], strict=True)
              if start is not None and t is not None and t - start >= STEADY_AFTER_S]
    middle = [v for v, t in zip(inner, when[span], strict=True)
              if start is not None and end is not None and t is not None and STEADY_AFTER_S <= t - start
              and end - t >= TAIL_S]
    # device memory in use over the busy span (MiB): how full the card really is while the budget admits tasks
    q = {f"memory_used_mib_q{p}": used[min(len(used) - 1, p * len(used) // 100)] for p in (10, 50, 90)}
    # the call's start and end seen from the GPU: seconds before its first busy sample and after its last
    edges = {}
    if busy and None not in (when[0], when[-1], start, end):
        edges = {"seconds_before_first_busy": round(start - when[0], 1), "seconds_after_last_busy": round(when[-1] - end, 1)}
    return {"samples": len(vals), "mean_all": statistics.mean(vals), "mean_busy_span": statistics.mean(inner), **edges,
            "mean_after_first_minute": round(statistics.mean(steady), 1) if steady else None,
            "mean_steady_state": round(statistics.mean(middle), 1) if middle else None,
            **q, "memory_used_mib_max": used[-1], **call_length_projection(vals, when)}


def stage_utilisation(paths: list[Path]) -> dict | None:
    """The profile stage's utilisation when it ran as several calls, one nvidia-smi CSV each (same sampling period):
    each call's figures, and the mean over every sample of them all, starts and tails included (what one GPU gave
    the stage). One file: that call's figures as they are."""
    calls = [u for u in (smi_utilisation(p) for p in paths) if u]
    if len(calls) <= 1:
        return calls[0] if calls else None
    samples = sum(u["samples"] for u in calls)
    return {"samples": samples, "calls": calls,
            "mean_all": round(sum(u["mean_all"] * u["samples"] for u in calls) / samples, 2)}


def family_table(tasks: list[dict], published: set[str], category: str) -> list[dict]:
    from operators.catalog import sampleable

    names = [s.name for s in sampleable() if s.category == category]
    rows = []
    for name in names:
        having = [t["task_id"] for t in tasks if name in (t["ops"] or [])]
        kept = sum(t in published for t in having)
        rows.append({"op": name, "sampled": len(having), "published": kept,
                     "share": round(kept / len(having), 3) if having else None})
    return rows


def dedupe_pairs(rd: RunDir, ops_of: dict[str, list[str]]) -> list[dict]:
    rows = rd.read_rows("dedupe") if rd.done_shards("dedupe") or (rd.path / "dedupe").exists() else []
    out = []
    for r in rows:
        if r["keep"] or not (r["reason"] or "").startswith("near"):
            continue
        other = next((m for m in TASK_ID.findall(r["reason"]) if m != r["task_id"]), None)
        a, b = ops_of.get(r["task_id"], []), ops_of.get(other, [])
        out.append({"dropped": r["task_id"], "kept": other, "dropped_ops": a, "kept_ops": b,
                    "same_ops": Counter(a) == Counter(b), "reason": r["reason"]})
    return out


def measured(rd: RunDir) -> dict[str, dict]:
    """task_id -> its whole measurement row, read once. Whole rows, not chosen columns: a run measured before the
    output checksums has shards without those columns, and read whole they come back null."""
    return {m["task_id"]: m for m in rd.read_rows("measurements")}


def rerun_differs(m: dict | None) -> bool | None:
    """Whether a task's compiled graph gave other bits on its warm-up than on its compile check (draw 0 both
    times, one worker); None where either checksum is missing."""
    a, b = (m or {}).get("compile_checksum"), (m or {}).get("compile_rerun_checksum")
    return None if a is None or b is None else a != b


def compiled_reruns(rows: list[dict]) -> dict:
    """Tasks whose compiled graph ran twice on draw 0 in one worker (the compile check, then a warm-up in the
    drain) with both outputs checksummed, and those whose two checksums differ: a compiled graph that computes
    other bits from run to run, whose compile verdict may then change too."""
    seen = {m["task_id"]: rerun_differs(m) for m in rows}
    differ = [t for t, d in seen.items() if d]
    return {"tasks_recorded": sum(d is not None for d in seen.values()), "differ": len(differ),
            "examples": differ[:10]}


def outputs_moved(m1: dict[str, dict], m2: dict[str, dict], judged: set[str]) -> dict:
    """Over every task both runs checksummed, whatever either verdict: how many computed other eager bits, other
    compiled bits, and of the latter how many ran another compiled program (compile_code) or one whose choices
    were timed (compile_benchmarks > 0 in either run); a few examples of each."""
    eager, compiled, code, timed = [], [], [], []
    for t in sorted(judged):
        a, b = m1.get(t) or {}, m2.get(t) or {}
        if a.get("eager_checksum") is not None and b.get("eager_checksum") is not None \
                and a["eager_checksum"] != b["eager_checksum"]:
            eager.append(t)
        if a.get("compile_checksum") is None or b.get("compile_checksum") is None \
                or a["compile_checksum"] == b["compile_checksum"]:
            continue
        compiled.append(t)
        if a.get("compile_code") and b.get("compile_code") and a["compile_code"] != b["compile_code"]:
            code.append(t)
        if (a.get("compile_benchmarks") or 0) > 0 or (b.get("compile_benchmarks") or 0) > 0:
            timed.append(t)
    both = sum(1 for t in judged if (m1.get(t) or {}).get("compile_checksum") is not None
               and (m2.get(t) or {}).get("compile_checksum") is not None)
    return {"compiled_in_both": both, "eager_moved": len(eager), "compiled_moved": len(compiled),
            "compiled_moved_other_code": len(code), "compiled_moved_timed_choices": len(timed),
            "examples": {"eager": eager[:10], "compiled": compiled[:10], "other_code": code[:10],
                         "timed": timed[:10]}}


def ratio_stats(pairs: list[tuple[float, float]]) -> dict:
    """Second over first of paired timings: how many, the median ratio and the median and p90 of |ratio - 1|."""
    r = sorted(b / a for a, b in pairs if a and b)
    if not r:
        return {"tasks": 0}
    dev = sorted(abs(x - 1) for x in r)
    return {"tasks": len(r), "median_ratio": round(statistics.median(r), 4),
            "median_abs_dev": round(statistics.median(dev), 4), "p90_abs_dev": round(dev[int(0.9 * (len(dev) - 1))], 4)}


def repeat_diff(rd: RunDir, rd2: RunDir, judged: set[str], window: tuple[float, float],
                m1: dict[str, dict] | None = None) -> dict:
    """The judged tasks measured again in rd2 (the same tasks, another profile run): which published set each run
    gives (a task whose eager time lies within 5% of a window bound may flip) and how the paired timings agree
    (eager: the run-to-run noise; compile: that noise plus whatever the second run's settings changed)."""
    m1, m2 = m1 if m1 is not None else measured(rd), measured(rd2)  # m1: rd's rows when the caller has them
    judged = judged & set(m2)  # a time-boxed second run may not have measured them all
    published, pub2 = set(accepted_task_ids(rd)) & judged, set(accepted_task_ids(rd2)) & judged
    rej1, rej2 = first_rejection(rd), first_rejection(rd2)
    lo, hi = window

    def near_bound(t: str) -> bool:
        for m in (m1.get(t), m2.get(t)):
            ms = (m or {}).get("eager_ms")
            if ms and (abs(ms - lo) <= 0.05 * lo or abs(ms - hi) <= 0.05 * hi):
                return True
        return False

    def same(t: str, col: str) -> bool | None:
        """Whether both runs computed the same output (its checksum), None where either run recorded none."""
        a, b = (m1.get(t) or {}).get(col), (m2.get(t) or {}).get(col)
        return None if a is None or b is None else a == b

    diff = []
    for t in sorted(published ^ pub2):
        diff.append({"task_id": t, "first": "published" if t in published else rej1.get(t, ("", ""))[1],
                     "second": "published" if t in pub2 else rej2.get(t, ("", ""))[1],
                     "eager_ms": [(m1.get(t) or {}).get("eager_ms"), (m2.get(t) or {}).get("eager_ms")],
                     "within_5pct_of_bound": near_bound(t),
                     "same_eager_output": same(t, "eager_checksum"), "same_compiled_output": same(t, "compile_checksum"),
                     "compiled_varied_within_run": [rerun_differs(m1.get(t)), rerun_differs(m2.get(t))],
                     "same_compiled_code": same(t, "compile_code"),
                     "compile_benchmarks": [(m1.get(t) or {}).get("compile_benchmarks"),
                                            (m2.get(t) or {}).get("compile_benchmarks")]})
    both = [(m1[t], m2[t]) for t in sorted(published & pub2) if t in m1 and t in m2]
    return {"tasks_in_both": len(judged), "published_first": len(published), "published_second": len(pub2),
            "same": len(published & pub2),
            "differ": len(diff), "differ_not_near_bound": sum(not d["within_5pct_of_bound"] for d in diff),
            "outputs_moved": outputs_moved(m1, m2, judged),
            "paired_eager_ms": ratio_stats([(a["eager_ms"], b["eager_ms"]) for a, b in both]),
            "paired_compile_ms": ratio_stats([(a["compile_ms"], b["compile_ms"]) for a, b in both]),
            "rows": diff}


WAITS = ("wall_s", "cpu_s", "lock_wait_s", "lock_wait_exclusive_s", "lock_gather_s", "budget_wait_s", "regrow_wait_s",
         "gpu_exclusive_s", "gpu_busy_s", "gpu_busy_eager_s", "gpu_busy_compile_s", "compile_wall_s")


def time_breakdown(rows: list[dict], profile_s: float) -> dict | None:
    """Mean seconds per task of each part of a worker's wall time, and how many cores the workers kept busy."""
    rows = [r for r in rows if r.get("cpu_s") is not None]
    if not rows:
        return None
    out = {k: round(statistics.fmean(r.get(k) or 0.0 for r in rows), 4) for k in WAITS}
    out["tasks"] = len(rows)
    if profile_s:
        out["cpu_cores_busy"] = round(sum(r["cpu_s"] for r in rows) / profile_s, 2)
        out["exclusive_share_of_profile"] = round(sum(r.get("gpu_exclusive_s") or 0 for r in rows) / profile_s, 4)
    return out


STALL_S = 10.0  # a first compiled run (inductor's autotuning) that kept the GPU busy this long stalls the pool


def long_first_compiled_runs(rows: list[dict], over_s: float = STALL_S) -> dict:
    """Tasks whose compiled graph's first run (inductor's autotuning, under the shared GPU lock) kept the GPU busy
    over `over_s` seconds: while it ran, every worker that came to time waited, and every shared section behind
    those (call 45: one 48 s such run, 40 s with no task finishing)."""
    long = sorted((r for r in rows if (r.get("gpu_busy_compile_s") or 0) > over_s),
                  key=lambda r: -r["gpu_busy_compile_s"])
    return {"over_s": over_s, "tasks": len(long), "gpu_busy_s": round(sum(r["gpu_busy_compile_s"] for r in long), 1),
            "examples": [f"{r['task_id']}: {r['gpu_busy_compile_s']:.1f} s" for r in long[:3]]}


def finish_timeline(rows: list[dict], bin_s: float = 20.0, gap_s: float = 120.0) -> dict | None:
    """Tasks finished per `bin_s` seconds, one list per profile call (rows that record `started_at`; a call starts
    where a task starts over `gap_s` after every earlier one finished), and the seconds in bins under a quarter of
    the median bin: a pool stalled behind one long shared section (call 45: two bins of 5 and 0 among bins of
    60-97) shows there, not in per-task means. A call's last bin is partial: it counts only as its only bin."""
    spans = sorted((float(r["started_at"]), float(r["started_at"]) + float(r.get("wall_s") or 0.0))
                   for r in rows if r.get("started_at"))
    if len(spans) < 2:
        return None
    calls: list[list[tuple[float, float]]] = []
    last_end = -math.inf
    for start, end in spans:
        if start > last_end + gap_s:
            calls.append([])
        calls[-1].append((start, end))
        last_end = max(last_end, end)
    finished = []
    for call in calls:
        t0 = call[0][0]
        counts = [0] * (int((max(e for _, e in call) - t0) // bin_s) + 1)
        for _, end in call:
            counts[int((end - t0) // bin_s)] += 1
        finished.append(counts)
    full = [c for counts in finished for c in (counts[:-1] or counts)]
    median = statistics.median(full)
    return {"bin_s": bin_s, "finished": finished, "median": median,
            "stalled_s": bin_s * sum(c < median / 4 for c in full)}


def call_range(manifest: dict, call: int) -> tuple[int, int, float, dict, dict]:
    """(first index, end index, seconds, settings, fixed costs) of the tasks one profile call measured: profile
    takes pending tasks in index order, so a call measured the indices between the previous call's count of measured
    tasks and its own (`profiled` + `skipped` after it); settings: what its `--set` changed from the run's config;
    fixed costs: seconds until every worker was ready and the drain after the last task was handed out (logged
    since 2026-12-01); since 2026-12-03 also the call's own table reading and the fork server's imports, each
    from the call's start."""
    calls = (manifest.get("stages", {}).get("profile", {}) or {}).get("calls") or []
    k = call - 1 if call > 0 else len(calls) + call
    if not 0 <= k < len(calls):
        sys.exit(f"error: the run's manifest logs {len(calls)} profile call(s); --call {call} is not one of them")

    def done(c: dict) -> int:
        return int(c.get("profiled", 0)) + int(c.get("skipped", 0))

    keys = ("tables_s", "fork_server_ready_s", "workers_ready_s", "tail_s")
    fixed = {key: calls[k][key] for key in keys if key in calls[k]}
    return ((done(calls[k - 1]) if k else 0), done(calls[k]), float(calls[k]["seconds"]), calls[k].get("settings") or {},
            fixed)


def reservation_retries(rows: list[dict]) -> dict:
    """How many tasks ran out of their memory reservation and ran again with the worker's whole cap, of those
    measured since measurements record it (`reservation_retry`), with the first few reasons."""
    known = [r for r in rows if r.get("reservation_retry") is not None]  # "" once recorded, None before
    retried = [r for r in known if r.get("reservation_retry")]
    # "7.00 GiB: oom in compiled-run: ..." names the step the first attempt ran out in (older rows: "oom: ...")
    steps = Counter(m.group(1) if (m := re.match(r"[\d.]+ GiB: (timing alloc retries|\w+(?: in [\w-]+)?)",
                                                  r["reservation_retry"])) else "other" for r in retried)
    return {"tasks_recorded": len(known), "retried": len(retried), "by_step": dict(steps.most_common()),
            "examples": [f"{r['task_id']}: {r['reservation_retry'][:200]}" for r in retried[:3]]}


def rejected_before_timing(rows: list[dict], f) -> dict:
    """The tasks the checks decided before their timed runs reject (filters.checks.UNTIMED_CHECKS at the run's
    thresholds): how many were timed all the same and what that cost (their time holding the GPU alone and waiting
    for it), and how many the worker left untimed (profile.skip_timing_when_rejected)."""
    ok = [r for r in rows if r.get("status") == "ok"]
    out = [r for r in ok if decide(r, UNTIMED_CHECKS, f)[1]]
    timed = [r for r in out if r.get("eager_ms") is not None]

    def total(rs: list[dict], key: str) -> float:
        return round(sum(r.get(key) or 0.0 for r in rs), 1)

    alone = total(ok, "gpu_exclusive_s")
    return {"ran": len(ok), "rejected_before_timing": len(out), "timed_anyway": len(timed),
            "left_untimed": sum(1 for r in out if r.get("timing_skipped")),
            "their_gpu_exclusive_s": total(timed, "gpu_exclusive_s"), "all_gpu_exclusive_s": alone,
            "their_share_of_exclusive": round(total(timed, "gpu_exclusive_s") / alone, 4) if alone else None,
            "their_wait_exclusive_s": total(timed, "lock_wait_exclusive_s"),
            "all_wait_exclusive_s": total(ok, "lock_wait_exclusive_s")}


def quick_over_median(rows: list[dict]) -> dict:
    """How far the untimed quick eager run (which early_reject_factor judges) strays from the timed median:
    quantiles of quick_eager_ms / eager_ms over the tasks that have both."""
    r = sorted(m["quick_eager_ms"] / m["eager_ms"] for m in rows
               if m.get("quick_eager_ms") and m.get("eager_ms") and m.get("eager_runs"))
    if not r:
        return {}
    return {"tasks": len(r), **{f"q{q:02d}": round(r[min(len(r) - 1, int(q / 100 * len(r)))], 3)
                                for q in (1, 10, 50, 90, 99)}, "min": round(r[0], 3), "max": round(r[-1], 3)}


def headline(result: dict) -> list[dict]:
    """The figures docs/figures.md shows for this run (python -m pipeline.outputs.figures reads them)."""
    common = {"command": "python " + str(result.get("command", "benchmarks/pipeline_yield.py")),
              "hardware": f"{result.get('gpus') or 1}x {result.get('gpu') or 'GPU'}",
              "torch": str(result.get("torch")), "commit": str(result.get("commit"))}
    rows = [{"figure": "published / sampled, fresh h200 tasks",
             "value": f"{100 * result['published_over_sampled']:.1f}% ({result['published']:,} of {result['sampled']:,})",
             "target": ">= 85%", **common}]
    if result.get("gpu_s_per_published") is not None:
        rows.append({"figure": "profile GPU-s per published task", "value": f"{result['gpu_s_per_published']:.4f}",
                     "target": "<= 0.3", **common})
    util = result.get("gpu_utilisation") or {}
    if util.get("mean_all") is not None:
        rows.append({"figure": "GPU utilisation over a profile call", "value": f"{util['mean_all']:.1f}% over all samples",
                     "target": ">= 90%", **common})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, required=True)
    ap.add_argument("--repeat", type=Path)
    ap.add_argument("--smi", type=Path, action="append", default=[],
                    help="nvidia-smi CSV of the profile call; again for each call of a stage profiled in several")
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--label", default="")
    ap.add_argument("--commit", help="the tree the GPU measured, where its manifest has none (a checkout without git)")
    ap.add_argument("--since-index", type=int, default=0, help="judge only tasks sampled at this index or later")
    ap.add_argument("--until-index", type=int, help="judge only tasks sampled before this index")
    ap.add_argument("--profile-seconds", type=float, help="profile seconds of the judged tasks (default: manifest)")
    ap.add_argument("--call", type=int, help="judge the tasks profile call K measured (1-based, negative from the "
                    "last, as stages.profile.calls logs them): sets --since-index, --until-index, --profile-seconds")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/pipeline_yield.json"))
    a = ap.parse_args()

    rd = RunDir(a.run)
    cfg = load_file(a.run / "config.toml")
    manifest = json.loads((a.run / "manifest.json").read_text())
    settings: dict = {}
    fixed: dict = {}
    if a.call is not None:
        a.since_index, a.until_index, a.profile_seconds, settings, fixed = call_range(manifest, a.call)
    all_tasks = rd.read_rows("tasks", ["task_id", "name", "ops"])
    tasks = all_tasks[a.since_index:a.until_index]
    rejections = first_rejection(rd)
    meas_rows = measured(rd)
    if a.since_index or a.until_index is not None:  # a grown run: only the new tasks that a stage has decided so far
        tasks = [t for t in tasks if t["task_id"] in meas_rows or t["task_id"] in rejections]
    ops_of = {t["task_id"]: list(t["ops"] or []) for t in all_tasks}
    name_of = {t["task_id"]: t["name"] for t in all_tasks}
    judged = {t["task_id"] for t in tasks}
    published = set(accepted_task_ids(rd)) & judged
    rejections = {t: r for t, r in rejections.items() if t in judged}
    n = len(tasks)
    if not n:
        sys.exit(f"error: no task of {a.run} in the judged range [{a.since_index}, {a.until_index}); a re-measure copy "
                 "logs its call after the original's: give --since-index, --until-index and --profile-seconds")
    profile = dict(manifest.get("stages", {}).get("profile", {}))
    if a.profile_seconds is not None:
        profile["seconds"] = a.profile_seconds
    gpu_s = float(profile.get("seconds", 0.0)) * a.gpus
    kinds = Counter((stage, reason_kind(reason)) for stage, reason in rejections.values())
    examples: dict[tuple[str, str], str] = {}
    for t, (stage, reason) in rejections.items():
        examples.setdefault((stage, reason_kind(reason)), f"{t} {name_of.get(t, '')}: {reason[:160]}")
    labels = [(t, r) for t, (s, r) in rejections.items() if r.startswith("label mismatch")]
    pairs = [p for p in dedupe_pairs(rd, ops_of) if p["dropped"] in judged]
    judged_rows = [m for t, m in meas_rows.items() if t in judged]
    machine = Counter((m["gpu"], m["torch_version"]) for m in judged_rows if m["gpu"]).most_common(1)
    result = {
        "label": a.label, "command": " ".join(sys.argv), "run": str(a.run),
        "gpu": machine[0][0][0] if machine else None, "torch": machine[0][0][1] if machine else None, "commit": a.commit or manifest.get("versions", {}).get("git_commit")
        or manifest.get("commit"), "sampled": n, "published": len(published),
        "published_over_sampled": round(len(published) / n, 4) if n else None,
        "profile_seconds": profile.get("seconds"), "gpus": a.gpus,
        "gpu_s_per_published": round(gpu_s / len(published), 4) if published else None,
        "gpu_s_per_sampled": round(gpu_s / n, 4) if n else None,
        "gpu_utilisation": stage_utilisation(a.smi),
        "since_index": a.since_index, "until_index": a.until_index, "profile_settings": settings,
        "profile_fixed_costs_s": fixed,
        "quick_over_median": quick_over_median(judged_rows),
        "reservation_retries": reservation_retries(judged_rows),
        "compiled_reruns": compiled_reruns(judged_rows),
        "rejected_before_timing": rejected_before_timing(judged_rows, cfg.filter),
        "long_first_compiled_runs": long_first_compiled_runs(judged_rows),
        "finish_timeline": finish_timeline(judged_rows),
        "worker_time_per_task_s": time_breakdown(judged_rows,
                                                 float(profile.get("seconds") or 0.0)),
        "funnel": {s: sum(1 for st, _ in rejections.values() if st == s)
                   for s in ("decontaminate", "filter", "dedupe")},
        "top_reasons": [{"stage": s, "reason": k, "tasks": c, "example": examples[(s, k)]}
                        for (s, k), c in kinds.most_common(10)],
        "label_rejections": [{"task_id": t, "name": name_of.get(t), "reason": r} for t, r in labels],
        "normalization": family_table(tasks, published, "normalization"),
        "near_duplicate_drops": len(pairs),
        "near_duplicate_drops_ops_differ": [p for p in pairs if not p["same_ops"]],
        "near_duplicate_pairs": pairs,
    }
    if a.repeat:
        result["repeat"] = repeat_diff(rd, RunDir(a.repeat), judged, (cfg.filter.min_eager_ms, cfg.filter.max_eager_ms),
                                       meas_rows)

    print(f"run {a.run} ({a.label}): {n} sampled -> {len(published)} published "
          f"({result['published_over_sampled']:.1%}); profile {profile.get('seconds')} s x {a.gpus} GPU -> "
          f"{result['gpu_s_per_published']} GPU-s per published task")
    stage = result["gpu_utilisation"]
    if stage and "calls" in stage:
        print(f"GPU utilisation over the stage's {len(stage['calls'])} calls: mean {stage['mean_all']:.1f}% over all "
              f"{stage['samples']} samples; per call "
              + ", ".join(f"{u['mean_all']:.1f}%" for u in stage["calls"]))
    elif stage:
        u = stage
        steady = u["mean_after_first_minute"]
        middle = u.get("mean_steady_state")
        print(f"GPU utilisation: mean {u['mean_all']:.1f}% over all samples, {u['mean_busy_span']:.1f}% between first and "
              f"last busy{f', {steady:.1f}% after its first minute' if steady is not None else ''}"
              f"{f', {middle:.1f}% without its last {TAIL_S:g} s too (steady state)' if middle is not None else ''}")
        if "projected_mean_all_60_min" in u:
            print(f"  its first minute idled {u['first_minute_idle_gpu_s']} GPU-s; with that start and tail, and the "
                  f"{u['middle_mean']}% between them going on, a call of "
                  + " / ".join(f"{m} min would read {u[f'projected_mean_all_{m}_min']}%" for m in PROJECT_MINUTES
                               if f"projected_mean_all_{m}_min" in u) + " over all samples (a model)")
    if result["worker_time_per_task_s"]:
        b = result["worker_time_per_task_s"]
        print("worker time per task (s): " + ", ".join(f"{k} {b[k]}" for k in WAITS)
              + f"; CPU cores busy {b.get('cpu_cores_busy')}")
    rr = result["reservation_retries"]
    if rr["tasks_recorded"]:
        print(f"run again with the worker's whole cap (out of their reservation): {rr['retried']} of "
              f"{rr['tasks_recorded']} tasks that record it" + "".join(f"\n  {e}" for e in rr["examples"]))
    rb = result["rejected_before_timing"]
    print(f"rejected by the checks before timing: {rb['rejected_before_timing']} of {rb['ran']} that ran; timed all the "
          f"same: {rb['timed_anyway']} ({rb['their_gpu_exclusive_s']} of {rb['all_gpu_exclusive_s']} s held alone, "
          f"{rb['their_wait_exclusive_s']} of {rb['all_wait_exclusive_s']} s waiting for it); left untimed: "
          f"{rb['left_untimed']}")
    lf = result["long_first_compiled_runs"]
    if lf["tasks"]:
        print(f"first compiled runs over {lf['over_s']:g} s of GPU (the pool waits behind them): {lf['tasks']} tasks, "
              f"{lf['gpu_busy_s']} s: " + ", ".join(lf["examples"]))
    if tl := result["finish_timeline"]:
        print(f"tasks finished per {tl['bin_s']:g} s: median {tl['median']}, {tl['stalled_s']:g} s in bins under a quarter "
              f"of it: {tl['finished']}")
    print("funnel:", result["funnel"])
    print(f"\n{'stage':<14} {'tasks':>5}  reason  (example)")
    for r in result["top_reasons"]:
        print(f"{r['stage']:<14} {r['tasks']:>5}  {r['reason']}\n{'':<22}e.g. {r['example']}")
    print(f"\nlabel rejections: {len(labels)}")
    for t, r in labels[:20]:
        print(f"  {t} {name_of.get(t)}: {r[:150]}")
    print(f"\n{'normalization op':<24} {'sampled':>7} {'published':>9} {'share':>6}")
    for r in result["normalization"]:
        print(f"{r['op']:<24} {r['sampled']:>7} {r['published']:>9} {r['share'] if r['share'] is not None else '-':>6}")
    print(f"\nnear-duplicate drops: {len(pairs)}; with different operators: {len(result['near_duplicate_drops_ops_differ'])}")
    for p in pairs:
        print(f"  {p['dropped']} {p['dropped_ops']}  ~  {p['kept']} {p['kept_ops']}")
    if a.repeat:
        r = result["repeat"]
        print(f"\nrepeat: {r['published_first']} vs {r['published_second']} published, {r['same']} in both, "
              f"{r['differ']} differ ({r['differ_not_near_bound']} not within 5% of a runtime bound)")
        for k in ("paired_eager_ms", "paired_compile_ms"):
            print(f"  {k} (second / first, published in both): {r[k]}")
        for d in r["rows"]:
            print(f"  {d['task_id']} {d['first'][:50]!r} / {d['second'][:50]!r} eager_ms {d['eager_ms']} "
                  f"{'near bound' if d['within_5pct_of_bound'] else ''}")
    result = {"headline": headline(result), **result}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"\nwrote {a.out}")


if __name__ == "__main__":
    main()
