"""Where a profile call's idle GPU time goes: nvidia-smi's utilisation laid beside who held the GPU lock.

The workers of a call run with OPSYNTH_LOCK_TRACE=FILE (pipeline/gpu/gpu_share.py: one line per change of a worker's
hold: `want` exclusive, `hold` / `free` shared or exclusive). Each nvidia-smi sample interval (`nvidia-smi
--query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv -lms 500`, same clock) is split by the lock's
state over it:

  timing    a worker holds the GPU alone (timed runs, KernelBench-style: launch gaps count, the GPU idles in them)
  drain     a worker waits to time: no new shared section starts while the ones in flight finish
  handover  a worker waits to time and nobody holds the GPU (the gap between one holder and the next)
  shared    untimed work side by side (setup, checks, the first compiled run), no one waiting to time
  none      nobody holds or waits for the GPU (every worker compiles, waits for memory, or starts)

and the idle GPU-seconds of the interval (100 - utilisation, times its length) are shared out in proportion.
Prints a table and writes JSON: per state its seconds, its share of the busy span, the idle seconds it carries
and the mean utilisation of the intervals it fills (over 80%); and, where the trace names the holders' steps
(eager, compiled-run, compile-check, free-memory...), which steps the drains waited for and the shared time
held, each holder's share of a moment counted as 1 / the holders then; how long holds last per step; and the drains
one by one (how many, how long: each timing phase pays one). Past the first `--after` seconds, how many workers held
the GPU, waited to time or (with `--budget`, the call's OPSYNTH_BUDGET_TRACE) waited for memory in the samples of
each utilisation band: where the GPU idles with few holders, the other workers were on the host. With
profile.first_run_wait_s, the waits of timers for first compiled runs in flight (`waitout` lines) and the GPU's
utilisation inside them.

    python -m pipeline.gpu.lock_trace --trace TRACE[.gz] --smi SMI.csv [--budget BUDGET[.gz]] [--after 60]
        [--label TEXT] [--out JSON]

stdlib only.
"""

from __future__ import annotations

import argparse
import bisect
import csv
import datetime
import gzip
import json
import sys
from collections import defaultdict
from pathlib import Path

STATES = ("timing", "drain", "handover", "shared", "none")


def read_trace(path: Path) -> list[tuple[float, str, str, str, str]]:
    """(time, worker, event, mode, step) per line, sorted by time (stably: a relabelled hold's free and hold
    share their time); step is "-" where the line names none."""
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt") as f:
        for line in f:
            p = line.split()
            if len(p) in (4, 5) and p[2] in ("want", "unwant", "hold", "free"):
                rows.append((float(p[0]), p[1], p[2], p[3], p[4] if len(p) == 5 else "-"))
    rows.sort(key=lambda r: r[0])
    return rows


def read_wait_outs(path: Path) -> list[tuple[float, float]]:
    """(start, end) of each wait of a worker about to time for the first compiled runs in flight to end
    (profile.first_run_wait_s: `waitout` / `waitedout` lines; the shared work of the others goes on meanwhile)."""
    opener = gzip.open if path.suffix == ".gz" else open
    began: dict[str, float] = {}
    out = []
    with opener(path, "rt") as f:
        for line in f:
            p = line.split()
            if len(p) >= 3 and p[2] == "waitout":
                began[p[1]] = float(p[0])
            elif len(p) >= 3 and p[2] == "waitedout" and p[1] in began:
                out.append((began.pop(p[1]), float(p[0])))
    return sorted(out)


def wait_outs(spans: list[tuple[float, float]], smi: list[tuple[float, int]]) -> dict:
    """How many wait-outs, how long, and the GPU's mean utilisation in the samples that fall inside one."""
    if not spans:
        return {"n": 0}
    inside = [u for t, u in smi if any(a <= t <= b for a, b in spans)]
    return {**_quantiles([b - a for a, b in spans]),
            "mean_utilisation_inside": round(sum(inside) / len(inside), 1) if inside else None,
            "samples_inside": len(inside)}


