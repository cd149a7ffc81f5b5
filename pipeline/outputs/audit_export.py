"""The per-row verdict table of an audit: one row per imported row, every stage's finding side by side.

`opsynth report DIR --verdicts FILE` writes it as parquet (no code, no labels text beyond operator names: derived
findings only), so an auditor can query a dataset's audit without the run directory. Columns that come from the
GPU (profile, filter) are null for rows that were not measured.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.rundir.store import RunDir


def _level(key: str | None) -> int | None:
    """KernelBench level of a reference key (`level2/17_Conv2d_...`), or None."""
    if key and key.startswith("level") and "/" in key:
        head = key.split("/", 1)[0][len("level"):]
        return int(head) if head.isdigit() else None
    return None


def verdict_rows(rd: RunDir) -> list[dict[str, Any]]:
    """One dict per task, in the imported file's order."""
    from pipeline.rundir.selection import accepted_task_ids, first_rejection, stages_run

    tasks = rd.read_rows("tasks", ["task_id", "source_row", "data_source", "ops"])
    by = {name: {r["task_id"]: r for r in rd.read_rows(name)} for name in ("labels", "contamination", "dedupe")}
    meas = {r["task_id"]: r for r in rd.read_rows("measurements", ["task_id", "status", "error", "eager_ms",
                                                                   "compile_ms", "device", "gpu"])}
    verdicts: dict[str, dict[str, str]] = {}
    for v in rd.read_rows("verdicts"):
        if not v["keep"]:
            verdicts.setdefault(v["task_id"], {})[v["stage"]] = v["reason"]
    first = first_rejection(rd)
    accepted = set(accepted_task_ids(rd))
    gpu_done = "filter" in stages_run(rd)
    row_of = {t["task_id"]: t["source_row"] for t in tasks}
    out = []
    for position, t in enumerate(tasks):
        tid = t["task_id"]
        lab, con, dd, m = (by["labels"].get(tid, {}), by["contamination"].get(tid, {}), by["dedupe"].get(tid, {}),
                           meas.get(tid))
        base = tid.rsplit("-", 1)[0] if "-" in tid else None
        measured = m is not None and m["status"] != "skipped"
        stage, reason = first.get(tid, ("", ""))
        out.append({
            # position in the run's (seeded) task order, which a time-boxed profile follows: the measured sample
            "source_row": t["source_row"], "run_order": position, "task_id": tid, "data_source": t["data_source"], "ops": t["ops"],
            "import_reason": verdicts.get(tid, {}).get("import", ""),
            "byte_duplicate_of": row_of.get(base) if base else None,
            "label_finding": lab.get("finding"), "trace_device": lab.get("trace_device"),
            "wrong_labels": lab.get("wrong_labels"), "missing_labels": lab.get("missing_labels"),
            "unknown_labels": lab.get("unknown_labels"), "unjudged_ops": lab.get("unjudged_ops"),
            "contaminated": con.get("contaminated"), "detectors_fired": con.get("detectors_fired"),
            "kb_nearest": con.get("kb_nearest"), "kb_ast_similarity": con.get("kb_ast_similarity"),
            "kb_op_signature_match": con.get("kb_op_signature_match"),
            "kb_op_signature_nearest": con.get("kb_op_signature_nearest") if con.get("kb_op_signature_match") else None,
            "kb_op_signature_level": _level(con.get("kb_op_signature_nearest")) if con.get("kb_op_signature_match") else None,
            "exact_cluster": dd.get("exact_cluster"), "near_cluster": dd.get("near_cluster"),
            "dedupe_reason": verdicts.get(tid, {}).get("dedupe", ""),
            # status `skipped`: a row of the measured sample (a seeded prefix) that an earlier stage had dropped
            "profiled": measured, "status": m["status"] if m is not None else None,
            "gpu": m["gpu"] if measured else None, "eager_ms": m["eager_ms"] if measured else None,
            "compile_ms": m["compile_ms"] if measured else None,
            "filter_reason": verdicts.get(tid, {}).get("filter", "") if measured else None,
            "rejected_by": stage, "rejection_reason": reason,
            # kept by every stage that ran; with the GPU stages run, only measured rows can be kept
            "kept": tid in accepted and (measured or not gpu_done),
        })
    return sorted(out, key=lambda r: r["source_row"] if r["source_row"] is not None else -1)


def write(rd: RunDir, path: str | Path) -> Path:
    """Write the verdict table of `rd` to `path` (parquet); returns the path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(verdict_rows(rd)), p, compression="zstd")
    return p
