"""Where a profile call's memory-budget waits came from, read from the trace its workers wrote with
OPSYNTH_BUDGET_TRACE=FILE (pipeline/gpu/gpu_share.py: one line per change of a worker's reservation). Prints a table
and writes JSON: tasks, how many were run again with the worker's whole cap (a request of the cap right after the
same worker released a smaller one), the seconds waited for each kind of request, and the room the others held
when a request had to wait. With --measurements, each traced task is matched to its measurement row by start time
(the worker reserves within milliseconds of starting it) to compare what the retried tasks look like.

    python benchmarks/budget_trace.py --trace TRACE[.gz] [--measurements DIR] [--retry-factor F] [--label TEXT]
        [--out JSON]

--retry-factor F replays the waits as if every whole-cap retry had held F times the reservation its task outgrew.

pyarrow and stdlib.
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

GIB = 2**30


def read_trace(path: Path) -> list[tuple[float, str, str, int, int, int]]:
    """(time, worker, event, bytes, held by the others, budget) per line, in the file's order: workers write it
    under the budget's lock, so that is the order of the changes (times to the millisecond tie)."""
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt") as f:
        for line in f:
            p = line.split()
            if len(p) >= 7:
                rows.append((float(p[0]), p[1], p[2], int(p[3]), int(p[4]), int(p[6])))
    return rows


def whole_cap(rows: list[tuple]) -> int:
    """The largest request in the trace: a worker's whole cap, which only a retry asks for."""
    return max(r[3] for r in rows if r[2] in ("admit", "wait"))


def _first_request(events: list[tuple]) -> int:
    return next((e[3] for e in events if e[2] in ("admit", "wait")), 0)


def tasks_of(rows: list[tuple], cap: int) -> list[dict]:
    """Each worker's attempts (its events from a first request to its release), marked whole-cap (a retry) or not,
    and an attempt followed by the same worker's whole-cap one as retried."""
    by: dict[str, list[dict]] = defaultdict(list)
    cur: dict[str, list[tuple]] = defaultdict(list)
    for r in rows:  # the file's order: each worker's attempts come in the order it made them
        cur[r[1]].append(r)
        if r[2] == "release":
            events = cur.pop(r[1])
            by[r[1]].append({"worker": r[1], "start": events[0][0], "end": r[0], "events": events,
                             "whole_cap": _first_request(events) >= cap})
    for mine in by.values():
        for t, after in zip(mine, [*mine[1:], None], strict=True):
            t["retried"] = not t["whole_cap"] and after is not None and after["whole_cap"]
    return [t for mine in by.values() for t in mine]


def waits(rows: list[tuple], cap: int) -> dict:
    """Seconds from each wait to the same worker's next admission, for whole-cap requests and the others, and
    what the others held at those waits."""
    pending: dict[str, tuple] = {}
    got = {"whole_cap": [], "other": []}
    held_at_wait = []
    for r in rows:
        if r[2] == "wait":
            pending[r[1]] = r
            held_at_wait.append(r[4] / GIB)
        elif r[2] == "admit" and r[1] in pending:
            w = pending.pop(r[1])
            got["whole_cap" if w[3] >= cap else "other"].append(r[0] - w[0])
    return {k: {"waits": len(v), "seconds": round(sum(v), 1)} for k, v in got.items()} | {
        "held_by_others_at_a_wait_gib_q50": round(statistics.median(held_at_wait), 1) if held_at_wait else None}


def retry_replay(rows: list[tuple], cap: int, factor: float) -> dict:
    """Over the trace's span: the share of the budget whole-cap reservations held on average, the share of time some
    worker waited, the worker-seconds waited, and of those the seconds in which the waiting request would have fit if
    every whole-cap reservation had been `factor` times the same worker's reservation before it (the one its task
    outgrew; profile.retry_reserve_factor), and as it was. First order only: what earlier admissions would have
    changed after them is not replayed, nor a sized retry that runs out again."""
    held: dict[str, int] = {}
    wants: dict[str, int] = {}
    outgrown: dict[str, int] = {}  # each worker's last reservation under the cap
    last = rows[0][0]
    span = any_wait = big_gib_s = waited = would_fit = fit_as_is = 0.0
    budget = rows[0][5]

    def sized(w: str, v: int) -> int:
        return min(v, int(factor * outgrown.get(w, cap))) if v >= cap else v

    for r in rows:
        dt, last = r[0] - last, r[0]
        span += dt
        big_gib_s += dt * sum(v for v in held.values() if v >= cap) / GIB
        if wants:
            any_wait += dt
            now, smaller = sum(held.values()), sum(sized(w, v) for w, v in held.items())
            for w, n in wants.items():
                waited += dt
                would_fit += dt * (smaller - sized(w, held.get(w, 0)) + sized(w, n) <= budget)
                fit_as_is += dt * (now - held.get(w, 0) + n <= budget)  # room, but a queue ahead of it
        if r[2] in ("admit", "wait") and r[3] < cap:
            outgrown[r[1]] = r[3]
        if r[2] == "admit":
            held[r[1]] = r[3]
            wants.pop(r[1], None)
        elif r[2] == "wait":
            wants[r[1]] = r[3]
        elif r[2] == "release":
            held.pop(r[1], None)
            wants.pop(r[1], None)
    return {"retry_factor": factor, "span_s": round(span, 1),
            "whole_cap_share_of_budget": round(big_gib_s / span / (budget / GIB), 3) if span else None,
            "share_of_time_someone_waits": round(any_wait / span, 3) if span else None,
            "worker_s_waited": round(waited, 1), "worker_s_that_would_fit": round(would_fit, 1),
            "worker_s_that_fit_as_it_was": round(fit_as_is, 1)}