def read_smi(path: Path) -> list[tuple[float, int]]:
    """(time, utilisation %) per sample; timestamps are the GPU host's local time, as the trace's."""
    out = []
    with open(path) as f:
        for row in csv.reader(f):
            if len(row) < 3 or not row[2].strip().split(" ")[0].isdigit():
                continue
            t = datetime.datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
            out.append((t, int(row[2].strip().split(" ")[0])))
    return out


def _holders(rows: list[tuple[float, str, str, str, str]]):
    """After each line: (time, shared holders -> step, exclusive holders, workers announced and not yet holding the
    GPU alone; an announcement may be made from a shared hold). The same objects, changed in place."""
    shared: dict[str, str] = {}
    exclusive: set[str] = set()
    waiting: set[str] = set()
    for t, who, event, mode, step in rows:
        if event == "want":
            waiting.add(who)
        elif event == "unwant":  # an announcement ended without a timed run (the task failed before it)
            waiting.discard(who)
        elif event == "hold" and mode == "exclusive":
            exclusive.add(who)
            waiting.discard(who)
        elif event == "hold":
            shared[who] = step
        elif mode == "exclusive":
            exclusive.discard(who)
        else:
            shared.pop(who, None)
        yield t, shared, exclusive, waiting


def state_changes(rows: list[tuple[float, str, str, str, str]]) -> list[tuple[float, str, tuple[str, ...]]]:
    """(time, state from then on, the steps of the shared holders then) each time either changes."""
    out: list[tuple[float, str, tuple[str, ...]]] = []
    for t, shared, exclusive, waiting in _holders(rows):
        if exclusive:
            state = "timing"
        elif waiting:
            state = "drain" if shared else "handover"
        else:
            state = "shared" if shared else "none"
        steps = tuple(sorted(shared.values()))
        if out and out[-1][0] == t:
            out.pop()  # several lines at one instant: the state after the last of them
        if not out or out[-1][1:] != (state, steps):
            out.append((t, state, steps))
    return out


def split(changes: list[tuple[float, str, tuple[str, ...]]], a: float, b: float,
          start: int) -> tuple[list[tuple[str, tuple[str, ...], float]], int]:
    """(state, shared holders' steps, seconds) of the pieces of [a, b), from the change index `start` on (the
    caller walks forward), and the index to start from next."""
    i = start
    while i + 1 < len(changes) and changes[i + 1][0] <= a:
        i += 1
    got = []
    j = i
    while j < len(changes) and changes[j][0] < b:
        lo = max(a, changes[j][0])
        hi = min(b, changes[j + 1][0]) if j + 1 < len(changes) else b
        if hi > lo:
            got.append((changes[j][1], changes[j][2], hi - lo))
        j += 1
    return got, i


