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


def test_generated_code_that_falls_back_to_pytorch_compute_is_not_a_strict_candidate():
    """avg_pool3d and scatter_reduce_ are neither strict nor inductor fallbacks; cumsum is a fallback: a library
    candidate with aten::cumsum allowed."""
    from verify.inductor_corpus import refused_calls

    src = ("buf0 = empty_strided_cuda((4, 4), (4, 1), torch.float32)\nbuf0.zero_()\n"
           "extern_kernels.mm(a, b, out=buf0)\nbuf1 = torch.ops.aten.avg_pool3d.default(x, [2, 2, 2])\n"
           "aten.scatter_reduce_.two(buf2, 0, idx, src, 'sum')\nbuf3.copy_(buf0)\n")
    assert refused_calls(src) == ["avg_pool3d", "scatter_reduce_"]
    assert refused_calls(src.replace("avg_pool3d", "convolution").replace("scatter_reduce_", "mm")) == []
    from verify.inductor_corpus import library_ops

    fb = src.replace("avg_pool3d", "cumsum").replace("scatter_reduce_", "mm")
    assert refused_calls(fb) == ["cumsum"] and library_ops(fb) == ["aten::cumsum"]


def test_the_committed_inductor_corpus_is_strict_policy_code_for_release_tasks():
    import ast
    import json
    from pathlib import Path

    import pyarrow.dataset as ds

    from verify.inductor_corpus import library_ops, refused_calls
    from verify.policy import make_policy

    root = Path(__file__).resolve().parents[2]
    pairs = [json.loads(ln) for ln in (root / "benchmarks/verify_inductor/pairs.jsonl").read_text().splitlines()]
    release = ds.dataset(str(root / "data/releases/opsynth-ops-h200-v1/data")).to_table(columns=["task_id"])
    ids = set(release.column("task_id").to_pylist())
    assert len(pairs) >= 32
    for p in pairs:
        src = (root / p["candidate"]).read_text()
        ast.parse(src)
        assert p["kind"] == "inductor" and p["task"].rsplit(":", 1)[1] in ids
        # strict code calls nothing strict refuses; code that calls fallback operators names them, as library
        assert refused_calls(src, make_policy(p.get("policy"), p.get("allow"))) == [], p
        assert library_ops(src) == p.get("allow", []), p
        assert "kernel path:" not in src  # the generating machine's cache paths are left out
