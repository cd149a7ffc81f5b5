"""What a published row carries beyond its measurements: which profile call measured it (`profile_call`, an id
whose settings the manifest's `profile_calls` holds) and which split it is in (a held-out `validation` split of
whole operator multisets, never in `train`)."""

from __future__ import annotations

import hashlib
import time
from typing import Any


def profile_calls(run_manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's profile calls as the manifest publishes them: id (p00, p01...), settings changed from the run's
    config ({} for none), its window in Unix seconds (start, end; None where the call did not record when it ended)."""
    calls = ((run_manifest.get("stages") or {}).get("profile") or {}).get("calls") or []
    out = []
    for i, c in enumerate(calls):
        end = None
        if c.get("finished"):
            end = time.mktime(time.strptime(c["finished"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
        out.append({"id": f"p{i:02d}", "settings": c.get("settings") or {},
                    "window": [end - float(c.get("seconds") or 0), end] if end is not None else None,
                    **{k: c[k] for k in ("device", "workers", "gpus", "measured_now") if k in c}})
    return out


def call_of(started_at: float | None, calls: list[dict[str, Any]]) -> str | None:
    """The id of the call whose window holds `started_at` (a measurement's), or None."""
    if started_at is None:
        return None
    for c in calls:
        w = c["window"]
        if w is not None and w[0] - 1 <= started_at <= w[1] + 1:
            return c["id"]
    return None


def multiset_key(ops: list[str] | None) -> str:
    return "|".join(sorted(ops or []))


def validation_ids(rows: list[dict[str, Any]], share: float) -> set[str]:
    """task_ids of the held-out split: every row of each operator multiset whose hash falls in the lowest
    `share` of the hash range, so a multiset is wholly in one split and the choice is stable across releases."""
    if share <= 0:
        return set()

    def in_validation(key: str) -> bool:
        h = int(hashlib.sha256(key.encode()).hexdigest()[:12], 16)
        return h < share * 16**12

    return {r["task_id"] for r in rows if in_validation(multiset_key(r.get("ops_list")))}
