"""Stage 4, filter: cheap, re-runnable keep/drop decisions from the measurements and the config's thresholds."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from filters.base import decide, reason_kind
from filters.degenerate import OUTPUT_CHECKS
from filters.determinism import compiles_and_agrees, deterministic
from filters.labels import labels_match
from filters.runtime import eager_in_window, peak_memory_under_cap, ran_ok
from pipeline.config import Config
from pipeline.store import RunDir

# what the eager runs alone decide; a profile worker applies them too, to skip compiling a task they reject
EAGER_CHECKS = (deterministic, *OUTPUT_CHECKS)
# order matters: the first failing check is the reason recorded, so the eager checks come before the compile's
CHECKS = (ran_ok, eager_in_window, *EAGER_CHECKS, peak_memory_under_cap, compiles_and_agrees, labels_match)


def decide_measurement(m: dict[str, Any], cfg: Config) -> tuple[bool, str]:
    return decide(m, CHECKS, cfg.filter)


def run(rd: RunDir, cfg: Config) -> dict[str, Any]:
    t0 = time.time()
    rd.require_table("measurements", "profile")
    ops = {r["task_id"]: r["ops"] for r in rd.read_rows("tasks", ["task_id", "ops"])}
    foreign = "audit_source" in rd.manifest()  # an audited dataset's labels are judged by kind (filters/labels.py)
    rows = []
    for m in rd.read_rows("measurements"):
        keep, reason = decide_measurement({**m, "ops": ops.get(m["task_id"]), "foreign_labels": foreign}, cfg)
        rows.append({"task_id": m["task_id"], "keep": keep, "reason": reason})
    rd.write_verdicts("filter", rows)
    kept = sum(r["keep"] for r in rows)
    reasons = Counter(reason_kind(r["reason"]) for r in rows if not r["keep"])
    rd.record_stage("filter", time.time() - t0, considered=len(rows), kept=kept, rejected=dict(reasons))
    return {"considered": len(rows), "kept": kept, "rejected": dict(reasons)}