def q10_q50_q90(xs: list[float]) -> list[float] | None:
    xs = sorted(x for x in xs if x is not None)
    return [round(xs[int(q * (len(xs) - 1))], 2) for q in (0.1, 0.5, 0.9)] if xs else None


def match_measurements(tasks: list[dict], folder: Path) -> dict:
    """Output (as float32, which the checks compare in) and peak GiB, q10/q50/q90, of the retried tasks and of
    the others, matched by start time."""
    import pyarrow.parquet as pq

    rows = []
    for f in sorted(folder.glob("*.parquet")):
        t = pq.read_table(f)
        if "started_at" in t.column_names:
            rows += [r for r in t.select(["task_id", "started_at", "output_numel", "peak_memory_bytes"]).to_pylist()
                     if r["started_at"] is not None]
    rows.sort(key=lambda r: r["started_at"])
    starts = [r["started_at"] for r in rows]
    out: dict[str, dict] = {}
    for kind in ("retried", "not_retried"):
        chosen = [t for t in tasks if not t["whole_cap"] and t["retried"] == (kind == "retried")]
        found = []
        for t in chosen:
            i = bisect.bisect_left(starts, t["start"])
            near = [rows[j] for j in (i - 1, i) if 0 <= j < len(rows) and abs(rows[j]["started_at"] - t["start"]) < 0.01]
            if near:
                found.append(near[0])
        out[kind] = {"tasks": len(chosen), "matched": len(found),
                     "output_gib_q10_q50_q90": q10_q50_q90([(r["output_numel"] or 0) * 4 / GIB for r in found]),
                     "peak_gib_q10_q50_q90": q10_q50_q90([(r["peak_memory_bytes"] or 0) / GIB for r in found])}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, required=True)
    ap.add_argument("--measurements", type=Path, help="the run's measurements/ (rows with started_at)")
    ap.add_argument("--retry-factor", type=float,
                    help="replay the waits with every whole-cap retry at this many times the reservation it outgrew")
    ap.add_argument("--label", default="")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    if not a.trace.is_file():
        sys.exit(f"error: {a.trace} is not a file; give the trace a profile call wrote with OPSYNTH_BUDGET_TRACE")
    rows = read_trace(a.trace)
    if not rows:
        sys.exit(f"error: {a.trace} holds no trace lines")
    cap = whole_cap(rows)
    tasks = tasks_of(rows, cap)
    first = [t for t in tasks if not t["whole_cap"]]
    res = {"label": a.label, "command": "benchmarks/budget_trace.py " + " ".join(sys.argv[1:]),
           "budget_gib": round(rows[0][5] / GIB, 1), "whole_cap_gib": round(cap / GIB, 1),
           "first_attempts": len(first), "whole_cap_attempts": sum(t["whole_cap"] for t in tasks),
           "run_again_with_whole_cap": sum(t["retried"] for t in first),
           "worker_s_in_whole_cap_attempts": round(sum(t["end"] - t["start"] for t in tasks if t["whole_cap"]), 1),
           **waits(rows, cap)}
    if a.measurements:
        res["by_retry"] = match_measurements(tasks, a.measurements)
    if a.retry_factor:
        res["retry_replay"] = retry_replay(rows, cap, a.retry_factor)
    print(f"{res['first_attempts']} first attempts, {res['whole_cap_attempts']} attempts with the whole cap "
          f"({res['whole_cap_gib']} GiB of a {res['budget_gib']} GiB budget; {res['run_again_with_whole_cap']} right "
          f"after the same worker's smaller one), {res['worker_s_in_whole_cap_attempts']} worker-s waiting for or "
          f"holding it; waits: whole-cap {res['whole_cap']}, others {res['other']}; held by the others at a wait "
          f"(q50) {res['held_by_others_at_a_wait_gib_q50']} GiB")
    for kind, v in res.get("by_retry", {}).items():
        print(f"  {kind:<12} {v['tasks']:>5} tasks ({v['matched']} matched): output GiB q10/q50/q90 "
              f"{v['output_gib_q10_q50_q90']}, peak {v['peak_gib_q10_q50_q90']}")
    if "retry_replay" in res:
        rr = res["retry_replay"]
        print(f"whole-cap reservations held {rr['whole_cap_share_of_budget']:.1%} of the budget on average; some worker "
              f"waited {rr['share_of_time_someone_waits']:.0%} of the span, {rr['worker_s_waited']} worker-s; with them "
              f"at {rr['retry_factor']}x what they outgrew, {rr['worker_s_that_would_fit']} of those would have fit (as it was: "
              f"{rr['worker_s_that_fit_as_it_was']}, room the queue ahead kept)")
    if a.out:
        a.out.write_text(json.dumps(res, indent=1) + "\n")
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
