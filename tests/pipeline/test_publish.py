"""publish(): the Hub-ready folder read back with datasets (map and streaming), polars, DuckDB and exec."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from pipeline.errors import OpsynthError
from pipeline.outputs.publish import PUBLISHED, publish
from pipeline.rundir.config import load_preset
from pipeline.rundir.schema import CONTAMINATION, MEASUREMENTS, TASKS
from pipeline.rundir.store import RunDir

CODE = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))

batch_size = 4
in_features = 8
out_features = {k}

def get_inputs():
    return [torch.rand(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features]
"""


def _task(i: int) -> dict:
    return {"task_id": f"{i:016x}", "name": "Linear_ReLU", "code": CODE.format(k=3 + i),
            "ops": ["nn.Linear", "torch.relu"], "categories": ["gemm", "activation"], "data_source": "torch#2",
            "num_ops": 2, "is_dag": i % 2 == 1, "graph": json.dumps({"nodes": [], "links": []}),
            "graph_hash": f"h{i}", "aten_ops": ["aten.addmm", "aten.relu"], "flops": 1000 * (i + 1),
            "bytes_moved": 500, "predicted_ms": 0.5, "predicted_peak_bytes": 4096,
            "shape_variants": json.dumps([{"batch_size": 8}]), "composer": "template", "composer_note": "",
            "seed": 100 + i}


def _measurement(i: int) -> dict:
    return {"task_id": f"{i:016x}", "status": "ok", "device": "cpu", "gpu": "cpu", "torch_version": "2.13.0",
            "eager_ms": 0.5 * (i + 1), "compile_ms": 0.25 * (i + 1), "compile_ok": True,
            "compile_agrees_1e4": True, "compile_agrees_1e2": True, "deterministic": True,
            "input_sensitivity_ratio": 40.0 if i == 0 else math.inf,
            "peak_memory_bytes": 2048, "aten_ops": ["aten.addmm", "aten.relu"]}


def _contamination(i: int) -> dict:
    return {"task_id": f"{i:016x}", "contaminated": i == 2, "kb_nearest": "level1/9_Matmul",
            "kb_ast_similarity": 0.95 if i == 2 else 0.3, "kb_op_signature_match": False,
            "kb_minhash_jaccard": 0.1, "detectors_fired": ["ast"] if i == 2 else [], "reference": "builtin"}


def make_run(tmp_path: Path, n: int = 4, measurements: bool = True, contamination: bool = True,
             shard_rows: int = 5000, keep_all: bool = False) -> RunDir:
    """Tasks 0..n-1; the filter drops task 3, decontamination drops task 2 (unless keep_all); every stage done
    unless measurements or contamination are left out."""
    cfg = load_preset("demo")
    cfg = dataclasses.replace(cfg, publish=dataclasses.replace(cfg.publish, shard_rows=shard_rows),
                              run=dataclasses.replace(cfg.run, n=n, shard_size=max(n, 1)))
    rd = RunDir(tmp_path / "run")
    rd.init(cfg)
    rd.write_shard("tasks", 0, [_task(i) for i in range(n)], TASKS)
    if measurements:
        rd.write_shard("measurements", 0, [_measurement(i) for i in range(n)], MEASUREMENTS)
    rd.write_verdicts("filter", [{"task_id": f"{i:016x}", "keep": keep_all or i != 3,
                                  "reason": "" if keep_all or i != 3 else "eager runtime below window (0.01 ms)"}
                                 for i in range(n)])
    if contamination:
        rd.write_shard("contamination", 0, [_contamination(i) for i in range(n)], CONTAMINATION)
        rd.write_verdicts("decontaminate", [{"task_id": f"{i:016x}", "keep": keep_all or i != 2,
                                             "reason": "" if keep_all or i != 2 else "kernelbench ast (0.95)"}
                                            for i in range(n)])
        rd.write_verdicts("dedupe", [{"task_id": f"{i:016x}", "keep": True, "reason": ""} for i in range(n)
                                     if keep_all or i not in (2, 3)])
    return rd


def _card_meta(folder: Path) -> dict:
    from huggingface_hub import DatasetCard

    return DatasetCard.load(folder / "README.md").data.to_dict()


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("pub")
    return publish(make_run(tmp), tmp / "out")


