"""labels: trace an audited dataset's rows on the CPU side and judge their `ops` labels, each finding kind apart.

Every row that passed the import check runs its forward once under the ATen recorder in a tracer subprocess:
on the meta device first (no memory, sizes do not matter), on the CPU with real tensors only where meta cannot
run the code (data-dependent ops: nonzero, masked_select, .item()), each tracer under an address-space cap and
a per-row timeout. A row that brings its own `aten_ops` (an opsynth release) is judged on them instead, against
the pins of the device they were recorded on (pipeline.stages.audit.aten_ops_device). The trace fills the tasks
table's `aten_ops` (so decontaminate does not trace again) and the labels/ table holds the findings (operators.labels.label_findings). A row is dropped here only when the config
asks for label checking (`filter.require_label_match`, `opsynth audit --check-labels`) and its finding is a
wrong or a missing label; an operator opsynth does not know is reported, never a rejection.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pipeline.rundir.config import Config
from pipeline.rundir.schema import LABELS, TASKS
from pipeline.rundir.store import RunDir

TRACE_DEVICES = ["meta", "cpu"]
MEM_LIMIT_BYTES = 6 << 30  # per tracer; two tracers and the parent stay well inside a 24 GiB machine
TRACE_TIMEOUT_S = 60.0  # per row, meta and cpu together: a real-tensor forward on two cores can be slow
ERRORS = ("wrong label", "missing label")


def trace_rows(codes: list[str], workers: int, timeout_s: float, mem_limit_bytes: int) -> list[dict[str, Any]]:
    """trace_isolated over `workers` tracers (interleaved chunks, results in input order)."""
    from operators.trace import trace_isolated

    if not codes:
        return []
    workers = max(1, min(workers, len(codes)))
    parts = [list(range(w, len(codes), workers)) for w in range(workers)]

    def one(idx: list[int]) -> list[dict[str, Any]]:
        return trace_isolated([codes[i] for i in idx], timeout_s, devices=TRACE_DEVICES, mem_limit_bytes=mem_limit_bytes)

    out: list[dict[str, Any]] = [{}] * len(codes)
    with ThreadPoolExecutor(workers) as ex:
        for idx, res in zip(parts, ex.map(one, parts), strict=True):
            for i, r in zip(idx, res, strict=False):
                out[i] = r
    return out


def _row(task_id: str, ops: list[str] | None, trace: dict[str, Any] | None, why_not: str) -> dict[str, Any]:
    from operators.labels import label_findings

    if trace is None or not trace.get("ok"):
        err = why_not or (trace or {}).get("error", "")
        return {"task_id": task_id, "trace_device": "", "trace_error": err, "finding": "not traced"}
    if not ops:
        return {"task_id": task_id, "trace_device": trace["device"], "trace_error": "", "finding": "no labels"}
    f = label_findings(ops, trace["ops"], trace["device"])
    return {"task_id": task_id, "trace_device": trace["device"], "trace_error": "", "finding": f.kind,
            "wrong_labels": list(f.wrong), "missing_labels": list(f.missing), "unknown_labels": list(f.unknown),
            "unjudged_ops": list(f.unjudged)}


def reason(row: dict[str, Any]) -> str:
    """The rejection reason of a row whose labels are wrong (used only when label checking is asked for)."""
    parts = []
    if row.get("wrong_labels"):
        parts.append(f"labelled but never ran: {', '.join(row['wrong_labels'])}")
    if row.get("missing_labels"):
        parts.append(f"ran without a label: {', '.join(row['missing_labels'])}")
    return f"{row['finding']} ({'; '.join(parts)})"


def run(rd: RunDir, cfg: Config, mem_limit_bytes: int = MEM_LIMIT_BYTES, retrace: bool = False) -> dict[str, Any]:
    """Trace and judge every imported row of `rd`; returns counts per finding and trace device. A rerun judges the
    traces it has again (new pins) and traces only rows it never tried, unless `retrace`."""
    t0 = time.time()
    tasks = rd.require_table("tasks", "audit FILE --out").to_pylist()
    refused = {v["task_id"]: v["reason"] for v in rd.read_rows("verdicts")
               if v["stage"] == "import" and not v["keep"]}
    before = {r["task_id"]: r for r in rd.read_rows("labels", ["task_id", "trace_device", "trace_error"])}
    todo = [i for i, t in enumerate(tasks) if t["task_id"] not in refused and not t.get("aten_ops")
            and (retrace or t["task_id"] not in before)]
    # the dataset's own aten_ops are judged on the device they were recorded on (audit.aten_ops_device)
    given = (rd.manifest().get("audit_source") or {}).get("aten_ops_device") or "meta"
    traces: dict[int, dict[str, Any]] = {
        i: {"ok": True, "ops": t["aten_ops"], "device": before.get(t["task_id"], {}).get("trace_device") or given}
        if t.get("aten_ops") else {"ok": False, "error": before[t["task_id"]]["trace_error"]}
        for i, t in enumerate(tasks) if t.get("aten_ops") or t["task_id"] in before}
    got = trace_rows([tasks[i]["code"] for i in todo], cfg.run.workers, min(TRACE_TIMEOUT_S, cfg.profile.timeout_s),
                     mem_limit_bytes)
    traces.update(zip(todo, got, strict=True))
    rows = []
    for i, t in enumerate(tasks):
        why = f"refused by the import check: {refused[t['task_id']]}" if t["task_id"] in refused else ""
        rows.append(_row(t["task_id"], t.get("ops"), traces.get(i), why))
        if traces.get(i, {}).get("ok"):
            t["aten_ops"] = traces[i]["ops"]
    rd.replace_table("tasks", tasks, TASKS)
    rd.replace_table("labels", rows, LABELS)
    reject = cfg.filter.require_label_match
    rd.write_verdicts("labels", [{"task_id": r["task_id"], "keep": not (reject and r["finding"] in ERRORS),
                                  "reason": reason(r) if reject and r["finding"] in ERRORS else ""} for r in rows])
    counts = {"rows": len(rows), "traced": len(todo), "findings": dict(Counter(r["finding"] for r in rows)),
              "trace_device": dict(Counter(r["trace_device"] or "none" for r in rows)), "rejects": reject,
              "mem_limit_gib": mem_limit_bytes / (1 << 30)}
    rd.record_stage("labels", time.time() - t0, **counts)
    return counts
