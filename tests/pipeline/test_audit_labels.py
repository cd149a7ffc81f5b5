"""The labels stage of an audit: rows traced on meta, then on the CPU where meta cannot run them, under a memory
cap; each finding kind kept apart; only wrong or missing labels reject, and only when label checking is asked."""

import dataclasses

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.rundir.config import Config
from pipeline.rundir.store import RunDir
from pipeline.stages import audit, labels

HEAD = "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return "
TAIL = "\n\ndef get_inputs():\n    return [torch.rand({n})]\n\ndef get_init_inputs():\n    return []\n"


def _row(body: str, ops: list[str], n: str = "4, 8") -> dict:
    return {"code": HEAD + body + TAIL.format(n=n), "ops": str(ops)}


ROWS = [
    _row("torch.tanh(x) * 2.0 + x", ["torch.tanh"]),                       # true, with glue arithmetic
    _row("torch.abs(x)", ["nn.Tanh", "torch.abs"]),                         # wrong label
    _row("torch.relu(torch.sigmoid(x))", ["torch.relu"]),                    # missing label
    _row("torch.relu(x).cumsum(0)", ["torch.relu", "nn.BrandNewOp"]),        # unknown: cannot judge
    _row("torch.nonzero(x)", ["torch.nonzero"]),                             # data-dependent: needs the CPU
    # meta is fine with any size; this one is data-dependent too, so it needs 4 GB of real memory on the CPU
    _row("torch.nonzero(x)", ["torch.nonzero"], n="1024, 1024, 1024"),
    {"code": "import os\n" + HEAD + "x" + TAIL.format(n="4"), "ops": "['torch.relu']"},  # refused at import
]
ROWS.append(dict(ROWS[0]))  # a byte-identical duplicate


def _cfg(check: bool) -> Config:
    cfg = Config()
    return dataclasses.replace(cfg, filter=dataclasses.replace(cfg.filter, require_label_match=check))


@pytest.fixture(scope="module")
def audited(tmp_path_factory) -> RunDir:
    d = tmp_path_factory.mktemp("labels")
    pq.write_table(pa.Table.from_pylist(ROWS), d / "ds.parquet")
    rd = RunDir(d / "run")
    rd.init(_cfg(False))
    audit.import_dataset(str(d / "ds.parquet"), rd, _cfg(False))
    labels.run(rd, _cfg(False), mem_limit_bytes=3 << 30)
    return rd


def test_findings_are_kept_apart_and_only_reported_by_default(audited):
    rd = audited
    by_row = {t["source_row"]: t for t in rd.read_rows("tasks")}
    found = {r["task_id"]: r for r in rd.read_rows("labels")}
    got = [found[by_row[i]["task_id"]] for i in range(len(ROWS))]
    assert [g["finding"] for g in got] == ["labels true", "wrong label", "missing label", "cannot judge",
                                           "labels true", "not traced", "not traced", "labels true"]
    assert got[1]["wrong_labels"] == ["nn.Tanh"] and got[2]["missing_labels"] == ["aten.sigmoid"]
    assert got[3]["unknown_labels"] == ["nn.BrandNewOp"] and got[3]["unjudged_ops"] == ["aten.cumsum"]
    assert got[0]["trace_device"] == "meta" and got[4]["trace_device"] == "cpu"
    assert "cpu:" in got[5]["trace_error"] and "memory" in got[5]["trace_error"].lower()
    assert got[6]["trace_error"].startswith("refused by the import check: forbidden import 'os'")
    # the trace is the tasks' aten_ops now, so decontaminate does not trace again
    assert "aten.tanh" in by_row[0]["aten_ops"]
    assert all(v["keep"] for v in rd.read_rows("verdicts") if v["stage"] == "labels")