def test_load_dataset_matches_card_and_ops6k_columns(published: Path):
    from datasets import Features, load_dataset

    ds = load_dataset(str(published), split="train", cache_dir=str(published.parent / "hf"))
    assert ds.column_names[:3] == ["ops", "data_source", "code"]
    assert ds.column_names == PUBLISHED.names
    assert sorted(ds["task_id"]) == [f"{0:016x}", f"{1:016x}"]  # 2 filtered, 3 decontaminated out
    row = ds[0]
    assert isinstance(row["ops"], str) and json.loads(row["ops"]) == row["ops_list"] == ["nn.Linear", "torch.relu"]
    assert row["ops"] == '["nn.Linear", "torch.relu"]'
    assert row["compile_speedup"] == pytest.approx(2.0)
    assert row["arithmetic_intensity"] == pytest.approx(row["flops"] / 500)
    ratios = dict(zip(ds["task_id"], ds["input_sensitivity_ratio"], strict=True))
    assert ratios == {f"{0:016x}": 40.0, f"{1:016x}": None}  # inf (a NaN beside a number) is published as null
    meta = _card_meta(published)
    info = {i["config_name"]: i for i in meta["dataset_info"]}
    assert Features._from_yaml_list(info["default"]["features"]) == ds.features
    assert info["default"]["splits"][0]["num_examples"] == len(ds)
    assert meta["license"] == "cc-by-4.0" and meta["size_categories"] == ["n<1K"]
    for name in ("contamination", "rejections", "rejection_summary"):
        sub = load_dataset(str(published), name, split="train", cache_dir=str(published.parent / "hf"))
        assert Features._from_yaml_list(info[name]["features"]) == sub.features
        assert info[name]["splits"][0]["num_examples"] == len(sub)


def test_streaming_reads_the_same_rows(published: Path):
    from datasets import load_dataset

    stream = load_dataset(str(published), split="train", streaming=True)
    rows = list(stream)
    assert [r["task_id"] for r in rows] == [f"{0:016x}", f"{1:016x}"]
    assert rows[1]["is_dag"] is True and rows[1]["eager_ms"] == pytest.approx(1.0)


def test_polars_duckdb_and_exec(published: Path):
    import duckdb
    import polars as pl
    import torch

    df = pl.read_parquet(published / "data" / "*.parquet")
    assert df.schema["ops_list"] == pl.List(pl.String) and df.schema["eager_ms"] == pl.Float64
    con = duckdb.connect()
    got = con.execute(f"SELECT count(*), sum(num_ops) FROM '{published}/data/*.parquet'").fetchone()
    assert got == (2, 4)
    cont = con.execute(f"SELECT task_id, published FROM '{published}/contamination/*.parquet' "
                       "WHERE contaminated").fetchall()
    assert cont == [(f"{2:016x}", False)]
    rej = con.execute(f"SELECT stage, reason_kind, count FROM '{published}/rejections/summary.parquet' "
                      "ORDER BY stage").fetchall()
    assert rej == [("decontaminate", "kernelbench ast", 1), ("filter", "eager runtime below window", 1)]
    code = df["code"][1]
    ns: dict = {}
    exec(code, ns)
    model = ns["Model"](*ns["get_init_inputs"]())
    out = model(*ns["get_inputs"]())
    assert out.shape == (4, 4) and torch.all(out >= 0)


def test_manifest_card_and_plots(published: Path):
    m = json.loads((published / "manifest.json").read_text())
    assert [s["step"] for s in m["funnel"]] == ["sampled", "kept after decontaminate", "profiled (ran ok)",
                                                "kept after filter", "kept after dedupe"]
    assert [s["tasks"] for s in m["funnel"]] == [4, 3, 3, 2, 2]
    assert m["config"]["name"] == "demo" and m["seeds"]["task_seeds"] == [100, 101]
    assert m["reference"]["used"] == ["builtin"] and m["gpu"] == ["cpu"]
    for rel, info in m["files"].items():
        assert (published / rel).stat().st_size == info["bytes"]
    readme = (published / "README.md").read_text()
    for name in ("runtime", "ops_per_task", "categories", "compile_speedup"):
        png = published / "plots" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size < 100_000
        assert f"(plots/{name}.png)" in readme
    assert "| kept after decontaminate | 3 |" in readme and "CUDA-Agent-Ops-6K" in readme
    assert "hf://datasets/ORG/NAME/data/*.parquet" in readme
    assert not list(published.parent.glob(".out.*"))  # no temp folder left beside it


