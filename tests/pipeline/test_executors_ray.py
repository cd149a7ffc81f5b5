"""The Ray executor runs the same work as the local one, on a local Ray cluster with logical GPUs."""

import importlib.util
import sys
from pathlib import Path

import pytest

from pipeline.gpu.executors import make_executor

# the planted tasks live beside this file; importlib mode has no package to import them from
_spec = importlib.util.spec_from_file_location("planted", Path(__file__).with_name("test_harness_planted.py"))
planted = importlib.util.module_from_spec(_spec)
sys.modules["planted"] = planted
_spec.loader.exec_module(planted)


def test_ray_executor_matches_local():
    pytest.importorskip("ray")
    import ray

    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with make_executor("ray", device="cpu", workers=1, settings=planted.settings()) as ex:
            assert len(ex.actors) == 2  # one actor per (logical) GPU
            results = {r["task_id"]: r["status"] for r in ex.imap_unordered(planted.tasks())}
    finally:
        ray.shutdown()
    expected = {f"good{k}": "ok" for k in range(4)} | {n: s for n, (_, s) in planted.PLANTS.items()}
    assert results == expected