def test_label_checking_drops_only_wrong_and_missing_labels(audited):
    rd = audited
    labels.run(rd, _cfg(True))  # judges the traces it has again, now rejecting
    row_of = {t["task_id"]: t["source_row"] for t in rd.read_rows("tasks")}
    dropped = {row_of[v["task_id"]]: v["reason"] for v in rd.read_rows("verdicts")
               if v["stage"] == "labels" and not v["keep"]}
    assert sorted(dropped) == [1, 2]
    assert dropped[1].startswith("wrong label (labelled but never ran: nn.Tanh")
    assert dropped[2] == "missing label (ran without a label: aten.sigmoid)"


def test_the_verdict_table_has_one_row_per_source_row_with_each_finding(audited, tmp_path):
    import pyarrow.parquet as pq

    from pipeline.outputs.audit_export import write

    rows = pq.read_table(write(audited, tmp_path / "v.parquet")).to_pylist()
    assert [r["source_row"] for r in rows] == list(range(len(ROWS)))
    assert [r["byte_duplicate_of"] for r in rows] == [None] * 7 + [0]
    assert rows[1]["wrong_labels"] == ["nn.Tanh"] and rows[3]["unknown_labels"] == ["nn.BrandNewOp"]
    assert rows[6]["import_reason"].startswith("forbidden import 'os'") and rows[6]["rejected_by"] == "import"
    assert rows[0]["profiled"] is False and rows[0]["kept"] is True


def test_a_skipped_row_of_the_measured_sample_keeps_its_status(audited, tmp_path):
    # a time-boxed profile measures a seeded prefix; a row dropped before it gets a `skipped` measurement and must
    # still count in the sample, or the sample's kept share is overstated
    import shutil

    import pyarrow.parquet as pq

    from pipeline.outputs.audit_export import write
    from pipeline.rundir.schema import MEASUREMENTS

    rd = RunDir(shutil.copytree(audited.path, tmp_path / "run"))
    refused = next(t["task_id"] for t in rd.read_rows("tasks") if t["source_row"] == 6)
    rd.replace_table("measurements", [{"task_id": refused, "status": "skipped", "device": "cuda",
                                       "error": "not profiled: dropped by import"}], MEASUREMENTS)
    rows = pq.read_table(write(rd, tmp_path / "v.parquet")).to_pylist()
    assert rows[6]["status"] == "skipped" and rows[6]["profiled"] is False and rows[6]["filter_reason"] is None
    assert [r["status"] for r in rows[:6]] == [None] * 6
    order = [t["task_id"] for t in rd.read_rows("tasks")]
    assert [r["run_order"] for r in rows] == [order.index(r["task_id"]) for r in rows]


ONE_HOT = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x, y):
        return (F.one_hot(x, 8).float() - y).abs()


def get_inputs():
    return [torch.randint(0, 8, (4, 16)), torch.randn(4, 16, 8)]


def get_init_inputs():
    return []
'''
# what the forward ran on the H200 that profiled the release's F.one_hot task (1cda502261ba42d7): one_hot there is
# zeros + scatter_, where the CPU checks the classes first (aminmax) or compares with an arange
GPU_OPS = ["aten.zeros", "aten.unsqueeze", "aten.scatter_", "aten.sub", "aten.abs"]


@pytest.mark.parametrize(("gpu", "device", "finding"), [("NVIDIA H200", "cuda", "labels true"),
                                                          ("cpu", "cpu", "wrong label")])
def test_a_releases_own_aten_ops_are_judged_on_the_device_they_ran_on(tmp_path, gpu, device, finding):
    row = {"code": ONE_HOT, "ops": '["F.one_hot", "nn.L1Loss"]', "aten_ops": GPU_OPS, "gpu": gpu}
    pq.write_table(pa.Table.from_pylist([row]), tmp_path / "ds.parquet")
    rd = RunDir(tmp_path / "run")
    rd.init(_cfg(False))
    audit.import_dataset(str(tmp_path / "ds.parquet"), rd, _cfg(False))
    assert rd.manifest()["audit_source"]["aten_ops_device"] == device
    labels.run(rd, _cfg(False))
    (got,) = rd.read_rows("labels")
    assert (got["trace_device"], got["finding"]) == (device, finding)
    assert got["wrong_labels"] == ([] if finding == "labels true" else ["F.one_hot"])
