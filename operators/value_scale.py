"""Value-scale rules: draws whose operators cannot matter at the verifier's tolerance (1e-2), predicted from an
operator's parameters and shapes before any task is rendered, so the sampler draws another instead of making a
task the shortcut checks (measures/shortcuts.py) would drop.

- renorm(p, dim, maxnorm=1) scales each slice (all dims but `dim`) to norm 1: each value becomes ~n**(-1/p) of
  an n-value slice, below the tolerance once n**(1/p) > RENORM_MAX_SCALE;
- prod over n values in [0, 1) is ~2**-n: it underflows to ~0 past PROD_MAX_VALUES values;
- softmax / softmin over n >= SOFTMAX_MAX_WIDTH values are each ~1/n: a distance or similarity between them and
  another operand hardly sees them.
"""

from __future__ import annotations

import math
from typing import Any

RENORM_MAX_SCALE = 10.0  # each renormed value stays above ~0.1: far from the tolerance
PROD_MAX_VALUES = 4
SOFTMAX_MAX_WIDTH = 64
SOFTMAXES = frozenset({"F.softmax", "F.softmin", "torch.softmax", "Tensor.softmax"})
DISTANCES = frozenset({"F.pairwise_distance", "F.cosine_similarity", "torch.cdist", "torch.dist"})


def _in_shape(g: Any, values: dict, n: str) -> tuple[int, ...] | None:
    preds = list(g.predecessors(n))
    return tuple(values[preds[0]].shape) if preds else None


def cannot_matter(g: Any, values: dict) -> str:
    """'' or why one operator of graph `g` (node attrs op, params; `values`: each node's output tensor, meta is
    enough) cannot matter at the verifier's tolerance."""
    for n, d in g.nodes(data=True):
        if d.get("kind") != "op":
            continue
        op, p = d["op"], d.get("params") or {}
        shape = _in_shape(g, values, n)
        if not shape or "dim" not in p or not -len(shape) <= int(p["dim"]) < len(shape):
            continue
        width = shape[int(p["dim"])]
        if op == "torch.renorm":
            slice_n = math.prod(shape) // max(width, 1)
            if slice_n ** (1 / float(p.get("p", 2))) > RENORM_MAX_SCALE:
                return f"renorm p={p.get('p')} over {slice_n} values per slice scales each to ~{slice_n ** (-1 / float(p.get('p', 2))):.2g}"
        elif op in ("torch.prod", "Tensor.prod") and width > PROD_MAX_VALUES:
            return f"prod over {width} values in [0, 1) underflows (~2**-{width})"
        elif op in SOFTMAXES and width >= SOFTMAX_MAX_WIDTH and any(g.nodes[s].get("op") in DISTANCES
                                                                   for s in g.successors(n)):
            return f"{op} over {width} values (each ~{1 / width:.2g}) feeds a distance"
    return ""
