"""What a worker's first compile imports and how long that takes, in fresh interpreters; prints a table and writes
JSON.

Why: a profile worker is a fork of a server that imported the harness, Dynamo and inductor (PRELOAD,
PRELOAD_COMPILE), yet its first task compiled 2.5 s against 0.9 s later (call 77, p50 over each worker's first
task): the first compile imports the code generators it needs and sets them up. Any module of those whose import
leaves CUDA alone could be imported by the fork server once instead of by every worker.

Arms, each a fresh interpreter with empty inductor and Triton caches of its own (so no arm reuses another's kernels):
- preload: the fork server's imports, then CUDA, then the first compile of a small graph (a linear layer, a softmax,
  a reduction: Triton pointwise, reduction and a cuBLAS call), then a second graph; lists the modules the first
  compile imported and whether importing them initialised CUDA (tried in an interpreter of its own first);
- more_preload: the same with those modules imported beside the preload, before CUDA.
The difference between the two first compiles is what importing those modules ahead would save each worker. On
the H200 (2026-12-03, `call79_h200_first_compile.json`) it was nothing: 3.02 s against 3.10 s, the 163 modules
imported in 0.32 s without initialising CUDA; so the fork server does not import them.

    python benchmarks/first_compile.py --out first_compile.json [--device cuda]

The environment's PYTHONPYCACHEPREFIX (pipeline/bytecode.py) applies to every arm, as to the workers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# candidates are the modules of the packages whose bytecode the fork server compiles ahead (what the workers
# import); generated kernel modules and the like cannot be imported by name
from pipeline.bytecode import PACKAGES  # noqa: E402
from pipeline.executors import PRELOAD, PRELOAD_COMPILE  # noqa: E402

ARM = r"""
import importlib, json, sys, time
modules, more, device = {modules!r}, {more!r}, {device!r}
t0 = time.perf_counter()
for m in modules:
    importlib.import_module(m)
t_preload = time.perf_counter() - t0
t0 = time.perf_counter()
failed = []
for m in more:
    try:
        importlib.import_module(m)
    except Exception as e:
        failed.append(f"{{m}}: {{type(e).__name__}}")
t_more = time.perf_counter() - t0
import torch
cuda_after_imports = torch.cuda.is_initialized()
before = set(sys.modules)
x = torch.rand(64, 256, device=device)
lin = torch.nn.Linear(256, 128).to(device)
torch.zeros(1, device=device).sum().item()
def first(x):
    return torch.softmax(lin(x) * 2.0, dim=-1).sum(0)
def second(x):
    return torch.tanh(x).cumsum(0).amax(1)
with torch.no_grad():
    t0 = time.perf_counter(); torch.compile(first)(x); torch.cuda.synchronize() if device == "cuda" else None
    t_first = time.perf_counter() - t0
    new = sorted(set(sys.modules) - before)
    t0 = time.perf_counter(); torch.compile(second)(x); torch.cuda.synchronize() if device == "cuda" else None
    t_second = time.perf_counter() - t0
print(json.dumps({{"preload_s": round(t_preload, 3), "more_s": round(t_more, 3), "more_failed": failed,
                  "cuda_after_imports": cuda_after_imports, "first_compile_s": round(t_first, 3),
                  "second_compile_s": round(t_second, 3), "imported_by_first_compile": new}}))
"""

PROBE = r"""
import importlib, json, os
os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
for m in {modules!r}:
    importlib.import_module(m)
ok, failed = [], []
import torch
for m in {more!r}:
    try:
        importlib.import_module(m)
        ok.append(m)
    except Exception as e:
        failed.append(f"{{m}}: {{type(e).__name__}}")
print(json.dumps({{"cuda_initialised": torch.cuda.is_initialized(), "imported": len(ok), "failed": failed}}))
"""


def _run(code: str, caches: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"), "TRITON_CACHE_DIR": str(caches / "triton"),
           "TORCHINDUCTOR_COMPILE_THREADS": "1", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"first_compile: an arm failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def candidates(names: list[str]) -> list[str]:
    """The modules of `names` that belong to PACKAGES (in import order as given)."""
    return [n for n in names if n.split(".")[0] in PACKAGES]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    modules = [*PRELOAD, *PRELOAD_COMPILE]
    with tempfile.TemporaryDirectory(prefix="first-compile-") as tmp:
        base = _run(ARM.format(modules=modules, more=[], device=args.device), Path(tmp, "a"))
        more = candidates(base["imported_by_first_compile"])
        probe = _run(PROBE.format(modules=modules, more=more), Path(tmp, "p"))
        ahead = _run(ARM.format(modules=modules, more=more, device=args.device), Path(tmp, "b"))
    import torch

    result = {"python": sys.version.split()[0], "torch": torch.__version__, "device": args.device,
              "preload": modules, "first_compile_imports": len(base["imported_by_first_compile"]),
              "candidates": more, "probe": probe,
              "arms": {"preload": {k: v for k, v in base.items() if k != "imported_by_first_compile"},
                       "more_preload": {k: v for k, v in ahead.items() if k != "imported_by_first_compile"}},
              "left_after_more": ahead["imported_by_first_compile"]}
    print(f"{'arm':<14} {'preload s':>9} {'more s':>7} {'1st compile s':>13} {'2nd compile s':>13}")
    for name, arm in result["arms"].items():
        print(f"{name:<14} {arm['preload_s']:>9.2f} {arm['more_s']:>7.2f} {arm['first_compile_s']:>13.2f} "
              f"{arm['second_compile_s']:>13.2f}")
    print(f"{len(more)} modules imported by the first compile; CUDA initialised by importing them: "
          f"{probe['cuda_initialised']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
