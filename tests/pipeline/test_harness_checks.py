"""Each check of the harness fires on a task built to trip it, and stays quiet on a clean one."""

import dataclasses
import math
import os

import pytest
import torch

from filters.base import decide
from filters.checks import EAGER_CHECKS
from measures.tensor_checks import degenerate, tolerance_ratio
from pipeline.gpu.harness import Harness, one_line
from pipeline.gpu.worker_settings import WorkerSettings
from pipeline.rundir.config import Config, FilterSection, RunSection

TEMPLATE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16))
        self.drop = nn.Dropout(0.5)
    def forward(self, x):
        return {expr}
def get_inputs():
    return [torch.rand(32, 16)]
def get_init_inputs():
    return []
'''


WIDE = FilterSection(min_eager_ms=0.0, max_eager_ms=1e9)  # no early reject on a shared CPU


def profile(code, filter=WIDE, **kw):
    s = WorkerSettings.from_config(Config(run=RunSection(seed=0), filter=filter)).with_profile(
        memory_limit_gb=0.0, compile=False, warmup=1, min_runs=3, max_runs=5)
    s = s.with_profile(**kw)
    return Harness("cpu", s).profile({"task_id": "t", "code": code, "flops": 512, "bytes_moved": 4096})


def run(expr, **kw):
    return profile(TEMPLATE.replace("{expr}", expr), **kw)


@pytest.fixture(scope="module")
def clean():
    return run("torch.sin(x * self.w) + x")


def test_clean_task_passes_every_check(clean):
    assert clean["status"] == "ok" and clean["degenerate"] == "" and clean["deterministic"]
    assert clean["input_min_pairwise_diff"] > 0.1 and clean["output_numel"] == 32 * 16
    assert clean["determinism_max_diff"] == 0.0 and clean["eager_runs"] >= 3
    assert 0 < clean["quick_eager_ms"] < 1e4  # the untimed run early_reject_factor judges, kept for calibration
    assert 0 <= clean["quick_host_ms"] and clean.get("eager_alone_ms") is None  # no slow quick run to confirm
    assert clean["aten_ops"] == ["aten.mul", "aten.sin", "aten.add"]
    assert clean["peak_memory_bytes"] >= 3 * 32 * 16 * 4  # input, product, sine (the sum is the output)


@pytest.mark.parametrize("expr, flag", [
    ("x * 0", "zero"),
    ("x * 1e-6", "tiny"),
    ("torch.ones_like(x) * self.w.sum()", "constant"),
    ("torch.log(x - 2)", "nonfinite"),
    ("F.pad(x[:1, :4], (0, 508), value=1.0)", "saturated"),
])
def test_degenerate_outputs_are_flagged(expr, flag):
    r = run(expr)
    assert r["status"] == "ok" and r["degenerate"] == flag


def test_input_insensitive_output_is_caught():
    r = run("self.w.expand(32, 16) + 0 * x")
    assert r["input_min_pairwise_diff"] == 0.0


LONG = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
class Model(nn.Module):
    def forward(self, *xs):
        return {expr}
def get_inputs():
    return {inputs}
def get_init_inputs():
    return []
'''


def run_long(expr, inputs, **kw):
    """A task over inputs of its own (the template's are 32 x 16)."""
    return profile(LONG.replace("{expr}", expr).replace("{inputs}", inputs), max_runs=3, **kw)


def test_clean_task_stands_far_apart_at_the_verifier_tolerance():
    r = run_long("torch.tanh(xs[0])", "[torch.randn(32, 16)]")
    assert r["status"] == "ok" and r["input_sensitivity_ratio"] > 10
    # the ratio is measured at the filter's compile_tolerance: the same draws stand 100x farther apart at 1e-4
    strict = dataclasses.replace(WIDE, compile_tolerance=1e-4)
    r4 = run_long("torch.tanh(xs[0])", "[torch.randn(32, 16)]", filter=strict)
    assert r4["input_sensitivity_ratio"] == pytest.approx(100 * r["input_sensitivity_ratio"], rel=1e-3)


