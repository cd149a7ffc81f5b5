"""torch.compile's own generated code, wrapped as ModelNew by verify/inductor_corpus.py, is verified correct (every
draw and the shape variant) with reward >= 1: the runtime checks do not punish inductor's output."""

from verify.api import verify
from verify.inductor_corpus import generate
from verify.suite import TASK


def test_inductor_candidate_is_honest(tmp_path):
    src = generate(TASK, "cpu", [{"batch_size": 16}])
    task = {"task_id": "linear_relu", "code": TASK, "shape_variants": [{"batch_size": 16}]}
    res = verify(task, src, device="cpu", off=("static",), rounds=2)
    assert res["correct"] and res["reward"] >= 1 and res["hack"] is None, res
    assert res["draws_passed"] == 7  # 5 fresh, 1 perturbed, 1 shape variant
