"""Stage 3, profile: measure every task in isolated workers and stream the results to shards.

Measurement shard k covers the tasks at positions [k*S, (k+1)*S) of the tasks table. Results arrive
in completion order from the executor; a shard is written (atomically, then its marker) as soon as all
of its tasks have come back, so a killed run loses at most the shards in flight and a rerun measures
exactly those again.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from filters.base import reason_kind
from filters.static_check import check_task_source
from pipeline.config import Config, worker_settings
from pipeline.progress import Progress
from pipeline.schema import MEASUREMENTS, conform
from pipeline.store import RunDir, chunks


def _static_rejection(task: dict[str, Any], reason: str, device: str) -> dict[str, Any]:
    return {"task_id": task["task_id"], "status": "rejected_static", "error": reason, "device": device}


def run(rd: RunDir, cfg: Config, executor: str = "local", gpus: list[int] | None = None,
        ray_address: str | None = None, skip_dropped: bool = False) -> dict[str, Any]:
    """Measure the tasks of `rd`. skip_dropped: tasks an earlier stage already dropped (decontaminate, when
    `opsynth run` puts it first) get a `skipped` row instead of GPU time."""
    from pipeline.executors import make_executor
    from pipeline.selection import CODE_STAGES, first_rejection
    from pipeline.stages.filter import decide_measurement

    t0 = time.time()
    tasks = rd.require_table("tasks", "sample").select(["task_id", "code", "ops", "flops", "bytes_moved", "predicted_peak_bytes"]).to_pylist()
    size = cfg.run.shard_size
    pending: dict[int, list[dict[str, Any]]] = {
        k: rows for k, rows in chunks(tasks, size) if not rd.is_done("measurements", k)
    }
    results: dict[int, dict[str, dict[str, Any]]] = {k: {} for k in pending}
    shard_of = {t["task_id"]: k for k, rows in pending.items() for t in rows}
    ops_of = {t["task_id"]: t["ops"] for t in tasks}
    # only the stages before profile decide what it skips: a filter verdict is drawn from measurements, so a lost
    # shard's tasks must be measured again, not skipped because of the verdict their old measurements earned
    dropped = first_rejection(rd, CODE_STAGES) if skip_dropped else {}
    to_run = []
    for rows in pending.values():
        for t in rows:
            reason = check_task_source(t["code"])
            if t["task_id"] in dropped:
                stage, why = dropped[t["task_id"]]
                results[shard_of[t["task_id"]]][t["task_id"]] = {
                    "task_id": t["task_id"], "status": "skipped", "device": cfg.run.device,
                    "error": f"not profiled: dropped by {stage} ({why})"[:300]}
            elif reason:
                results[shard_of[t["task_id"]]][t["task_id"]] = _static_rejection(t, reason, cfg.run.device)
            else:
                to_run.append(t)

    accepted, reasons = 0, Counter()
    bar = Progress("profile", total=len(tasks), initial=len(tasks) - len(shard_of))

    def note(m: dict[str, Any]) -> None:
        nonlocal accepted
        keep, why = decide_measurement({**m, "ops": ops_of.get(m["task_id"])}, cfg)
        accepted += keep
        if not keep:
            reasons[reason_kind(why)] += 1
        top = ", ".join(f"{r} {c}" for r, c in reasons.most_common(2))
        bar.note(f"accepted {accepted}" + (f" | {top}" if top else ""))
        bar.update(1)

    def flush_ready() -> None:
        for k in [k for k, rows in pending.items() if len(results[k]) == len(rows)]:
            ordered = [results[k][t["task_id"]] for t in pending.pop(k)]
            rd.write_shard("measurements", k, conform(ordered, MEASUREMENTS), MEASUREMENTS)

    with bar:
        for k in list(results):
            for m in results[k].values():
                note(m)
        flush_ready()
        if to_run:
            bar.restart_clock()
            bar.phase("starting workers")
            with make_executor(executor, cfg.run.device, cfg.run.workers, gpus, ray_address,
                               worker_settings(cfg)) as ex:
                for m in ex.imap_unordered(to_run):
                    bar.phase("")
                    results[shard_of[m["task_id"]]][m["task_id"]] = m
                    note(m)
                    flush_ready()
    statuses = Counter(r["status"] for r in rd.read_rows("measurements", ["status"]))
    profiled = sum(statuses.values()) - statuses.get("skipped", 0)
    rd.record_stage("profile", time.time() - t0, profiled=profiled, skipped=statuses.get("skipped", 0),
                    device=cfg.run.device, executor=executor, workers=cfg.run.workers)
    return {"profiled": profiled, "skipped": statuses.get("skipped", 0), "measured_now": len(to_run)}
