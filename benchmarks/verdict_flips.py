"""Whether a task's compile verdict changes from process to process on an idle GPU: each named task of a run is
built, drawn and run eagerly and through a fresh torch.compile in several fresh interpreters, one after another, and
each reports a checksum of its eager and of its compiled output and their largest difference. Tasks whose verdict
flipped between two profile calls (`pipeline_yield.py --repeat`) are what it is for: if every process computes
the same bits, the flip came from the conditions of a shared GPU (neighbours, memory), not from the task alone.

    python benchmarks/verdict_flips.py --run DIR --ids ID,ID,... [--reps 4] [--fresh-cache]
        [--neighbours N] [--memory-fraction F] [--device cuda|cpu] --out JSON

--neighbours starts N processes that keep the device busy (matrix products on the GPU) while the probes run, and
--memory-fraction caps each probe's share of GPU memory as a profile worker's reservation does: the conditions of
a shared GPU in a profile call, one at a time. torch and pyarrow only (it runs on a bare GPU image); --device cpu
runs the same probes on the CPU. Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# one process: the task built and drawn as the profile stage's worker does (its seeds, on the GPU), then eager and
# compiled outputs on draw 0, flattened as the compile check flattens them
PROBE = r'''
import json, sys
import torch
from filters.tensor_checks import checksum, flatten, max_diff
from pipeline.rundir.config import load_file
from pipeline.gpu.harness import Harness
from pipeline.gpu.worker_settings import WorkerSettings

run, device, fraction, code = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.stdin.read()
s = WorkerSettings.from_config(load_file(run + "/config.toml")).with_profile(memory_limit_gb=0.0)
h = Harness(device, s)
h._configure_compile()  # inductor set up as the run's profile section sets up a worker's (timed choices or not)
if fraction > 0:
    torch.cuda.set_per_process_memory_fraction(fraction)
ns = {}
exec(code, ns)
torch.manual_seed(s.seed)
with torch.device(device):
    model = ns["Model"](*ns["get_init_inputs"]())
x = h._draw(ns, 0)
with torch.no_grad():
    eager = flatten(model(*x)).clone()
    compiled = flatten(torch.compile(model)(*x))
print(json.dumps({"eager": checksum(eager), "compiled": checksum(compiled), "max_diff": max_diff(eager, compiled),
                  "agrees_1e2": bool(torch.allclose(compiled, eager, atol=1e-2, rtol=1e-2, equal_nan=True))}))
'''


def task_codes(run: Path, ids: list[str]) -> dict[str, str]:
    from pipeline.rundir.store import RunDir

    rows = {r["task_id"]: r["code"] for r in RunDir(run).read_rows("tasks", ["task_id", "code"]) if r["task_id"] in ids}
    missing = [i for i in ids if i not in rows]
    if missing:
        sys.exit(f"error: {run} has no task {missing[0]}; give task ids of its tasks table")
    return rows


# a neighbour: keeps the device busy with matrix products (and some of its memory) until it is stopped
NEIGHBOUR = r'''
import sys, torch
device = sys.argv[1]
a = torch.randn(2048, 2048, device=device)
while True:
    a = torch.tanh(a @ a)
    if device == "cuda":
        torch.cuda.synchronize()
'''


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def start_neighbours(n: int, device: str) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", NEIGHBOUR, device], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=_env(), cwd=ROOT) for _ in range(n)]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def probe(run: Path, code: str, fresh_cache: bool, device: str = "cuda", fraction: float = 0.0) -> dict:
    env = _env()
    with tempfile.TemporaryDirectory() as tmp:
        if fresh_cache:
            env |= {"TORCHINDUCTOR_CACHE_DIR": f"{tmp}/inductor", "TRITON_CACHE_DIR": f"{tmp}/triton"}
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", PROBE, str(run), device, str(fraction)], input=code,
                             capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    return json.loads(out.stdout.strip().splitlines()[-1]) | {"seconds": round(time.perf_counter() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True)
    ap.add_argument("--ids", required=True, help="task ids, comma-separated")
    ap.add_argument("--reps", type=int, default=4, help="fresh processes per task")
    ap.add_argument("--fresh-cache", action="store_true", help="each process with empty inductor and Triton caches")
    ap.add_argument("--neighbours", type=int, default=0, help="processes keeping the device busy meanwhile")
    ap.add_argument("--memory-fraction", type=float, default=0.0,
                    help="each probe's share of GPU memory (0: all of it), as a worker's reservation caps it")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    if not 0 <= a.memory_fraction <= 1 or (a.memory_fraction and a.device != "cuda"):
        sys.exit(f"error: --memory-fraction {a.memory_fraction}: give a share in (0, 1] of a CUDA device's memory")
    codes = task_codes(a.run, [i for i in a.ids.split(",") if i])
    rows = []
    neighbours = start_neighbours(a.neighbours, a.device)
    try:
        for tid, code in codes.items():
            for rep in range(a.reps):
                r = {"task_id": tid, "rep": rep} | probe(a.run, code, a.fresh_cache, a.device, a.memory_fraction)
                rows.append(r)
                print(f"{tid} rep {rep}: " + ", ".join(f"{k} {v}" for k, v in r.items() if k not in ("task_id", "rep")),
                      flush=True)
    finally:
        stop(neighbours)
    summary = {}
    for tid in codes:
        mine = [r for r in rows if r["task_id"] == tid and "error" not in r]
        summary[tid] = {"processes": len(mine), "eager_checksums": len({r["eager"] for r in mine}),
                        "compiled_checksums": len({r["compiled"] for r in mine}),
                        "verdicts": sorted({r["agrees_1e2"] for r in mine})}
    print(f"{'task':18} {'procs':>5} {'eager sums':>10} {'compiled sums':>13} verdicts")
    for tid, s in summary.items():
        print(f"{tid:18} {s['processes']:>5} {s['eager_checksums']:>10} {s['compiled_checksums']:>13} {s['verdicts']}")
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""
    a.out.write_text(json.dumps({"command": " ".join(["benchmarks/verdict_flips.py", *sys.argv[1:]]), "gpu": gpu,
                                 "torch": torch.__version__, "fresh_cache": a.fresh_cache, "neighbours": a.neighbours,
                                 "memory_fraction": a.memory_fraction, "device": a.device, "summary": summary,
                                 "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
