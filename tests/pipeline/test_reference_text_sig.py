"""Text signatures through the index and the decontaminate stage (synthetic level-4-style reference, no Hub)."""

import json
from dataclasses import replace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.errors import OpsynthError
from pipeline.rundir.config import Config
from pipeline.rundir.reference import build_index, load_index, reference_matrix
from pipeline.rundir.store import RunDir
from pipeline.stages import audit, decontaminate

HF_PROBLEM = '''import torch
import transformers

class Model(torch.nn.Module):
    def __init__(self, seq_len):
        super().__init__()
        cfg = transformers.AutoConfig.from_pretrained(pretrained_model_name_or_path="acme/tiny-lm-7b")
        self.lm = transformers.AutoModelForCausalLM.from_config(cfg)
        self.seq_len = seq_len

    def forward(self, ids):
        return self.lm(ids[:, : self.seq_len]).logits

batch_size = 32
sequence_length = 256

def get_inputs():
    return [torch.randint(0, 1000, (batch_size, sequence_length))]

def get_init_inputs():
    return [sequence_length]
'''

TORCH_PROBLEM = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.tanh(x) * 2.0

def get_inputs():
    return [torch.rand(4, 8)]

def get_init_inputs():
    return []
'''

# the wrapper renamed, wrapped in a no-op module, other sizes, the id reached only through get_init_inputs
WRAPPED = '''import torch
import torch.nn as nn
from transformers import AutoModelForCausalLM as Lm, AutoConfig as Cfg

class Model(nn.Module):
    def __init__(self, which, cfg):
        super().__init__()
        self.net = Lm.from_pretrained(which, config=cfg)
        self.skip = nn.Identity()

    def forward(self, tokens):
        tokens = self.skip(tokens)

        def inner(t):
            return self.net(t).logits
        return inner(tokens)

B = 8
T = 1024

def get_inputs():
    return [torch.randint(0, 50000, (B, T))]

def get_init_inputs():
    name = "acme/tiny-lm-7b"
    return [name, Cfg.from_pretrained(name)]
'''

CLEAN = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return torch.cumsum(self.lin(x), dim=1).sigmoid()

def get_inputs():
    return [torch.rand(4, 8)]

def get_init_inputs():
    return []
'''


@pytest.fixture(scope="module")
def hf_reference(tmp_path_factory):
    d = tmp_path_factory.mktemp("hfref")
    src = d / "tinybench.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in [
        {"level": 4, "problem_id": 1, "name": "1_acme-tiny-lm_bs32_seq256", "code": HF_PROBLEM},
        {"level": 1, "problem_id": 2, "name": "2_Tanh_Scale", "code": TORCH_PROBLEM}]))
    return build_index([str(src)], d / "tiny.index.parquet")


def test_index_stores_model_ids_not_source(hf_reference):
    rows = {r["key"]: r for r in pq.read_table(hf_reference).to_pylist()}
    hf, torch_row = rows["level4/1_acme-tiny-lm_bs32_seq256"], rows["level1/2_Tanh_Scale"]
    assert hf["op_status"].startswith("text-only") and hf["ops"] == []
    assert hf["text_sig"] == ["model:acme/tiny-lm-7b", "const:32", "const:256"]
    assert torch_row["op_status"] == "traced" and torch_row["text_sig"] == []
    assert b"AutoModelForCausalLM" not in hf_reference.read_bytes()


def test_wrapped_model_task_is_flagged_by_its_model_id_and_clean_task_is_not(tmp_path, hf_reference):
    ds = tmp_path / "ds.parquet"
    pq.write_table(pa.Table.from_pylist([{"code": WRAPPED}, {"code": CLEAN}]), ds)
    rd = RunDir(tmp_path / "run")
    cfg = Config()
    rd.init(cfg)
    audit.import_dataset(str(ds), rd, cfg)
    counts = decontaminate.run(rd, cfg, [str(hf_reference)])
    tasks = rd.read_rows("tasks")
    by_id = {r["task_id"]: r for r in rd.read_rows("contamination")}
    wrapped, clean = by_id[tasks[0]["task_id"]], by_id[tasks[1]["task_id"]]
    assert wrapped["contaminated"] and wrapped["detectors_fired"] == ["op_signature"]
    assert wrapped["kb_op_signature_match"] and wrapped["kb_nearest"] == "level4/1_acme-tiny-lm_bs32_seq256"
    assert wrapped["op_signature_source"].startswith("text: model id acme/tiny-lm-7b (text-only")
    assert not clean["contaminated"] and clean["op_signature_source"] == "traced"
    assert counts["text_signature_matches"] == 1 and counts["by_detector"]["op_signature"] == 1
    reasons = [v["reason"] for v in rd.read_rows("verdicts") if v["stage"] == "decontaminate" and not v["keep"]]
    assert len(reasons) == 1 and "(text: model id)" in reasons[0]

    # the op-signature switch turns the text match off too
    cfg_off = replace(cfg, decontaminate=replace(cfg.decontaminate, op_signature=False))
    decontaminate.run(rd, cfg_off, [str(hf_reference)])
    assert not {r["task_id"]: r for r in rd.read_rows("contamination")}[tasks[0]["task_id"]]["contaminated"]


def test_index_from_before_text_signatures_is_refused_with_a_rebuild_hint(tmp_path, hf_reference):
    old = pq.read_table(hf_reference).drop_columns(["text_sig"])
    old = old.set_column(old.schema.get_field_index("fingerprint_version"), "fingerprint_version",
                         pa.array([2] * old.num_rows, pa.int32()))
    p = tmp_path / "old.index.parquet"
    pq.write_table(old, p)
    index = load_index(str(p))
    assert index.column("text_sig").to_pylist() == [[], []]
    with pytest.raises(OpsynthError, match="rebuild it with `opsynth reference build"):
        reference_matrix(index)
