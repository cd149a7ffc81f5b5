"""Stage 1-2, sample + compose: draw operator graphs and render them as KernelBench-format tasks.

Tasks are written in shards of `run.shard_size`; the task at index i depends only on (seed, i) and the
tasks before it, so a rerun skips finished shards and produces exactly what an uninterrupted run would, and a
run whose n grew (`opsynth sample DIR --add N`) samples only the new indices (its last, short shard again).
Large runs sample on a process pool (operators.sample.sample_parallel), which yields the same tasks.
With sample.prescreen on, every draw is first run on the CPU (operators.prescreen) and the screens of each
shard's draws are written to DIR/prescreen/ just before the tasks shard, so both resume together.
A shard is written when its last task is sampled: tasks of a shard an interrupt cuts short are not kept, and a
rerun samples them again (the same tasks); `UNWRITTEN` says how many that is.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

from pipeline.progress import Progress
from pipeline.rundir.config import Config
from pipeline.rundir.schema import PRESCREEN, TASKS, conform
from pipeline.rundir.store import RunDir

# a worker costs a few seconds to start (torch import, first meta dispatch): below this many tasks per
# process, sampling in this process is faster
MIN_TASKS_PER_PROCESS = 1000
# with the CPU pre-screen a task costs ~0.1 s instead of ~7 ms, so a worker pays for itself far sooner
MIN_SCREENED_TASKS_PER_PROCESS = 100
# run directory -> tasks sampled into the shard not yet written: what an interrupted call loses (a rerun samples
# that shard again, the same tasks), for the command's interrupted line
UNWRITTEN: dict[str, int] = {}


def processes_for(cfg: Config, n_todo: int) -> int:
    """Sampling processes: one per CPU, at most run.workers, and only as many as have enough tasks."""
    per = MIN_TASKS_PER_PROCESS if cfg.sample.prescreen == "off" else MIN_SCREENED_TASKS_PER_PROCESS
    return max(1, min(os.cpu_count() or 1, cfg.run.workers, n_todo // per))


def run(rd: RunDir, cfg: Config, llm: Any = None, processes: int | None = None) -> dict[str, int]:
    """Sample `run.n` tasks into DIR/tasks/; `llm` (LLMSettings) switches on the LLM composer; `processes`
    overrides the pool size (1: in this process)."""
    from operators.prescreen import RECORDS_KEY, Screen
    from operators.sample import sample_parallel, seen_keys

    t0 = time.time()
    n, size = cfg.run.n, cfg.run.shard_size
    todo = todo_shards(rd, n, size)
    redo = shard_ids(rd, todo)
    seen = {k for r in rd.read_rows("tasks", ["task_id", "graph"]) if r["task_id"] not in redo
            for k in seen_keys(cfg.sample, r)}
    composer = cfg.sample.composer
    if composer == "llm" and llm is None:
        from pipeline.errors import OpsynthError

        raise OpsynthError("sample.composer is 'llm' but no endpoint was given; pass --llm-base-url URL --llm-model NAME")
    n_todo = sum(min(size, n - k * size) for k in todo)
    procs = processes if processes is not None else processes_for(cfg, n_todo)
    screen = Screen(cfg) if cfg.sample.prescreen != "off" else None
    screened: list[dict] = []
    with Progress("sample", total=n, initial=n - n_todo) as bar:
        # done shards form a prefix of a run that stopped; runs of consecutive shards left to do are sampled
        # as one stream (one pool), each shard written as soon as its last task arrives
        for first, last in _runs(todo):
            stream = sample_parallel(cfg.sample, cfg.run.seed, range(first * size, min(n, (last + 1) * size)),
                                     seen, procs, screen=screen)
            rows: list[dict] = []
            for i, row in stream:
                rows.append(row)
                UNWRITTEN[str(rd.path)] = len(rows)
                k = i // size
                if i + 1 == min(n, (k + 1) * size):
                    if screen is not None:
                        records = [r for row in rows for r in row.pop(RECORDS_KEY, [])]
                        rd.write_shard("prescreen", k, conform(records, PRESCREEN), PRESCREEN)
                        screened += records
                    _write(rd, k, rows, composer, llm)
                    bar.update(len(rows))
                    rows = []
                    UNWRITTEN[str(rd.path)] = 0
    total = sum(1 for _ in rd.read_rows("tasks", ["task_id"]))
    counts = {}
    if screen is not None:
        counts = {"prescreened": len(screened), "prescreen_flagged": sum(bool(r["reason"]) for r in screened),
                  "prescreen_resampled": sum(r["resampled"] for r in screened),
                  "prescreen_no_verdict": sum(r["status"] != "ok" for r in screened),
                  "prescreen_cpu_s": round(sum(r["cpu_ms"] for r in screened) / 1e3, 3)}
    rd.record_stage("sample", time.time() - t0, sampled=total, seed=cfg.run.seed, processes=procs, **counts)
    return {"sampled": total}


def todo_shards(rd: RunDir, n: int, size: int) -> list[int]:
    """Task shards to (re)sample for `n` tasks: those not done, and a done shard holding fewer tasks than `n` now
    puts in it (the last shard of a run that has grown since; resampling it rewrites the same first tasks)."""
    return [k for k in range(math.ceil(n / size))
            if not rd.is_done("tasks", k) or rd.shard_rows("tasks", k) < min(size, n - k * size)]


def shard_ids(rd: RunDir, shards: list[int]) -> set[str]:
    """task_ids in the done ones of `shards`."""
    import pyarrow.parquet as pq

    return {t for k in shards if rd.is_done("tasks", k)
            for t in pq.read_table(rd.shard_path("tasks", k), columns=["task_id"]).column(0).to_pylist()}


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
