"""The reward levels, TASK resolution from a published dataset directory, and the candidate static check."""

from pathlib import Path

import pytest

from opsynth.errors import OpsynthError
from verify.reward import reward
from verify.static import check_candidate_source
from verify.suite import HONEST
from verify.task import load_task

RELEASE = Path(__file__).resolve().parents[2] / "data/releases/opsynth-ops-h200-v1"


@pytest.mark.parametrize(("correct", "se", "sc", "level"), [
    (False, 9.0, 9.0, -1), (True, 1.06, 1.06, 3), (True, 1.06, 1.04, 2), (True, 1.04, 2.0, 1),
    (True, 1.06, None, 2), (True, None, None, 1)])
def test_reward_levels(correct, se, sc, level):
    assert reward(correct, se, sc) == level


def test_dataset_row_resolves_with_its_variants():
    import pyarrow.parquet as pq

    f = sorted((RELEASE / "data").glob("*.parquet"))[0]
    row = pq.read_table(f, columns=["task_id", "eager_ms"]).slice(3, 1).to_pylist()[0]
    t = load_task(f"{RELEASE}:{row['task_id']}")
    assert t["task_id"] == row["task_id"] and t["eager_ms"] == row["eager_ms"]
    assert "class Model" in t["code"] and isinstance(t["shape_variants"], list)


def test_bad_task_names_the_fix(tmp_path):
    with pytest.raises(OpsynthError, match="DATASET_DIR:task_id"):
        load_task(str(tmp_path / "nothing.py"))
    with pytest.raises(OpsynthError, match="no row with task_id"):
        load_task(f"{RELEASE}:0000000000000000")


def test_static_check_allows_load_inline_and_refuses_the_rest():
    assert check_candidate_source(HONEST) is None
    assert "ModelNew" in check_candidate_source("import torch\nclass Model: pass\n")
    assert check_candidate_source(HONEST.replace("import torch\n", "import torch\nimport subprocess\n", 1))
    aliased = HONEST.replace("import load_inline", "import load_inline as li")
    assert check_candidate_source(aliased)


FLOAT_INSIDE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 8, 1) * 0.1)

    def forward(self, x, y):
        m = torch.logical_xor(x > 0, y > 0).float()  # float32 whatever the weights are
        return torch.conv1d(m, self.w)


def get_inputs():
    return [torch.randn(2, 8, 16), torch.randn(2, 8, 16)]


def get_init_inputs():
    return []
'''


def test_a_task_that_cannot_run_in_float64_is_verified_without_the_precision_check(tmp_path):
    from verify.api import verify

    task = tmp_path / "float_inside.py"
    task.write_text(FLOAT_INSIDE)
    r = verify(str(task), FLOAT_INSIDE + "\n\nclass ModelNew(Model):\n    pass\n", device="cpu", allow_torch=True,
               rounds=2)
    assert r["correct"] and r["reward"] >= 1 and r["hack"] is None, r
    assert r["precision_err"] is None


PLAIN = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(8, 8)]


def get_init_inputs():
    return []
'''
TWIN = PLAIN + "\n\nclass ModelNew(Model):\n    pass\n"


def test_a_broken_task_is_the_tasks_error_not_the_candidates_hack(tmp_path):
    from verify.api import verify

    task = tmp_path / "broken.py"
    task.write_text(PLAIN.replace("class Model", "raise RuntimeError('the task is broken')\n\n\nclass Model", 1))
    r = verify(str(task), TWIN, device="cpu", allow_torch=True, rounds=2)
    assert r["reward"] == -1 and r["hack"] is None and not r["correct"]
    assert r["error"].startswith("the task failed to load: RuntimeError: the task is broken"), r


def test_a_worker_that_dies_before_the_candidate_runs_is_the_verifiers_error(tmp_path, monkeypatch):
    from verify.api import verify

    task = tmp_path / "plain.py"
    task.write_text(PLAIN)
    # a worker that exits at interpreter start, before the verifier's setup: nothing of the candidate ran
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos._exit(3)\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    r = verify(str(task), TWIN, device="cpu", allow_torch=True, rounds=2)
    assert r["reward"] == -1 and r["hack"] is None, r
    assert r["error"].startswith("the verifier's worker failed before the candidate ran (rc 3)"), r
    # the same exit from the candidate's own code is the candidate's: a hack
    monkeypatch.delenv("PYTHONPATH")
    r = verify(str(task), TWIN + "\nimport os\nos._exit(3)\n", device="cpu", allow_torch=True, rounds=2,
               off=("static",))
    assert r["hack"] == "hack: the worker exited (rc 3) without a verdict", r
