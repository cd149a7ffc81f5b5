"""The independent re-check of a published dataset: a fresh run that re-profiled a random sample of its rows
(`opsynth audit FOLDER --sample N --stages profile,filter --device cuda`) set row by row beside what
was published: the share the filter still accepts, why the others were dropped, and how the fresh eager times
agree with the published ones. `opsynth recheck RUN_DIR AUDIT_DIR` writes it to RUN_DIR/recheck.json, which the
next `opsynth publish` of RUN_DIR puts into the manifest and the card.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from filters.base import reason_kind
from pipeline.errors import OpsynthError
from pipeline.rundir.selection import accepted_task_ids, first_rejection
from pipeline.rundir.store import RunDir

FILE = "recheck.json"


def _quantile(xs: list[float], q: float) -> float | None:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None


def summarize(published: dict[str, float], audit: RunDir) -> dict[str, Any]:
    """The re-check figures of `audit` (a run that imported published rows by task_id and ran at least profile
    and filter) against `published` (task_id -> published eager_ms)."""
    ids = [r["task_id"] for r in audit.read_rows("tasks", ["task_id"])]
    if not ids:
        raise OpsynthError(f"{audit.path} holds no tasks; make it with `opsynth audit FOLDER --sample N "
                           "--stages profile,filter --device cuda --out DIR`")
    unknown = [t for t in ids if t not in published]
    if unknown:
        raise OpsynthError(f"{audit.path} holds {len(unknown)} task(s) not in the published rows (e.g. {unknown[0]}); "
                           "re-check a run made from this dataset's own parquet")
    measured = {r["task_id"]: r for r in audit.read_rows("measurements", ["task_id", "status", "eager_ms",
                                                                          "device", "gpu", "torch_version"])}
    if not measured:
        raise OpsynthError(f"{audit.path} has no measurements; run `opsynth profile {audit.path}` first")
    accepted = set(accepted_task_ids(audit))
    dropped = first_rejection(audit)
    reasons = Counter(f"{dropped[t][0]}: {reason_kind(dropped[t][1])}" for t in ids
                      if t not in accepted and t in dropped)
    ratios = [measured[t]["eager_ms"] / published[t] for t in ids
              if t in measured and measured[t].get("eager_ms") and published[t]]
    dev = [abs(r - 1.0) for r in ratios]
    one = next(iter(measured.values()))
    n_accepted = sum(t in accepted for t in ids)
    manifest = audit.manifest()
    source = manifest.get("audit_source") or {}
    return {
        "rows": len(ids), "accepted": n_accepted, "accepted_share": n_accepted / len(ids),
        "dropped": dict(reasons.most_common()),
        "eager_ratio_median": statistics.median(ratios) if ratios else None,
        "eager_ratio_p10": _quantile(ratios, 0.1), "eager_ratio_p90": _quantile(ratios, 0.9),
        "eager_deviation_median": statistics.median(dev) if dev else None,
        "eager_deviation_p90": _quantile(dev, 0.9),
        "compared": len(ratios), "device": one.get("device"), "gpu": one.get("gpu"),
        "profile_seconds": ((manifest.get("stages") or {}).get("profile") or {}).get("seconds"),
        "torch_version": one.get("torch_version"),
        # where the sample came from, by file name only: the path is the machine's
        "audit_source": {**{k: v for k, v in source.items() if k != "path"}, "file": Path(source.get("path") or "").name},
    }


def published_eager(parquet: Path | str) -> dict[str, float]:
    """task_id -> eager_ms of a published folder's data shards (the ones `opsynth audit FOLDER` imports) or of
    one parquet file."""
    import pyarrow.parquet as pq

    from pipeline.rundir.reference import parquet_shards

    p = Path(parquet)
    files = parquet_shards(p) if p.is_dir() else [p]
    if not files:
        raise OpsynthError(f"{parquet} holds no data/*.parquet; give a folder `opsynth publish` wrote")
    out: dict[str, float] = {}
    for f in files:
        t = pq.read_table(f, columns=["task_id", "eager_ms"])
        out.update(zip(t.column("task_id").to_pylist(), t.column("eager_ms").to_pylist(), strict=True))
    return out


def agreement_line(summary: dict[str, Any]) -> str:
    """How the fresh eager times agree with the published ones, in words."""
    if not summary.get("compared"):
        return "no eager time to compare"
    return (f"eager_ms fresh/published: median ratio {summary['eager_ratio_median']:.3f}, |ratio - 1| median "
            f"{summary['eager_deviation_median']:.1%}, p90 {summary['eager_deviation_p90']:.1%} "
            f"({summary['compared']} rows)")


def write(rd: RunDir, summary: dict[str, Any]) -> Path:
    """Keep the figures beside the run, for its next publish."""
    path = Path(rd.path) / FILE
    path.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return path


def read(rd: RunDir) -> dict[str, Any] | None:
    """The figures `write` kept beside the run, or None when it was never re-checked."""
    path = Path(rd.path) / FILE
    return json.loads(path.read_text()) if path.exists() else None