def test_long_softmax_is_fakeable_though_input_sensitive():
    # every value is ~5e-6 (at most ~4e-4): draws differ by more than the old 1e-4 check asks, but a kernel
    # returning draw 0's output would pass allclose at 1e-2 on every draw; the worker skips its compilation
    r = run_long("torch.softmax(xs[0], dim=-1)", "[torch.randn(2, 200_000)]", compile=True)
    assert r["status"] == "ok" and r["degenerate"] == ""
    assert r["input_min_pairwise_diff"] > FilterSection().min_input_sensitivity
    assert r["input_sensitivity_ratio"] < 0.5
    assert r.get("compile_ok") is None
    assert r["compile_error"].startswith("skipped: fakeable by a fixed output (")


def test_mean_loss_over_a_large_input_is_fakeable():
    r = run_long("F.mse_loss(xs[0], xs[1])", "[torch.randn(1_000_000), torch.randn(1_000_000)]")
    assert r["status"] == "ok" and r["output_numel"] == 1
    assert r["input_min_pairwise_diff"] > FilterSection().min_input_sensitivity
    assert r["input_sensitivity_ratio"] < 0.5
    assert decide(r, EAGER_CHECKS, FilterSection())[1].startswith("fakeable by a fixed output (")


def test_tolerance_ratio_on_tensors():
    import torch

    nan, inf = float("nan"), float("inf")
    t = torch.tensor
    assert tolerance_ratio(t([1.0, -2.0]), t([1.0, -2.0]), 1e-2) == 0.0
    # the reference's magnitude scales the tolerance, as in allclose(fixed, ref)
    assert tolerance_ratio(t([0.0]), t([1.5]), 1e-2) == pytest.approx(1.5 / 0.025)
    assert tolerance_ratio(t([1.5]), t([0.0]), 1e-2) == pytest.approx(1.5 / 0.01)
    assert tolerance_ratio(t([nan, 1.0]), t([nan, 1.0]), 1e-2) == 0.0
    assert tolerance_ratio(t([nan, 1.0]), t([0.0, 1.0]), 1e-2) == inf
    assert tolerance_ratio(t([0.0, 1.0]), t([nan, 1.0]), 1e-2) == inf
    assert tolerance_ratio(t([inf, -inf]), t([inf, -inf]), 1e-2) == 0.0
    assert tolerance_ratio(t([inf]), t([-inf]), 1e-2) == inf
    assert tolerance_ratio(t([1.0]), t([inf]), 1e-2) == inf
    assert tolerance_ratio(t([inf]), t([1.0]), 1e-2) == inf
    assert tolerance_ratio(t([1.0, 2.0]), t([1.0]), 1e-2) == inf
    assert tolerance_ratio(t([]), t([]), 1e-2) == 0.0
    assert tolerance_ratio(t([1.0]), t([1.0 + 1e-6]), 0.0) == inf  # no tolerance: only equal values pass
    g = torch.Generator().manual_seed(0)
    for scale in (1e-5, 1e-2, 1.0, 1e3):  # below 1 exactly where the verifier passes the fixed output
        a = torch.randn(64, generator=g) * scale
        b = a + torch.randn(64, generator=g) * scale * 0.02
        assert (tolerance_ratio(a, b, 1e-2) < 1) == torch.allclose(a, b, atol=1e-2, rtol=1e-2)


def test_stochastic_op_is_not_deterministic(clean):
    r = run("self.drop(x)")  # train mode, as KernelBench runs the reference
    assert not r["deterministic"] and r["determinism_max_diff"] > 0


ALTERNATING = TEMPLATE.replace("        self.drop = nn.Dropout(0.5)\n", "        self.calls = 0\n").replace(
    "        return {expr}", "        self.calls += 1\n        return x * self.w * (2.0 if self.calls == 2 else 1.0)")


def test_a_non_determinism_only_the_second_run_shows_is_caught():
    """The first and third eager runs agree and the second differs (a reduction order that changes now and then):
    the quick run's repeat is compared too, so the task is not kept as deterministic."""
    assert "self.calls == 2" in ALTERNATING
    r = profile(ALTERNATING)
    assert r["status"] == "ok" and not r["deterministic"] and r["determinism_max_diff"] > 0
    assert decide(r, EAGER_CHECKS, WIDE)[1].startswith("non-deterministic (eager runs on the same inputs differ")


