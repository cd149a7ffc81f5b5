"""How far the release re-check has come: the shortcut checks that shortcuts-only profile calls have run on a
release's run directory (its shortcuts/ table), what they found, and the GPU time they took, so the time the rest
needs can be planned. The tasks to check are those the checks run on: measured ok, kept by the stored filter
verdicts and not contaminated.

    python benchmarks/shortcuts_release.py --run data/releases/opsynth-ops-h200-v1/run \
        --hardware "NVIDIA H100 80GB HBM3" --torch 2.11.0+cu130 --commit C
Reads only the run directory (CPU, seconds); writes benchmarks/results/shortcuts_release_gpu.json (with
"headline"). The calls' GPU and torch are not in the run directory: name them (every call of the count should have
run on that GPU)."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.rundir.store import RunDir  # noqa: E402

KINDS = {"dead": "dead_inputs", "skip": "skippable_ops", "fragile": "fragile"}


def summarize(measurements: list[dict], verdicts: list[dict], shortcuts: list[dict], calls: list[dict]) -> dict:
    """Counts over the tasks to check; the shortcuts-only calls' seconds and tasks measured (their rate), and where
    their workers' seconds went (the rows' call_* columns)."""
    ok = {r["task_id"] for r in measurements if r["status"] == "ok"}
    # the stages before the checks that drop: the filter's stored verdicts, and decontamination
    dropped = {v["task_id"] for v in verdicts if v["stage"] in ("filter", "decontaminate") and not v["keep"]}
    todo = ok - dropped
    checked = [r for r in shortcuts if r["task_id"] in todo and r["status"] == "ok" and r.get("shortcut_checks")]
    # a check that failed (out of memory, a crash) leaves its task unchecked: the filter keeps it, so it is counted
    failed = Counter(r["status"] for r in shortcuts if r["task_id"] in todo and r["status"] != "ok")
    # by the first finding in the checks' order (dead, skip, fragile): the profile stage stops a task's checks there
    # (profile.shortcut_stop_first), and the filter drops on it alone
    found = Counter()
    for r in checked:
        hits = [k for k, col in KINDS.items() if r.get(col)]
        if hits:
            found[hits[0]] += 1
            found["any"] += 1
    sc_calls = [c for c in calls if (c.get("settings") or {}).get("profile.shortcuts_only")]
    seconds = sum(c.get("seconds") or 0.0 for c in sc_calls)
    measured = sum(c.get("measured_now") or 0 for c in sc_calls)
    rate = measured / seconds if seconds else None
    left = len(todo) - len(checked)
    # where the calls' worker seconds went, over the rows that recorded them (call_* columns)
    timed = [r for r in checked if r.get("call_wall_s") is not None]
    spent = {k: sum(r.get(f"call_{k}_s") or 0.0 for r in timed) for k in ("wall", "gpu_busy", "lock_wait",
                                                                           "budget_wait")}
    spent["host"] = spent["wall"] - spent["gpu_busy"] - spent["lock_wait"] - spent["budget_wait"]
    walls = sorted(r["call_wall_s"] for r in timed)
    # each task's last reservation (call_reserved_gib): a task run again after outgrowing its first holds the larger
    held = sorted(r["call_reserved_gib"] for r in timed if r.get("call_reserved_gib") is not None)
    top = held[-1] if held else None
    reservations = {"rows": len(held), "median_gib": held[len(held) // 2] if held else None, "largest_gib": top,
                    "at_largest": sum(g == top for g in held)}
    last = sc_calls[-1] if sc_calls else {}
    latest = {"seconds": last.get("seconds"), "rows": last.get("measured_now"), "gpus": last.get("gpus") or 1,
              "workers": last.get("workers"), "workers_ready_s": last.get("workers_ready_s")} if last else None
    # each check kind's own GPU hold over those rows (rows of a call share the GPU, so these add up past its
    # seconds), and the fragility check's by how it ran: the scaled move alone or, for a step operator the move
    # passed, the exhaustive draws too (fragile_weights "fresh")
    kinds = {k: sum(r.get(f"gpu_busy_{k}_s") or 0.0 for r in timed) for k in ("dead", "skip", "fragile")}
    by_weights = {w: [r.get("gpu_busy_fragile_s") or 0.0 for r in timed if r.get("fragile_weights") == w]
                  for w in ("scaled", "fresh")}
    check_gpu = {"rows": len(timed), **kinds,
                 "fragile_per_row": {w: {"rows": len(v), "mean_s": sum(v) / len(v) if v else None}
                                     for w, v in by_weights.items()}}
    return {"latest_call": latest, "check_gpu_s": check_gpu, "worker_seconds": {"rows": len(timed), **spent,
                               "median_wall_s": walls[len(walls) // 2] if walls else None},
            "reservations": reservations,
            "tasks_to_check": len(todo), "checked": len(checked), "failed": dict(failed), "found": dict(found),
            "calls": len(sc_calls), "call_seconds": seconds, "measured_by_calls": measured,
            "tasks_per_s": rate, "left": left, "left_gpu_hours": left / rate / 3600 if rate else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="the release's run directory")
    ap.add_argument("--hardware", required=True, help="the GPU the shortcuts-only calls ran on")
    ap.add_argument("--torch", required=True, help="torch version of those calls")
    ap.add_argument("--commit", required=True, help="commit those calls ran")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results"))
    a = ap.parse_args()
    rd = RunDir(Path(a.run))
    calls = (rd.manifest().get("stages", {}).get("profile") or {}).get("calls") or []
    s = summarize(rd.read_rows("measurements", ["task_id", "status"]), rd.read_rows("verdicts"),
                  rd.read_rows("shortcuts") if rd.done_shards("shortcuts") else [], calls)
    run = Path(a.run).resolve()
    shown = run.relative_to(ROOT) if run.is_relative_to(ROOT) else "DIR"
    base = {"command": f"python benchmarks/shortcuts_release.py --run {shown}", "hardware": a.hardware,
            "torch": a.torch, "commit": a.commit}
    n, f = s["checked"], s["found"]
    pct = lambda k: f"{f.get(k, 0)} ({100 * f.get(k, 0) / max(1, n):.1f}%)"  # noqa: E731
    head = [
        {"figure": "release rows the re-check has measured (shortcut checks at real sizes, profile stage)",
         "value": f"{n} of {s['tasks_to_check']} ({100 * n / max(1, s['tasks_to_check']):.1f}%)"
                  + "".join(f"; {c} {k}" for k, c in sorted(s["failed"].items())),
         "target": "all, for v2", **base},
        {"figure": "release rows with a shortcut, of those measured so far",
         "value": f"{pct('any')}; by the first finding: dead input {pct('dead')}, skippable operator "
                  f"{pct('skip')}, fragile {pct('fragile')}", "target": None, **base},
        {"figure": "release re-check rate (shortcuts-only profile calls)",
         "value": (f"{s['tasks_per_s']:.2f} tasks/s per GPU ({s['measured_by_calls']} tasks in "
                   f"{s['call_seconds']:.0f} s, {s['calls']} call(s)); the {s['left']} left need "
                   f"{s['left_gpu_hours']:.1f} GPU-hours") if s["tasks_per_s"] else "no call yet",
         "target": None, **base},
    ]
    if (c := s["latest_call"]) and c["seconds"] and c["rows"]:
        per_gpu = c["rows"] / c["seconds"] / c["gpus"]
        ready = c["workers_ready_s"] or 0.0
        after = (f"; {c['rows'] / (c['seconds'] - ready) / c['gpus']:.2f} once its {c['workers']} workers were ready "
                 f"at {ready:.0f} s" if 0 < ready < c["seconds"] else "")
        head.append({"figure": "shortcuts-only profile call on v1's packed run: rows checked per second per GPU "
                               "(the latest call)",
                     "value": f"{per_gpu:.2f} rows/s ({c['rows']} rows in {c['seconds']:.0f} s on {c['gpus']} "
                              f"GPU(s){after})", "target": ">= 20 rows/s", **base})
    w = s["worker_seconds"]
    if w["rows"]:
        share = lambda k: f"{100 * w[k] / w['wall']:.0f}%"  # noqa: E731
        head.append({"figure": "where a re-check worker's seconds go (shortcuts-only calls)",
                     "value": f"GPU held {share('gpu_busy')}, waiting for the GPU lock {share('lock_wait')}, for "
                              f"memory {share('budget_wait')}, on the host {share('host')}; median "
                              f"{w['median_wall_s']:.2f} s a task ({w['rows']} tasks)", "target": None, **base})
    g = s["reservations"]
    if g["rows"]:
        head.append({"figure": "re-check tasks' memory reservation (each task's last; the largest is a retry's)",
                     "value": f"median {g['median_gib']:.1f} GiB; {g['at_largest']} of {g['rows']} tasks at the "
                              f"largest, {g['largest_gib']:.1f} GiB", "target": None, **base})
    for h in head:
        print(f"{h['figure']}: {h['value']}")
    print("each check kind's GPU hold over those rows:", s["check_gpu_s"])
    out = Path(a.out) / "shortcuts_release_gpu.json"
    out.write_text(json.dumps({"headline": head, **s}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
