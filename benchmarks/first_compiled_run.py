"""Where a compiled graph's first run spends its time, task by task: the host functions inside it (cProfile, the
compile itself left out) and the kernels' own time on the GPU (torch.profiler), beside a second run.

Why: in a profile call the first compiled run holds the GPU lock shared, and a worker waiting to time waits for it
to end. Call 58's lock trace counted 19.3 idle GPU-s of drains behind such holds (up to 3.6 s each, the GPU at 0-1%
meanwhile): host work inside the first run, not kernels. This names that host work.

    python benchmarks/first_compiled_run.py --run DIR --tasks ID,ID,... [--out FILE.json]

The harness's own inductor settings apply (profile section of DIR's config, with --set overrides as `opsynth
profile` takes them), so the first run is the one a worker makes. Needs a GPU.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TOP = 12  # host functions listed per task


def _top(prof: cProfile.Profile, n: int = TOP) -> list[dict]:
    st = pstats.Stats(prof)
    rows = []
    for (file, line, fn), (_, calls, tt, ct, _) in st.stats.items():  # type: ignore[attr-defined]
        rows.append({"function": f"{Path(file).name}:{line}:{fn}", "calls": calls, "own_s": round(tt, 4),
                     "cumulative_s": round(ct, 4)})
    rows.sort(key=lambda r: -r["own_s"])
    return rows[:n]


def probe(task: dict, harness, torch) -> dict:
    from torch.profiler import ProfilerActivity, profile

    ns: dict = {}
    exec(compile(task["code"], task["task_id"], "exec"), ns)  # noqa: S102 - tasks passed the static check
    torch.manual_seed(0)
    model = ns["Model"](*ns["get_init_inputs"]()).to(harness.device).eval()
    x = [a.to(harness.device) if hasattr(a, "to") else a for a in ns["get_inputs"]()]
    inner = torch._TorchCompileInductorWrapper(None, None, None)
    prof = cProfile.Profile()
    compile_s = [0.0]

    def backend(gm, example_inputs):
        prof.disable()
        t = time.perf_counter()
        try:
            return inner(gm, example_inputs)
        finally:
            compile_s[0] += time.perf_counter() - t
            prof.enable()

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend)
    sync = torch.cuda.synchronize if harness.cuda else (lambda: None)
    with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA if harness.cuda else ProfilerActivity.CPU]) as kp:
        sync()
        t0 = time.perf_counter()
        prof.enable()
        compiled(*x)
        sync()
        prof.disable()
        first = time.perf_counter() - t0 - compile_s[0]
    kernel_s = sum(e.device_time_total for e in kp.key_averages()) / 1e6 if harness.cuda else 0.0
    with torch.no_grad():
        sync()
        t0 = time.perf_counter()
        compiled(*x)
        sync()
        second = time.perf_counter() - t0
    return {"task_id": task["task_id"], "name": task.get("name"), "compile_s": round(compile_s[0], 3),
            "first_run_s": round(first, 3), "first_run_kernel_s": round(kernel_s, 4),
            "second_run_s": round(second, 4), "host_top": _top(prof)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True)
    ap.add_argument("--tasks", required=True, help="task ids, comma-separated")
    ap.add_argument("--set", action="append", default=[], help="profile.KEY=VALUE, as opsynth profile takes it")
    ap.add_argument("--device", default="cuda", help="cuda; cpu only to try the script")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    import pyarrow.parquet as pq
    import torch

    from pipeline.gpu.harness import Harness
    from pipeline.gpu.worker_settings import WorkerSettings
    from pipeline.rundir.config import with_profile_settings
    from pipeline.rundir.store import RunDir

    rd = RunDir(args.run)
    cfg, _ = with_profile_settings(rd.load_config(), args.set, f"{args.run}/config.toml with --set")
    want = set(args.tasks.split(","))
    tasks = [t for f in sorted((args.run / "tasks").glob("part-*.parquet"))
             for t in pq.read_table(f, columns=["task_id", "name", "code"]).to_pylist() if t["task_id"] in want]
    harness = Harness(args.device, WorkerSettings.from_config(cfg, workers_per_gpu=1).with_profile(memory_limit_gb=0.0))
    rows = []
    for t in tasks:
        r = probe(t, harness, torch)
        rows.append(r)
        host = r["first_run_s"] - r["first_run_kernel_s"]
        print(f"{r['task_id']} {r['name'][:40]:40s} compile {r['compile_s']:6.2f} s  first run {r['first_run_s']:6.3f} s "
              f"(kernels {r['first_run_kernel_s']:.3f} s, host {host:.3f} s)  second {r['second_run_s'] * 1e3:8.2f} ms")
        for h in r["host_top"][:6]:
            print(f"      {h['own_s']:8.3f} s own  {h['cumulative_s']:8.3f} s cum  {h['calls']:6d}x  {h['function']}")
    if args.out:
        out = {"command": "benchmarks/first_compiled_run.py " + " ".join(sys.argv[1:]),
               "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu", "torch": torch.__version__, "tasks": rows}
        args.out.write_text(json.dumps(out, indent=1))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
