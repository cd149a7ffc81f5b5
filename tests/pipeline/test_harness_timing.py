"""When timed runs may stop (pipeline.gpu.harness.timed_enough) and how inductor's autotuning benchmarks are bounded
(pipeline.gpu.harness._bound_autotuning, _cap_autotune_configs): profile-section settings a worker applies."""

import dataclasses

import pytest

from pipeline.gpu.harness import (
    AUTOTUNE_WARMUP_ITERS,
    _bound_autotuning,
    _cap_autotune_configs,
    next_batch,
    require_autotuning_bound,
    timed_enough,
)
from pipeline.rundir.config import ConfigError, ProfileSection


@pytest.mark.parametrize(("med", "iqr", "runs", "precision", "expected"), [
    (1.0, 0.01, 5, 0.0, True),     # spread under iqr_target (0.02): stop
    (1.0, 0.05, 5, 0.0, False),    # wider spread, IQR rule alone: go on
    (1.0, 0.05, 99, 0.0, False),
    (1.0, 0.05, 100, 0.0, True),   # max_runs
    (1.0, 0.05, 5, 0.015, False),  # 1.57 * 0.05 / sqrt(5) = 3.5% > 1.5%
    (1.0, 0.05, 28, 0.015, True),  # 1.57 * 0.05 / sqrt(28) = 1.48% <= 1.5%
    (1.0, 0.05, 27, 0.015, False),  # 1.51%
    (1.0, 0.30, 99, 0.015, False),  # a very noisy task still runs to max_runs
])
def test_timing_stops_on_spread_median_precision_or_max_runs(med, iqr, runs, precision, expected):
    s = dataclasses.replace(ProfileSection(), median_precision=precision)
    assert timed_enough(med, iqr, runs, s) is expected


def test_timed_runs_grow_by_half_their_count_up_to_max_runs():
    runs, batch, seen = 0, 5, []
    while runs < 100:
        runs += batch
        seen.append(runs)
        batch = next_batch(batch, runs, 100)
    assert seen == [5, 10, 15, 22, 33, 49, 73, 100]


def test_median_precision_is_off_by_default_and_validated():
    from pipeline.rundir.config import ConfigError, validate_profile

    assert ProfileSection().median_precision == 0 and ProfileSection().autotune_benchmark_ms == 0
    with pytest.raises(ConfigError, match="median_precision must be >= 0"):
        validate_profile(dataclasses.replace(ProfileSection(), median_precision=-0.1), "test")
    with pytest.raises(ConfigError, match="autotune_benchmark_ms must be >= 0"):
        validate_profile(dataclasses.replace(ProfileSection(), autotune_benchmark_ms=-1.0), "test")


class _Bench:
    """Stands in for inductor's benchmarker: records what each benchmark was asked for."""

    def __init__(self):
        self.calls = []

    def benchmark_gpu(self, _callable, estimation_iters=5, memory_warmup_iters=100, benchmark_iters=100,
                      max_benchmark_duration=25, **kwargs):
        self.calls.append((memory_warmup_iters, max_benchmark_duration))
        return 1.0


def test_bounded_autotuning_caps_each_benchmark_and_keeps_smaller_asks(monkeypatch):
    from torch._inductor.runtime import benchmarking

    fake = _Bench()
    monkeypatch.setattr(benchmarking, "benchmarker", fake)
    assert _bound_autotuning(5.0)
    assert not _bound_autotuning(5.0)  # bounded once
    assert fake.benchmark_gpu(lambda: None) == 1.0
    fake.benchmark_gpu(lambda: None, max_benchmark_duration=2, memory_warmup_iters=3)
    assert fake.calls == [(AUTOTUNE_WARMUP_ITERS, 5.0), (3, 2)]


