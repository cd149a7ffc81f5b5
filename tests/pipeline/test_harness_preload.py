"""profile.preload_compile: with it off, a worker imports and sets up Dynamo and inductor at its first compile,
not at its start, so the fork server forks workers after torch alone; the compile and its settings are the same."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.gpu.executors import PRELOAD, PRELOAD_COMPILE, preload_modules
from pipeline.gpu.worker_settings import WorkerSettings
from pipeline.rundir.config import Config, RunSection

ROOT = Path(__file__).resolve().parents[2]

# a fresh interpreter: what a worker has imported after its start, and after its first task
PROBE = r'''
import json, sys
from pipeline.rundir.config import Config, FilterSection, RunSection
from pipeline.gpu.harness import Harness
from pipeline.gpu.worker_settings import WorkerSettings

preload = sys.argv[1] == "1"
s = WorkerSettings.from_config(Config(run=RunSection(seed=0), filter=FilterSection(min_eager_ms=0.0, max_eager_ms=1e9)))
h = Harness("cpu", s.with_profile(memory_limit_gb=0.0, compile=True, warmup=1, min_runs=3, max_runs=3,
                                  preload_compile=preload, autotune_pointwise=False))
at_start = "torch._dynamo" in sys.modules
code = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2 + 1
def get_inputs():
    return [torch.rand(64, 64)]
def get_init_inputs():
    return []
"""
m = h.profile({"task_id": "a", "code": code, "flops": 0, "bytes_moved": 0})
import torch._inductor.config as ic
print(json.dumps({"at_start": at_start, "configured": h.compile_configured, "status": m["status"],
                  "compile_ok": m.get("compile_ok"), "pointwise": ic.triton.autotune_pointwise}))
'''


@pytest.mark.parametrize("preload", [True, False])
def test_a_worker_imports_inductor_at_its_start_or_its_first_compile(preload):
    out = subprocess.run([sys.executable, "-c", PROBE, "1" if preload else "0"], cwd=ROOT, capture_output=True,
                         text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["at_start"] is preload
    assert got["configured"] and got["status"] == "ok" and got["compile_ok"]
    assert got["pointwise"] is False  # the profile section's inductor settings hold either way


def test_the_fork_server_preloads_inductor_only_when_asked():
    base = WorkerSettings.from_config(Config(run=RunSection(seed=0)))
    assert preload_modules(base.with_profile(compile=True)) == [*PRELOAD, *PRELOAD_COMPILE]
    assert preload_modules(base.with_profile(compile=True, preload_compile=False)) == list(PRELOAD)
    assert preload_modules(base.with_profile(compile=False)) == list(PRELOAD)


@pytest.mark.gpu
@pytest.mark.parametrize("preload", [True, False])
def test_forked_gpu_workers_compile_with_the_h200_settings_either_way(preload, tanh_tasks):
    """The h200 preset's profile section (bounded autotuning, capped configs, the GPU lock around inductor's
    benchmarks, MPS) set up in the fork server or at each worker's first compile: every task compiles and agrees."""
    import torch

    from pipeline.gpu.executors import make_executor
    from pipeline.rundir.config import load_preset

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    cfg = load_preset("h200")
    cfg = dataclasses.replace(cfg, filter=dataclasses.replace(cfg.filter, min_eager_ms=0.0))  # tiny tasks time too
    s = WorkerSettings.from_config(cfg).with_profile(preload_compile=preload, fork_workers=True)
    tasks = tanh_tasks(6)
    with make_executor("local", device="cuda", workers=3, gpus=[0], settings=s) as ex:
        out = {r["task_id"]: r for r in ex.imap_unordered(tasks)}
    assert {t: (r["status"], r["compile_ok"], r["compile_agrees_1e2"]) for t, r in out.items()} == \
        {t["task_id"]: ("ok", True, True) for t in tasks}