def test_output_checksums_say_which_side_of_the_compile_check_computed_what():
    """The eager and compiled outputs of draw 0 are checksummed (what a repeat compares): the same task gives the
    same eager checksum in another worker, a compiled graph that computes the same bits gives the same checksum,
    and another task gives another."""
    from measures.tensor_checks import checksum

    first, again = (run("x * self.w + 1", compile=True) for _ in range(2))
    other = run("x * self.w + 2", compile=True)
    assert first["compile_ok"] and first["compile_max_abs_err"] == 0.0
    assert first["eager_checksum"] == again["eager_checksum"] == first["compile_checksum"]
    assert other["eager_checksum"] != first["eager_checksum"]
    assert checksum(torch.zeros(3)) == 0.0 and first["eager_checksum"] != 0.0
    assert "compile_checksum" not in run("x + 1")  # not compiled: nothing to checksum


def test_early_reject_outside_the_window():
    r = run("x + 1", filter=FilterSection(min_eager_ms=1e6, max_eager_ms=1e7))
    assert r["status"] == "early_reject" and "<" in r["error"] and r["eager_ms"] > 0
    assert r.get("compile_ok") is None  # nothing after the quick run


def test_a_slow_quick_run_is_rejected_only_when_a_run_alone_confirms_it():
    # the window's bound is far below any run: the quick run and the run alone are both over it
    r = run("x + 1", filter=FilterSection(min_eager_ms=0.0, max_eager_ms=1e-7))
    assert r["status"] == "early_reject" and "alone on the GPU" in r["error"]
    assert r["eager_ms"] == r["eager_alone_ms"] > 1.5e-7 and r.get("compile_ok") is None


def _quick_reads(monkeypatch, ms):
    """Every quick run reads `ms`, as one slowed by neighbours' kernels would."""
    from pipeline.gpu import harness

    quick = harness.Harness._quick_ms

    def contended(self, model, x, base, m):
        out, _ = quick(self, model, x, base, m)
        return out, ms

    monkeypatch.setattr(harness.Harness, "_quick_ms", contended)


@pytest.mark.parametrize("quick_ms", [1e6, 200.0])
def test_a_quick_run_slowed_by_neighbours_is_not_an_early_reject(monkeypatch, quick_ms):
    """Under the shared lock neighbours' kernels take turns with the quick run (4.3x the timed median at q50 on
    the H200, up to 49x): a quick run over 1.5x a 100 ms window's bound (far over, or under early_reject_factor
    times it) is checked by a run alone, and the task, fast alone, measures on."""
    _quick_reads(monkeypatch, quick_ms)
    r = run("x + 1", filter=FilterSection(min_eager_ms=0.0, max_eager_ms=100.0))
    assert r["status"] == "ok" and r["quick_eager_ms"] == quick_ms and 0 < r["eager_alone_ms"] < 150
    assert r["eager_runs"] >= 3 and r["eager_ms"] < 100


def test_a_quick_run_under_one_and_a_half_times_the_bound_is_not_checked_alone(monkeypatch):
    _quick_reads(monkeypatch, 140.0)
    r = run("x + 1", filter=FilterSection(min_eager_ms=0.0, max_eager_ms=100.0))
    assert r["status"] == "ok" and r["quick_eager_ms"] == 140.0 and r.get("eager_alone_ms") is None


def test_degenerate_helper_on_tensors():
    import torch

    assert degenerate(torch.tensor([1.0, 2.0, float("inf")])) == "nonfinite"
    assert degenerate(torch.tensor([0.5, 0.25])) == ""


def test_compile_agreement_and_graph_breaks():
    r = run("torch.sin(x) * (2 if x.sum().item() > 0 else 3)", compile=True)
    assert r["status"] == "ok" and r["compile_ok"], r
    assert r["compile_agrees_1e4"] and r["compile_agrees_1e2"] and r["compile_max_abs_err"] < 1e-5
    assert r["graph_breaks"] >= 1 and r["compile_ms"] > 0 and r["compile_runs"] >= 3
    # inductor's compile time over every graph of the break, measured apart from the runs
    assert 0 < r["compile_wall_s"] < r["wall_s"]


@pytest.mark.parametrize("expr, why", [
    ("self.w.expand(32, 16) + 0 * x", "input-insensitive"),
    ("F.pad(x[:1, :4], (0, 508), value=1.0)", "degenerate output"),
    ("self.drop(x)", "non-deterministic"),
])
def test_eager_rejection_skips_the_compile(expr, why):
    r = run(expr, compile=True)
    assert r["status"] == "ok" and r["eager_ms"] > 0
    assert r.get("compile_ok") is None and r["compile_error"].startswith(f"skipped: {why} (")
    # the worker's reason is the filter stage's own verdict on the same measurements
    assert r["compile_error"] == "skipped: " + decide(r, EAGER_CHECKS, FilterSection())[1]