def test_missing_stages_give_null_columns(tmp_path: Path):
    from datasets import load_dataset

    rd = make_run(tmp_path, measurements=False, contamination=False)
    out = publish(rd, allow_incomplete=True)
    assert out == tmp_path / "run" / "dataset" and rd.manifest()["stages"]["publish"]["rows"] == 3
    ds = load_dataset(str(out), split="train", cache_dir=str(tmp_path / "hf"))
    assert len(ds) == 3 and set(ds["eager_ms"]) == {None} and set(ds["kb_nearest"]) == {None}
    assert ds.features["eager_ms"].dtype == "float64"  # typed even when all null
    assert not (out / "plots" / "runtime.png").exists() and (out / "plots" / "ops_per_task.png").exists()
    assert "(plots/runtime.png)" not in (out / "README.md").read_text()


def test_shards_split_by_shard_rows(tmp_path: Path):
    import pyarrow.parquet as pq

    out = publish(make_run(tmp_path, n=5, keep_all=True, shard_rows=2), tmp_path / "ds")
    files = sorted(p.name for p in (out / "data").glob("*.parquet"))
    assert files == [f"train-{i:05d}-of-00003.parquet" for i in range(3)]
    assert sum(pq.read_metadata(out / "data" / f).num_rows for f in files) == 5
    assert pq.read_metadata(out / "data" / files[0]).row_group(0).column(0).compression == "ZSTD"


def test_nothing_accepted_or_missing_tables_publish_nothing(tmp_path: Path):
    rd = make_run(tmp_path, n=1)
    rd.write_verdicts("filter", [{"task_id": f"{0:016x}", "keep": False, "reason": "degenerate (zero)"}])
    rd.write_verdicts("dedupe", [])  # as dedupe writes it: nothing was left to dedupe
    with pytest.raises(OpsynthError, match="no task was accepted"):
        publish(rd, tmp_path / "out")
    bare = RunDir(tmp_path / "bare")
    bare.init(load_preset("demo"))
    with pytest.raises(OpsynthError, match="no tasks/ table"):
        publish(bare, tmp_path / "out")
    bare.write_shard("tasks", 0, [_task(0)], TASKS)
    with pytest.raises(OpsynthError, match="not finished"):
        publish(bare, tmp_path / "out")
    with pytest.raises(OpsynthError, match="no verdicts"):
        publish(bare, tmp_path / "out", allow_incomplete=True)
    with pytest.raises(OpsynthError, match="not a run directory"):
        publish(RunDir(tmp_path / "nowhere"), tmp_path / "out")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_failure_keeps_the_previous_folder(tmp_path: Path, monkeypatch):
    from pipeline.outputs import card

    rd = make_run(tmp_path)
    out = publish(rd, tmp_path / "ds")
    before = (out / "README.md").read_text()

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(card, "render", boom)
    with pytest.raises(RuntimeError):
        publish(rd, out)
    assert (out / "README.md").read_text() == before and len(list((out / "data").glob("*.parquet"))) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "run"]


def test_card_usage_snippets_run_against_the_folder(published: Path, tmp_path: Path, monkeypatch):
    import re

    import datasets
    import duckdb

    # a private cache: datasets keys local folders by name and mtime, and stale copies would hide bugs
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")

    readme = (published / "README.md").read_text()
    blocks = re.findall(r"```(python|sql)\n(.*?)```", readme, flags=re.DOTALL)
    python_block = blocks[0][1].replace("ORG/NAME", str(published))
    ns: dict = {}
    exec(python_block, ns)  # load_dataset, exec of a row, streaming, audit configs, as a user would
    assert ns["out"].shape[0] == 4 and len(ns["rejections"]) == 2 and len(ns["contamination"]) == 4
    sql = blocks[1][1].replace("hf://datasets/ORG/NAME", str(published))
    statements = [s for s in (x.strip() for x in re.sub(r"--.*", "", sql).split(";")) if s]
    con = duckdb.connect()
    assert con.execute(statements[0]).fetchall() == [("torch#2", 2, 0.75, 2.0)]
    assert con.execute(statements[1]).fetchall()[0] == ("level1/9_Matmul", 0.95)


