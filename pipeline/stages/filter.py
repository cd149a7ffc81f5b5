"""Stage 4, filter: cheap, re-runnable keep/drop decisions from the measurements and the config's thresholds."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from filters.base import decide, reason_kind
from filters.checks import CHECKS
from pipeline.rundir.config import Config
from pipeline.rundir.store import RunDir


def decide_measurement(m: dict[str, Any], cfg: Config) -> tuple[bool, str]:
    return decide(m, CHECKS, cfg.filter)


def run(rd: RunDir, cfg: Config) -> dict[str, Any]:
    t0 = time.time()
    rd.require_table("measurements", "profile", ["task_id"])  # presence only: the rows are read below
    ops = {r["task_id"]: r["ops"] for r in rd.read_rows("tasks", ["task_id", "ops"])}
    foreign = "audit_source" in rd.manifest()  # an audited dataset's labels are judged by kind (filters/labels.py)
    rows = []
    for m in rd.measurement_rows():  # shortcut measurements of a shortcuts-only call over the stored ones
        keep, reason = decide_measurement({**m, "ops": ops.get(m["task_id"]), "foreign_labels": foreign}, cfg)
        rows.append({"task_id": m["task_id"], "keep": keep, "reason": reason})
    rd.write_verdicts("filter", rows)
    kept = sum(r["keep"] for r in rows)
    reasons = Counter(reason_kind(r["reason"]) for r in rows if not r["keep"])
    rd.record_stage("filter", time.time() - t0, considered=len(rows), kept=kept, rejected=dict(reasons))
    return {"considered": len(rows), "kept": kept, "rejected": dict(reasons)}
