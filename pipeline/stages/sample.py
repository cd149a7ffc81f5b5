"""Stage 1-2, sample + compose: draw operator graphs and render them as KernelBench-format tasks.

Tasks are written in shards of `run.shard_size`; the task at index i depends only on (seed, i) and the
tasks before it, so a rerun skips finished shards and produces exactly what an uninterrupted run would.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

from pipeline.config import Config
from pipeline.schema import TASKS, conform
from pipeline.store import RunDir


def run(rd: RunDir, cfg: Config, llm: Any = None) -> dict[str, int]:
    """Sample `run.n` tasks into DIR/tasks/; `llm` (LLMSettings) switches on the LLM composer."""
    from operators.sample import sample_tasks

    t0 = time.time()
    n, size = cfg.run.n, cfg.run.shard_size
    n_shards = math.ceil(n / size)
    seen = {r["task_id"] for r in rd.read_rows("tasks", ["task_id"])}
    todo = [k for k in range(n_shards) if not rd.is_done("tasks", k)]
    composer = cfg.sample.composer
    if composer == "llm" and llm is None:
        from pipeline.errors import OpsynthError

        raise OpsynthError("sample.composer is 'llm' but no endpoint was given; pass --llm-base-url URL --llm-model NAME")
    with tqdm(total=n, initial=n - sum(min(size, n - k * size) for k in todo), desc="sample", unit="task",
              disable=None) as bar:
        for k in todo:
            rows = sample_tasks(cfg.sample, cfg.run.seed, range(k * size, min(n, (k + 1) * size)), seen)
            if composer == "llm":
                from operators.llm_composer import compose_rows

                rows = compose_rows(rows, llm, cache_dir=Path(rd.path) / "llm_cache")
            rd.write_shard("tasks", k, conform(rows, TASKS), TASKS)
            bar.update(len(rows))
    total = sum(1 for _ in rd.read_rows("tasks", ["task_id"]))
    rd.record_stage("sample", time.time() - t0, sampled=total, seed=cfg.run.seed)
    return {"sampled": total}
