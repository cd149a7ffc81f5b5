"""Which tasks survive: the one place that combines every stage's verdicts into the accepted set."""

from __future__ import annotations

from pipeline.rundir.stage_defs import VERDICT_ORDER
from pipeline.rundir.store import RunDir


def verdicts_by_task(rd: RunDir) -> dict[str, dict[str, tuple[bool, str]]]:
    """task_id -> {stage: (keep, reason)} over every stage that has run."""
    out: dict[str, dict[str, tuple[bool, str]]] = {}
    for v in rd.read_rows("verdicts"):
        out.setdefault(v["task_id"], {})[v["stage"]] = (bool(v["keep"]), v["reason"] or "")
    return out


def stages_run(rd: RunDir) -> list[str]:
    seen = {v["stage"] for v in rd.read_rows("verdicts", ["stage"])}
    return [s for s in VERDICT_ORDER if s in seen]


def accepted_task_ids(rd: RunDir, up_to: str | None = None) -> list[str]:
    """Tasks (in task table order) kept by every stage that ran, or by the stages before `up_to`."""
    stages = stages_run(rd)
    if up_to is not None:
        stages = [s for s in VERDICT_ORDER[: VERDICT_ORDER.index(up_to)] if s in stages]
    verdicts = verdicts_by_task(rd)
    ids = [r["task_id"] for r in rd.read_rows("tasks", ["task_id"])]
    return [t for t in ids if all(verdicts.get(t, {}).get(s, (False, ""))[0] for s in stages)]


def first_rejection(rd: RunDir, stages: tuple[str, ...] = VERDICT_ORDER) -> dict[str, tuple[str, str]]:
    """task_id -> (stage, reason) of the first of `stages` that dropped it."""
    out = {}
    for task_id, by_stage in verdicts_by_task(rd).items():
        for s in stages:
            keep, reason = by_stage.get(s, (True, ""))
            if not keep:
                out[task_id] = (s, reason)
                break
    return out

