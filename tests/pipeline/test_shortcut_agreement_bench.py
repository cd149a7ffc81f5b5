"""benchmarks/shortcut_agreement.py: the float64 check in batch slices against the whole batch, from measured rows."""

import sys
from pathlib import Path


def test_float64_slices_counts_sliced_rows_differing_verdicts_and_the_peak_ratio():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from shortcut_agreement import float64_slices

    def row(tid, chunks, whole, sliced, peaks=(None, None)):
        cheap = {"f64_chunks": chunks, "f64_ratio": whole, "f64_peak_bytes": peaks[1]}
        if chunks > 1:
            cheap.update(f64_sliced_ratio=sliced, f64_sliced_peak_bytes=peaks[0])
        return {"task_id": tid, "cheap": cheap}

    rows = [row("same", 4, 0.5, 0.5, (30, 100)), row("flips", 4, 1.2, 0.9, (40, 100)),
            row("whole", 1, 2.0, None), row("no-ref", 4, None, None)]
    got = float64_slices(rows)
    assert got["rows"] == 4 and got["sliced"] == 2
    assert got["verdicts_differ"] == 1 and got["differ"] == ["flips"]
    assert abs(got["largest_ratio_gap"] - 0.3) < 1e-12
    assert got["with_peaks"] == 2 and got["sliced_over_whole_peak_median"] == 0.4


def test_step_margin_table_splits_the_step_rows_by_elements_near_a_step():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from shortcut_agreement import CHOSEN, step_margin_table

    def row(tid, near16, fragile, steps=True, moved=0.5):
        return {"task_id": tid, "steps": steps,
                "exhaustive": {"op_ratios": {}, "ulp_ratios": [0.1], "f64_ratio": 0.1, "fragile": fragile,
                               "dead": [], "skip": []},
                "cheap": {"reduced_op_ratios": {}, "move160": moved},
                "step_margins": {"calls": 1, "elements": 10, "near": {"1": 0.0, "4": 0.0, "16": near16,
                                                                      "64": near16 + 5}}}

    rows = [row("clear", 0.0, False), row("clear-fragile", 0.0, True), row("near", 3.0, True),
            row("near-fine", 2.0, False), row("no-step", 0.0, True, steps=False),
            row("scaled-flag", 0.0, True, moved=50.0)]
    got = step_margin_table(rows, CHOSEN)
    assert got["rows"] == 4  # the rows whose cheap verdict runs the exhaustive draws
    assert got["16"] == {"clear": 2, "clear_but_fragile": 1, "near": 2, "near_not_fragile": 1}
    assert got["64"]["clear"] == 0 and got["64"]["near"] == 4
