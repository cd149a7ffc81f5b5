"""Duplicates within one dataset: exact (normalized code), structural (graph hash) and near (MinHash-LSH).

Tasks are visited in task_id order; a task is kept unless it duplicates an already kept task, and the
reason names that task, so every drop has its evidence. Cluster ids are the first task_id of each
connected cluster (union-find), recorded per kind.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np


class _UnionFind:
    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)  # the earlier task stays the root


def exact_key(code: str) -> str:
    from filters.contamination import exact_text

    return hashlib.sha256(exact_text(code or "").encode()).hexdigest()[:16]


def near_pairs(minhash: np.ndarray, threshold: float) -> list[tuple[int, int, float]]:
    """(earlier, later, estimated Jaccard) for pairs at or above `threshold`, found with MinHash-LSH."""
    from datasketch import MinHash, MinHashLSH

    from filters.contamination import NUM_PERM

    # LSH only proposes candidates (verified below); above ~0.9 it cannot band, so ask it for more
    lsh = MinHashLSH(threshold=min(threshold, 0.9), num_perm=NUM_PERM)
    empty = (minhash == np.uint32(0xFFFFFFFF)).all(axis=1)
    pairs = []
    for i, hv in enumerate(minhash):
        if empty[i]:
            continue
        m = MinHash(num_perm=NUM_PERM, hashvalues=hv.astype(np.uint64), scheme="affine32")
        for j in lsh.query(m):
            jac = float((minhash[j] == hv).mean())
            if jac >= threshold:
                pairs.append((j, i, jac))
        lsh.insert(i, m)
    return pairs


def dedupe(task_ids: Sequence[str], codes: Sequence[str], graph_hashes: Sequence[str | None] | None,
           minhash: np.ndarray, threshold: float = 0.7) -> list[dict]:
    """One row per task (in task_id order): cluster ids of each kind, keep, reason."""
    order = sorted(range(len(task_ids)), key=lambda i: task_ids[i])
    ids = [task_ids[i] for i in order]
    n = len(ids)
    uf = {k: _UnionFind(n) for k in ("exact", "structural", "near")}
    dup_of: dict[int, list[tuple[str, int, float]]] = {}

    def group(keys: list[str | None], kind: str) -> None:
        first: dict[str, int] = {}
        for pos, key in enumerate(keys):
            if not key:
                continue
            if key in first:
                uf[kind].union(first[key], pos)
                dup_of.setdefault(pos, []).append((kind, first[key], 1.0))
            else:
                first[key] = pos

    group([exact_key(codes[i]) for i in order], "exact")
    if graph_hashes is not None:
        group([graph_hashes[i] for i in order], "structural")
    for a, b, jac in near_pairs(minhash[order], threshold) if n else []:
        uf["near"].union(a, b)
        dup_of.setdefault(b, []).append(("near", a, jac))
    roots = {k: [u.find(p) for p in range(n)] for k, u in uf.items()}
    sizes = {k: np.bincount(r, minlength=n) if n else np.zeros(0, int) for k, r in roots.items()}
    kept: set[int] = set()
    rows = []
    for pos in range(n):
        hit = next(((k, o, j) for k, o, j in dup_of.get(pos, []) if o in kept), None)
        if hit is None:
            kept.add(pos)
        kind, other, jac = hit if hit else ("", -1, 0.0)
        reason = "" if hit is None else (
            f"{kind} duplicate of {ids[other]}" + (f" (minhash jaccard {jac:.3f})" if kind == "near" else ""))
        cluster = {k: ids[roots[k][pos]] if sizes[k][roots[k][pos]] > 1 else None for k in uf}
        rows.append({"task_id": ids[pos], "exact_cluster": cluster["exact"],
                     "structural_cluster": cluster["structural"], "near_cluster": cluster["near"],
                     "keep": hit is None, "reason": reason})
    return rows
