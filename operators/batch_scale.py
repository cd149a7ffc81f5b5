"""Batch scaling: a node of a batch-linear operator re-run at another batch size, without running it.

A task's graph runs on meta at the batch it was built with, again at the solved batch and at the batch-only
shape variants. For the operators in BATCH_LINEAR, a node whose arguments all lead with the batch (and lay
it outermost in memory) gives at batch B exactly what it gave at batch b, with the output's dim 0 set to B
and every record's FLOPs, activation and output bytes times B/b (parameters and buffers stay). The list
holds the operators that did so, with no exception, over every node of thousands of sampled tasks re-run
at six other batch sizes (batch_linear.json, written by `python -m pinning.batch`;
tests/operators/test_batch_scale.py re-checks each one against meta). Not on it:
operators whose meta trace holds a tensor of fixed size that is not a parameter (Linear reads a transposed
view of its weight, BatchNorm counts num_batches_tracked, SDPA's causal mask), or whose ATen calls depend
on the sizes (einsum's contraction order, quantile).

Guards that the list cannot give: neither batch is 1 (a size-1 dim makes a strided tensor contiguous and
changes the path torch takes), no expression of the node names the batch or holds it as a literal, every
scaled quantity divides by b, and no derived tensor reaches 2**31 elements (where some kernels check
32-bit indexing). Anything else runs on meta as before.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

from operators.cost import OpCost
from operators.flops import LOG_COUNTS

BATCH = "batch_size"
MAX_ELEMENTS = 2**31 - 1
MEMO_SIZE = 50_000
# (static expressions, constants read, argument layouts without the batch) -> (batch, output layout, records)
_MEMO: dict[tuple, tuple] = {}
_LITERALS: dict[tuple, frozenset[int]] = {}
_INT = re.compile(r"(?<![\w.])\d+(?![\w.])")

PIN_FILE = Path(__file__).with_name("batch_linear.json")  # written by python -m pinning.batch
BATCH_LINEAR: frozenset[str] = frozenset(json.loads(PIN_FILE.read_text())["operators"])


def _outer(layout: tuple, batch: int) -> bool:
    """Dim 0 is the batch, laid outermost (or broadcast): its other strides do not depend on it."""
    shape, stride = layout[0], layout[1]
    if not shape or shape[0] != batch:
        return False
    return stride[0] == 0 or all(stride[0] >= s * n for s, n in zip(stride[1:], shape[1:], strict=True))


def _literals(static: tuple) -> frozenset[int]:
    """The integer literals in a node's expressions (a batch among them would not follow a new batch)."""
    hit = _LITERALS.get(static)
    if hit is None:
        if len(_LITERALS) > MEMO_SIZE:
            _LITERALS.clear()
        call, init, tensors = static
        hit = _LITERALS[static] = frozenset(int(m) for e in (call, init, *tensors) if e for m in _INT.findall(e))
    return hit


def batch_key(op: str, key: tuple, names: tuple[str, ...], batch: int | None, listed: bool = True) -> tuple | None:
    """The node memo key with the batch taken out, or None where scaling would not be exact (`listed=False`:
    whether or not `op` is on the list, for the pinning tool)."""
    if (listed and op not in BATCH_LINEAR) or not batch or batch < 2 or BATCH in names:
        return None
    static, consts, args = key
    if not args or not all(_outer(layout, batch) for _, _, layout in args) or batch in _literals(static):
        return None
    return static, consts, tuple((k, src, layout[0][1:], *layout[1:]) for k, src, layout in args)


def remember(bkey: tuple, batch: int, layout: tuple, records: tuple[OpCost, ...]) -> None:
    """What a node gave on meta at `batch`, if its output leads with the batch and every count divides."""
    if bkey in _MEMO or not _outer(layout, batch):
        return
    if any(r.flops % batch or r.family_flops % batch or r.act_bytes % batch or r.out_bytes % batch
           or r.name in LOG_COUNTS for r in records):
        return
    if len(_MEMO) >= MEMO_SIZE:  # drop the oldest quarter
        for k in list(itertools.islice(_MEMO, MEMO_SIZE // 4)):
            del _MEMO[k]
    _MEMO[bkey] = (batch, layout, records)


def derive(bkey: tuple, batch: int) -> tuple[tuple, list[OpCost]] | None:
    """The node at `batch` from a run at another batch: its output layout and records."""
    hit = _MEMO.get(bkey)
    if hit is None or hit[0] == batch:
        return None
    b, (shape, stride, offset, dtype), records = hit
    shape = (batch, *shape[1:])
    if _numel(shape) > MAX_ELEMENTS or any(_numel((batch, *s)) > MAX_ELEMENTS for _, _, s, *_ in bkey[2]):
        return None
    return (shape, stride, offset, dtype), [
        OpCost(r.name, r.flops // b * batch, r.act_bytes // b * batch, r.fixed_bytes, r.out_bytes // b * batch, r.view,
               r.family_flops // b * batch)
        for r in records]


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
