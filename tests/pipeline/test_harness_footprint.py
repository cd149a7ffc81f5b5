"""The memory a profile worker reserves for a task before and after its first forward (pipeline.gpu.harness)."""

import pytest

from pipeline.gpu.harness import Harness
from pipeline.gpu.worker_settings import WorkerSettings
from pipeline.rundir.config import Config, ConfigError, FilterSection, ProfileSection, load_file

GIB = 2**30


def _harness(task_cap_gib: float, max_peak_gb: float, **profile) -> Harness:
    h = Harness.__new__(Harness)  # no device, no rlimit: only the sizing rule is under test
    h.s = WorkerSettings.from_config(Config(filter=FilterSection(max_peak_memory_gb=max_peak_gb),
                                            profile=ProfileSection(**profile)))
    h.task_cap = int(task_cap_gib * GIB)
    h.measured_need = None
    return h


def test_a_predicted_peak_is_reserved_with_its_margin_and_never_beyond_the_workers_cap():
    h = _harness(26, 8)
    six = 6 * GIB
    assert h._footprint(six) == int(1.1 * six + GIB // 2)
    assert h._footprint(six, out_bytes=GIB, measured=True) == int(1.15 * 7 * GIB + GIB // 2)
    assert h._footprint(40 * GIB) == 26 * GIB


def test_the_reservation_margins_are_the_profile_sections():
    h = _harness(26, 8, reserve_margin_predicted=1.0, reserve_margin_measured=1.05, reserve_slack_gb=0.25)
    six = 6 * GIB
    assert h._footprint(six) == six + GIB // 4
    assert h._footprint(six, out_bytes=GIB, measured=True) == int(1.05 * 7 * GIB + GIB // 4)
    assert h._footprint(None) == 8 * GIB + GIB // 4


def test_a_reservation_margin_under_one_is_refused_at_load(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text("[profile]\nreserve_margin_measured = 0.9\n")
    with pytest.raises(ConfigError, match="reserve_margin_measured must be >= 1"):
        load_file(cfg)


def test_an_unpredicted_peak_reserves_the_filters_cap_not_the_whole_worker():
    # imported rows carry no prediction: a task above the filter's cap is rejected for its peak anyway, and the
    # worker's whole cap (3x) would let only a few such tasks share the GPU
    assert _harness(26, 8)._footprint(None) == 8 * GIB + GIB // 2
    assert _harness(4, 8)._footprint(None) == 4 * GIB
    assert _harness(0, 8)._footprint(None) == 0  # no budget at all (CPU): nothing to reserve


def _retrying_harness(first: dict, reserved_gib: float = 7, task_cap_gib: float = 26,
                      step: str = "", fails: int = 1, **profile) -> tuple[Harness, list[int]]:
    """A CPU harness whose first `fails` attempts return `first` under a reservation of reserved_gib (as a GPU worker
    with a memory budget would), having failed in `step`, and whose next returns a clean measurement;
    the reservation of each attempt is kept."""
    from pipeline.gpu.gpu_share import GpuLock, MemoryBudget

    h = _harness(task_cap_gib, 8, **profile)
    h.lock, h.budget = GpuLock(None, lambda _: None), MemoryBudget(None, 0, lambda _: None)
    h.budget.fd = -1  # a budget file is open (GPU workers): only then is there a larger cap to retry with
    h.cuda, h.gpu, h.torch_version, h.regrow_wait_s = False, "", "", 0.0
    h.reserved_cap = int(reserved_gib * GIB)
    reserves: list[int] = []

    def attempt(task, m, reserve):
        reserves.append(reserve)
        h.lock.label = "free-memory"  # the attempt's clean-up held the lock last, whatever step it failed in
        failed = {**first, "_step": step} if first["status"] != "ok" else first
        return {**m, **(failed if len(reserves) <= fails else {"status": "ok", "timing_alloc_retries": 0})}

    h._attempt, h._footprint = attempt, lambda *a, **k: int(reserved_gib * GIB)
    return h, reserves


def test_timing_disturbed_by_allocator_retries_is_measured_again_with_the_workers_cap():
    h, reserves = _retrying_harness({"status": "ok", "timing_alloc_retries": 1})
    m = h.profile({"task_id": "t"})
    assert reserves == [7 * GIB, 26 * GIB] and m["status"] == "ok" and m["timing_alloc_retries"] == 0
    assert m["error"] == "" and m["reservation_retry"] == "7.00 GiB: timing alloc retries 1"


def test_an_oom_is_retried_and_an_undisturbed_or_capped_task_is_not():
    h, reserves = _retrying_harness({"status": "oom", "error": "CUDA out of memory"}, step="compiled-run")
    m = h.profile({"task_id": "t"})
    assert m["status"] == "ok" and len(reserves) == 2
    assert m["reservation_retry"] == "7.00 GiB: oom in compiled-run: CUDA out of memory"  # where it ran out
    h.lock.label = "timing"  # the last task's step is not this one's
    h._attempt = lambda task, m, reserve: {**m, "status": "oom", "error": "CUDA out of memory"}
    assert h.profile({"task_id": "u"})["reservation_retry"] == "7.00 GiB: oom in setup: CUDA out of memory"
    h, reserves = _retrying_harness({"status": "ok", "timing_alloc_retries": 0})
    assert h.profile({"task_id": "t"})["reservation_retry"] == ""  # recorded: not run again
    assert len(reserves) == 1  # nothing to retry
    h, reserves = _retrying_harness({"status": "ok", "timing_alloc_retries": 3}, reserved_gib=26)
    assert h.profile({"task_id": "t"})["timing_alloc_retries"] == 3 and len(reserves) == 1  # no larger cap left
    h, reserves = _retrying_harness({"status": "crashed", "timing_alloc_retries": 1})
    h.profile({"task_id": "t"})
    assert len(reserves) == 1  # only a want of memory is retried


def test_with_a_retry_factor_a_task_runs_again_with_a_larger_share_before_the_whole_cap():
    oom = {"status": "oom", "error": "CUDA out of memory"}
    h, reserves = _retrying_harness(oom, step="compiled-run", retry_reserve_factor=2.5)
    m = h.profile({"task_id": "t"})
    assert reserves == [7 * GIB, int(17.5 * GIB)] and m["status"] == "ok"
    assert m["reservation_retry"] == "7.00 GiB: oom in compiled-run: CUDA out of memory"
    h, reserves = _retrying_harness(oom, step="compiled-run", fails=2, retry_reserve_factor=2.5)
    m = h.profile({"task_id": "t"})
    assert reserves == [7 * GIB, int(17.5 * GIB), 26 * GIB] and m["status"] == "ok"  # not enough either: whole cap
    assert m["reservation_retry"] == ("7.00 GiB: oom in compiled-run: CUDA out of memory; "
                                      "17.50 GiB: oom in compiled-run: CUDA out of memory")
    h, reserves = _retrying_harness(oom, step="eager", fails=3, retry_reserve_factor=2.5)
    m = h.profile({"task_id": "t"})
    assert len(reserves) == 3 and m["status"] == "oom"  # the whole cap is the last try
    assert m["error"] == "CUDA out of memory (retried with the worker's cap reserved)"
    h, reserves = _retrying_harness({"status": "ok", "timing_alloc_retries": 2}, retry_reserve_factor=4)
    assert h.profile({"task_id": "t"})["status"] == "ok" and reserves == [7 * GIB, 26 * GIB]  # 28 GiB > the cap
    h, reserves = _retrying_harness({"status": "crashed", "error": "boom"}, retry_reserve_factor=2.5)
    h.profile({"task_id": "t"})
    assert reserves == [7 * GIB]  # only a want of memory is retried


def test_a_retry_factor_of_one_or_less_is_refused_and_zero_is_the_whole_cap(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text("[profile]\nretry_reserve_factor = 1.0\n")
    with pytest.raises(ConfigError, match="retry_reserve_factor must be 0 .the whole cap. or > 1"):
        load_file(cfg)
    h, reserves = _retrying_harness({"status": "oom", "error": "CUDA out of memory"})
    h.profile({"task_id": "t"})
    assert reserves == [7 * GIB, 26 * GIB]


@pytest.mark.parametrize(("margin", "grows_to_gib"), [(0.0, 5.0), (1.5, 1.5 * 4 + 0.25), (9.0, 26.0)])
def test_the_compiled_phase_grows_back_to_its_own_margin_when_one_is_set(monkeypatch, margin, grows_to_gib):
    """After compiling, a task's share grows back to what it held before (5 GiB here), or with
    reserve_margin_compiled to that margin over the measured peak and output (3 + 1 GiB), whichever is larger and
    never over the worker's cap; 0 keeps the measured margin throughout."""
    import torch

    from pipeline.gpu.gpu_share import MemoryBudget

    h = _harness(26, 8, reserve_slack_gb=0.25, reserve_margin_compiled=margin)
    h.cuda, h.retrying, h.regrow_wait_s, h.device = True, False, 0.0, torch.device("cpu")
    h.budget = MemoryBudget(None, 0, lambda _: None)
    h.budget.fd, h.budget.reserved = -1, 5 * GIB
    h.measured_need = (3 * GIB, GIB)
    reserves: list[int] = []
    monkeypatch.setattr(h, "_reserve", lambda nbytes, wait=True: reserves.append(nbytes))
    monkeypatch.setattr(h, "_empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: GIB)
    enter, leave = h._compile_hooks()
    enter()
    leave()
    assert reserves == [GIB + 512 * 2**20, int(grows_to_gib * GIB)]  # shrunk to what is alive, then grown back


def test_a_compiled_margin_under_one_is_refused_and_zero_is_off(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text("[profile]\nreserve_margin_compiled = 0.5\n")
    with pytest.raises(ConfigError, match="reserve_margin_compiled must be 0 .off. or >= 1"):
        load_file(cfg)
    assert _harness(26, 8)._compiled_footprint() == 0  # off by default


def test_the_retry_names_the_step_the_task_failed_in_not_the_clean_up_after_it():
    """The real attempt on a GPU worker: the task runs out of memory inside a compiled-run hold, then the attempt's
    clean-up holds the lock to free memory; the retry note names compiled-run. Out of memory while inductor
    compiles (no hold) reads compile."""
    import torch

    from pipeline.gpu.harness import _LockedBackend

    h, _ = _retrying_harness({"status": "ok"})
    del h._attempt  # the real one
    h.cuda, h._reserve = True, lambda *a, **k: None
    steps = iter(["compiled-run", "timing"])

    def profile(task, m):
        label = next(steps)
        with h.lock.hold(label=label):
            if label == "compiled-run":
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        m["timing_alloc_retries"] = 0

    h._profile = profile
    m = h.profile({"task_id": "t"})
    assert m["status"] == "ok" and m["reservation_retry"].startswith("7.00 GiB: oom in compiled-run: ")
    assert "_step" not in m

    def oom_compiling(gm, example_inputs):
        raise torch.OutOfMemoryError("CUDA out of memory")

    with h.lock.hold(label="compiled-draw"), pytest.raises(torch.OutOfMemoryError):
        _LockedBackend(oom_compiling, h.lock)(None, [])
    assert h.lock.label == "compile"


def test_a_task_whose_checks_run_a_float64_forward_reserves_twice_its_peak_and_output():
    # the fragility check's float64 forward doubles weights, inputs, intermediates and output
    h = _harness(26, 8, shortcut_checks=("dead", "skip", "fragile"))
    six = 6 * GIB
    assert h._runs_float64()
    assert h._footprint(six, checks=True) == int(1.1 * 2 * six + GIB // 2)
    assert h._footprint(six, out_bytes=GIB, measured=True, checks=True) == int(1.15 * 2 * 7 * GIB + GIB // 2)
    assert h._footprint(None, checks=True) == 16 * GIB + GIB // 2
    assert h._footprint(12 * GIB, checks=True) == 26 * GIB  # never beyond the worker's cap
    # without the fragility check no float64 forward runs: one forward's need
    assert not _harness(26, 8, shortcut_checks=("dead", "skip"))._runs_float64()
    assert not _harness(26, 8)._runs_float64()


def test_the_float64_forward_runs_in_slices_only_with_the_fragility_check_and_rows_computed_apart():
    import torch
    from torch import nn

    x = (torch.randn(8, 16),)
    rows_apart = nn.Sequential(nn.Linear(16, 4), nn.Tanh())
    with torch.no_grad():
        out = rows_apart(*x)
        assert _harness(26, 8, shortcut_checks=("fragile",))._float64_chunks(rows_apart, x, out) == 4
        assert _harness(26, 8, shortcut_checks=("fragile",), shortcut_f64_chunks=2)._float64_chunks(rows_apart, x, out) == 2
        assert _harness(26, 8, shortcut_checks=("fragile",), shortcut_f64_chunks=1)._float64_chunks(rows_apart, x, out) == 1
        assert _harness(26, 8, shortcut_checks=("dead", "skip"))._float64_chunks(rows_apart, x, out) == 1
        mixed = nn.Sequential(nn.Linear(16, 4), nn.BatchNorm1d(4))  # training statistics mix the rows
        assert _harness(26, 8, shortcut_checks=("fragile",))._float64_chunks(mixed, x, mixed(*x)) == 1


def test_a_float64_forward_in_no_slices_is_refused_at_load(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text("[profile]\nshortcut_f64_chunks = 0\n")
    with pytest.raises(ConfigError, match="shortcut_f64_chunks must be >= 1"):
        load_file(cfg)
