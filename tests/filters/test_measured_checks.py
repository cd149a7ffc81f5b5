"""Filter decisions from measurements: the first failing check is the one reason recorded."""

import dataclasses

import pytest

from filters.base import reason_kind
from pipeline.rundir.config import load_preset
from pipeline.stages.filter import decide_measurement

GOOD = {
    "task_id": "t", "status": "ok", "eager_ms": 5.0, "compile_ok": True, "compile_agrees_1e2": True,
    "compile_agrees_1e4": False, "compile_max_abs_err": 3e-4, "compile_max_rel_err": 2e-4,
    "deterministic": True, "determinism_max_diff": 0.0, "input_min_pairwise_diff": 0.3, "degenerate": "",
    "input_sensitivity_ratio": 30.0,
    "peak_memory_bytes": 2**20, "ops": None, "aten_ops": [], "timing_alloc_retries": 0,
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
        ({"input_sensitivity_ratio": 0.31}, "fakeable by a fixed output"),
        ({"degenerate": "zero"}, "degenerate output (zero)"),
        ({"peak_memory_bytes": 9 * 2**30}, "too much memory"),
        ({"timing_alloc_retries": 2}, "timing disturbed by allocator retries"),
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


def test_fakeable_reason_names_the_tolerance_and_groups_as_one_kind():
    keep, reason = decide_measurement({**GOOD, "input_sensitivity_ratio": 0.31}, CFG)
    assert not keep
    assert reason == ("fakeable by a fixed output (draws agree within the verifier tolerance 0.01: "
                      "ratio 0.31 < 1)")
    other = decide_measurement({**GOOD, "input_sensitivity_ratio": 0.0042}, CFG)[1]
    assert reason_kind(reason) == reason_kind(other) == "fakeable by a fixed output"


def test_fakeable_threshold_keeps_at_and_above_it_and_old_rows():
    assert decide_measurement({**GOOD, "input_sensitivity_ratio": 1.0}, CFG) == (True, "")
    # measured before the column existed
    old = {k: v for k, v in GOOD.items() if k != "input_sensitivity_ratio"}
    assert decide_measurement(old, CFG) == (True, "")
    assert decide_measurement({**GOOD, "input_sensitivity_ratio": None}, CFG) == (True, "")
    off = dataclasses.replace(CFG, filter=dataclasses.replace(CFG.filter, min_input_sensitivity_ratio=0.0))
    assert decide_measurement({**GOOD, "input_sensitivity_ratio": 0.31}, off) == (True, "")


def test_labels_are_judged_with_the_pins_of_the_measurements_device(tmp_path, monkeypatch):
    import json

    from operators import labels
    from pipeline.rundir.schema import MEASUREMENTS

    assert "device" in MEASUREMENTS.names  # what the filter stage reads back from the profile's rows
    pin = tmp_path / "aten_pins_cuda.json"
    pin.write_text(json.dumps({"ops": {"nn.BatchNorm2d": {"behaviours": [["aten.cudnn_batch_norm"]],
                                                          "fingerprint": "0"}}}))
    monkeypatch.setattr(labels, "CUDA_PIN_FILE", pin)
    labels.reload_pins()
    try:
        gpu_row = {**GOOD, "ops": ["nn.BatchNorm2d"], "aten_ops": ["aten.cudnn_batch_norm"], "device": "cuda"}
        assert decide_measurement(gpu_row, CFG) == (True, "")
        keep, reason = decide_measurement({**gpu_row, "device": "cpu"}, CFG)
        assert not keep and reason.startswith("label mismatch") and "cudnn_batch_norm" in reason
        keep, reason = decide_measurement({**gpu_row, "device": None}, CFG)  # rows from before the column
        assert not keep and reason_kind(reason) == reason_kind("label mismatch (x)")
        cpu_row = {**gpu_row, "aten_ops": ["aten.native_batch_norm", "aten.add_"], "device": "cuda"}
        assert decide_measurement(cpu_row, CFG) == (True, "")
    finally:
        monkeypatch.undo()
        labels.reload_pins()


def test_filter_stage_reads_each_rows_device_from_the_measurements_table(tmp_path, monkeypatch):
    # the path `opsynth filter` and `opsynth audit --stages profile,filter` take: rows written, stage run, verdicts read
    import json

    from operators import labels
    from pipeline.rundir.schema import MEASUREMENTS, TASKS
    from pipeline.rundir.store import RunDir
    from pipeline.stages import filter as filter_stage

    pin = tmp_path / "aten_pins_cuda.json"
    pin.write_text(json.dumps({"ops": {"nn.RMSNorm": {"behaviours": [["aten._fused_rms_norm"]], "fingerprint": "0"}}}))
    monkeypatch.setattr(labels, "CUDA_PIN_FILE", pin)
    labels.reload_pins()
    try:
        rd = RunDir(tmp_path / "run")
        rd.init(CFG)
        rd.replace_table("tasks", [{"task_id": t, "ops": ["nn.RMSNorm"], "code": ""} for t in ("a", "b")], TASKS)
        row = {k: v for k, v in GOOD.items() if k in MEASUREMENTS.names}
        rows = [{**row, "task_id": "a", "device": "cuda", "aten_ops": ["aten._fused_rms_norm"]},
                {**row, "task_id": "b", "device": "cpu", "aten_ops": ["aten._fused_rms_norm"]}]
        rd.replace_table("measurements", rows, MEASUREMENTS)
        filter_stage.run(rd, CFG)
        got = {v["task_id"]: (v["keep"], v["reason"]) for v in rd.read_rows("verdicts") if v["stage"] == "filter"}
        assert got["a"] == (True, "")
        assert not got["b"][0] and got["b"][1].startswith("label mismatch")
    finally:
        monkeypatch.undo()
        labels.reload_pins()


def test_audited_rows_are_judged_by_kind_and_unknown_operators_pass():
    row = {**GOOD, "device": "cuda", "foreign_labels": True}
    assert decide_measurement({**row, "ops": ["nn.LSTM"], "aten_ops": ["aten._cudnn_rnn"]}, CFG) == (True, "")
    assert decide_measurement({**row, "ops": ["nn.Unpinned"], "aten_ops": ["aten.abs"]}, CFG) == (True, "")
    keep, reason = decide_measurement({**row, "ops": ["nn.Tanh"], "aten_ops": ["aten.abs"]}, CFG)
    assert not keep and reason.startswith("wrong label (labelled but never ran: nn.Tanh")
    # the sampler's own rows keep the strict check: an unpinned label is a mismatch there
    keep, reason = decide_measurement({**row, "foreign_labels": False, "ops": ["nn.Unpinned"], "aten_ops": ["aten.abs"]}, CFG)
    assert not keep and reason.startswith("label mismatch")


def test_allocator_retries_in_timed_runs_drop_unless_switched_off_and_old_rows_keep():
    keep, reason = decide_measurement({**GOOD, "timing_alloc_retries": 3}, CFG)
    assert not keep and reason == "timing disturbed by allocator retries (3 in timed runs)"
    assert reason_kind(reason) == reason_kind(decide_measurement({**GOOD, "timing_alloc_retries": 41}, CFG)[1])
    # measured before the column existed, or on the CPU (always 0)
    assert decide_measurement({k: v for k, v in GOOD.items() if k != "timing_alloc_retries"}, CFG) == (True, "")
    assert decide_measurement({**GOOD, "timing_alloc_retries": None}, CFG) == (True, "")
    off = dataclasses.replace(CFG, filter=dataclasses.replace(CFG.filter, require_undisturbed_timing=False))
    assert decide_measurement({**GOOD, "timing_alloc_retries": 3}, off) == (True, "")
    # a task outside the window is reported as that: the window comes first
    assert decide_measurement({**GOOD, "timing_alloc_retries": 3, "eager_ms": 0.2}, CFG)[1].startswith("too fast")


def test_the_worker_skips_compiling_only_on_checks_the_eager_runs_decide():
    from filters.checks import CHECKS, EAGER_CHECKS
    from filters.runtime import eager_in_window, timing_undisturbed

    assert set(EAGER_CHECKS) < set(CHECKS)
    assert eager_in_window not in EAGER_CHECKS and timing_undisturbed not in EAGER_CHECKS  # timing comes last


def test_reasons_that_differ_only_in_an_object_address_are_one_kind():
    a = "compile failed: BackendCompilerFailed: backend='<__main__._LockedBackend object at 0x7fdf5e1a0b60>' raised:"
    b = a.replace("0x7fdf5e1a0b60", "0x7f00aa12c0d0")
    assert reason_kind(a) == reason_kind(b) and "0x7f" not in reason_kind(a)
