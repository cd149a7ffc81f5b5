"""dedupe: drop duplicates within the dataset among the tasks earlier stages kept.

Writes DIR/dedupe/ (DEDUPE schema: cluster ids per kind, near-duplicate evidence and representatives, keep,
reason) and the stage's verdicts.
"""

from __future__ import annotations

import time
from typing import Any

from pipeline.rundir.config import Config
from pipeline.rundir.schema import DEDUPE
from pipeline.rundir.selection import accepted_task_ids
from pipeline.rundir.store import RunDir


def runtime_window(cfg: Config) -> tuple[float, float]:
    """The eager window whose log-middle picks near-cluster representatives (the sampler's target window when
    the filter's starts at 0, which has no log-middle)."""
    f, s = cfg.filter, cfg.sample
    return (f.min_eager_ms, f.max_eager_ms) if f.min_eager_ms > 0 else (s.target_min_ms, s.target_max_ms)


def inputs(rd: RunDir, cfg: Config) -> dict[str, Any]:
    """Keyword arguments of detectors.dedupe.dedupe for the tasks kept so far (eager_ms from measurements with
    status ok, when the run has them)."""
    keep_ids = set(accepted_task_ids(rd, up_to="dedupe"))
    cols = ["task_id", "code", "graph_hash", "graph", "ops", "predicted_ms"]
    tasks = [t for t in rd.read_rows("tasks", cols) if t["task_id"] in keep_ids]
    eager = {m["task_id"]: m["eager_ms"] for m in rd.read_rows("measurements", ["task_id", "status", "eager_ms"])
             if m["status"] == "ok" and m["eager_ms"] is not None}
    return {"task_ids": [t["task_id"] for t in tasks], "codes": [t["code"] or "" for t in tasks],
            "graph_hashes": [t["graph_hash"] for t in tasks] if cfg.dedupe.structural else None,
            "graphs": [t["graph"] for t in tasks], "ops": [t["ops"] for t in tasks],
            "eager_ms": [eager.get(t["task_id"]) for t in tasks], "predicted_ms": [t["predicted_ms"] for t in tasks],
            "window": runtime_window(cfg), "code_jaccard": cfg.dedupe.near_code_jaccard}


def counts_of(rows: list[dict]) -> dict[str, int]:
    counts = {"considered": len(rows), "dropped": sum(not r["keep"] for r in rows)}
    for kind in ("exact", "structural", "near"):
        counts[f"{kind}_dropped"] = sum(r["reason"].startswith(kind) for r in rows)
        counts[f"{kind}_clusters"] = len({r[f"{kind}_cluster"] for r in rows if r[f"{kind}_cluster"]})
    counts["near_same_graph_dropped"] = sum((r["near_evidence"] or "").startswith("same graph") for r in rows)
    counts["near_same_ops_dropped"] = sum((r["near_evidence"] or "").startswith("same ops") for r in rows)
    sizes: dict[str, int] = {}
    for r in rows:
        if r["near_cluster"]:
            sizes[r["near_cluster"]] = sizes.get(r["near_cluster"], 0) + 1
    counts["largest_near_cluster"] = max(sizes.values(), default=0)
    return counts


def run(rd: RunDir, cfg: Config) -> dict:
    """Dedupe the tasks kept so far: exact, structural if configured, near (same operators doing the same
    thing, star clusters around the task whose predicted runtime, else eager time, is nearest the window's log-middle)."""
    from detectors.dedupe import dedupe

    t0 = time.time()
    rows = dedupe(**inputs(rd, cfg))
    rd.replace_table("dedupe", rows, DEDUPE)
    rd.write_verdicts("dedupe", [{"task_id": r["task_id"], "keep": r["keep"], "reason": r["reason"]} for r in rows])
    counts = counts_of(rows)
    rd.record_stage("dedupe", time.time() - t0, **counts)
    return counts
