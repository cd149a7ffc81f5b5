"""Planted failures among good tasks: each bad task costs itself alone, with the right status."""


import pytest

from pipeline.gpu.executors import make_executor
from pipeline.gpu.worker_settings import WorkerSettings
from pipeline.rundir.config import Config, FilterSection, RunSection

GOOD = '''
import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)
    def forward(self, x):
        return torch.tanh(self.lin(x)) + {k}
N = 16
def get_inputs():
    return [torch.rand(8, N)]
def get_init_inputs():
    return [N]
'''

BAD_FORWARD = '''
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        {body}
def get_inputs():
    return [torch.rand(4, 4)]
def get_init_inputs():
    return []
'''

PLANTS = {
    "segfault": ("import ctypes; ctypes.string_at(0)", "crashed"),
    "hang": ("while True: pass", "timeout"),
    "oom": ("return torch.empty(2**31, dtype=torch.float64)", "oom"),
    "raises": ("raise ValueError('planted')", "error"),
}


def settings(**kw) -> WorkerSettings:
    cfg = Config(run=RunSection(seed=0), filter=FilterSection(min_eager_ms=0.0, max_eager_ms=1e9))
    return WorkerSettings.from_config(cfg).with_profile(timeout_s=8.0, memory_limit_gb=3.0, compile=False, warmup=1,
                                                        min_runs=3, max_runs=5, **kw)


def tasks():
    good = [{"task_id": f"good{k}", "code": GOOD.replace("{k}", str(k)), "flops": 4096, "bytes_moved": 2048}
            for k in range(4)]
    bad = [{"task_id": name, "code": BAD_FORWARD.replace("{body}", body), "flops": 0, "bytes_moved": 0}
           for name, (body, _) in PLANTS.items()]
    # interleave so a bad task lands between good ones on every worker
    return [t for pair in zip(good, bad, strict=True) for t in pair]


@pytest.mark.parametrize("fork", [True, False])
def test_planted_failures_cost_one_task_each(fork):
    """Workers forked by the fork server or started as fresh interpreters: the same statuses."""
    with make_executor("local", device="cpu", workers=2, settings=settings(fork_workers=fork)) as ex:
        assert {type(w.proc).__name__ for w in ex.workers} == {"ForkedProc" if fork else "Popen"}
        results = {r["task_id"]: r for r in ex.imap_unordered(tasks())}
        # the workers that replaced the dead ones still work
        again = list(ex.imap_unordered([{"task_id": "after", "code": GOOD.replace("{k}", "9"),
                                         "flops": 1, "bytes_moved": 1}]))
    assert sorted(results) == sorted(t["task_id"] for t in tasks())
    for name, (_, status) in PLANTS.items():
        assert results[name]["status"] == status, results[name]
        assert results[name]["error"] and "\n" not in results[name]["error"]
    assert "SIGSEGV" in results["segfault"]["error"]
    for k in range(4):
        r = results[f"good{k}"]
        assert r["status"] == "ok", r
        assert r["deterministic"] and r["degenerate"] == "" and r["input_min_pairwise_diff"] > 0
        assert r["eager_ms"] > 0 and r["eager_runs"] >= 3 and r["aten_ops"][:2] == ["aten.t", "aten.addmm"]
    assert again[0]["status"] == "ok"


DEVICE_FAULT = ("i = torch.tensor([1 << 20], device=x.device); return x.flatten()[i] + 1",
                "a device-side assert (index out of range) poisons the worker's CUDA context")


@pytest.mark.gpu
@pytest.mark.parametrize("mps", [False, True])
def test_a_device_fault_costs_its_own_task_alone(mps):
    """On the GPU, with and without MPS (under MPS a fatal fault reaches every client of the GPU: the neighbours'
    tasks are measured once more): the planted task alone fails, every good task is measured."""
    import shutil

    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if mps and shutil.which("nvidia-cuda-mps-control") is None:
        pytest.skip("needs nvidia-cuda-mps-control")
    fault = {"task_id": "fault", "code": BAD_FORWARD.replace("{body}", DEVICE_FAULT[0]), "flops": 0, "bytes_moved": 0}
    good = [{"task_id": f"good{k}", "code": GOOD.replace("{k}", str(k)), "flops": 4096, "bytes_moved": 2048}
            for k in range(6)]
    with make_executor("local", device="cuda", workers=3, gpus=[0], settings=settings(mps=mps)) as ex:
        assert ex.uses_mps == mps
        out = {r["task_id"]: r for r in ex.imap_unordered([*good[:3], fault, *good[3:]])}
    assert out["fault"]["status"] in ("crashed", "error") and out["fault"]["error"]
    assert {t: r["status"] for t, r in out.items() if t != "fault"} == {g["task_id"]: "ok" for g in good}
