"""Filter decisions from measurements: the first failing check is the one reason recorded."""

import dataclasses

import pytest

from pipeline.config import load_preset
from pipeline.stages.filter import decide_measurement

GOOD = {
    "task_id": "t", "status": "ok", "eager_ms": 5.0, "compile_ok": True, "compile_agrees_1e2": True,
    "compile_agrees_1e4": False, "compile_max_abs_err": 3e-4, "compile_max_rel_err": 2e-4,
    "deterministic": True, "determinism_max_diff": 0.0, "input_min_pairwise_diff": 0.3, "degenerate": "",
    "peak_memory_bytes": 2**20, "ops": None, "aten_ops": [],
}
CFG = load_preset("h200")


@pytest.mark.parametrize(
    "change, fragment",
    [
        ({"status": "timeout", "error": "timed out after 5s"}, "timeout"),
        ({"eager_ms": 0.2}, "too fast"),
        ({"eager_ms": 250.0}, "too slow"),
        ({"compile_ok": False, "compile_error": "Unsupported"}, "compile failed"),
        ({"compile_agrees_1e2": False}, "compile disagrees"),
        ({"deterministic": False, "determinism_max_diff": 1e-3}, "non-deterministic"),
        ({"input_min_pairwise_diff": 0.0}, "input-insensitive"),
        ({"degenerate": "zero"}, "degenerate output (zero)"),
        ({"peak_memory_bytes": 9 * 2**30}, "too much memory"),
    ],
)
def test_each_check_drops_with_its_reason(change, fragment):
    assert decide_measurement(GOOD, CFG) == (True, "")
    keep, reason = decide_measurement({**GOOD, **change}, CFG)
    assert not keep and fragment in reason


def test_strict_tolerance_uses_the_1e4_agreement():
    strict = dataclasses.replace(CFG, filter=dataclasses.replace(CFG.filter, compile_tolerance=1e-4))
    keep, reason = decide_measurement(GOOD, strict)
    assert not keep and "compile disagrees" in reason


def test_first_failure_wins():
    keep, reason = decide_measurement({**GOOD, "eager_ms": 0.1, "degenerate": "zero"}, CFG)
    assert reason.startswith("too fast")