def test_eager_rejection_compiles_when_told_to():
    r = run("self.w.expand(32, 16) + 0 * x", compile=True, skip_compile_when_rejected=False)
    assert r["compile_ok"] and r["compile_ms"] > 0


def test_oom_line_keeps_the_request_and_the_cap():
    procs = " ".join(f"Process {i} has 9.23 GiB memory in use." for i in range(40))
    msg = (f"CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total capacity of 139.80 GiB of which "
           f"37.15 GiB is free. {procs} Of the allocated memory 5.1 GiB is allocated by PyTorch, 6.50 GiB allowed; "
           "and 1.25 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large ...")
    line = one_line(RuntimeError(msg))
    assert "tried to allocate 3.00 GiB" in line and "6.50 GiB allowed" in line
    assert "5.1 GiB is allocated by PyTorch" in line and "1.25 GiB is reserved by PyTorch but unallocated" in line
    assert len(line) <= 300


def test_max_diff_counts_equal_infinities_and_same_place_nans_as_equal():
    from measures.tensor_checks import max_diff

    inf, nan = float("inf"), float("nan")
    a = torch.tensor([1.0, inf, -inf, nan])
    assert max_diff(a, a.clone()) == 0.0  # rsqrt(0) = inf in both runs is deterministic, not "differ by nan"
    assert max_diff(a, torch.tensor([1.0, -inf, -inf, nan])) == inf
    assert math.isnan(max_diff(a, torch.tensor([1.0, inf, -inf, 0.0])))  # NaN in one run only: not equal


def test_locked_backend_compiles_again_with_the_whole_share_when_compiling_runs_out_of_memory():
    from pipeline.gpu.gpu_share import GpuLock
    from pipeline.gpu.harness import _LockedBackend

    calls: list[str] = []

    def inner(gm, example_inputs):
        calls.append("compile")
        if calls.count("compile") == 1:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return lambda *args: "compiled"

    backend = _LockedBackend(inner, GpuLock(None, lambda _: None),
                             (lambda: calls.append("shrink"), lambda: calls.append("grow")))
    assert backend(None, [])() == "compiled"  # the second compile's graph, wrapped to take the lock when it runs
    assert calls == ["shrink", "compile", "grow", "compile"]  # grown back once, before the second compile
    calls.clear()
    failing = _LockedBackend(lambda gm, ex: (_ for _ in ()).throw(ValueError("bad graph")), GpuLock(None, lambda _: None),
                             (lambda: calls.append("shrink"), lambda: calls.append("grow")))
    with pytest.raises(ValueError):
        failing(None, [])
    assert calls == ["shrink", "grow"]  # another failure is the task's: not compiled twice


def test_locked_backend_takes_the_lock_when_the_graph_runs_not_when_compiling_returns(tmp_path):
    """Dynamo's CPU work after the backend returns (guards, bytecode) must not hold the GPU; the graph's runs do,
    shared when the worker holds nothing, and a run inside a timed (exclusive) hold keeps that hold."""
    from pipeline.gpu.gpu_share import GpuLock
    from pipeline.gpu.harness import _LockedBackend

    lock = GpuLock(str(tmp_path / "gpu.lock"), lambda _: None)
    seen: list[str | None] = []

    def graph(*args):
        seen.append(lock.mode)
        return len(args)

    lock.acquire(label="compiled-draw")
    fn = _LockedBackend(lambda gm, ex: graph, lock)(None, [])
    assert lock.mode is None  # compiling gave the lock back, and returning did not take it again
    assert fn(1, 2) == 2 and lock.mode == "shared" and lock.label == "compiled-run"
    lock.acquire(exclusive=True, label="timing")
    assert fn(3) == 1 and lock.mode == "exclusive" and lock.label == "timing"
    lock.release()
    assert seen == ["shared", "exclusive"]


