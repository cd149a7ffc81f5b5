"""The memory a profile worker reserves for a task before and after its first forward (pipeline.harness)."""

from pipeline.config import Config, FilterSection
from pipeline.harness import MEASURED_MARGIN, PREDICTED_MARGIN, Harness
from pipeline.worker_settings import WorkerSettings

GIB = 2**30


def _harness(task_cap_gib: float, max_peak_gb: float) -> Harness:
    h = Harness.__new__(Harness)  # no device, no rlimit: only the sizing rule is under test
    h.s = WorkerSettings.from_config(Config(filter=FilterSection(max_peak_memory_gb=max_peak_gb)))
    h.task_cap = int(task_cap_gib * GIB)
    return h


def test_a_predicted_peak_is_reserved_with_its_margin_and_never_beyond_the_workers_cap():
    h = _harness(26, 8)
    six = 6 * GIB
    assert h._footprint(six) == int(PREDICTED_MARGIN * six + GIB // 2)
    assert h._footprint(six, out_bytes=GIB, measured=True) == int(MEASURED_MARGIN * 7 * GIB + GIB // 2)
    assert h._footprint(40 * GIB) == 26 * GIB


def test_an_unpredicted_peak_reserves_the_filters_cap_not_the_whole_worker():
    # imported rows carry no prediction: a task above the filter's cap is rejected for its peak anyway, and the
    # worker's whole cap (3x) would let only a few such tasks share the GPU
    assert _harness(26, 8)._footprint(None) == 8 * GIB + GIB // 2
    assert _harness(4, 8)._footprint(None) == 4 * GIB
    assert _harness(0, 8)._footprint(None) == 0  # no budget at all (CPU): nothing to reserve
