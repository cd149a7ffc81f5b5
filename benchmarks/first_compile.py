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

With --profile the arms are instead: preload; caches_warm (other graphs of the same kinds in a fresh interpreter, with
the inductor and Triton caches the first one filled: its first compile less its second is the process's own setup,
paid by every worker); and both
of those again under cProfile (the top functions of each first compile, by cumulative and by own time).

On the H200 (2026-12-04, `call99_h200_first_compile.json`; these arms import without our bytecode folder): the first
compile took 3.61 s with empty caches and 3.42 s with the caches another process filled (second compiles 0.34-0.51
s), so what a worker's first compile costs is its own setup, not what disk caches hold. Profiled, its largest parts
were the compile's imports (0.8 s), the AOT autograd cache key (0.65 s: hashing torch's and Triton's files), the
registration of inductor's pattern rewrites (0.53 s) and, with empty caches, building Triton's driver module (0.38 s).

    python benchmarks/first_compile.py --out first_compile.json [--device cuda] [--profile]

The environment's PYTHONPYCACHEPREFIX (pipeline/gpu/bytecode.py) applies to every arm, as to the workers.
"""

from __future__ import annotations

import argparse
import functools
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
from pipeline.gpu.bytecode import PACKAGES  # noqa: E402
from pipeline.gpu.executors import PRELOAD, PRELOAD_COMPILE  # noqa: E402

ARM = r"""
import importlib, json, re, sys, time
modules, more, device, prof, variant = {modules!r}, {more!r}, {device!r}, {prof!r}, {variant!r}
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
x = torch.rand(64 + 16 * variant, 256, device=device)  # another variant: other graphs, other kernels
lin = torch.nn.Linear(256, 128).to(device)
torch.zeros(1, device=device).sum().item()
def first(x):
    return torch.softmax(lin(x) * (2.0 + variant), dim=-1).sum(0)
def second(x):
    return torch.tanh(x + variant).cumsum(0).amax(1)
with torch.no_grad():
    import cProfile, pstats
    profiler = cProfile.Profile() if prof else None
    t0 = time.perf_counter()
    if profiler: profiler.enable()
    torch.compile(first)(x); torch.cuda.synchronize() if device == "cuda" else None
    if profiler: profiler.disable()
    t_first = time.perf_counter() - t0
    new = sorted(set(sys.modules) - before)
    t0 = time.perf_counter(); torch.compile(second)(x); torch.cuda.synchronize() if device == "cuda" else None
    t_second = time.perf_counter() - t0
top = {{}}
if profiler:
    st = pstats.Stats(profiler).stats
    def name(k):  # a file by its place in its package (or the cache), never the machine's folders
        where = re.sub(r"^.*(site-packages|python3\.\d+)/", "", k[0])
        where = re.sub(r"^.*/(inductor|triton)/", r"<\1 cache>/", where)
        return f"{{where}}:{{k[1]}}({{k[2]}})"
    top = {{"by_cumulative": [[name(k), round(v[3], 3)] for k, v in sorted(st.items(), key=lambda kv: -kv[1][3])[:80]],
           "by_own": [[name(k), round(v[2], 3)] for k, v in sorted(st.items(), key=lambda kv: -kv[1][2])[:40]]}}
print(json.dumps({{"profile": top, "preload_s": round(t_preload, 3), "more_s": round(t_more, 3), "more_failed": failed,
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
    ap.add_argument("--profile", action="store_true",
                    help="instead of the import arms: the first compile again with the caches warm, and both profiled")
    args = ap.parse_args()
    modules = [*PRELOAD, *PRELOAD_COMPILE]
    arm = functools.partial(ARM.format, modules=modules, device=args.device, variant=0)
    with tempfile.TemporaryDirectory(prefix="first-compile-") as tmp:
        base = _run(arm(more=[], prof=False), Path(tmp, "a"))
        more = candidates(base["imported_by_first_compile"])
        if args.profile:
            # a fresh interpreter with the caches the first one filled: what is left is the process's own setup
            # other graphs (variant 1) than the first compiled: nothing of theirs is cached
            arms = {"preload": base, "caches_warm": _run(arm(more=[], prof=False, variant=1), Path(tmp, "a")),
                    "profiled": _run(arm(more=[], prof=True), Path(tmp, "c")),
                    "profiled_caches_warm": _run(arm(more=[], prof=True, variant=1), Path(tmp, "c"))}
            probe = None
        else:
            probe = _run(PROBE.format(modules=modules, more=more), Path(tmp, "p"))
            arms = {"preload": base, "more_preload": _run(arm(more=more, prof=False), Path(tmp, "b"))}
    import torch

    result = {"python": sys.version.split()[0], "torch": torch.__version__, "device": args.device,
              "preload": modules, "first_compile_imports": len(base["imported_by_first_compile"]),
              "candidates": more, "probe": probe,
              "arms": {name: {k: v for k, v in a.items() if k not in ("imported_by_first_compile", "profile")}
                       for name, a in arms.items()},
              "profiles": {name: a["profile"] for name, a in arms.items() if a["profile"]}}
    if "more_preload" in arms:
        result["left_after_more"] = arms["more_preload"]["imported_by_first_compile"]
    print(f"{'arm':<20} {'preload s':>9} {'more s':>7} {'1st compile s':>13} {'2nd compile s':>13}")
    for name, arm in result["arms"].items():
        print(f"{name:<20} {arm['preload_s']:>9.2f} {arm['more_s']:>7.2f} {arm['first_compile_s']:>13.2f} "
              f"{arm['second_compile_s']:>13.2f}")
    if probe is not None:
        print(f"{len(more)} modules imported by the first compile; CUDA initialised by importing them: "
              f"{probe['cuda_initialised']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
