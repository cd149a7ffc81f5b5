"""The stage declaration: its order is consistent, its verdict shards are the ones on disk, and every reader
(run, audit, the card, completeness, the store) follows it or fails at once."""

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.rundir import stage_defs
from pipeline.rundir.stage_defs import STAGES, VERDICT_SHARDS

ROOT = Path(__file__).resolve().parents[2]


def test_verdict_shards_are_the_numbers_committed_runs_hold():
    # on disk in data/releases/*/run and benchmarks/results/gpu_runs/*: never renumber
    assert VERDICT_SHARDS == {"import": 0, "filter": 1, "decontaminate": 2, "dedupe": 3, "labels": 4}
    runs = [*ROOT.glob("data/releases/*/run"), *ROOT.glob("benchmarks/results/gpu_runs/*")]
    seen = 0
    for run in runs:
        for part in (run / "verdicts").glob("part-*.parquet"):
            shard = int(part.stem.split("-")[1])
            stages = set(pq.read_table(part, columns=["stage"]).column("stage").to_pylist())
            assert stages == {next(s for s, k in VERDICT_SHARDS.items() if k == shard)}, part
            seen += 1
    assert seen, "no committed verdict shard found to check against"


def test_every_stage_reads_only_what_an_earlier_stage_wrote():
    for path in (("import", "labels", "decontaminate", "profile", "filter", "dedupe", "publish", "report"),
                 stage_defs.RUN_STAGES):
        written: set[str] = set()
        for name in path:
            stage = stage_defs.BY_NAME[name]
            missing = set(stage.reads) - written
            assert not missing, f"{name} reads {missing} before any stage writes it"
            written |= set(stage.writes)


def test_derived_orders():
    assert stage_defs.RUN_STAGES == ("sample", "decontaminate", "profile", "filter", "dedupe", "publish", "report")
    assert stage_defs.VERDICT_ORDER == ("import", "labels", "decontaminate", "filter", "dedupe")
    assert stage_defs.CODE_STAGES == ("import", "labels", "decontaminate")
    assert stage_defs.AUDIT_STAGES == ("labels", "decontaminate", "profile", "filter", "dedupe")
    assert stage_defs.WRITER["tasks"] == "sample" and stage_defs.WRITER["measurements"] == "profile"
    assert len({s.name for s in STAGES}) == len(STAGES)
    shards = [s.verdict_shard for s in STAGES if s.verdict_shard is not None]
    assert len(set(shards)) == len(shards)
    # a code-only stage decides before profiling: none may follow a stage that needs measurements
    order = stage_defs.VERDICT_ORDER
    assert max(order.index(s) for s in stage_defs.CODE_STAGES) < min(
        order.index(s) for s in order if s not in stage_defs.CODE_STAGES)


def test_run_refuses_steps_that_do_not_match_the_declaration():
    from pipeline.cli import _run_steps

    calls: list[str] = []
    steps = {name: (lambda n=name: calls.append(n) or n) for name in stage_defs.RUN_STAGES}
    assert list(_run_steps(steps, stage_defs.RUN_STAGES)) == list(stage_defs.RUN_STAGES)
    assert calls == list(stage_defs.RUN_STAGES)
    del steps["dedupe"]
    with pytest.raises(AssertionError, match="do not match the declared stages"):
        _run_steps(steps, stage_defs.RUN_STAGES)


def test_card_numbers_steps_in_the_declared_order_and_misses_none():
    from pipeline.outputs.card import _numbered

    built = {s: [f"**{s}**"] for s in stage_defs.PIPELINE_STAGES}
    lines = _numbered(built, stage_defs.PIPELINE_STAGES)
    assert lines == [f"{i}. **{s}**" for i, s in enumerate(stage_defs.PIPELINE_STAGES, 1)]
    assert lines[1] == "2. **decontaminate**"  # `opsynth run` decontaminates second
    del built["profile"]
    with pytest.raises(KeyError, match="profile"):
        _numbered(built, stage_defs.PIPELINE_STAGES)
