"""Audit mode: importing a foreign dataset, then decontaminate and dedupe on it (functions, then the CLI)."""

import dataclasses
import json
import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.errors import OpsynthError
from pipeline.rundir.config import Config
from pipeline.rundir.reference import build_index, load_index
from pipeline.rundir.store import RunDir
from pipeline.stages import audit, decontaminate, dedupe

SHARED = Path(os.environ.get("OPSYNTH_SHARED") or Path(__file__).resolve().parents[3] / "shared")
SNAP = SHARED / "reference" / "kernelbench"
MAIN = SNAP / "kernelbench_main.parquet"
# CI and developers have ../shared beside the checkout (or OPSYNTH_SHARED); a clone without it skips these tests,
# never fakes them, and the summary says why (-rs in the pytest options)
needs_snapshot = pytest.mark.skipif(not MAIN.exists(), reason=f"KernelBench snapshot not found at {SNAP}; put the "
                                    "shared data beside the checkout as ../shared or set OPSYNTH_SHARED")

GOOD = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        z = torch.cumsum(x, dim=1)
        w = torch.logsumexp(y, dim=1, keepdim=True)
        return torch.where(z > w, z.sin(), w.cos()) * 3.0

def get_inputs():
    return [torch.rand(4, 8), torch.rand(4, 8)]

def get_init_inputs():
    return []
