"""Fixtures shared by the pipeline tests: tiny KernelBench-format tasks that run in milliseconds on the CPU."""

import subprocess
import sys

import pytest

TANH_CODE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x) * {k}

def get_inputs():
    return [torch.rand(16, 16)]

def get_init_inputs():
    return []
'''


@pytest.fixture
def tanh_tasks():
    """n task rows t0..t{n-1}: tanh(x) * k with a different k each, so every task has its own output."""
    def make(n: int) -> list[dict]:
        return [{"task_id": f"t{i}", "name": "Tanh", "code": TANH_CODE.format(k=i + 2)} for i in range(n)]
    return make


@pytest.fixture
def other_pid():
    """A live process standing in for a second worker (entries are keyed by worker pid)."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield p.pid
    p.kill()
    p.wait()
