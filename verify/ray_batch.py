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
from verify.api import _text, verify_batch
from verify.task import load_task


class _Agent:
    """Ray actor body: `verify_batch` on the GPU (or CPU) Ray gave this actor."""

    def __init__(self, workers: int, kw: dict) -> None:
        self.workers, self.kw = workers, kw

    def run(self, pairs: list[tuple[dict, str]]) -> list[dict]:
        return verify_batch(pairs, workers=self.workers, **self.kw)


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
        order = iter(range(len(shipped)))
        out: list[dict | None] = [None] * len(shipped)
        inflight: dict[Any, tuple[int, list[int], bool]] = {}  # ref -> (actor index, pair indices, a retry)

        def submit(a: int, idx: list[int] | None = None, retry: bool = False) -> None:
            idx = idx if idx is not None else [i for _, i in zip(range(workers), order, strict=False)]
            if idx:
                inflight[actors[a].run.remote([shipped[i] for i in idx])] = (a, idx, retry)

        for a in range(len(actors)):  # two chunks per actor keep its workers fed while results travel
            submit(a)
            submit(a)
        while inflight:
            done, _ = ray.wait(list(inflight), num_returns=1)
            a, idx, retry = inflight.pop(done[0])
            try:
                rows = ray.get(done[0])
            except Exception as e:  # noqa: BLE001 - the actor or its node died: a fresh actor, the chunk again
                with contextlib.suppress(Exception):
                    ray.kill(actors[a])
                actors[a] = agent.remote(workers, kw)
                if not retry:
                    submit(a, idx, retry=True)
                    continue
                rows = [_failed(shipped[i][0], type(e).__name__, device) for i in idx]
            for i, r in zip(idx, rows, strict=True):
                out[i] = r
                if on_result:
                    on_result(i, r)
            submit(a)
        for a in actors:
            with contextlib.suppress(Exception):
                ray.kill(a)
        return [o for o in out if o is not None]
    finally:
        if owns:
            ray.shutdown()
