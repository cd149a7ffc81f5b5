"""What a compiled graph's first run does while it holds the GPU lock: profile chosen tasks of a run again, in
`--workers` processes sharing one GPU lock as profile workers do, time every `compiled-run` hold and cProfile it
(the top frames by cumulative time of each hold over `--over` seconds).

Why: a first run is meant to launch kernels, yet a few held the lock 2-4 s while the GPU idled and every worker
waiting to time waited for it (lock_trace.py: drains behind `compiled-run`). Which tasks: `--from-trace` picks those
a call's lock trace shows behind such holds (a hold belongs to the task its worker started at its first `eager`
hold after its previous timed run: started_at within 30 ms), `--name-regex` adds tasks by name, `--ids` by id
(one per line); `--limit` keeps the first N.

    python benchmarks/first_run_holds.py --run runs/RUN [--from-trace TRACE.gz [--trace-over 0.5]]
        [--name-regex 'Cumsum|Logcumsumexp'] [--ids FILE] [--limit 160] [--workers 8] [--over 0.4] [--out JSON]

Prints the longest holds with their top frames and writes JSON (every hold; per task its status and wall time).
Runs where the run's device is (the CPU too: a test uses that); measurements go nowhere, the run is only read.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import glob
import io
import json
import multiprocessing as mp
import os
import pstats
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lock_trace import read_trace  # noqa: E402  (beside this script)

from pipeline.rundir.store import RunDir  # noqa: E402

LABEL = "compiled-run"


def tasks_behind_long_holds(run: str, trace: str, over: float) -> list[str]:
    """Task ids a lock trace shows holding `compiled-run` over `over` seconds (see the module docstring)."""
    events: dict[str, list[tuple[float, str, str, str]]] = collections.defaultdict(list)
    for t, worker, ev, mode, label in read_trace(Path(trace)):
        events[worker].append((t, ev, mode, label))
    starts = [r for r in RunDir(Path(run)).read_rows("measurements", ["task_id", "started_at"]) if r["started_at"]]
    found: list[str] = []
    for evs in events.values():
        opened: dict[tuple[str, str], float] = {}
        last_timed, task_start = float("-inf"), None
        for t, ev, mode, label in evs:
            if ev == "free" and mode == "exclusive" and label == "timing":
                last_timed, task_start = t, None
            if ev == "hold":
                if task_start is None and t > last_timed and label == "eager":
                    task_start = t
                opened[(mode, label)] = t
            elif ev == "free" and (mode, label) in opened:
                began = opened.pop((mode, label))
                if label == LABEL and t - began > over and task_start is not None:
                    found += [r["task_id"] for r in starts if abs(r["started_at"] - task_start) <= 0.03]
    return list(dict.fromkeys(found))


def _work(k: int, workers: int, run: str, mine: list[dict], lockdir: str, over: float, out: str) -> None:
    """One worker: profile the task rows `mine`, cProfiling each compiled-run hold; writes out/part-k.json."""
    import torch

    from pipeline.gpu import gpu_share, harness
    from pipeline.gpu.worker_settings import WorkerSettings
    from pipeline.rundir.config import load_file

    cfg = load_file(os.path.join(run, "config.toml"))
    settings = WorkerSettings.from_config(cfg, workers_per_gpu=workers)
    state: dict = {"prof": None, "t0": 0.0, "task": ""}
    holds: list[dict] = []
    acquire, release = gpu_share.GpuLock.acquire, gpu_share.GpuLock.release

    def stop() -> None:
        if state["prof"] is None:
            return
        state["prof"].disable()
        held = time.perf_counter() - state["t0"]
        hold = {"task": state["task"], "hold_s": round(held, 3)}
        if held > over:
            text = io.StringIO()
            pstats.Stats(state["prof"], stream=text).sort_stats("cumulative").print_stats(30)
            hold["frames"] = short_paths(text.getvalue())[-6000:]
        holds.append(hold)
        state["prof"] = None

    def traced_acquire(self, exclusive: bool = False, label: str = "") -> None:
        if self.label == LABEL and label != LABEL:
            stop()
        acquire(self, exclusive, label)
        if label == LABEL and state["prof"] is None:
            state["t0"], state["prof"] = time.perf_counter(), cProfile.Profile()
            state["prof"].enable()

    def traced_release(self, keep_announced: bool = False) -> None:
        if self.label == LABEL:
            stop()
        release(self, keep_announced)

    gpu_share.GpuLock.acquire, gpu_share.GpuLock.release = traced_acquire, traced_release
    device = "cuda" if cfg.run.device == "cuda" and torch.cuda.is_available() else "cpu"
    h = harness.Harness(device, settings, os.path.join(lockdir, "gpu-0.lock"))
    h.warm(with_compile=True)
    holds.clear()  # the warm-up's own compile is no task's
    tasks = []
    for t in mine:
        state["task"] = t["task_id"]
        t0 = time.perf_counter()
        m = h.profile(t)
        tasks.append({"task_id": t["task_id"], "name": t["name"], "status": m.get("status"),
                      "wall_s": round(time.perf_counter() - t0, 2), "compile_wall_s": m.get("compile_wall_s"),
                      "error": (m.get("error") or "")[:200]})
    Path(out, f"part-{k}.json").write_text(json.dumps({"holds": holds, "tasks": tasks}))


def run_holds(run: str, tasks: list[dict], workers: int, over: float) -> dict:
    """Profile the task rows `tasks` again in `workers` spawned processes; every compiled-run hold and every
    task's result."""
    workers = min(workers, len(tasks))
    with tempfile.TemporaryDirectory() as lockdir, tempfile.TemporaryDirectory() as parts:
        procs = [mp.get_context("spawn").Process(target=_work,
                                                 args=(k, workers, run, tasks[k::workers], lockdir, over, parts))
                 for k in range(workers)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        got = [json.loads(Path(f).read_text()) for f in sorted(glob.glob(f"{parts}/part-*.json"))]
    names = {t["task_id"]: t["name"] for t in tasks}
    holds = sorted((h for g in got for h in g["holds"]), key=lambda h: -h["hold_s"])
    for h in holds:
        h["name"] = names.get(h["task"], "")
    return {"holds": holds, "tasks": [t for g in got for t in g["tasks"]],
            "workers_failed": sum(p.exitcode != 0 for p in procs)}


def short_paths(text: str) -> str:
    """Frames named from their package (torch/..., copy.py) or the inductor cache (compiled/...), not the machine's
    folders."""
    text = re.sub(r"\S*?/site-packages/", "", text)
    text = re.sub(r"/\S*?/lib/python3\.\d+/", "", text)  # the standard library
    return re.sub(r"\S*?/torchinductor_[^/\s]+/", "compiled/", text)


def _chain(frames: str) -> list[tuple[float, str]]:
    """(cumulative s, frame) of each profile line, heaviest first."""
    rows = [r.split(None, 5) for r in frames.splitlines() if re.match(r"\s*\d+(/\d+)?\s+[\d.]+\s+[\d.]+\s+[\d.]+", r)]
    return [(float(r[3]), r[5]) for r in rows if len(r) == 6]


def innermost_heavy_frame(frames: str) -> str:
    """The last profile line whose cumulative time is within 5% of the first's: where the hold's time went."""
    chain = _chain(frames)
    keep = [f for c, f in chain if c >= 0.95 * chain[0][0]] if chain else []
    return keep[-1] if keep else ""


def seconds_in(frames: str, function: str) -> float:
    """Cumulative seconds the profile gives the first frame naming `function` (0 if none does)."""
    return next((c for c, f in _chain(frames) if f"({function})" in f), 0.0)


COPIES = "copy_args_to_cpu_if_needed"  # the autotuner saving written arguments to pinned host memory


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True)
    ap.add_argument("--from-trace", help="a call's OPSYNTH_LOCK_TRACE file: the tasks behind its long holds")
    ap.add_argument("--trace-over", type=float, default=0.5)
    ap.add_argument("--name-regex")
    ap.add_argument("--ids", help="a file of task ids, one per line")
    ap.add_argument("--limit", type=int, default=160)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--over", type=float, default=0.4, help="cProfile holds longer than this (seconds)")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    rows = RunDir(Path(a.run)).read_rows("tasks")
    ids: list[str] = []
    if a.from_trace:
        ids += tasks_behind_long_holds(a.run, a.from_trace, a.trace_over)
    if a.ids:
        ids += Path(a.ids).read_text().split()
    if a.name_regex:
        ids += [r["task_id"] for r in rows if re.search(a.name_regex, r["name"])]
    ids = list(dict.fromkeys(ids))[:a.limit]
    if not ids:
        print("first_run_holds: no task chosen; pass --from-trace, --name-regex or --ids", file=sys.stderr)
        return 2
    by_id = {r["task_id"]: r for r in rows}
    res = run_holds(a.run, [by_id[t] for t in ids if t in by_id], a.workers, a.over)
    res.update(command="benchmarks/first_run_holds.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               run=a.run, chosen=len(ids))
    long = [h for h in res["holds"] if h["hold_s"] > a.over]
    print(f"{len(res['tasks'])} tasks, {len(res['holds'])} compiled-run holds, {len(long)} over {a.over} s")
    print(f"{'hold s':>7}  {'copies s':>8}  {'task':<16}  {'name':<40}  innermost heavy frame")
    for h in long[:20]:
        frames = h.get("frames", "")
        print(f"{h['hold_s']:7.3f}  {seconds_in(frames, COPIES):8.3f}  {h['task']:<16}  {h['name'][:40]:<40}  "
              f"{innermost_heavy_frame(frames)[:80]}")
    res["seconds_in_autotuner_copies"] = round(sum(seconds_in(h.get("frames", ""), COPIES) for h in long), 3)
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
