"""What a run has done, stage by stage: done, not run, partial (k of n tasks) or stale (older than its inputs).

Publish reads it to refuse an unfinished run (or, when told to publish it anyway, to say in the card exactly
what was and was not done), and every stage command reads it through `order_refusal` to refuse to run before
the stages whose tables it reads (pipeline/rundir/stage_defs.py) have.
"""

from __future__ import annotations

import math

from pipeline.rundir.stage_defs import BY_NAME, PIPELINE_STAGES, VERDICT_SHARDS
from pipeline.rundir.store import RunDir

DONE = "done"
NOT_RUN = "not run"


def _marker_time(rd: RunDir, table: str, shards: list[int]) -> float:
    return max((rd.marker_path(table, s).stat().st_mtime for s in shards if rd.is_done(table, s)), default=0.0)


def _verdict_time(rd: RunDir, stage: str) -> float:
    return _marker_time(rd, "verdicts", [VERDICT_SHARDS[stage]])


def _coverage(have: set[str], need: list[str]) -> str:
    if not have:
        return NOT_RUN
    missing = sum(t not in have for t in need)
    return DONE if not missing else f"partial ({len(need) - missing} of {len(need)} tasks)"


def stage_status(rd: RunDir, cfg) -> dict[str, str]:
    """stage -> "done", "not run", "partial (k of n tasks)" or "stale (...)", for every stage of `opsynth run`
    whose work the run directory holds, in their order."""
    from pipeline.rundir.selection import accepted_task_ids, verdicts_by_task

    ids = [r["task_id"] for r in rd.read_rows("tasks", ["task_id"])]
    verdicts = verdicts_by_task(rd)
    by_stage: dict[str, set[str]] = {}
    for task_id, stages in verdicts.items():
        for s in stages:
            by_stage.setdefault(s, set()).add(task_id)
    out: dict[str, str] = {}

    if "import" in by_stage:
        out["sample"] = DONE  # an imported dataset: its tasks are what there is
    else:
        n_shards = math.ceil(cfg.run.n / cfg.run.shard_size)
        done = [k for k in range(n_shards) if rd.is_done("tasks", k)]
        out["sample"] = DONE if len(done) == n_shards else (
            NOT_RUN if not ids else f"partial ({len(ids)} of {cfg.run.n} tasks)")
    out["decontaminate"] = _coverage(by_stage.get("decontaminate", set()), ids)
    measured = [r["task_id"] for r in rd.read_rows("measurements", ["task_id"])]
    out["profile"] = _coverage(set(measured), ids)

    filtered = by_stage.get("filter", set())
    out["filter"] = _coverage(filtered, measured) if measured or not filtered else DONE
    if out["filter"] == DONE and filtered and \
            _verdict_time(rd, "filter") < _marker_time(rd, "measurements", rd.done_shards("measurements")):
        out["filter"] = "stale (measurements changed after it ran)"

    deduped = by_stage.get("dedupe", set())
    if not rd.is_done("verdicts", VERDICT_SHARDS["dedupe"]):
        out["dedupe"] = NOT_RUN
    else:
        before = set(accepted_task_ids(rd, up_to="dedupe"))
        newest_input = max(_verdict_time(rd, s) for s in ("filter", "decontaminate"))
        out["dedupe"] = DONE if deduped == before and _verdict_time(rd, "dedupe") >= newest_input else \
            "stale (earlier verdicts changed after it ran)"
    return {s: out[s] for s in PIPELINE_STAGES}  # a declared stage without a rule here fails at once


def unfinished(status: dict[str, str]) -> list[str]:
    """`stage: status` for every stage not done."""
    return [f"{s} {v}" for s, v in status.items() if v != DONE]


def prerequisites(stage: str) -> tuple[str, ...]:
    """The stages of `opsynth run` before `stage` that write a table it reads (for verdicts/: each deciding stage
    before it), in their order: what must have run first."""
    if stage not in PIPELINE_STAGES:
        return ()
    reads = set(BY_NAME[stage].reads)
    return tuple(s for s in PIPELINE_STAGES[: PIPELINE_STAGES.index(stage)] if reads & set(BY_NAME[s].writes))


def order_refusal(rd: RunDir, cfg, stage: str) -> str | None:
    """One line naming the stage to run before `stage`, or None when what `stage` reads is there and current.

    A prerequisite that has not run, or is stale, refuses. A partial one refuses only when it decides (writes
    verdicts): such a stage judges every task in one go, so "k of n" means tasks came after it ran; a partial
    sample or profile is work in progress (a time-boxed profile call), and the stages after it take what is done.
    In an imported (audited) run a stage not run is one `opsynth audit --stages` did not choose, so only a
    partial or stale one refuses there."""
    before = prerequisites(stage)
    if not before:
        return None
    status = stage_status(rd, cfg)
    imported = rd.is_done("verdicts", VERDICT_SHARDS["import"])
    for p in before:
        state = status[p]
        if state == DONE or (state == NOT_RUN and imported) or \
                (state.startswith("partial") and BY_NAME[p].verdict_shard is None):
            continue
        if state.startswith("partial"):
            state = f"{state}: tasks came after it ran"
        return f"{p} is {state}; run `opsynth {p} {rd.path}` before `opsynth {stage} {rd.path}`"
    return None
