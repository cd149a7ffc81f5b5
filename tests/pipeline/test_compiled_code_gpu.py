"""pipeline.gpu.compiled_code on the GPU: with timed choices inductor times a reduction's configs, untimed it times none
and two fresh workers compile the same bits. Its own module: the CPU tests of compiled_code import a benchmark
script, which a bare GPU image's collection (tests/conftest.py) would take for a missing package."""

import pytest

GPU_REDUCTION = '''
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return (x.softmax(-1) * x).sum(-1) > 0.1
def get_inputs():
    return [torch.randn(1 << 18, 8)]
def get_init_inputs():
    return []
'''


@pytest.mark.gpu
def test_on_the_gpu_untimed_choices_time_nothing_where_timed_ones_do():
    """A persistent reduction of 8-wide rows is offered several configs: with timed choices inductor times them
    (compile_benchmarks > 0); untimed it times none, and two fresh workers compile the same bits."""
    import torch
    from torch._inductor.runtime import benchmarking

    from pipeline.gpu.harness import Harness
    from pipeline.gpu.worker_settings import WorkerSettings
    from pipeline.rundir.config import Config, RunSection
    from tests.pipeline.test_harness_checks import WIDE

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    base = WorkerSettings.from_config(Config(run=RunSection(seed=0, device="cuda"), filter=WIDE)).with_profile(
        memory_limit_gb=0.0, compile=True, warmup=1, min_runs=3, max_runs=5)
    import torch._inductor.config as inductor_config

    task = {"task_id": "r", "code": GPU_REDUCTION, "flops": 1, "bytes_moved": 1}
    saved = inductor_config.save_config()
    try:
        timed = Harness("cuda:0", base).profile(task)
        untimed = [Harness("cuda:0", base.with_profile(compile_timed_choices=False)).profile(task) for _ in range(2)]
    finally:
        vars(benchmarking.benchmarker).pop("benchmark_gpu", None)  # the class's method again
        inductor_config.load_config(saved)
    assert timed["compile_ok"] and timed["compile_benchmarks"] > 0, timed
    assert [u["compile_benchmarks"] for u in untimed] == [0, 0]
    assert untimed[0]["compile_checksum"] == untimed[1]["compile_checksum"]
    assert untimed[0]["compile_code"] == untimed[1]["compile_code"] != ""
