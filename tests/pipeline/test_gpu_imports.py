"""`opsynth profile` runs where only torch, pyarrow, networkx, numpy and small wheels are installed: the command,
the stage, the executor and its workers never import polars, duckdb, datasets, datasketch or matplotlib."""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

from pipeline.rundir.config import load_preset
from pipeline.rundir.schema import TASKS, conform
from pipeline.rundir.store import RunDir

ROOT = Path(__file__).resolve().parents[2]
ABSENT = ("polars", "duckdb", "datasets", "datasketch", "matplotlib")
BLOCKER = f'''import sys


class Absent:
    """Imports of packages the GPU image lacks fail, as they would there."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {ABSENT!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (absent on the GPU image)")
        return None


sys.meta_path.insert(0, Absent())
'''
CODE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) + 1

def get_inputs():
    return [torch.rand(8, 8)]

def get_init_inputs():
    return []
'''


def _env(tmp_path: Path) -> dict:
    block = tmp_path / "absent"
    block.mkdir()
    (block / "sitecustomize.py").write_text(BLOCKER)  # loads at startup in this process and every worker
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(block), str(ROOT)])}


def test_the_blocker_blocks(tmp_path):
    p = subprocess.run([sys.executable, "-c", "import duckdb"], env=_env(tmp_path), capture_output=True, text=True)
    assert p.returncode != 0 and "absent on the GPU image" in p.stderr


def test_profile_runs_without_the_cpu_side_packages(tmp_path):
    cfg = load_preset("demo")
    cfg = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, workers=1, n=1),
                              profile=dataclasses.replace(cfg.profile, compile=False, warm_worker=False))
    rd = RunDir(tmp_path / "r")
    rd.init(cfg)
    rd.write_shard("tasks", 0, conform([{"task_id": "t0", "name": "ReLU", "code": CODE}], TASKS), TASKS)
    rd.write_verdicts("decontaminate", [{"task_id": "t0", "keep": True}])  # done on the CPU box
    p = subprocess.run([sys.executable, "-m", "pipeline.cli", "profile", str(rd.path), "--max-minutes", "5"],
                       cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    rows = rd.read_rows("measurements")
    assert [(m["task_id"], m["status"]) for m in rows] == [("t0", "ok")], rows


def test_the_kernel_warmup_renders_without_the_cpu_side_packages(tmp_path):
    code = "from pipeline.gpu.kernel_warmup import warmup_code; print(len(warmup_code('torch.special.erfcx')))"
    p = subprocess.run([sys.executable, "-c", code], env=_env(tmp_path), capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    assert int(p.stdout) > 0
