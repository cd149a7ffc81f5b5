"""verify_batch on a local Ray cluster: one actor per (logical) GPU, results in input order, the same verdicts as
the local batch."""

import pytest


def test_ray_batch_spreads_pairs_over_actors_and_keeps_the_order(ext_dir, suite_task):
    pytest.importorskip("ray")
    import ray

    from verify.ray_batch import verify_batch_ray
    from verify.suite import HONEST, ROUTES

    pairs = [(suite_task, HONEST), (suite_task, ROUTES["returns an input"][0]), (suite_task, HONEST)]
    heard = []
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    try:
        rows = verify_batch_ray(pairs, workers=1, device="cpu", extensions_dir=ext_dir,
                                on_result=lambda i, r: heard.append(i))
    finally:
        ray.shutdown()
    assert [r["reward"] >= 1 for r in rows] == [True, False, True], rows
    assert "shares storage" in (rows[1]["hack"] or ""), rows[1]
    assert sorted(heard) == [0, 1, 2]


def test_ray_batch_on_cuda_without_gpus_names_the_fix():
    pytest.importorskip("ray")
    import ray

    from opsynth.errors import OpsynthError
    from verify.ray_batch import verify_batch_ray

    ray.init(num_cpus=1, num_gpus=0, include_dashboard=False, log_to_driver=False)
    try:
        with pytest.raises(OpsynthError, match="no GPU"):
            verify_batch_ray([("t.py", "c.py")], device="cuda")
    finally:
        ray.shutdown()


def _cli(*args, env=None):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=root, capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})})


def test_verify_batch_cli_on_ray_writes_the_table(ext_dir, suite_task, tmp_path):
    pytest.importorskip("ray")
    import json

    import pyarrow.parquet as pq

    from verify.suite import HONEST

    cand = tmp_path / "honest.py"
    cand.write_text(HONEST)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"task": suite_task, "candidate": str(cand)}) + "\n" for _ in range(2)))
    out = tmp_path / "r.parquet"
    p = _cli("verify-batch", str(pairs), "--out", str(out), "--device", "cpu", "--workers", "1",
             "--executor", "ray", env={"TORCH_EXTENSIONS_DIR": ext_dir})
    assert p.returncode == 0, p.stderr[-2000:]
    t = pq.read_table(out).to_pylist()
    assert [r["reward"] >= 1 for r in t] == [True, True] and {r["candidate"] for r in t} == {str(cand)}
    bad = _cli("verify-batch", str(pairs), "--out", str(tmp_path / "x.parquet"), "--device", "cpu",
               "--executor", "slurm")
    assert bad.returncode != 0 and "choose local or ray" in bad.stderr
