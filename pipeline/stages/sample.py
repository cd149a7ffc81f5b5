"""Stage 1-2, sample + compose: draw operator graphs and render them as KernelBench-format tasks.

Tasks are written in shards of `run.shard_size`; the task at index i depends only on (seed, i) and the
tasks before it, so a rerun skips finished shards and produces exactly what an uninterrupted run would.
Large runs sample on a process pool (operators.sample.sample_parallel), which yields the same tasks.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

from pipeline.config import Config
from pipeline.progress import Progress
from pipeline.schema import TASKS, conform
from pipeline.store import RunDir

# a worker costs a few seconds to start (torch import, first meta dispatch): below this many tasks per
# process, sampling in this process is faster
MIN_TASKS_PER_PROCESS = 1000


def processes_for(cfg: Config, n_todo: int) -> int:
    """Sampling processes: one per CPU, at most run.workers, and only as many as have enough tasks."""
    return max(1, min(os.cpu_count() or 1, cfg.run.workers, n_todo // MIN_TASKS_PER_PROCESS))


def run(rd: RunDir, cfg: Config, llm: Any = None, processes: int | None = None) -> dict[str, int]:
    """Sample `run.n` tasks into DIR/tasks/; `llm` (LLMSettings) switches on the LLM composer; `processes`
    overrides the pool size (1: in this process)."""
    from operators.sample import sample_parallel

    t0 = time.time()
    n, size = cfg.run.n, cfg.run.shard_size
    n_shards = math.ceil(n / size)
    seen = {r["task_id"] for r in rd.read_rows("tasks", ["task_id"])}
    todo = [k for k in range(n_shards) if not rd.is_done("tasks", k)]
    composer = cfg.sample.composer
    if composer == "llm" and llm is None:
        from pipeline.errors import OpsynthError

        raise OpsynthError("sample.composer is 'llm' but no endpoint was given; pass --llm-base-url URL --llm-model NAME")
    n_todo = sum(min(size, n - k * size) for k in todo)
    procs = processes if processes is not None else processes_for(cfg, n_todo)
    with Progress("sample", total=n, initial=n - n_todo) as bar:
        # done shards form a prefix of a run that stopped; runs of consecutive shards left to do are sampled
        # as one stream (one pool), each shard written as soon as its last task arrives
        for first, last in _runs(todo):
            stream = sample_parallel(cfg.sample, cfg.run.seed, range(first * size, min(n, (last + 1) * size)),
                                     seen, procs)
            rows: list[dict] = []
            for i, row in stream:
                rows.append(row)
                k = i // size
                if i + 1 == min(n, (k + 1) * size):
                    _write(rd, k, rows, composer, llm)
                    bar.update(len(rows))
                    rows = []
    total = sum(1 for _ in rd.read_rows("tasks", ["task_id"]))
    rd.record_stage("sample", time.time() - t0, sampled=total, seed=cfg.run.seed, processes=procs)
    return {"sampled": total}


def _runs(todo: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for k in todo:
        if out and out[-1][1] == k - 1:
            out[-1] = (out[-1][0], k)
        else:
            out.append((k, k))
    return out


def _write(rd: RunDir, k: int, rows: list[dict], composer: str, llm: Any) -> None:
    if composer == "llm":
        from operators.llm_composer import compose_rows

        rows = compose_rows(rows, llm, cache_dir=Path(rd.path) / "llm_cache")
    rd.write_shard("tasks", k, conform(rows, TASKS), TASKS)
