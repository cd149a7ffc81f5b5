"""dedupe: drop duplicates within the dataset among the tasks earlier stages kept.

Writes DIR/dedupe/ (DEDUPE schema: cluster ids per kind, keep, reason) and the stage's verdicts.
"""

from __future__ import annotations

import time

from pipeline.config import Config
from pipeline.schema import DEDUPE
from pipeline.selection import accepted_task_ids
from pipeline.store import RunDir


def run(rd: RunDir, cfg: Config) -> dict:
    """Dedupe the tasks kept so far (exact, structural if configured, near at the MinHash threshold)."""
    from filters.contamination import minhashes
    from filters.dedupe import dedupe

    t0 = time.time()
    keep_ids = set(accepted_task_ids(rd, up_to="dedupe"))
    tasks = [t for t in rd.read_rows("tasks", ["task_id", "code", "graph_hash"]) if t["task_id"] in keep_ids]
    codes = [t["code"] or "" for t in tasks]
    graph = [t["graph_hash"] for t in tasks] if cfg.dedupe.structural else None
    rows = dedupe([t["task_id"] for t in tasks], codes, graph, minhashes(codes, normalize_ids=False), cfg.dedupe.minhash_threshold)
    rd.replace_table("dedupe", rows, DEDUPE)
    rd.write_verdicts("dedupe", [{"task_id": r["task_id"], "keep": r["keep"], "reason": r["reason"]} for r in rows])
    counts = {"considered": len(rows), "dropped": sum(not r["keep"] for r in rows)}
    for kind in ("exact", "structural", "near"):
        counts[f"{kind}_dropped"] = sum(r["reason"].startswith(kind) for r in rows)
        counts[f"{kind}_clusters"] = len({r[f"{kind}_cluster"] for r in rows if r[f"{kind}_cluster"]})
    rd.record_stage("dedupe", time.time() - t0, **counts)
    return counts
