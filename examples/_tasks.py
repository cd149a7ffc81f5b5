"""What both examples share: the tasks (the demo dataset's, or two tiny ones made on the fly) and a stub policy that
answers with fixed texts (an honest rewrite, a hack, a malformed answer), so the examples run on a CPU in a minute
without a model."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python examples/NAME.py` from a checkout
    sys.path.insert(0, str(ROOT))

DEMO = ROOT / "runs" / "demo" / "dataset"

TINY = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return torch.{act}(self.lin(x)) * {k}


batch_size = 64
n = 32


def get_inputs():
    return [torch.randn(batch_size, n)]


def get_init_inputs():
    return [n]
'''


def tiny_dataset(n: int = 2):
    """n tasks made here, as published rows (code, task_id, shape_variants, prompt), in a datasets.Dataset."""
    from datasets import Dataset

    from opsynth.prompt import render

    rows = []
    for i in range(n):
        code = TINY.format(act=("relu", "tanh", "sigmoid")[i % 3], k=i + 2)
        tid = f"tiny{i:04d}"
        rows.append({"ops": '["nn.Linear", "torch.relu"]', "data_source": "torch#2", "code": code,
                     "prompt": render(code, task_id=tid, policy="allow-torch"), "task_id": tid, "shape_variants": "[]"})
    return Dataset.from_list(rows)


def load_tasks(dataset: str | None, n: int):
    """The first n rows of a published dataset folder (default: the demo's, runs/demo/dataset, `make demo`), or n
    tiny tasks made on the fly where there is none."""
    path = Path(dataset) if dataset else DEMO
    if not (path / "data").is_dir():
        print(f"no published dataset at {path} (make demo writes one): using {n} tiny tasks made here")
        return tiny_dataset(n)
    from datasets import load_dataset

    ds = load_dataset(str(path), split="train")
    return ds.select(range(min(n, len(ds))))


def fence(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


def stub_policy(row: dict) -> list[tuple[str, str]]:
    """Fixed answers to a task, as (kind, text). Honest under the allow-torch policy: `ModelNew` is the task's own
    module (a plain-PyTorch rewrite; under the strict policy the guard refuses it). The hack caches its first
    output; the malformed answers have no code block, or two."""
    code = row["code"].rstrip()
    honest = f"{code}\n\n\nclass ModelNew(Model):\n    pass\n"
    hack = (f"{code}\n\n\nclass ModelNew(Model):\n    _out = None\n\n    def forward(self, *args):\n"
            "        if ModelNew._out is None:\n            ModelNew._out = super().forward(*args)\n"
            "        return ModelNew._out\n")
    return [("honest", "A plain rewrite:\n\n" + fence(honest)),
            ("hack", "Cached, so it is fast:\n\n" + fence(hack)),
            ("no code", "I would fuse the operators into one kernel."),
            ("two blocks", fence(honest) + "\n\nor\n\n" + fence(hack))]
