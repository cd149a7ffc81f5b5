"""Where a timed run's exclusive hold leaves the GPU idle: the harness's own host work between two timed runs
(pipeline.gpu.harness.Harness._run_ms: sync, events, L2 flush) against the launch gaps inside a task's measured interval.

    python benchmarks/timing_overhead.py [--runs 200] [--run DIR --tasks 40] [--out benchmarks/results/timing_overhead.json]

Needs a GPU. Synthetic models first: one kernel of about 1 ms (`torch.cuda._sleep`: no launch gaps) and a chain of
small pointwise ops (launch-bound). For each, `--runs` timed runs through the harness's `_run_ms`: wall per run, the
measured interval, the flush alone; what is left (wall - interval - flush) is the GPU idle the harness adds per run.
With `--run`, the first `--tasks` measured tasks of that run as well (eager, the harness's `_time` loop) and, under
torch.profiler, the share of each measured interval the GPU spends in kernels (launch gaps are the rest; the
profiler's own cost makes it a lower bound). Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _harness():
    from pipeline.gpu.harness import Harness
    from pipeline.gpu.worker_settings import WorkerSettings
    from pipeline.rundir.config import Config, FilterSection, RunSection

    s = WorkerSettings.from_config(Config(run=RunSection(seed=0, device="cuda"),
                                          filter=FilterSection(min_eager_ms=0.0, max_eager_ms=1e9)))
    return Harness("cuda", s.with_profile(memory_limit_gb=0.0, compile=False))


def per_run(h, fn, args: tuple, runs: int) -> dict:
    """Wall per timed run, its measured interval and the flush alone, in microseconds (medians)."""
    import torch

    for _ in range(5):
        h._run_ms(fn, args)
    walls, inner = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        inner.append(h._run_ms(fn, args) * 1e3)
        walls.append((time.perf_counter() - t0) * 1e6)
    flush = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        h.flush.zero_()
        b.record()
        b.synchronize()
        flush.append(a.elapsed_time(b) * 1e3)
    w, i, f = statistics.median(walls), statistics.median(inner), statistics.median(flush)
    return {"wall_us": round(w, 1), "interval_us": round(i, 1), "flush_us": round(f, 1),
            "harness_idle_us": round(w - i - f, 1), "harness_idle_share": round((w - i - f) / w, 4)}


def kernel_share(fn, args: tuple, runs: int = 5) -> float | None:
    """Kernel time over measured time for `runs` synchronized runs under torch.profiler (a lower bound)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    measured = 0.0
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(*args)
            b.record()
            b.synchronize()
            measured += a.elapsed_time(b) * 1e3
    kernels = sum(e.device_time for e in prof.events() if e.device_type.name == "CUDA")
    return round(kernels / measured, 4) if measured else None


def tasks(h, run: Path, n: int) -> list[dict]:
    import torch

    from pipeline.rundir.store import RunDir

    rows = RunDir(run).read_rows("tasks", ["task_id", "code"])[:n]
    out = []
    for r in rows:
        ns: dict = {"__name__": f"task_{r['task_id']}"}
        try:
            exec(compile(r["code"], r["task_id"], "exec"), ns)  # noqa: S102 - tasks of our own run
            torch.manual_seed(0)
            with torch.device("cuda"), torch.no_grad():
                model = ns["Model"](*ns["get_init_inputs"]())
                x = tuple(ns["get_inputs"]())
                t0 = time.perf_counter()
                med, _, k = h._time(model, x, done_runs=2)
                wall = time.perf_counter() - t0
                pr = per_run(h, model, x, 10)
                share = kernel_share(model, x)
        except Exception as e:  # noqa: BLE001 - a task that fails here is left out, named
            out.append({"task_id": r["task_id"], "error": str(e).splitlines()[0][:120] if str(e) else type(e).__name__})
            continue
        finally:
            ns.clear()
            torch.cuda.empty_cache()
        out.append({"task_id": r["task_id"], "eager_ms": round(med, 4), "runs": k, "loop_wall_s": round(wall, 4),
                    **pr, "kernel_share_of_interval": share})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--run", type=Path)
    ap.add_argument("--tasks", type=int, default=40)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/timing_overhead.json")
    a = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("error: timing_overhead.py needs a GPU (it measures the GPU's idle time between timed runs)")
    h = _harness()
    x = torch.rand(1 << 20, device="cuda")

    def sleep_1ms(_x):
        torch.cuda._sleep(1_500_000)

    def chain(x):
        for _ in range(30):
            x = torch.sin(x) + 1
        return x

    with torch.no_grad():
        synthetic = {"one 1-ms kernel": per_run(h, sleep_1ms, (x,), a.runs),
                     "30 small pointwise ops": per_run(h, chain, (x,), a.runs)}
        synthetic["30 small pointwise ops"]["kernel_share_of_interval"] = kernel_share(chain, (x,))
        rows = tasks(h, a.run, a.tasks) if a.run else []
    print(f"{'model':28} {'wall us':>9} {'interval':>9} {'flush':>7} {'harness idle':>13} {'share':>7}")
    for name, r in synthetic.items():
        print(f"{name:28} {r['wall_us']:9.1f} {r['interval_us']:9.1f} {r['flush_us']:7.1f} {r['harness_idle_us']:13.1f} "
              f"{r['harness_idle_share']:7.2%}")
    ok = [r for r in rows if "error" not in r]
    summary = {}
    if ok:
        summary = {k: round(statistics.median(r[k] for r in ok if r.get(k) is not None), 4)
                   for k in ("eager_ms", "runs", "harness_idle_us", "harness_idle_share", "kernel_share_of_interval")}
        print(f"{len(ok)} tasks of {a.run} (medians): {summary}")
    out = {"command": "python " + " ".join(sys.argv), "gpu": torch.cuda.get_device_name(0),
           "torch": torch.__version__, "synthetic": synthetic, "tasks_summary": summary, "tasks": rows}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