def _quantiles(v: list[float]) -> dict[str, float]:
    v = sorted(v)
    return {"n": len(v), "total_s": round(sum(v), 1), "p50_s": round(v[len(v) // 2], 3),
            "p90_s": round(v[int(0.9 * len(v))], 3), "max_s": round(v[-1], 2)} if v else {"n": 0}


def holds_by_step(trace: list[tuple[float, str, str, str, str]]) -> dict[str, dict[str, float]]:
    """Per step, the holds' count and durations (hold to free of one worker), most held first."""
    start: dict[str, tuple[float, str]] = {}
    got: dict[str, list[float]] = defaultdict(list)
    for t, who, event, _, step in trace:
        if event == "hold":
            start[who] = (t, step)
        elif event == "free" and who in start:
            t0, s = start.pop(who)
            got[s].append(t - t0)
    return {s: _quantiles(v) for s, v in sorted(got.items(), key=lambda kv: -sum(kv[1]))}


def drain_episodes(changes: list[tuple[float, str, tuple[str, ...]]]) -> dict[str, float]:
    """The drains one by one: from a worker's announcement to the first timed run of its phase."""
    lengths, since = [], None
    for t, state, _ in changes:
        if state in ("drain", "handover") and since is None:
            since = t
        elif state not in ("drain", "handover") and since is not None:
            lengths.append(t - since)
            since = None
    return {**_quantiles(lengths), "over_1s": sum(x > 1 for x in lengths),
            "over_1s_total_s": round(sum(x for x in lengths if x > 1), 1)}


BANDS = ((0, 50), (50, 80), (80, 95), (95, 101))


def read_budget_waits(path: Path) -> list[tuple[float, str, bool]]:
    """(time, worker, waiting for memory from then on) from an OPSYNTH_BUDGET_TRACE file (pipeline/gpu/gpu_share.py:
    `wait` when a reservation queues, `admit` / `release` when it ends), sorted by time."""
    opener = gzip.open if path.suffix == ".gz" else open
    out = []
    with opener(path, "rt") as f:
        for line in f:
            p = line.split()
            if len(p) >= 3 and p[2] in ("wait", "admit", "release"):
                out.append((float(p[0]), p[1], p[2] == "wait"))
    out.sort(key=lambda r: r[0])
    return out


def occupancy(trace: list[tuple[float, str, str, str, str]], smi: list[tuple[float, int]],
              budget: list[tuple[float, str, bool]], after_s: float) -> dict:
    """Who the workers were while the GPU idled: over the nvidia-smi samples from `after_s` seconds past the first
    lock event on (the start left out), per utilisation band the mean number of workers holding the GPU shared,
    holding it alone, announced to time and waiting for memory (the rest compile or do other host work)."""
    if not trace:
        return {}
    lock = [(t, (len(shared), len(exclusive), len(waiting))) for t, shared, exclusive, waiting in _holders(trace)]
    mem_wait: set[str] = set()
    mem = []
    for t, who, waiting in budget:
        (mem_wait.add if waiting else mem_wait.discard)(who)
        mem.append((t, len(mem_wait)))

    def at(changes: list, t: float, none: object) -> object:  # the counts after the last change at or before t
        i = bisect.bisect_right(changes, t, key=lambda c: c[0]) - 1
        return changes[i][1] if i >= 0 else none

    start = trace[0][0] + after_s
    rows = []
    for (t0, _), (t1, u) in zip(smi, smi[1:], strict=False):
        if t0 < start or t1 > trace[-1][0]:
            continue
        mid = (t0 + t1) / 2
        rows.append((u, (*at(lock, mid, (0, 0, 0)), at(mem, mid, 0))))
    if not rows:
        return {}
    names = ("shared_holders", "timing_holders", "announced", "waiting_for_memory")
    bands = {}
    for lo, hi in BANDS:
        got = [c for u, c in rows if lo <= u < hi]
        if got:
            bands[f"{lo}-{min(hi, 100)}%"] = {"samples": len(got), **{n: round(sum(c[k] for c in got) / len(got), 2)
                                                                     for k, n in enumerate(names)}}
    return {"after_s": after_s, "utilisation": round(sum(u for u, _ in rows) / len(rows), 1), "bands": bands}


def analyse(trace: list[tuple[float, str, str, str, str]], smi: list[tuple[float, int]]) -> dict:
    changes = state_changes(trace)
    if not changes or len(smi) < 2:
        raise SystemExit("lock_trace: no lock changes or too few nvidia-smi samples to compare")
    first, last = changes[0][0], trace[-1][0]
    seconds: dict[str, float] = defaultdict(float)
    idle: dict[str, float] = defaultdict(float)
    full: dict[str, list[int]] = defaultdict(list)
    # per state (drain, shared) and holder step: seconds and idle GPU-s, a moment shared out among its holders
    by_step: dict[str, dict[str, list[float]]] = {"drain": defaultdict(lambda: [0.0, 0.0]),
                                                  "shared": defaultdict(lambda: [0.0, 0.0])}
    span = busy = 0.0
    i = 0
    for (t0, _), (t1, u) in zip(smi, smi[1:], strict=False):
        if t1 <= first or t0 >= last:
            continue
        a, b = max(t0, first), min(t1, last)
        parts, i = split(changes, a, b, i)
        dt = b - a
        span += dt
        busy += dt * u / 100
        per_state: dict[str, float] = defaultdict(float)
        for state, steps, s in parts:
            per_state[state] += s
            idle[state] += s * (100 - u) / 100
            if state in by_step:
                for step in steps:
                    acc = by_step[state][step]
                    acc[0] += s / len(steps)
                    acc[1] += s * (100 - u) / 100 / len(steps)
        for state, s in per_state.items():
            seconds[state] += s
            if s > 0.8 * dt:
                full[state].append(u)
    return {
        "span_s": round(span, 1),
        "utilisation": round(100 * busy / span, 1) if span else None,
        "idle_s": round(span - busy, 1),
        "states": {s: {"seconds": round(seconds[s], 1), "share": round(seconds[s] / span, 3) if span else None,
                       "idle_s": round(idle[s], 1),
                       "mean_utilisation_when_it_fills_a_sample": round(sum(full[s]) / len(full[s]), 1)
                       if full[s] else None, "samples_filled": len(full[s])}
                   for s in STATES},
        "by_step": {state: {step: {"seconds": round(v[0], 1), "idle_s": round(v[1], 1)}
                            for step, v in sorted(steps.items(), key=lambda kv: -kv[1][1])}
                    for state, steps in by_step.items()},
        "holds_by_step": holds_by_step(trace),
        "drain_episodes": drain_episodes(changes),
        "workers": len({r[1] for r in trace}),
        "lock_events": len(trace),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, required=True)
    ap.add_argument("--smi", type=Path, required=True)
    ap.add_argument("--budget", type=Path, help="the OPSYNTH_BUDGET_TRACE file of the same call: memory waits too")
    ap.add_argument("--after", type=float, default=60.0, help="seconds past the first lock event the occupancy "
                    "table starts (the start left out)")
    ap.add_argument("--label", default="")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    trace, smi = read_trace(args.trace), read_smi(args.smi)
    res = {"label": args.label, "command": "python -m pipeline.gpu.lock_trace " + " ".join(sys.argv[1:] if argv is None else argv),
           **analyse(trace, smi),
           "occupancy": occupancy(trace, smi, read_budget_waits(args.budget) if args.budget else [], args.after),
           "first_run_wait_outs": wait_outs(read_wait_outs(args.trace), smi)}
    print(f"{args.label or args.trace}: utilisation {res['utilisation']}% over {res['span_s']} s between the first "
          f"and last lock event; idle {res['idle_s']} GPU-s")
    print(f"{'state':10} {'seconds':>8} {'share':>6} {'idle s':>7} {'util when filling':>18}")
    for s, v in res["states"].items():
        u = v["mean_utilisation_when_it_fills_a_sample"]
        print(f"{s:10} {v['seconds']:8.1f} {v['share']:6.3f} {v['idle_s']:7.1f} {'' if u is None else u:>18}")
    for state, steps in res["by_step"].items():
        if len(steps) > 1 or "-" not in steps:
            print(f"{state} by the holders' step (seconds / idle GPU-s): "
                  + ", ".join(f"{k} {v['seconds']}/{v['idle_s']}" for k, v in steps.items()))
    print("holds by step (n, total s, p50 / p90 / max s): " + "; ".join(
        f"{k} {v['n']}, {v['total_s']}, {v['p50_s']} / {v['p90_s']} / {v['max_s']}" for k, v in res["holds_by_step"].items()))
    e = res["drain_episodes"]
    if e["n"]:
        print(f"drains: {e['n']}, {e['total_s']} s, p50 {e['p50_s']} s, p90 {e['p90_s']} s, max {e['max_s']} s; "
              f"{e['over_1s']} over 1 s ({e['over_1s_total_s']} s)")
    w = res["first_run_wait_outs"]
    if w["n"]:
        print(f"first-run wait-outs (profile.first_run_wait_s): {w['n']}, {w['total_s']} s, p50 {w['p50_s']} s, max "
              f"{w['max_s']} s; utilisation inside them {w['mean_utilisation_inside']}% ({w['samples_inside']} samples)")
    occ = res["occupancy"]
    if occ:
        print(f"after the first {occ['after_s']:g} s: utilisation {occ['utilisation']}%; workers per sample by its "
              "utilisation (shared holders / timing / announced / waiting for memory):")
        for band, v in occ["bands"].items():
            print(f"  {band:8} {v['samples']:5} samples: {v['shared_holders']} / {v['timing_holders']} / "
                  f"{v['announced']} / {v['waiting_for_memory']}")
    if args.out:
        args.out.write_text(json.dumps(res, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
