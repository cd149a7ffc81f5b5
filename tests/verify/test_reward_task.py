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