'''


def _kb(names: list[str]) -> list[dict]:
    rows = pq.read_table(MAIN).to_pylist()
    return [r for r in rows if f"level{r['level']}/{r['name']}" in names]


KB_PICK = ["level1/19_ReLU", "level2/12_Gemm_Multiply_LeakyReLU", "level1/23_Softmax"]


@pytest.fixture(scope="module")
def tiny_reference(tmp_path_factory) -> Path:
    """A 3-problem reference as jsonl, and its index."""
    d = tmp_path_factory.mktemp("ref")
    src = d / "kb3.jsonl"
    src.write_text("\n".join(json.dumps({k: r[k] for k in ("level", "problem_id", "name", "code")})
                             for r in _kb(KB_PICK)))
    return build_index([str(src)], d / "kb3.index.parquet")


def _dataset(tmp_path: Path) -> Path:
    kb = _kb(KB_PICK[:2])
    renamed = kb[0]["code"].replace("x", "inp").replace("batch_size", "B").replace("dim", "D")
    rows = [
        {"code": GOOD},
        {"code": GOOD},                                   # byte-identical repeat
        {"code": renamed},                                # disguised KernelBench problem
        {"code": kb[1]["code"]},                          # verbatim KernelBench problem
        {"code": "class Model(:\n  pass"},                # syntax error
        {"code": GOOD.replace("class Model", "class Net")},  # not KernelBench format
        {"code": "import os\n" + GOOD},                   # forbidden import
    ]
    p = tmp_path / "ds.parquet"
    pq.write_table(pa.Table.from_pylist(rows), p)
    return p


@needs_snapshot
def test_import_keeps_every_row_and_rejects_bad_ones_with_reasons(tmp_path):
    rd = RunDir(tmp_path / "run")
    rd.init(Config())
    counts = audit.import_dataset(str(_dataset(tmp_path)), rd, Config())
    tasks = rd.read_rows("tasks")
    assert counts == {"rows": 7, "rejected": 3, "kept": 4, "repeated_ids": 1}
    assert len({t["task_id"] for t in tasks}) == 7
    assert tasks[1]["task_id"] == tasks[0]["task_id"] + "-1"
    assert all(t["ops"] is None and t["graph_hash"] is None for t in tasks)
    reasons = {v["task_id"]: v["reason"] for v in rd.read_rows("verdicts") if not v["keep"]}
    got = sorted(reasons.values())
    assert "syntax error" in got[2] and "missing top-level Model" in got[1] and "forbidden import 'os'" in got[0]


def test_import_folder_of_py_and_ops6k_style_ops(tmp_path):
    d = tmp_path / "py"
    d.mkdir()
    (d / "1_Good.py").write_text(GOOD)
    (d / "2_Bad.py").write_text("x = 1\n")
    rd = RunDir(tmp_path / "run")
    rd.init(Config())
    assert audit.import_dataset(str(d), rd, Config())["rejected"] == 1
    assert [t["name"] for t in rd.read_rows("tasks")] == ["1_Good", "2_Bad"]
    jl = tmp_path / "ops6k.jsonl"
    jl.write_text(json.dumps({"code": GOOD, "ops": '["torch.cumsum", "torch.logsumexp"]', "data_source": "torch#2"}))
    rd2 = RunDir(tmp_path / "run2")
    rd2.init(Config())
    audit.import_dataset(str(jl), rd2, Config())
    t = rd2.read_rows("tasks")[0]
    assert t["ops"] == ["torch.cumsum", "torch.logsumexp"] and t["data_source"] == "torch#2"


def test_import_a_published_folder_reads_every_data_shard_in_order(tmp_path):
    """A published dataset has several data/train-*.parquet shards (and other parquet beside them): the folder
    imports the data shards only, all of them, in name order."""
    pub = tmp_path / "pub"
    (pub / "data").mkdir(parents=True)
    (pub / "contamination").mkdir()
    pq.write_table(pa.table({"code": [GOOD], "task_id": ["b"]}), pub / "data" / "train-00001-of-00002.parquet")
    pq.write_table(pa.table({"code": [GOOD, GOOD], "task_id": ["a0", "a1"]}), pub / "data" / "train-00000-of-00002.parquet")
    pq.write_table(pa.table({"task_id": ["zz"], "kb_nearest": ["x"]}), pub / "contamination" / "contamination.parquet")
    for folder in (pub, pub / "data"):
        rd = RunDir(tmp_path / f"run_{folder.name}")
        rd.init(Config())
        assert audit.import_dataset(str(folder), rd, Config())["kept"] == 3
        assert [t["task_id"] for t in rd.read_rows("tasks")] == ["a0", "a1", "b"]


def test_import_bad_input_is_one_readable_error(tmp_path):
    rd = RunDir(tmp_path / "run")
    rd.init(Config())
    with pytest.raises(OpsynthError, match="does not exist"):
        audit.import_dataset(str(tmp_path / "nope.parquet"), rd, Config())
    p = tmp_path / "nocode.parquet"
    pq.write_table(pa.table({"text": ["x"]}), p)
    with pytest.raises(OpsynthError, match="no `code` column"):
        audit.import_dataset(str(p), rd, Config())
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"not parquet")
    with pytest.raises(OpsynthError, match="cannot read"):
        audit.import_dataset(str(broken), rd, Config())


def test_reference_errors(tmp_path, monkeypatch):
    p = tmp_path / "ref.parquet"
    pq.write_table(pa.table({"source": ["x"]}), p)
    with pytest.raises(OpsynthError, match="no `code` column"):
        load_index(str(p))
    with pytest.raises(OpsynthError, match="does not exist"):
        load_index(str(tmp_path / "missing.jsonl"))
    import datasets

    def offline(*a, **k):
        raise ConnectionError("Couldn't reach the Hub (offline)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(OpsynthError, match="cannot load reference 'nobody/NoSuchSet' from the Hub"):
        load_index("nobody/NoSuchSet")


@needs_snapshot
def test_index_holds_fingerprints_not_source(tiny_reference):
    t = pq.read_table(tiny_reference)
    assert "code" not in t.column_names
    blob = tiny_reference.read_bytes()
    assert b"LeakyReLU" not in blob.replace(b"12_Gemm_Multiply_LeakyReLU", b"")
    rows = t.to_pylist()
    assert [r["key"] for r in rows] == sorted(KB_PICK)
    assert {r["op_status"] for r in rows} == {"traced"}
    assert rows[0]["ops"] and len(rows[0]["minhash"]) == 128
    assert json.loads(t.schema.metadata[b"opsynth.sources"])[0].startswith("kb3@")


@needs_snapshot
def test_decontaminate_then_dedupe_on_an_audited_dataset(tmp_path, tiny_reference):
    rd = RunDir(tmp_path / "run")
    cfg = Config()
    rd.init(cfg)
    audit.import_dataset(str(_dataset(tmp_path)), rd, cfg)
    counts = decontaminate.run(rd, cfg, [str(tiny_reference)])
    rows = rd.read_rows("contamination")
    tasks = rd.read_rows("tasks")
    assert [r["task_id"] for r in rows] == [t["task_id"] for t in tasks]  # one row per task, rejected ones too
    by_id = {r["task_id"]: r for r in rows}
    clean, renamed, verbatim = (by_id[tasks[i]["task_id"]] for i in (0, 2, 3))
    assert not clean["contaminated"] and clean["detectors_fired"] == []
    assert renamed["contaminated"] and renamed["kb_nearest"] == "level1/19_ReLU"
    assert renamed["kb_op_signature_match"] and "ast" in renamed["detectors_fired"]
    assert set(verbatim["detectors_fired"]) == {"ast", "op_signature", "minhash"}
    assert verbatim["kb_nearest"] == "level2/12_Gemm_Multiply_LeakyReLU" and verbatim["kb_minhash_jaccard"] == 1.0
    assert by_id[tasks[4]["task_id"]]["op_signature_source"].startswith("text-only")
    assert counts["contaminated"] == 2
    verdicts = [v for v in rd.read_rows("verdicts") if v["stage"] == "decontaminate"]
    assert sum(not v["keep"] for v in verdicts) == 2
    assert any("contaminated by" in v["reason"] and "level1/19_ReLU" in v["reason"] for v in verdicts)

    d = dedupe.run(rd, cfg)
    dd = {r["task_id"]: r for r in rd.read_rows("dedupe")}
    assert set(dd) == {tasks[0]["task_id"], tasks[1]["task_id"]}  # only what import and decontaminate kept
    assert d["exact_dropped"] == 1 and not dd[tasks[1]["task_id"]]["keep"]


@needs_snapshot
def test_builtin_reference_flags_kernelbench_v0_problems(tmp_path):
    v0 = pq.read_table(SNAP / "kernelbench_v0.parquet").to_pylist()
    pick = [r for r in v0 if r["level"] in (1, 2)][::25]
    p = tmp_path / "v0.jsonl"
    p.write_text("\n".join(json.dumps({"code": r["code"], "task_id": f"v0-{r['level']}-{r['problem_id']}"})
                           for r in pick))
    rd = RunDir(tmp_path / "run")
    cfg = Config()
    rd.init(cfg)
    audit.import_dataset(str(p), rd, cfg)
    decontaminate.run(rd, cfg, ["builtin:main"])
    rows = rd.read_rows("contamination")
    assert len(rows) == len(pick) and all(r["contaminated"] for r in rows)
    assert {r["reference"] for r in rows} == {next(iter(load_index("builtin:main").column("source").to_pylist()))}


@needs_snapshot
def test_opsynth_audit_cli(tmp_path, tiny_reference):
    from typer.testing import CliRunner

    from pipeline.cli import app

    out = tmp_path / "audit"
    res = CliRunner().invoke(app, ["audit", str(_dataset(tmp_path)), "--out", str(out), "--stages",
                                   "decontaminate,dedupe", "--reference", str(tiny_reference)])
    assert res.exit_code == 0, res.output
    rows = pq.read_table(out / "contamination").to_pylist()
    assert len(rows) == 7 and sum(r["contaminated"] for r in rows) == 2
    res = CliRunner().invoke(app, ["report", str(out), "--sql", "SELECT count(*) AS n FROM dedupe WHERE NOT keep"])
    assert res.exit_code == 0 and re.search(r"^1\s*\n\(1 row\)", res.output, re.M), res.output


def test_shipped_index_covers_kernelbench_without_source():
    t = load_index("builtin")
    assert "code" not in t.column_names
    by_source = {}
    for r in t.select(["source", "level", "op_status"]).to_pylist():
        by_source.setdefault(r["source"], []).append(r)
    assert sorted(by_source) == ["kernelbench_main@423217d9fda9", "kernelbench_v0@6500bbc8cf10"]
    for rows in by_source.values():
        assert len(rows) == 270 and sum(r["level"] == 4 for r in rows) == 20
        assert all(r["op_status"].startswith("text-only") for r in rows if r["level"] == 4)
        assert sum(r["op_status"] == "traced" for r in rows) >= 240
    assert load_index("builtin:v0").num_rows == 270
    with pytest.raises(OpsynthError, match="no shipped reference index"):
        load_index("builtin:v9")


@needs_snapshot
def test_a_task_under_a_reference_problem_name_is_flagged_by_name_only(tmp_path, tiny_reference):
    """A rewritten benchmark problem that keeps its numbered name (KernelBench v0 vs main) is caught by name;
    the same code under another name, and unnumbered sampler-style names, are not."""
    rows = [{"code": GOOD, "name": "19_ReLU"}, {"code": GOOD.replace("3.0", "4.0"), "name": "ReLU"},
            {"code": GOOD.replace("3.0", "5.0"), "name": "my_19_ReLU"}]
    p = tmp_path / "named.parquet"
    pq.write_table(pa.Table.from_pylist(rows), p)
    cfg = Config()
    rd = RunDir(tmp_path / "run")
    rd.init(cfg)
    audit.import_dataset(str(p), rd, cfg)
    decontaminate.run(rd, cfg, [str(tiny_reference)])
    got = {r["task_id"]: r for r in rd.read_rows("contamination")}
    names = {t["task_id"]: t["name"] for t in rd.read_rows("tasks")}
    by_name = {names[k]: v for k, v in got.items()}
    assert by_name["19_ReLU"]["contaminated"] and by_name["19_ReLU"]["detectors_fired"] == ["name"]
    assert by_name["19_ReLU"]["kb_nearest"] == "level1/19_ReLU"
    assert not by_name["ReLU"]["contaminated"] and not by_name["my_19_ReLU"]["contaminated"]
    off = Config(decontaminate=dataclasses.replace(cfg.decontaminate, name_match=False))
    rd2 = RunDir(tmp_path / "run2")
    rd2.init(off)
    audit.import_dataset(str(p), rd2, off)
    decontaminate.run(rd2, off, [str(tiny_reference)])
    assert not any(r["contaminated"] for r in rd2.read_rows("contamination"))


@needs_snapshot
def test_a_grown_run_scores_only_its_new_tasks_and_gets_the_rows_a_full_scoring_gets(tmp_path, tiny_reference):
    def run_dir(name: str) -> RunDir:
        rd = RunDir(tmp_path / name)
        rd.init(cfg)
        audit.import_dataset(str(_dataset(tmp_path)), rd, cfg)
        return rd

    def decontaminate_verdicts(rd: RunDir) -> list[str]:
        return sorted(str(v) for v in rd.read_rows("verdicts") if v["stage"] == "decontaminate")

    cfg = Config()
    whole = run_dir("whole")
    n = whole.read_table("tasks").num_rows
    assert decontaminate.run(whole, cfg, [str(tiny_reference)])["scored_now"] == n

    grown = run_dir("grown")
    every = grown.read_table("tasks")
    grown.replace_table("tasks", every.slice(0, 3))  # the run as it was before it grew
    assert decontaminate.run(grown, cfg, [str(tiny_reference)])["scored_now"] == 3
    grown.replace_table("tasks", every)
    counts = decontaminate.run(grown, cfg, [str(tiny_reference)])
    assert counts["scored_now"] == n - 3 and counts["tasks"] == n
    assert counts["contaminated"] == 2 == sum(r["contaminated"] for r in grown.read_rows("contamination"))
    assert grown.read_rows("contamination") == whole.read_rows("contamination")
    assert decontaminate_verdicts(grown) == decontaminate_verdicts(whole)
    assert decontaminate.run(grown, cfg, [str(tiny_reference)])["scored_now"] == 0  # nothing new
    # other settings (or other references) than the rows on disk were scored with: every task again
    stricter = Config(decontaminate=dataclasses.replace(cfg.decontaminate, ast_threshold=0.5))
    assert decontaminate.run(grown, stricter, [str(tiny_reference)])["scored_now"] == n
    assert grown.manifest()["decontaminate_basis"]["ast_threshold"] == 0.5
