"""The committed sample (data/sample/, 8 rows published from the demo run) read the way users will read it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    from datasets import load_dataset

    return load_dataset(str(SAMPLE), split="train", cache_dir=str(tmp_path_factory.mktemp("hf")))


def test_features_and_counts_match_the_card(ds):
    from datasets import Features
    from huggingface_hub import DatasetCard

    meta = DatasetCard.load(SAMPLE / "README.md").data.to_dict()
    default = next(i for i in meta["dataset_info"] if i["config_name"] == "default")
    assert Features._from_yaml_list(default["features"]) == ds.features
    assert default["splits"][0]["num_examples"] == len(ds) == json.loads((SAMPLE / "manifest.json").read_text())["rows"]
    assert ds.column_names[:3] == ["ops", "data_source", "code"]
    for row in ds:
        assert json.loads(row["ops"]) == row["ops_list"] and row["data_source"] == f"torch#{row['num_ops']}"


def test_streaming_polars_duckdb_agree(ds):
    import duckdb
    import polars as pl
    from datasets import load_dataset

    streamed = [r["task_id"] for r in load_dataset(str(SAMPLE), split="train", streaming=True)]
    assert streamed == ds["task_id"]
    df = pl.read_parquet(SAMPLE / "data" / "*.parquet")
    assert df["task_id"].to_list() == ds["task_id"]
    n, eager = duckdb.connect().execute(
        f"SELECT count(*), sum(eager_ms) FROM '{SAMPLE}/data/*.parquet'").fetchone()
    assert n == len(ds) and eager == pytest.approx(sum(ds["eager_ms"]))


def test_every_row_loads_with_exec_and_its_labels_hold(ds):
    import torch

    from operators.labels import check_labels
    from operators.trace import trace_code

    for row in ds:
        ns: dict = {}
        exec(row["code"], ns)
        torch.manual_seed(0)
        out = ns["Model"](*ns["get_init_inputs"]())(*ns["get_inputs"]())
        assert isinstance(out, torch.Tensor | tuple), row["name"]
        assert check_labels(row["ops_list"], trace_code(row["code"])) == [], row["name"]


def test_dry_run_lists_every_file():
    from pipeline.outputs.hub import push

    listing = push(SAMPLE, "opsynth/sample", dry_run=True)
    listed = {ln.split()[0] for ln in listing.splitlines()[1:]}
    on_disk = {p.relative_to(SAMPLE).as_posix() for p in SAMPLE.rglob("*") if p.is_file()}
    assert listed == on_disk and "plots/runtime.png" in listed
