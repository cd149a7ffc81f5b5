"""Resolve a TASK argument: a KernelBench-format file, or DATASET_DIR:task_id of a published dataset directory."""

from __future__ import annotations

import json
from pathlib import Path

from opsynth.errors import OpsynthError


def load_task(spec: str | Path) -> dict:
    """{"task_id", "code", "shape_variants" (list of {CONSTANT: value}), "eager_ms", "compile_ms"} for `spec`, and
    "peak_memory_bytes" (the release's measured forward peak) where the dataset has it."""
    p = Path(spec)
    if p.is_file():
        return {"task_id": p.stem, "code": p.read_text(), "shape_variants": [], "eager_ms": None, "compile_ms": None}
    text = str(spec)
    if ":" in text:
        root, task_id = text.rsplit(":", 1)
        files = sorted((Path(root) / "data").glob("*.parquet"))
        if not files:
            raise OpsynthError(f"{root}: no data/*.parquet; pass a published dataset directory as DATASET_DIR:task_id")
        import pyarrow.compute as pc
        import pyarrow.dataset as ds

        d = ds.dataset([str(f) for f in files])
        cols = [c for c in ("task_id", "code", "shape_variants", "eager_ms", "compile_ms", "peak_memory_bytes")
                if c in d.schema.names]
        t = d.to_table(columns=cols, filter=pc.field("task_id") == task_id)
        if t.num_rows == 0:
            raise OpsynthError(f"{root}: no row with task_id {task_id!r}; pick one from its data/*.parquet")
        row = t.slice(0, 1).to_pylist()[0]
        row["shape_variants"] = json.loads(row["shape_variants"] or "[]")
        return row
    raise OpsynthError(f"{spec}: not a file and not DATASET_DIR:task_id; pass a KernelBench .py file or e.g. "
                       "data/releases/opsynth-ops-h200-v1:c0527850f4788258")
