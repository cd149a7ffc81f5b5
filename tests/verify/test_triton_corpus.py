"""The hand-written Triton corpus (benchmarks/verify_triton): each pair names a release task and a Triton candidate in
the styles models write (tl.load/tl.store with masks, tl.program_id, triton.cdiv grids, @triton.autotune configs,
reductions with tl.sum/tl.max, a scan with tl.cumsum, a cuBLAS GEMM with a Triton epilogue). Each passes the static
check here, where triton is not installed; on a GPU each is correct and paid under the strict policy (skipped on
CPU)."""

import ast
import json
from collections import Counter
from pathlib import Path

import pytest

from verify.static import check_candidate_source
from verify.task import load_task

ROOT = Path(__file__).resolve().parents[2]
PAIRS = [json.loads(ln) for ln in (ROOT / "benchmarks/verify_triton/pairs.jsonl").read_text().splitlines() if ln]


def _forward_arity(code: str, cls: str) -> int:
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for f in node.body:
                if isinstance(f, ast.FunctionDef) and f.name == "forward":
                    return len(f.args.args) - 1 + (1 if f.args.vararg else 0)
    raise AssertionError(f"no {cls}.forward")


def test_at_least_ten_kernels_in_the_styles_models_write():
    assert len(PAIRS) >= 10 and len({p["task"] for p in PAIRS}) == len(PAIRS)
    assert {"pointwise", "reduction", "norm", "scan", "gemm_epilogue"} <= set(Counter(p["kind"] for p in PAIRS))
    text = "\n".join((ROOT / p["candidate"]).read_text() for p in PAIRS)
    for style in ("tl.load(", "tl.store(", "mask=", "tl.program_id(", "triton.cdiv(", "@triton.autotune(",
                  "triton.Config(", "tl.sum(", "tl.max(", "tl.cumsum(", "@triton.jit"):
        assert style in text, style


@pytest.mark.parametrize("pair", PAIRS, ids=[Path(p["candidate"]).stem for p in PAIRS])
def test_each_triton_candidate_passes_the_static_check_and_takes_the_tasks_inputs(pair):
    src = (ROOT / pair["candidate"]).read_text()
    assert check_candidate_source(src) is None
    assert "import triton.language as tl" in src and "load_inline" not in src
    root, task_id = pair["task"].rsplit(":", 1)
    task = load_task(f"{ROOT / root}:{task_id}")
    assert _forward_arity(src, "ModelNew") == _forward_arity(task["code"], "Model")


def test_the_worker_keeps_a_candidates_source_where_triton_jit_reads_it():
    """@triton.jit reads its function's source back with inspect.getsource: the worker's exec'd candidate has it."""
    import inspect

    from verify.worker import _load

    ns = _load("def kernel(x_ptr, n):\n    return n + 1\n", "candidate")
    assert "return n + 1" in inspect.getsource(ns["kernel"])


@pytest.mark.gpu
@pytest.mark.parametrize("pair", PAIRS, ids=[Path(p["candidate"]).stem for p in PAIRS])
def test_each_triton_kernel_is_correct_and_paid_under_strict_on_the_gpu(pair):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from verify.api import verify

    root, task_id = pair["task"].rsplit(":", 1)
    res = verify(f"{ROOT / root}:{task_id}", ROOT / pair["candidate"], device="cuda")
    assert res["correct"] and res["reward"] >= 1 and res["policy"] == "strict", res
    assert res["library_calls"] == [] and res["hack"] is None, res
