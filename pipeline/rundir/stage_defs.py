"""The one declaration of the stages: name, order, the run-directory tables each reads and writes, its shard of
DIR/verdicts/. `opsynth run` and `opsynth audit` run them in this order; the store, the verdict order, the
report's funnel, the card and publish's completeness check all read it from here. Plain data, stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    name: str
    reads: tuple[str, ...]  # run-directory tables it needs
    writes: tuple[str, ...]  # tables (or files) it writes; "verdicts": its own shard of DIR/verdicts/
    # its shard of DIR/verdicts/: on disk in committed run directories, so a number is never reused or changed
    verdict_shard: int | None = None
    code_only: bool = False  # decides from the code alone, before any task is profiled
    in_run: bool = False  # a step of `opsynth run`
    in_audit: bool = False  # a stage `opsynth audit --stages` may choose


# in the order they run: decontamination needs only the code, so it comes before the GPU
STAGES = (
    Stage("import", reads=(), writes=("tasks", "verdicts"), verdict_shard=0, code_only=True),
    Stage("sample", reads=(), writes=("tasks", "prescreen"), in_run=True),
    Stage("labels", reads=("tasks",), writes=("labels", "verdicts"), verdict_shard=4, code_only=True, in_audit=True),
    Stage("decontaminate", reads=("tasks",), writes=("contamination", "verdicts"), verdict_shard=2, code_only=True,
          in_run=True, in_audit=True),
    Stage("profile", reads=("tasks", "verdicts"), writes=("measurements",), in_run=True, in_audit=True),
    Stage("filter", reads=("tasks", "measurements"), writes=("verdicts",), verdict_shard=1, in_run=True,
          in_audit=True),
    Stage("dedupe", reads=("tasks", "measurements", "verdicts"), writes=("dedupe", "verdicts"), verdict_shard=3,
          in_run=True, in_audit=True),
    Stage("publish", reads=("tasks", "measurements", "verdicts", "contamination", "dedupe"), writes=("dataset",),
          in_run=True),
    Stage("report", reads=("tasks", "measurements", "verdicts", "contamination", "dedupe"),
          writes=(), in_run=True),  # its database lives outside the run directory (pipeline/outputs/report.py)
)
BY_NAME = {s.name: s for s in STAGES}

RUN_STAGES = tuple(s.name for s in STAGES if s.in_run)
AUDIT_STAGES = tuple(s.name for s in STAGES if s.in_audit)
# the stages whose work a run directory holds (publish and report rebuild theirs from it)
PIPELINE_STAGES = RUN_STAGES[: RUN_STAGES.index("publish")]
# the stages that leave verdicts, in the order they decide: the first that drops a task is its reason
VERDICT_ORDER = tuple(s.name for s in STAGES if s.verdict_shard is not None)
VERDICT_SHARDS = {s.name: s.verdict_shard for s in STAGES if s.verdict_shard is not None}
CODE_STAGES = tuple(s.name for s in STAGES if s.verdict_shard is not None and s.code_only)
# the command that writes each table, named in the fix for a shard that cannot be read
WRITER: dict[str, str] = {}
for _s in sorted(STAGES, key=lambda s: not s.in_run):  # `opsynth run`'s writer first (tasks: sample, not import)
    for _t in _s.writes:
        if _t != "verdicts":
            WRITER.setdefault(_t, _s.name)
