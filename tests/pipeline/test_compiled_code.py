"""pipeline.gpu.compiled_code: the hash of a task's compiled program is the same for the same task and another for
another; the benchmark count sees every timed choice; the repeat report tells moved eager bits, moved compiled bits
of another program and of a timed choice apart."""

import sys
from pathlib import Path

from pipeline.gpu.compiled_code import benchmarks_run, count_benchmarks, source_hash
from tests.pipeline.test_harness_checks import run

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from pipeline_yield import outputs_moved  # noqa: E402


def test_source_hash_ignores_where_the_files_lie_and_sees_the_program():
    a = "# AOT ID: ['5_inference']\n# kernel path: /tmp/a/x.py\nimport c\nload('/tmp/a/k.so')\ndef call(): return 1\n"
    b = "# AOT ID: ['9_inference']\n# kernel path: /var/b/y.py\nimport c\nload('/var/b/k.so')\ndef call(): return 1\n"
    assert source_hash(a, "/tmp/a") == source_hash(b, "/var/b")
    assert source_hash(a, "/tmp/a") != source_hash(a.replace("return 1", "return 2"), "/tmp/a")


def test_the_same_task_compiles_to_the_same_program_and_another_to_another():
    first, again = (run("torch.sin(x * self.w) + 1", compile=True) for _ in range(2))
    other = run("torch.cos(x * self.w) + 1", compile=True)
    assert first["compile_ok"] and first["compile_code"], first
    assert first["compile_code"] == again["compile_code"] != other["compile_code"]
    assert first["compile_benchmarks"] == 0  # nothing inductor times on a CPU
    assert "compile_code" not in run("x + 1")  # not compiled: no program


def test_every_call_of_the_benchmarker_counts_once():
    class Bench:
        def benchmark_gpu(self, fn):
            return fn()

    bench = Bench()
    assert count_benchmarks(bench) and not count_benchmarks(bench)  # a second wrapper would count twice
    before = benchmarks_run()
    assert [bench.benchmark_gpu(lambda: 3.0) for _ in range(3)] == [3.0] * 3
    assert benchmarks_run() - before == 3
    assert not count_benchmarks(object())


def test_outputs_moved_names_which_side_moved_and_why():
    m1 = {"same": {"eager_checksum": 1.0, "compile_checksum": 2.0, "compile_code": "a"},
          "eager": {"eager_checksum": 1.0, "compile_checksum": 2.0, "compile_code": "a"},
          "code": {"eager_checksum": 1.0, "compile_checksum": 2.0, "compile_code": "a"},
          "timed": {"eager_checksum": 1.0, "compile_checksum": 2.0, "compile_code": "a", "compile_benchmarks": 4},
          "old": {"compile_checksum": None}}
    m2 = {"same": {"eager_checksum": 1.0, "compile_checksum": 2.0, "compile_code": "a"},
          "eager": {"eager_checksum": 1.5, "compile_checksum": 2.0, "compile_code": "a"},
          "code": {"eager_checksum": 1.0, "compile_checksum": 2.5, "compile_code": "b"},
          "timed": {"eager_checksum": 1.0, "compile_checksum": 2.5, "compile_code": "a", "compile_benchmarks": 0},
          "old": {"compile_checksum": 3.0}}
    got = outputs_moved(m1, m2, set(m1))
    assert got["compiled_in_both"] == 4 and got["eager_moved"] == 1 and got["compiled_moved"] == 2
    assert got["examples"]["other_code"] == ["code"] and got["examples"]["timed"] == ["timed"]


def test_untimed_compile_choices_answer_every_benchmark_without_running_it(monkeypatch):
    import torch._inductor.config as inductor_config
    from torch._inductor.runtime import benchmarking

    from pipeline.gpu.harness import UNTIMED_MS, _untime_compile_choices

    ran = []

    class Bench:
        def benchmark_gpu(self, fn, **kwargs):
            ran.append(fn)
            return fn()

    bench = Bench()
    monkeypatch.setattr(benchmarking, "benchmarker", bench)
    _keep_autotuner_copies(monkeypatch)
    # inductor's config module is set back by hand: monkeypatch's undo deletes its entries
    tests = inductor_config.test_configs
    saved = (inductor_config.autotune_local_cache, inductor_config.shape_padding, tests.force_filter_reduction_configs)
    inductor_config.autotune_local_cache, inductor_config.shape_padding = True, True
    tests.force_filter_reduction_configs = False
    try:
        assert count_benchmarks(bench)
        before = benchmarks_run()
        assert _untime_compile_choices() and not _untime_compile_choices()
        assert [bench.benchmark_gpu(lambda: 7.0, rep=40) for _ in range(2)] == [UNTIMED_MS] * 2
        assert ran == [] and benchmarks_run() == before  # nothing ran, so nothing counts as timed
        assert not inductor_config.autotune_local_cache and not inductor_config.shape_padding
        assert tests.force_filter_reduction_configs  # reductions: deterministic mode's pick
    finally:
        inductor_config.autotune_local_cache, inductor_config.shape_padding = saved[:2]
        tests.force_filter_reduction_configs = saved[2]


def _keep_autotuner_copies(monkeypatch):
    """The autotuner's own copy step, put back after the test (`_untime_compile_choices` replaces it)."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    monkeypatch.setattr(CachingAutotuner, "copy_args_to_cpu_if_needed", CachingAutotuner.copy_args_to_cpu_if_needed)


def test_untimed_choices_save_no_written_argument_to_pinned_host_memory(monkeypatch):
    """A kernel argument the autotuner would save to pinned host memory (it writes it, and the allocator has no
    headroom for a clone) is left alone once choices are untimed: no config runs, so nothing can spoil it."""
    import types

    import torch
    from torch._inductor.runtime import benchmarking
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    from torch._subclasses.fake_tensor import FakeTensorMode

    from pipeline.gpu.harness import _skip_autotuning_copies, _untime_compile_choices

    _keep_autotuner_copies(monkeypatch)
    monkeypatch.setattr(benchmarking, "benchmarker", types.SimpleNamespace(benchmark_gpu=lambda fn, **kw: fn()))
    # a device tensor on any machine: the autotuner decides by its device and size only
    with FakeTensorMode(allow_non_fake_inputs=True):
        written = torch.empty(1 << 20, device="cuda")
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a, **k: torch.device("cuda"))
    monkeypatch.setattr(torch.accelerator, "max_memory_allocated", lambda *a, **k: 0)  # no headroom
    monkeypatch.setattr(torch.accelerator, "memory_allocated", lambda *a, **k: 0)
    tuner = types.SimpleNamespace(optimize_mem=True, mutated_arg_names=["out"], fn=types.SimpleNamespace(
        arg_names=["out"]))
    try:
        saved = CachingAutotuner.copy_args_to_cpu_if_needed(tuner, written)
    except RuntimeError as e:  # a machine without a GPU has no pinned memory to copy into
        assert "pin" in str(e)
    else:
        assert saved  # timed choices: the argument is saved
    assert _untime_compile_choices() and not _skip_autotuning_copies()
    assert CachingAutotuner.copy_args_to_cpu_if_needed(tuner, written) == {}