def test_limit_writes_a_consistent_sample(tmp_path: Path):
    from datasets import load_dataset

    rd = make_run(tmp_path, n=5, keep_all=True)
    rows = rd.read_rows("tasks")
    rows[1]["composer"] = "llm"
    rd.write_shard("tasks", 0, rows, TASKS)
    out = publish(rd, tmp_path / "sample", limit=2)
    ds = load_dataset(str(out), split="train", cache_dir=str(tmp_path / "hf"))
    assert ds["task_id"] == [f"{0:016x}", f"{1:016x}"]
    assert _card_meta(out)["dataset_info"][0]["splits"][0]["num_examples"] == 2
    m = json.loads((out / "manifest.json").read_text())
    assert m["rows"] == 2 and m["sample_of"] == 5
    readme = (out / "README.md").read_text()
    assert "a sample: 2 of the 5 accepted tasks" in readme and "; 1 tasks written by the LLM, 1 by" in readme
    assert list(ds["composer"]) == ["template", "llm"]


def test_incomplete_run_is_refused_unless_allowed_and_then_the_card_says_what_is_missing(tmp_path: Path):
    rd = make_run(tmp_path, measurements=False)
    with pytest.raises(OpsynthError, match=r"not finished \(profile not run; filter partial \(0 of 0|not finished") as e:
        publish(rd, tmp_path / "out")
    assert "profile not run" in str(e.value) and "--allow-incomplete" in str(e.value)
    assert not (tmp_path / "out").exists()
    out = publish(rd, tmp_path / "out", allow_incomplete=True)
    readme = (out / "README.md").read_text()
    assert "**Incomplete release" in readme and "profile not run" in readme
    assert "(not run for this release)**" in readme.split(". **profile**")[1].split("\n")[0]
    assert json.loads((out / "manifest.json").read_text())["stage_status"]["profile"] == "not run"


def test_partial_and_stale_stages_are_named(tmp_path: Path):
    import os
    import time

    rd = make_run(tmp_path, n=4)
    rd.write_shard("measurements", 0, [_measurement(i) for i in range(3)], MEASUREMENTS)
    with pytest.raises(OpsynthError, match=r"profile partial \(3 of 4 tasks\)"):
        publish(rd, tmp_path / "out")
    rd.write_shard("measurements", 0, [_measurement(i) for i in range(4)], MEASUREMENTS)
    later = time.time() + 5
    os.utime(rd.marker_path("measurements", 0), (later, later))  # re-measured after the filter ran
    with pytest.raises(OpsynthError, match=r"filter stale"):
        publish(rd, tmp_path / "out")


def test_a_growing_run_published_midway_leaves_its_unprofiled_tasks_out_and_says_so(tmp_path: Path):
    """Task 3 is sampled but not profiled yet, so neither the filter nor dedupe judged it, as in a run grown after its
    last profile call: it is not published, and the card says so, not that dropped tasks are still in."""
    import pyarrow.parquet as pq

    rd = make_run(tmp_path, n=4, keep_all=True)
    rd.write_shard("measurements", 0, [_measurement(i) for i in range(3)], MEASUREMENTS)
    for stage in ("filter", "dedupe"):
        rd.write_verdicts(stage, [{"task_id": f"{i:016x}", "keep": True, "reason": ""} for i in range(3)])
    out = publish(rd, tmp_path / "midway", allow_incomplete=True)
    readme = (out / "README.md").read_text()
    assert "profile partial (3 of 4 tasks)" in readme and "a partial stage has not reached are left out" in readme
    assert "would have dropped are still in" not in readme  # no stage was skipped
    published = {r["task_id"] for r in pq.read_table(out / "data").to_pylist()}
    assert published == {f"{i:016x}" for i in range(3)}


def test_complete_run_publishes_without_the_flag(tmp_path: Path):
    out = publish(make_run(tmp_path), tmp_path / "out")
    m = json.loads((out / "manifest.json").read_text())
    assert set(m["stage_status"].values()) == {"done"}
    assert "Incomplete release" not in (out / "README.md").read_text()


