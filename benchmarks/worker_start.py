"""What a profile worker's start is made of, from the fork to its first cuDNN call, with N workers forked at once
from one parent that imported what the fork server imports; prints a table and writes JSON.

Why: on a cold H200 call the fork server is ready 6.4 s in and the last of 20 workers 9.2 s in (call 98). In those
2.8 s each worker creates its CUDA context (under MPS, with --mps) and runs the harness's device warm-up, a linear
layer and a convolution (cuBLAS and cuDNN handles). cuDNN and parts of cuBLAS load their libraries at first use,
so every worker maps and relocates them itself. A parent that loads them before it forks (without initialising
CUDA) would hand them to every worker.

Arms, each a fresh parent interpreter, in rounds (the first round meets a cold page cache on a fresh machine):
- as_is: the parent imports the fork server's modules, forks N workers; each times its steps (context, cuBLAS,
  cuDNN) and lists the shared libraries its steps mapped;
- libs_ahead: the same, the parent first loading (ctypes, global) the libraries the as_is workers mapped.
A worker that cannot use CUDA after the parent's loading shows as failed (fork after CUDA initialisation).

On the H200 under MPS (2026-12-04, `call100_h200_worker_start.json`, 20 workers): the context took 2.1-2.6 s p50 in
each worker (all 20 at once), cuBLAS 0.12 s, cuDNN 0.5 s on a cold page cache and 0.2 s after; with cuDNN's
libraries loaded ahead, every worker ready 3.34-3.44 s after the forks against 3.44 s. The contexts are the start's
cost, and loading libraries ahead buys at most 0.1 s, so the fork server does not.

    python benchmarks/worker_start.py --out worker_start.json [--workers 20] [--rounds 2] [--mps]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.gpu.bytecode import with_cache as with_bytecode_cache  # noqa: E402
from pipeline.gpu.executors import PRELOAD, PRELOAD_COMPILE  # noqa: E402
from pipeline.gpu.mps import MpsDaemon  # noqa: E402

PARENT = r"""
import ctypes, importlib, json, os, sys, time
modules, libs, n = {modules!r}, {libs!r}, {n!r}
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # as the fork server: imports must not touch CUDA
def mapped():
    with open("/proc/self/maps") as f:
        return {{l.split()[-1] for l in f if ".so" in l.split()[-1]}}
t0 = time.perf_counter()
for m in modules:
    importlib.import_module(m)
t_import = time.perf_counter() - t0
t0 = time.perf_counter()
failed = []
for path in libs:
    try:
        ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    except OSError as e:
        failed.append(f"{{path}}: {{e}}"[:200])
t_libs = time.perf_counter() - t0
import torch
assert not torch.cuda.is_initialized()
before = mapped()
r, w = os.pipe()
start = time.perf_counter()
pids = []
for _ in range(n):
    pid = os.fork()
    if pid == 0:
        os.close(r)
        out = {{"forked_s": time.perf_counter() - start}}
        try:
            t = time.perf_counter(); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
            out["context_s"] = time.perf_counter() - t
            t = time.perf_counter()
            lin = torch.nn.Linear(64, 64).cuda(); lin(torch.rand(32, 64, device="cuda")); torch.cuda.synchronize()
            out["cublas_s"] = time.perf_counter() - t
            t = time.perf_counter()
            conv = torch.nn.Conv2d(4, 4, 3).cuda(); conv(torch.rand(2, 4, 8, 8, device="cuda")).relu().mean()
            torch.cuda.synchronize()
            out["cudnn_s"] = time.perf_counter() - t
            out["ready_s"] = time.perf_counter() - start
            out["new_libs"] = sorted(mapped() - before)
        except Exception as e:
            out["error"] = f"{{type(e).__name__}}: {{e}}"[:200]
        os.write(w, (json.dumps(out) + "\n").encode())
        os._exit(0)
    pids.append(pid)
