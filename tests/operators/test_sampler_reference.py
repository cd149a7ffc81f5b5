"""The sampler resamples a draw whose ATen op signature equals a reference problem's, with decontaminate's own key."""

from dataclasses import replace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from detectors.contamination import FINGERPRINT_VERSION, normalize_ops, op_signature
from detectors.reference_index import reference_op_signatures
from operators.sample import Stats, sample_tasks
from pipeline.errors import OpsynthError
from pipeline.rundir.config import load_preset
from pipeline.rundir.reference import INDEX_SCHEMA
from pipeline.rundir.store import RunDir
from pipeline.stages import decontaminate
from pipeline.stages import sample as sample_stage

DEMO = load_preset("demo")
OFF = replace(DEMO.sample, avoid_reference=())
N = 60


@pytest.fixture(scope="module")
def unguarded():
    return sample_tasks(OFF, 11, range(N), set())


def _index(path, op_lists: list[list[str]]):
    rows = [{"source": "test@0", "key": f"level1/{i}_P", "level": 1, "problem_id": i, "name": f"{i}_P", "ast": [],
             "minhash": [0] * 128, "ops": list(normalize_ops(ops)), "op_status": "traced", "text_sig": [],
             "code_sha256": "", "fingerprint_version": FINGERPRINT_VERSION} for i, ops in enumerate(op_lists)]
    pq.write_table(pa.Table.from_pylist(rows, schema=INDEX_SCHEMA), path)
    return str(path)


def test_the_builtin_reference_is_on_by_default_and_no_emitted_task_matches_it(unguarded):
    assert DEMO.sample.avoid_reference == ("builtin",) and load_preset("h200").sample.avoid_reference == ("builtin",)
    refs = reference_op_signatures(("builtin",))
    matched = [i for i, r in enumerate(unguarded) if op_signature(r["aten_ops"]) in refs]
    assert matched, "the unguarded sampler drew no reference copy in this seed: pick another"
    stats = Stats()
    guarded = sample_tasks(DEMO.sample, 11, range(N), set(), stats)
    assert not [r for r in guarded if op_signature(r["aten_ops"]) in refs]
    assert stats.rejected["reference op signature"] >= len(matched)
    # the check only adds retries: an index whose unguarded task did not match keeps that task (the first
    # index whose task was redrawn may take a task_id a later index had, so compare up to it)
    for i in range(matched[0]):
        assert guarded[i]["task_id"] == unguarded[i]["task_id"]
    assert all(guarded[i]["task_id"] != unguarded[i]["task_id"] for i in matched)


def test_a_custom_index_redraws_exactly_the_tasks_it_holds(unguarded, tmp_path):
    pick = [3, 7]
    path = _index(tmp_path / "ref.index.parquet", [unguarded[i]["aten_ops"] for i in pick])
    stats = Stats()
    rows = sample_tasks(replace(OFF, avoid_reference=(path,)), 11, range(pick[-1] + 1), set(), stats)
    banned = {op_signature(unguarded[i]["aten_ops"]) for i in pick}
    assert not [r for r in rows if op_signature(r["aten_ops"]) in banned]
    assert stats.rejected["reference op signature"] >= len(pick)
    assert [r["task_id"] for r in rows[:pick[0]]] == [r["task_id"] for r in unguarded[:pick[0]]]


def test_a_missing_or_wrong_index_is_one_readable_line(tmp_path):
    for spec, says in ((str(tmp_path / "nope.parquet"), "does not exist"), ("builtin:nope", "no shipped reference"),
                       (_bad := str(tmp_path / "plain.parquet"), "not a reference index")):
        if spec == _bad:
            pq.write_table(pa.table({"code": ["x"]}), spec)
        with pytest.raises(OpsynthError, match=says) as e:
            sample_tasks(replace(OFF, avoid_reference=(spec,)), 1, range(1), set())
        assert "\n" not in str(e.value) and "avoid_reference" in str(e.value)


def test_decontaminate_finds_no_op_signature_copy_among_sampled_tasks(tmp_path):
    cfg = replace(DEMO, run=replace(DEMO.run, n=24, shard_size=8, seed=5))
    rd = RunDir(tmp_path / "run")
    rd.init(cfg)
    sample_stage.run(rd, cfg, processes=1)
    counts = decontaminate.run(rd, cfg)
    assert counts["tasks"] == 24 and counts["by_detector"]["op_signature"] == 0
    rows = rd.read_rows("contamination", ["kb_op_signature_match"])
    assert len(rows) == 24 and not any(r["kb_op_signature_match"] for r in rows)
