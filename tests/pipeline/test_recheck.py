"""The independent re-check: `opsynth audit --sample N` imports N seeded random rows of a published parquet, and
`opsynth recheck` sets the fresh run's verdicts and eager times beside the published ones (file, CLI, card)."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.errors import OpsynthError
from pipeline.outputs.recheck import published_eager, summarize
from pipeline.rundir.config import Config
from pipeline.rundir.schema import MEASUREMENTS, conform
from pipeline.rundir.store import RunDir
from pipeline.stages import audit

CODE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.tanh(x) * {k}.0 + torch.sin(x)

def get_inputs():
    return [torch.rand(64, 256)]

def get_init_inputs():
    return []
'''


def _published(tmp_path, n=8):
    """A folder as publish lays it out, with n rows of known eager times."""
    rows = [{"task_id": f"t{k:02d}", "code": CODE.format(k=k + 2), "eager_ms": 2.0 + k} for k in range(n)]
    (tmp_path / "rel" / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rel" / "data" / "train-00000-of-00001.parquet")
    return tmp_path / "rel", {r["task_id"]: r["eager_ms"] for r in rows}


def _imported(tmp_path, name, sample, seed=None):
    folder, _ = _published(tmp_path) if not (tmp_path / "rel").exists() else (tmp_path / "rel", None)
    rd = RunDir(tmp_path / name)
    rd.init(Config())
    audit.import_dataset(str(folder / "data" / "train-00000-of-00001.parquet"), rd, Config(), seed, sample=sample)
    return rd


def test_sample_imports_n_seeded_random_rows(tmp_path):
    a = [r["task_id"] for r in _imported(tmp_path, "a", 3, seed=5).read_rows("tasks")]
    b = [r["task_id"] for r in _imported(tmp_path, "b", 3, seed=5).read_rows("tasks")]
    c = [r["task_id"] for r in _imported(tmp_path, "c", 8, seed=5).read_rows("tasks")]
    assert a == b and len(set(a)) == 3
    assert c[:3] == a and sorted(c) == [f"t{k:02d}" for k in range(8)]  # the sample is a prefix of the order
    verdicts = _imported(tmp_path, "d", 3, seed=5).read_rows("verdicts")
    assert sorted(v["task_id"] for v in verdicts) == sorted(a)
    with pytest.raises(OpsynthError, match="--sample must be >= 1"):
        _imported(tmp_path, "e", 0)


def _fake_profile(rd: RunDir, eager: dict[str, float], dropped: dict[str, str]) -> None:
    """What profile and filter write, for tasks whose fresh times and verdicts the test chooses."""
    rd.write_shard("measurements", 0, conform(
        [{"task_id": t, "status": "ok", "device": "cuda", "gpu": "NVIDIA H200", "torch_version": "2.11.0",
          "eager_ms": ms} for t, ms in eager.items()], MEASUREMENTS), MEASUREMENTS)
    rd.write_verdicts("filter", [{"task_id": t, "keep": t not in dropped, "reason": dropped.get(t, "")}
                                 for t in eager])


def test_summary_counts_accepted_and_eager_agreement(tmp_path):
    folder, published = _published(tmp_path)
    rd = _imported(tmp_path, "audit", 4, seed=1)
    ids = [r["task_id"] for r in rd.read_rows("tasks")]
    factors = [1.0, 1.01, 0.95, 1.3]
    _fake_profile(rd, {t: published[t] * f for t, f in zip(ids, factors, strict=True)},
                  {ids[3]: "too slow (eager 130 ms > 100 ms)"})
    s = summarize(published_eager(folder), rd)
    assert (s["rows"], s["accepted"], s["compared"]) == (4, 3, 4)
    assert s["accepted_share"] == pytest.approx(0.75)
    assert s["dropped"] == {"filter: too slow": 1}
    assert s["eager_ratio_median"] == pytest.approx((1.0 + 1.01) / 2)
    assert s["eager_deviation_p90"] == pytest.approx(0.3)
    assert s["gpu"] == "NVIDIA H200" and s["audit_source"]["sample"] == 4


def test_summary_refuses_rows_that_were_not_published(tmp_path):
    folder, published = _published(tmp_path)
    rd = _imported(tmp_path, "audit", 2, seed=1)
    ids = [r["task_id"] for r in rd.read_rows("tasks")]
    _fake_profile(rd, {t: 1.0 for t in ids}, {})
    with pytest.raises(OpsynthError, match="not in the published rows"):
        summarize({ids[0]: 1.0}, rd)
    with pytest.raises(OpsynthError, match=r"holds no data/\*\.parquet"):
        published_eager(tmp_path / "audit")


def test_cli_writes_recheck_json_and_the_card_shows_it(tmp_path):
    from typer.testing import CliRunner

    from pipeline.cli import app
    from pipeline.outputs.card import _recheck

    folder, published = _published(tmp_path)
    run = RunDir(folder / "run")
    run.init(Config())
    rd = _imported(tmp_path, "audit", 5, seed=2)
    ids = [r["task_id"] for r in rd.read_rows("tasks")]
    _fake_profile(rd, {t: published[t] * 1.02 for t in ids}, {ids[0]: "non-deterministic (two eager runs differ)"})
    res = CliRunner().invoke(app, ["recheck", str(folder / "run"), str(tmp_path / "audit")])
    assert res.exit_code == 0, res.output
    assert "4 accepted (80.0%)" in res.output and "dropped 1: filter: non-deterministic" in res.output
    saved = json.loads((folder / "run" / "recheck.json").read_text())
    assert saved["accepted"] == 4 and saved["eager_deviation_median"] == pytest.approx(0.02)
    card = "\n".join(_recheck({"recheck": saved}))
    assert "still accepted by the filter: 4 of 5 (80.0%)" in card and "median ratio 1.020" in card
    # the sample was drawn from the 8 rows published then; a release grown since says so
    assert saved["audit_source"]["source_rows"] == 8 and "from the 8 published rows" in card
    grown = "\n".join(_recheck({"recheck": saved, "rows": 12}))
    assert "from the 8 rows published then (the release has grown since)" in grown
    older = "\n".join(_recheck({"recheck": {**saved, "audit_source": {"order_seed": 2}}, "rows": 12}))
    assert "as it was published when the re-check ran" in older


def test_audit_on_a_box_without_duckdb_keeps_its_work_and_skips_the_report(tmp_path, monkeypatch):
    import sys

    from typer.testing import CliRunner

    from pipeline.cli import app

    folder, _ = _published(tmp_path)
    monkeypatch.setitem(sys.modules, "duckdb", None)  # `import duckdb` fails as on a torch-only GPU box
    out = tmp_path / "audit"
    res = CliRunner().invoke(app, ["audit", str(folder), "--sample", "3",  # the published folder: its data/ shards
                                   "--out", str(out), "--stages", "dedupe"])
    assert res.exit_code == 0, res.output
    assert "report skipped: duckdb is not installed" in res.output
    assert len(RunDir(out).read_rows("tasks")) == 3 and RunDir(out).read_rows("dedupe")