def test_publish_refuses_a_folder_with_files_it_did_not_write(tmp_path: Path):
    rd = make_run(tmp_path)
    mine = tmp_path / "D"
    (mine / "data").mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    (mine / "data" / "mine.csv").write_text("a,b\n")
    with pytest.raises(OpsynthError, match=r"D was not written by publish \(data/mine.csv, notes.txt\)"):
        publish(rd, mine)
    assert (mine / "notes.txt").read_text() == "mine" and (mine / "data" / "mine.csv").exists()

    out = publish(rd, tmp_path / "E")  # a folder publish wrote is replaced again...
    assert publish(rd, out) == out
    (out / "notes.txt").write_text("added later")  # ...but not once something else was put in it
    with pytest.raises(OpsynthError, match="holds files publish did not write \\(notes.txt\\)"):
        publish(rd, out)
    assert (out / "notes.txt").exists() and (out / "README.md").exists()
    (tmp_path / "empty").mkdir()
    assert publish(rd, tmp_path / "empty") == tmp_path / "empty"


def test_a_release_folder_keeps_its_run_state_beside_what_it_publishes(tmp_path: Path):
    """data/releases/NAME/run/ holds the run that NAME/ publishes: publishing into NAME carries run/ over untouched."""
    release = tmp_path / "release"
    rd = make_run(release)  # its run directory is release/run
    assert rd.path == release / "run"
    before = sorted(p.relative_to(rd.path).as_posix() for p in rd.path.rglob("*.parquet"))
    for _ in range(2):  # a first publish and a re-publish
        assert publish(rd, release) == release
        assert (release / "manifest.json").exists() and (release / "run" / "config.toml").exists()
        assert sorted(p.relative_to(rd.path).as_posix() for p in rd.path.rglob("*.parquet")) == before
    (release / "notes.txt").write_text("mine")  # anything else there is still refused
    with pytest.raises(OpsynthError, match=r"holds files publish did not write \(notes.txt\)"):
        publish(rd, release)
    other = make_run(tmp_path / "elsewhere")
    (release / "notes.txt").unlink()
    with pytest.raises(OpsynthError, match="holds files publish did not write"):
        publish(other, release)  # another run's publish may not replace the folder that holds this run


def test_every_row_carries_its_prompt_as_chat_messages(published: Path):
    """The `prompt` column as TRL and verl read it: datasets.load_dataset gives a list of {role, content} messages
    holding the row's code, the reward's rules and the answer format; the manifest and card name its version."""
    from datasets import load_dataset

    from opsynth.prompt import PROMPT_VERSION, render
    from opsynth.rl import code_blocks

    ds = load_dataset(str(published), split="train", cache_dir=str(published.parent / "hf"))
    assert ds.column_names[3] == "prompt"
    for row in ds:
        msgs = row["prompt"]
        assert [m["role"] for m in msgs] == ["system", "user"] and all(set(m) == {"role", "content"} for m in msgs)
        assert msgs == render(row["code"], task_id=row["task_id"], name=row["name"])
        assert code_blocks(msgs[1]["content"])[0] == [("python", row["code"])]
        assert "Policy: strict" in msgs[1]["content"] and "ModelNew" in msgs[1]["content"]
    m = json.loads((published / "manifest.json").read_text())
    assert m["prompt"] == {"version": PROMPT_VERSION, "policy": "strict", "custom_system": False, "custom_user": False}
    readme = (published / "README.md").read_text()
    assert f"template `{PROMPT_VERSION}`" in readme and "from opsynth.rl import make_trl_reward" in readme
    assert "prompt" in _card_meta(published)["dataset_info"][0]["features"][3]["name"]


def test_a_custom_prompt_template_from_the_config(tmp_path: Path):
    from datasets import load_dataset

    rd = make_run(tmp_path)
    cfg = rd.load_config()
    user = "Make {name} ({task_id}) faster.\n```python\n{code}\n```\n{answer_format}"
    cfg = dataclasses.replace(cfg, publish=dataclasses.replace(cfg.publish, prompt_user=user, prompt_system="",
                                                               prompt_policy="allow-torch"))
    (rd.path / "config.toml").write_text(cfg.to_toml())
    out = publish(rd, tmp_path / "custom")
    row = load_dataset(str(out), split="train", cache_dir=str(tmp_path / "hf"))[0]
    assert row["prompt"][1]["content"].startswith(f"Make Linear_ReLU ({row['task_id']}) faster.\n```python\nimport")
    assert "Policy: allow-torch" not in row["prompt"][1]["content"]  # the custom template leaves the rules out
    m = json.loads((out / "manifest.json").read_text())["prompt"]
    assert m["version"].startswith("custom-") and m["policy"] == "allow-torch" and m["custom_user"]
    assert "allow_torch=True" in (out / "README.md").read_text()
