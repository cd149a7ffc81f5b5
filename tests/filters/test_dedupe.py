"""Within-dataset duplicates: exact, structural and near, first by task_id kept."""

from filters.contamination import minhashes
from filters.dedupe import dedupe

BASE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.tanh(x)
        y = torch.sigmoid(y) * 2.0
        y = torch.cumsum(y, dim=1)
        return torch.softmax(y, dim=-1)

def get_inputs():
    return [torch.rand(16, 32)]

def get_init_inputs():
    return []
'''
SPACED = BASE.replace("y = torch.tanh(x)", "y = torch.tanh( x )  # comment")
NEAR = BASE.replace("return [torch.rand(16, 32)]", "return [torch.rand(8, 64)]").replace("cumsum", "cumprod")
OTHER = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv1d(c, c, 3)

    def forward(self, a, b):
        return self.conv(a).amax(dim=2) - b.mean(dim=2)

def get_inputs():
    return [torch.rand(2, 4, 9), torch.rand(2, 4, 9)]

def get_init_inputs():
    return [4]
'''


def _run(ids, codes, graphs=None, threshold=0.7):
    return {r["task_id"]: r for r in dedupe(ids, codes, graphs, minhashes(codes, normalize_ids=False), threshold)}


def test_exact_duplicates_keep_the_first_task_id():
    rows = _run(["b", "a", "c"], [BASE, SPACED, OTHER])
    assert rows["a"]["keep"] and not rows["b"]["keep"]
    assert rows["b"]["reason"] == "exact duplicate of a"
    assert rows["a"]["exact_cluster"] == rows["b"]["exact_cluster"] == "a"
    assert rows["c"]["keep"] and rows["c"]["exact_cluster"] is None


def test_near_duplicate_found_and_threshold_matters():
    rows = _run(["t1", "t2", "t3"], [BASE, NEAR, OTHER])
    assert not rows["t2"]["keep"] and rows["t2"]["reason"].startswith("near duplicate of t1")
    assert rows["t2"]["near_cluster"] == "t1" and rows["t2"]["exact_cluster"] is None
    strict = _run(["t1", "t2", "t3"], [BASE, NEAR, OTHER], threshold=1.0)
    assert all(r["keep"] for r in strict.values())


def test_structural_duplicates_by_graph_hash():
    rows = _run(["x", "y", "z"], [BASE, OTHER, OTHER.replace("amax", "amin")], ["g1", "g2", "g2"], threshold=1.0)
    assert rows["x"]["keep"] and rows["y"]["keep"] and not rows["z"]["keep"]
    assert rows["z"]["reason"] == "structural duplicate of y" and rows["z"]["structural_cluster"] == "y"
    assert rows["x"]["structural_cluster"] is None


def test_distinct_tasks_all_kept():
    rows = _run(["p", "q"], [BASE, OTHER])
    assert all(r["keep"] and r["reason"] == "" for r in rows.values())