def test_a_benchmarker_without_those_arguments_is_left_alone(monkeypatch):
    from torch._inductor.runtime import benchmarking

    class Other:
        def benchmark_gpu(self, _callable, warmup=25, rep=100):
            return 2.0

    other = Other()
    monkeypatch.setattr(benchmarking, "benchmarker", other)
    assert not _bound_autotuning(5.0)
    assert "_bounded_to" not in vars(other)
    with pytest.raises(ConfigError, match=r"autotune_benchmark_ms = 5 .*set it to 0"):
        require_autotuning_bound(5.0)  # the worker refuses to start rather than measure unbounded


def test_a_worker_started_again_in_the_same_process_keeps_its_bound(monkeypatch):
    from torch._inductor.runtime import benchmarking

    fake = _Bench()
    monkeypatch.setattr(benchmarking, "benchmarker", fake)
    require_autotuning_bound(5.0)
    require_autotuning_bound(5.0)  # bounded already to the same value: fine
    with pytest.raises(ConfigError, match="another value"):
        require_autotuning_bound(3.0)


def test_this_torchs_benchmarker_takes_the_bounds():
    """A torch whose benchmarker drops these arguments must fail here, not silently autotune at full length."""
    from torch._inductor.runtime import benchmarking

    try:
        assert _bound_autotuning(5.0)
        assert benchmarking.benchmarker.benchmark_gpu._bounded_to == 5.0
    finally:
        del benchmarking.benchmarker.benchmark_gpu  # the class's method again


@pytest.mark.parametrize("on", [False, True])
def test_pointwise_autotuning_reaches_what_inductor_hands_its_triton_heuristics(on):
    """profile.autotune_pointwise sets inductor's triton.autotune_pointwise in the worker, and inductor's codegen
    still passes that key to the pointwise heuristics (a torch that drops it must fail here, not silently tune;
    read from the source, since calling it needs Triton)."""
    import inspect

    import torch._inductor.config as inductor_config
    from torch._inductor.codegen.triton import TritonKernel

    from pipeline.gpu.harness import Harness
    from pipeline.gpu.worker_settings import WorkerSettings
    from pipeline.rundir.config import Config

    before = inductor_config.triton.autotune_pointwise
    try:
        settings = WorkerSettings.from_config(Config()).with_profile(autotune_pointwise=on, memory_limit_gb=0)
        Harness("cpu", settings)
        assert inductor_config.triton.autotune_pointwise is on
        assert '"autotune_pointwise": config.triton.autotune_pointwise' in inspect.getsource(
            TritonKernel.inductor_meta_common)
    finally:
        inductor_config.triton.autotune_pointwise = before


class _WarmThenRuns:
    """Stands in for inductor's benchmarker: one warm-up call (then it would synchronize), five estimates, then
    timed runs; returns the number of calls it made."""

    def benchmark_gpu(self, _callable, rep=40):
        for _ in range(6 + rep // 10):
            _callable()
        return 7 + rep // 10


def test_a_config_whose_first_run_is_over_the_cap_is_not_benchmarked_further(monkeypatch):
    import time

    from torch._inductor.runtime import benchmarking

    fake = _WarmThenRuns()
    monkeypatch.setattr(benchmarking, "benchmarker", fake)
    assert _cap_autotune_configs(20.0)
    assert not _cap_autotune_configs(20.0)  # capped once
    runs = []

    def slow(seconds):
        def run():
            runs.append(1)
            time.sleep(seconds)
        return run

    slower_ms = fake.benchmark_gpu(slow(0.15), rep=40)
    assert len(runs) == 1 and 150 <= slower_ms < 5000  # its warm-up alone ran, and its time is the result
    runs.clear()
    slow_ms = fake.benchmark_gpu(slow(0.03), rep=40)
    assert len(runs) == 1 and 30 <= slow_ms < slower_ms  # slow configs stay ranked: inductor picks the faster one
    runs.clear()
    assert fake.benchmark_gpu(_callable=lambda: runs.append(1), rep=40) == 11 and len(runs) == 10  # fast: untouched