os.close(w)
for pid in pids:
    os.waitpid(pid, 0)
with os.fdopen(r) as f:
    workers = [json.loads(line) for line in f if line.strip()]
print(json.dumps({{"import_s": t_import, "libs_s": t_libs, "libs_failed": failed, "workers": workers,
                  "all_ready_s": time.perf_counter() - start}}))
"""

STEPS = ("forked_s", "context_s", "cublas_s", "cudnn_s", "ready_s")


def _arm(env: dict[str, str], libs: list[str], n: int) -> dict:
    code = PARENT.format(modules=[*PRELOAD, *PRELOAD_COMPILE], libs=libs, n=n)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"worker_start: an arm failed: {out.stderr.strip().splitlines()[-1:]}")
    raw = json.loads(out.stdout.strip().splitlines()[-1])
    ok = [w for w in raw["workers"] if "error" not in w]
    summary = {step: {"p50": round(statistics.median(w[step] for w in ok), 3),
                      "max": round(max(w[step] for w in ok), 3)} for step in STEPS} if ok else {}
    libs_mapped = sorted({lib for w in ok for lib in w["new_libs"]})  # paths: the next arm loads them
    return {"import_s": round(raw["import_s"], 2), "libs_s": round(raw["libs_s"], 2), "libs_failed": raw["libs_failed"],
            "workers": len(raw["workers"]), "failed": [w["error"] for w in raw["workers"] if "error" in w],
            "all_ready_s": round(raw["all_ready_s"], 2), "steps": summary, "libs_mapped_by_workers": libs_mapped}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--workers", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--mps", action="store_true", help="the workers are clients of a private MPS daemon")
    args = ap.parse_args()
    env = with_bytecode_cache({**os.environ, "OMP_NUM_THREADS": "1",
                               "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])})
    with tempfile.TemporaryDirectory(prefix="worker-start-") as tmp:
        daemon = MpsDaemon(Path(tmp)) if args.mps else None
        if daemon is not None and (problem := daemon.start()):
            raise SystemExit(problem)
        try:
            env = {**env, **(daemon.env() if daemon else {})}
            # the fork server's first step: bytecode compiled ahead where the installation has none
            subprocess.run([sys.executable, "-c", "from pipeline.gpu.bytecode import compile_ahead_from_env as c; c()"],
                           env=env, check=True, timeout=300)
            rounds, libs = [], []
            for _ in range(args.rounds):
                as_is = _arm(env, [], args.workers)
                libs = libs or as_is["libs_mapped_by_workers"]
                rounds.append({"as_is": as_is, "libs_ahead": _arm(env, libs, args.workers)})
        finally:
            if daemon is not None:
                daemon.stop()
    import torch

    for rnd in rounds:  # libraries by name: where the machine keeps them says nothing about the product
        for arm in rnd.values():
            arm["libs_mapped_by_workers"] = [Path(p).name for p in arm["libs_mapped_by_workers"]]
    result = {"python": sys.version.split()[0], "torch": torch.__version__, "workers": args.workers, "mps": args.mps,
              "libs_ahead": [Path(p).name for p in libs], "rounds": rounds}
    print(f"{'round':>5} {'arm':<11} {'import s':>8} {'libs s':>6} " + " ".join(f"{s[:-2] + ' p50/max':>17}" for s in STEPS)
          + f" {'all ready s':>11} failed")
    for i, rnd in enumerate(rounds):
        for name, arm in rnd.items():
            cells = " ".join(f"{arm['steps'][s]['p50']:>8.2f}/{arm['steps'][s]['max']:<8.2f}" if arm["steps"] else
                             f"{'-':>17}" for s in STEPS)
            print(f"{i:>5} {name:<11} {arm['import_s']:>8.2f} {arm['libs_s']:>6.2f} {cells} {arm['all_ready_s']:>11.2f} "
                  f"{len(arm['failed'])}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