@pytest.mark.skipif(len(getattr(os, "sched_getaffinity", lambda _: ())(0)) < 2, reason="needs two host cores")
def test_with_holder_cores_a_worker_compiles_off_them_and_runs_its_graph_on_every_core(tmp_path):
    """profile.holder_cores: inductor's compile (CPU work, no hold) runs on the cores left to non-holders; the
    compiled graph's run (a shared hold) may use every core, and the worker is back off them after its hold."""
    from pipeline.gpu.gpu_share import GpuLock, holder_core_split
    from pipeline.gpu.harness import _LockedBackend

    everything = os.sched_getaffinity(0)
    split = holder_core_split(1)
    assert split is not None
    lock = GpuLock(str(tmp_path / "gpu.lock"), lambda _: None, cores=split)
    seen: dict[str, set[int]] = {}

    def inner(gm, example_inputs):
        seen["compile"] = os.sched_getaffinity(0)

        def graph(*args):
            seen["run"] = os.sched_getaffinity(0)
            return len(args)
        return graph

    try:
        lock.acquire(label="compiled-draw")
        fn = _LockedBackend(inner, lock)(None, [])
        assert fn(1) == 1
        lock.release()
        seen["after"] = os.sched_getaffinity(0)
    finally:
        os.sched_setaffinity(0, everything)
    assert seen["compile"] == set(split[1]) and max(everything) not in seen["compile"]
    assert seen["run"] == everything and seen["after"] == set(split[1])


def test_a_failing_compile_backend_is_reported_by_its_inner_error():
    """torch.compile wraps a backend's exception in BackendCompilerFailed, whose first line names only the backend
    object: the recorded compile error must say what failed."""
    import torch

    from pipeline.gpu.gpu_share import GpuLock
    from pipeline.gpu.harness import _LockedBackend, one_line

    def refuse(gm, example_inputs):
        raise NotImplementedError("NYI TritonSplitDimKernel reductions")

    backend = _LockedBackend(refuse, GpuLock(None, lambda _: None))
    torch._dynamo.reset()
    with pytest.raises(Exception) as info:
        torch.compile(lambda x: torch.sin(x) + 1, backend=backend)(torch.ones(4))
    line = one_line(info.value)
    assert line.startswith("BackendCompilerFailed (NotImplementedError: NYI TritonSplitDimKernel reductions)"), line
    assert "0x" not in line
    assert one_line(ValueError("first\nsecond")) == "ValueError: first"


@pytest.mark.parametrize("expr, why", [
    ("self.w.expand(32, 16) + 0 * x", "input-insensitive"),
    ("self.drop(x)", "non-deterministic"),
])
def test_a_task_the_checks_reject_is_not_timed_when_told_so(expr, why):
    from filters.checks import CHECKS

    r = run(expr, compile=True, skip_timing_when_rejected=True)
    assert r["status"] == "ok" and r["timing_skipped"].startswith(why)
    assert r.get("eager_ms") is None and r.get("eager_runs") is None and r.get("compile_ms") is None
    # the filter stage rejects it for the same reason it was not timed, not for its missing runtime
    assert decide(r, CHECKS, FilterSection())[1] == r["timing_skipped"]
    # at thresholds loose enough to keep it, it has no runtime to publish: rejected as not timed, with the fix
    loose = FilterSection(require_deterministic=False, min_input_sensitivity=0.0, min_input_sensitivity_ratio=0.0,
                          require_compile=False,
                          min_eager_ms=0.0)
    reason = decide(r, CHECKS, loose)[1]
    assert reason.startswith("not timed: profile it again with profile.skip_timing_when_rejected off")
    assert "(rejected while profiling: " in reason


def test_a_compile_failure_is_not_timed_and_a_clean_task_is(clean):
    from filters.checks import CHECKS

    r = run("torch.sin(x * self.w) + x", compile=False, skip_timing_when_rejected=True)  # filter requires compile
    assert r["timing_skipped"].startswith("compile failed") and r.get("eager_ms") is None
    assert decide(r, CHECKS, FilterSection())[1] == r["timing_skipped"]
    r = run("torch.sin(x * self.w) + x", compile=True, skip_timing_when_rejected=True)
    assert r["timing_skipped"] == "" and r["eager_ms"] > 0 and r["compile_ms"] > 0
    assert decide(r, CHECKS, WIDE)[0]
    assert clean["timing_skipped"] == "" and clean["eager_ms"] > 0  # off: every task that ran is timed
