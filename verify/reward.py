"""The CUDA Agent reward: -1 incorrect (or a hack), 3 faster than eager and torch.compile by more than 5%, 2 faster
than eager only, 1 otherwise."""

from __future__ import annotations

MARGIN = 1.05  # "more than 5% faster"


def reward(correct: bool, speedup_eager: float | None, speedup_compile: float | None) -> int:
    """The reward level from correctness and the speedups (baseline time / candidate time)."""
    if not correct:
        return -1
    if speedup_eager is not None and speedup_eager > MARGIN:
        return 3 if speedup_compile is not None and speedup_compile > MARGIN else 2
    return 1
