"""The kernel warm-up: a tiny module per pointwise operator, run once per worker before a task needs it."""

import pytest
import torch

from filters.static_check import check_task_source
from operators.catalog import sampleable
from pipeline.gpu.kernel_warmup import CATEGORIES, KernelWarmup, run_codes, warmup_code

POINTWISE = sorted(s.name for s in sampleable() if s.category in CATEGORIES)


def test_every_pointwise_operator_has_a_warmup_module_of_itself_alone():
    for op in POINTWISE:
        code = warmup_code(op)
        assert code is not None, op
        assert code.split('"""')[1] == op  # the rendered module's docstring names its operators: this one only
        assert check_task_source(code) is None, op


@pytest.mark.parametrize("op", ["torch.matmul", "nn.Conv2d", "not.an.op"])
def test_other_operators_have_none(op):
    assert warmup_code(op) is None


def test_warmup_modules_run():
    codes = [warmup_code(op) for op in POINTWISE[::9]]
    got = run_codes(codes, "cpu")
    assert (got["ran"], got["failed"]) == (len(codes), 0)


def test_a_failing_module_is_counted_not_raised():
    good = warmup_code("torch.special.erfcx")
    got = run_codes([good, good.replace("return", "raise RuntimeError('x'); return", 1)], "cpu")
    assert (got["ran"], got["failed"]) == (1, 1)


def test_a_worker_warms_each_pointwise_operator_of_its_tasks_once():
    k = KernelWarmup()
    assert k.pending(["torch.special.erfcx", "torch.matmul", "torch.special.erfcx", "F.silu"]) == [
        "torch.special.erfcx", "F.silu"]  # once each, in order, pointwise only
    assert k.before(["torch.special.erfcx", "torch.matmul"], torch.device("cpu")) == 0  # nothing compiles on a CPU
    assert k.pending(["torch.special.erfcx", "F.silu"]) == ["F.silu"]  # erfcx is done for this worker


def test_a_harness_marks_a_tasks_pointwise_operators_warmed_and_survives_a_broken_warmup(monkeypatch):
    from pipeline.gpu.harness import Harness
    from pipeline.gpu.worker_settings import WorkerSettings
    from pipeline.rundir.config import Config, FilterSection, RunSection

    s = WorkerSettings.from_config(Config(run=RunSection(seed=0), filter=FilterSection(
        min_eager_ms=0.0, max_eager_ms=1e9))).with_profile(memory_limit_gb=0.0, compile=False, warmup=1,
                                                            min_runs=3, max_runs=5)
    code = warmup_code("torch.special.erfcx")
    h = Harness("cpu", s)
    task = {"task_id": "t", "code": code, "ops": ["torch.special.erfcx"], "flops": 0, "bytes_moved": 0}
    assert h.profile(task)["status"] == "ok"
    assert h.kernels.done == {"torch.special.erfcx"}
    monkeypatch.setattr(h.kernels, "before", lambda *a: 1 / 0)  # a warm-up that breaks is switched off, not fatal
    assert h.profile(task)["status"] == "ok" and h.kernels is None
