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
