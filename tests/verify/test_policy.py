"""Policy tiers: strict refuses every ATen compute but allocation, views, copies, GEMM and convolution (inductor's
fallback operators included); library adds the operators the trainer names and lists each call in `library_calls`;
torch allows anything. Every row says its policy and precision. A bad device is a plain error before any candidate
runs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from opsynth.errors import OpsynthError
from verify.policy import NAMED_SETS, Policy, inductor_fallbacks, make_policy

ROOT = Path(__file__).resolve().parents[2]


def test_strict_refuses_inductor_fallbacks_and_allows_gemm_conv_alloc_views():
    p = make_policy()
    assert p.tier == "strict"
    for op in ("cumsum", "cummax", "logcumsumexp", "_scaled_dot_product_efficient_attention", "_fused_rms_norm",
               "nonzero", "_embedding_bag", "relu", "add"):
        assert not p.allows(op), op
    for op in ("mm", "addmm", "bmm", "linear", "convolution", "empty_like", "view", "zero_", "aten::permute"):
        assert p.allows(op) == "strict", op
    fb = inductor_fallbacks()
    assert len(fb) > 100 and "aten::cumsum" in fb and not any(p.allows(o) for o in fb if o.split("::")[1] in
                                                                   {"cumsum", "cummax", "logcumsumexp"})


def test_library_allows_what_it_names_and_nothing_else():
    p = make_policy(allow=["aten::cumsum"])
    assert p.tier == "library" and p.asked == ("aten::cumsum",)
    assert p.allows("aten::cumsum") == "library" and p.allows("cumsum_") == "library"
    assert not p.allows("cummax") and p.allows("mm") == "strict"
    named = make_policy("library", ["inductor-fallbacks"])
    assert named.allows("logcumsumexp") == "library" and named.allows("_fused_rms_norm") == "library"
    assert not named.allows("relu")
    assert make_policy(allow=["sdpa"]).allows("_scaled_dot_product_flash_attention_for_cpu") == "library"
    assert set(NAMED_SETS) >= {"inductor-fallbacks", "sdpa"}


def test_torch_tier_and_its_alias():
    assert make_policy(allow_torch=True) == Policy("torch")
    assert make_policy("torch").allows("relu") == "torch"


@pytest.mark.parametrize("args", [dict(policy="library"), dict(policy="loose"), dict(allow=["cumsum"]),
                                  dict(allow=["aten::cumsum"], policy="strict"),
                                  dict(allow_torch=True, policy="strict")])
def test_bad_policy_words_are_plain_errors(args):
    with pytest.raises(OpsynthError):
        make_policy(**args)


def test_a_cumsum_left_to_pytorch_is_refused_under_strict_and_paid_under_library(ext_dir, suite_tasks):
    """relu(cumsum(x, 1)) with torch.cumsum and a hand-written relu: strict says which op; library with aten::cumsum
    pays it and lists the call; the candidate that writes both kernels is paid under strict."""
    from verify.api import verify
    from verify.suite import HONEST_CUMSUM, LIBRARY_CUMSUM

    task = suite_tasks["cumsum_relu"]
    strict = verify(task, LIBRARY_CUMSUM, device="cpu", rounds=2, extensions_dir=ext_dir)
    assert strict["reward"] == -1 and "aten::cumsum" in strict["hack"], strict
    assert strict["policy"] == "strict" and strict["library_calls"] == []
    lib = verify(task, LIBRARY_CUMSUM, device="cpu", rounds=2, extensions_dir=ext_dir, allow=["aten::cumsum"])
    assert lib["correct"] and lib["reward"] >= 1 and lib["hack"] is None, lib
    assert lib["policy"] == "library" and lib["allow"] == ["aten::cumsum"] and lib["library_calls"] == ["aten::cumsum"]
    other = verify(task, LIBRARY_CUMSUM, device="cpu", rounds=2, extensions_dir=ext_dir, allow=["aten::cummax"])
    assert other["reward"] == -1 and "aten::cumsum" in other["hack"], other
    own = verify(task, HONEST_CUMSUM, device="cpu", rounds=2, extensions_dir=ext_dir)
    assert own["correct"] and own["reward"] >= 1 and own["library_calls"] == [], own


def test_the_cli_takes_allow_and_policy(ext_dir, suite_tasks, tmp_path):
    from verify.suite import LIBRARY_CUMSUM

    cand = tmp_path / "cand.py"
    cand.write_text(LIBRARY_CUMSUM)
    env = {**__import__("os").environ, "TORCH_EXTENSIONS_DIR": ext_dir}
    run = lambda *a: subprocess.run([sys.executable, "-m", "pipeline.cli", "verify", suite_tasks["cumsum_relu"],  # noqa: E731
                                     str(cand), "--device", "cpu", *a], capture_output=True, text=True, cwd=ROOT,
                                    env=env, timeout=600)
    r = run("--allow", "aten::cumsum")
    assert r.returncode == 0, r.stderr[-2000:]
    row = json.loads(r.stdout.strip().splitlines()[-1])
    assert row["policy"] == "library" and row["library_calls"] == ["aten::cumsum"] and row["reward"] >= 1, row
    assert row["precision"] == "fp32"
    bad = run("--policy", "library")
    assert bad.returncode != 0 and "--allow" in bad.stderr and not bad.stdout.strip()


def test_every_row_states_policy_precision_and_library_calls(suite_task):
    from verify.api import verify

    refused = verify(suite_task, "import os\nclass ModelNew:\n    pass\n", device="cpu", precision="tf32")
    assert refused["hack"] and refused["policy"] == "strict" and refused["precision"] == "tf32"
    assert refused["library_calls"] == [] and refused["allow"] == []


def test_verify_batch_takes_a_library_policy_and_the_table_has_its_columns(ext_dir, suite_tasks, tmp_path):
    import pyarrow.parquet as pq

    from verify.batch import run_pairs_file
    from verify.suite import LIBRARY_CUMSUM

    cand = tmp_path / "c.py"
    cand.write_text(LIBRARY_CUMSUM)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"task": suite_tasks["cumsum_relu"], "candidate": str(cand)}) + "\n")
    out = tmp_path / "r.parquet"
    import os

    os.environ["TORCH_EXTENSIONS_DIR"] = ext_dir
    msg = run_pairs_file(pairs, out, device="cpu", workers=1, allow_torch=False, say=lambda m: None,
                         policy=None, allow=["inductor-fallbacks"])
    rows = pq.read_table(out).to_pylist()
    assert rows[0]["policy"] == "library" and rows[0]["library_calls"] == ["aten::cumsum"], rows[0]
    assert rows[0]["precision"] == "fp32" and rows[0]["reward"] >= 1 and "library policy" in msg


# ------------------------------------------------------------------------------------------------ device check

def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "tpu", "not a device"])
def test_a_missing_gpu_or_a_bad_device_is_a_plain_error_before_any_candidate_runs(device, suite_task, tmp_path):
    if device.startswith("cuda") and _cuda():
        pytest.skip("this machine has a GPU")
    marker = tmp_path / "ran"
    cand = tmp_path / "cand.py"
    # a candidate that would leave a file behind if it ever ran (the static check would refuse it anyway)
    cand.write_text(f"import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    pass\n# {marker}\n")
    r = subprocess.run([sys.executable, "-m", "pipeline.cli", "verify", suite_task, str(cand), "--device", device],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode != 0 and not r.stdout.strip(), (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.strip().splitlines() if "Warning" not in ln and "cpu = _conversion" not in ln]
    assert len(lines) == 1 and "--device" in lines[0] and "Traceback" not in r.stderr, r.stderr
    from verify.api import verify, verify_batch

    with pytest.raises(OpsynthError):
        verify(suite_task, cand, device=device)
    with pytest.raises(OpsynthError):
        verify_batch([(suite_task, cand)], device=device)


def test_a_bad_precision_is_a_plain_error(suite_task):
    from verify.api import verify

    with pytest.raises(OpsynthError):
        verify(suite_task, "class ModelNew:\n    pass\n", device="cpu", precision="fp16")


# ------------------------------------------------------------------------------------------------ precision

@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_precision_sets_the_whole_jobs_matmul_and_convolution_mode(precision):
    import torch

    from verify.worker import _flags, set_precision

    before = _flags()
    try:
        set_precision(precision)
        f = _flags()
        tf32 = precision == "tf32"
        assert f["matmul_tf32"] is tf32 and f["cudnn_tf32"] is tf32
        assert f["fp32_precision"] == ("high" if tf32 else "highest")
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before["matmul_tf32"]
        torch.backends.cudnn.allow_tf32 = before["cudnn_tf32"]
        torch.set_float32_matmul_precision(before["fp32_precision"])


def test_an_honest_candidate_is_paid_under_tf32_and_the_row_says_so(ext_dir, suite_task):
    from verify.api import verify
    from verify.suite import HONEST

    r = verify(suite_task, HONEST, device="cpu", rounds=2, extensions_dir=ext_dir, precision="tf32")
    assert r["correct"] and r["reward"] >= 1 and r["precision"] == "tf32", r


def test_tritons_own_timing_statistics_pass_the_guard_and_a_candidates_do_not(tmp_path):
    """Older Triton releases summarise an autotune's timings with torch.quantile on the CPU: from Triton's own
    testing module that is bookkeeping, from the candidate's code it is compute."""
    import importlib.util

    import torch

    from verify.guard import ComputeGuard, compute_calls

    (tmp_path / "triton").mkdir()
    path = tmp_path / "triton" / "testing.py"
    path.write_text("import torch\n\ndef summarise(times):\n"
                    "    return torch.quantile(torch.tensor(times), torch.tensor([0.5, 0.2, 0.8])).tolist()\n")
    spec = importlib.util.spec_from_file_location("fake_triton_testing", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    g = ComputeGuard()
    with g:
        mod.summarise([1.0, 2.0, 3.0])
    assert compute_calls(g) == []
    g = ComputeGuard()
    with pytest.raises(RuntimeError), g:
        torch.quantile(torch.tensor([1.0, 2.0]), torch.tensor([0.5]))
    assert compute_calls(g)
