"""The order a profile call hands one shard's tasks to its workers: the longest expected first.

Why: a call ends when the last task in flight ends. Once nothing is left to hand out, the GPU idles while the last
few workers compile on the host: call 57's last 17 s ran at under 10% utilisation, one worker compiling a sort for
15 s. Handing a shard's long tasks out first leaves its short ones for the end. The order never crosses a shard
(the unit a stop or a kill loses), so it changes nothing about resumption; only the last few shards a call starts
are ordered as one (profile.longest_first_last_shards; pipeline.stages.profile decides which): the shard boundary
had left one long compile of the run's last shard running alone at the end (a 27 s tail, call 70; 2.5 s with the
last four shards as one, call 71), and so had a call's last shard before its time limit (call 98: 7.5 s; 2.3 s
with the last shards the time left lets start as one, call 102).

What a task is expected to take comes from this call's own results as they arrive: for each operator, the mean
wall seconds of the measured tasks that used it; a task's expectation is the largest over its operators (one slow
operator, a sort or a quantile, makes a slow compile). An operator not seen yet counts as the mean of all tasks
seen; before any result the order is the shard's own.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any


class ExpectedWall:
    """Per-operator mean wall seconds of measured tasks; `order` sorts a shard by what its tasks are expected to
    take, longest first (stable: equal expectations keep the shard's order)."""

    def __init__(self) -> None:
        self._sum: dict[str, float] = defaultdict(float)
        self._n: dict[str, int] = defaultdict(int)
        self._all_sum = 0.0
        self._all_n = 0

    def observe(self, ops: Sequence[str] | None, wall_s: float | None) -> None:
        """One measured task: its operators and its wall seconds (a task without either teaches nothing)."""
        if not ops or wall_s is None or not wall_s > 0:
            return
        for op in set(ops):
            self._sum[op] += wall_s
            self._n[op] += 1
        self._all_sum += wall_s
        self._all_n += 1

    def expected(self, ops: Sequence[str] | None) -> float | None:
        """Seconds expected for a task with these operators; None before any result."""
        if not self._all_n:
            return None
        overall = self._all_sum / self._all_n
        return max((self._sum[op] / self._n[op] if self._n.get(op) else overall for op in ops or ()),
                   default=overall)

    def order(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows (task dicts with `ops`), longest expected first."""
        if not self._all_n:
            return rows
        return sorted(rows, key=lambda t: -(self.expected(t.get("ops")) or 0.0))
