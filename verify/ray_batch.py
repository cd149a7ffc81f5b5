"""verify_batch over a Ray cluster: one actor per GPU (`num_gpus=1`, so Ray sets its CUDA_VISIBLE_DEVICES), each
running `verify_batch` with `workers` worker subprocesses, its own timing lock and memory gate on its one GPU. The
driver reads every task and candidate once and ships their text, so the nodes need no copy of the dataset. A chunk
whose actor (or node) dies is verified again on a fresh actor once; a second failure gives those pairs an `error`
(reward -1, no hack), never a lost row."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opsynth.errors import OpsynthError, require
from pipeline.gpu.executors import ray_chunks
from verify.api import _text, verify_batch
from verify.task import load_task


class _Agent:
    """Ray actor body: `verify_batch` on the GPU (or CPU) Ray gave this actor."""

    def __init__(self, workers: int, kw: dict) -> None:
        self.workers, self.kw = workers, kw

    def run(self, items: list[tuple[int, tuple[dict, str]]]) -> list[dict]:
        return verify_batch([pair for _, pair in items], workers=self.workers, **self.kw)


def _failed(task: dict, why: str, device: str) -> dict:
    return {"task_id": task["task_id"], "device": device, "correct": False, "reward": -1, "hack": None,
            "error": f"ray actor failed: {why}"}


def verify_batch_ray(pairs: list[tuple[Any, Any]], workers: int = 2, ray_address: str | None = None,
                     on_result: Callable[[int, dict], None] | None = None, **kw: Any) -> list[dict]:
    """Verify (task, candidate) pairs on a Ray cluster (a local one when `ray_address` is None and none is
    running); results in input order. `kw` goes to `verify` (device, allow_torch, ...)."""
    ray = require("ray", "ray")
    device = str(kw.get("device", "cuda"))
    owns = not ray.is_initialized()
    if owns:
        ray.init(address=ray_address, include_dashboard=False, log_to_driver=False)
    try:
        n_gpu = int(ray.cluster_resources().get("GPU", 0))
        if device.startswith("cuda") and n_gpu == 0:
            raise OpsynthError("verify on Ray with device 'cuda' but the Ray cluster has no GPU; start Ray nodes "
                               "with GPUs or pass --device cpu")
        shipped = [(t if isinstance(t, dict) else load_task(t), _text(c) if isinstance(c, str | Path) else c)
                   for t, c in pairs]
        agent = ray.remote(num_gpus=1 if n_gpu else 0, num_cpus=0)(_Agent)
        actors = [agent.remote(workers, kw) for _ in range(max(1, n_gpu))]
        out: list[dict | None] = [None] * len(shipped)
        for chunk, rows, error in ray_chunks(ray, actors, lambda: agent.remote(workers, kw), enumerate(shipped),
                                             workers, retries=1):
            if error is not None:
                rows = [_failed(pair[0], type(error).__name__, device) for _, pair in chunk]
            for (i, _), r in zip(chunk, rows, strict=True):
                out[i] = r
                if on_result:
                    on_result(i, r)
        for a in actors:
            with contextlib.suppress(Exception):
                ray.kill(a)
        return [o for o in out if o is not None]
    finally:
        if owns:
            ray.shutdown()
