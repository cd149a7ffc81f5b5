"""Duplicates within one dataset: exact (normalized code), structural (graph hash) and near (same operators
doing the same thing).

Exact and structural duplicates are equal keys: in task_id order, the first task of a key is kept and every
later one is dropped as its duplicate. Near duplicates are judged only between tasks with the same operator
multiset, and only on evidence that the operators do the same thing: the same canonical graph up to sizes and
literal values (`canonical_graph_key`), or near-identical code once the template every task shares is removed
(`detemplated_tokens`). Code similarity that comes from the shared template is never evidence: two tasks with
different operators are never near duplicates.

Near clusters are stars, not connected components: the task whose runtime sits nearest the log-middle of the
runtime window represents its cluster, and a task is dropped only if it matches that representative directly,
so no task is dropped through a third one.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from typing import Any

# A 3-token shingle over the de-templated text: short enough that one changed token (another dim, another
# draw) moves the Jaccard by only a few shingles, long enough to keep the order of calls and arguments.
SHINGLE = 3
# De-templated code of the same operators in the same calls with the same arguments (up to numbers) scores 1.0.
# Over 3,000 h200 tasks (benchmarks/dedupe_bench.py) pairs with the same ops but another graph (a second input
# instead of a residual, another argument wired) reach at most 0.84, while pairs with different ops reach 0.91
# (aliases one token apart: torch.matmul / torch.linalg.matmul, F.conv1d / torch.conv1d): so the operator
# multiset must match first, and 0.9 sits above every distinct wiring the sampler drew. The code rule then takes
# only copies nearer than that (composed or imported tasks without a graph), never what the template shares.
NEAR_CODE_JACCARD = 0.9
_FIXED = frozenset({"import", "from", "class", "def"})  # template lines kept out of the code comparison
_SUPER = ["super", "(", ")", ".", "__init__", "(", ")"]
_PLAIN = frozenset({",", "[", "]", "(", ")"})


# ---- exact and structural keys ------------------------------------------------------------------------
def exact_key(code: str) -> str:
    from detectors.contamination import exact_text

    return hashlib.sha256(exact_text(code or "").encode()).hexdigest()[:16]


# ---- near-duplicate evidence --------------------------------------------------------------------------
def canonical_graph_key(graph: str | dict | None) -> str | None:
    """Hash of the operator graph up to sizes and literal values: op names, inputs and which argument each
    edge feeds (networkx's Weisfeiler-Lehman hash). None for a missing or unreadable graph."""
    if not graph:
        return None
    try:
        data = json.loads(graph) if isinstance(graph, str) else graph
        nodes = data["nodes"]
        edges = data.get("edges", data.get("links", []))
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(nodes, list) or not nodes:
        return None
    import warnings

    import networkx as nx

    g = nx.DiGraph()
    for n in nodes:
        op = n.get("op") if n.get("kind", "op") == "op" else None
        g.add_node(n["id"], label=f"op:{op}" if op else "input")
    for e in edges:
        g.add_edge(e["source"], e["target"], arg=str(e.get("arg", "")))
    with warnings.catch_warnings():  # networkx 3.5 notes that its directed hashes changed: keys compare in one run
        warnings.simplefilter("ignore", UserWarning)
        return nx.weisfeiler_lehman_graph_hash(g, node_attr="label", edge_attr="arg", iterations=3, digest_size=8)


def ops_multiset(ops: Sequence[str] | None) -> str | None:
    """The task's operators as a sorted multiset key; None when a task has no operator list."""
    return "|".join(sorted(ops)) if ops else None


def _statements(tokens: list[str]) -> list[list[str]]:
    out, cur = [], []
    for t in tokens:
        if t == ";":
            if cur:
                out.append(cur)
            cur = []
        else:
            cur.append(t)
    if cur:
        out.append(cur)
    return out


def _template_line(stmt: list[str]) -> bool:
    """Lines every task carries whatever its operators: imports, class/def headers, super().__init__(),
    returns of plain names (forward's output, get_inputs' list), module-level size constants."""
    if stmt[0] in _FIXED or stmt == _SUPER:
        return True
    if stmt[0] == "return":
        return all(t in _PLAIN or t.isidentifier() for t in stmt[1:])
    return len(stmt) == 3 and stmt[0].isidentifier() and stmt[1] == "=" and stmt[2] == "<num>"


def detemplated_tokens(code: str) -> list[str]:
    """Lexical tokens of what is particular to a task: docstrings, comments and the template's fixed lines
    removed, numbers normalised (sizes and literal values do not count)."""
    from detectors.contamination import code_tokens

    body = [s for s in _statements(code_tokens(code or "")) if not _template_line(s)]
    return [t for s in body for t in (*s, ";")]


def shingles(tokens: list[str]) -> frozenset[str]:
    if len(tokens) < SHINGLE:
        return frozenset([" ".join(tokens)]) if tokens else frozenset()
    return frozenset(" ".join(tokens[i : i + SHINGLE]) for i in range(len(tokens) - SHINGLE + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Exact Jaccard of two shingle sets (0 when either is empty: no code is no evidence)."""
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


# ---- representatives --------------------------------------------------------------------------------
# Measured times of one task differ ~1% between runs, at times up to 6%: where only measured times place the
# members, runtimes within this much of the nearest count as ties, broken by task_id.
RUNTIME_TIE_PCT = 10
RUNTIME_TIE = math.log(1 + RUNTIME_TIE_PCT / 100)


def log_middle(window: tuple[float, float]) -> float:
    lo, hi = window
    if not 0 < lo < hi:
        raise ValueError(f"runtime window {lo:g}-{hi:g} ms has no log-middle; give 0 < low < high")
    return math.sqrt(lo * hi)


def _runtime(eager: float | None, predicted: float | None) -> tuple[float | None, str]:
    """The runtime that places a task in the window: the sampler's prediction (a function of the task alone, so
    re-profiling the same tasks keeps every representative: with measured times, two members 6% apart can swap
    places between two runs of the same tasks), else the measured eager time (imported tasks carry no
    prediction)."""
    if predicted is not None and predicted > 0 and math.isfinite(predicted):
        return predicted, "predicted"
    if eager is not None and eager > 0 and math.isfinite(eager):
        return eager, "eager"
    return None, ""


# ---- the decision -----------------------------------------------------------------------------------
def dedupe(task_ids: Sequence[str], codes: Sequence[str], graph_hashes: Sequence[str | None] | None = None, *,
           graphs: Sequence[str | None] | None = None, ops: Sequence[Sequence[str] | None] | None = None,
           eager_ms: Sequence[float | None] | None = None, predicted_ms: Sequence[float | None] | None = None,
           window: tuple[float, float] = (1.0, 100.0), code_jaccard: float = NEAR_CODE_JACCARD) -> list[dict]:
    """One row per task (in task_id order): cluster ids of each kind, the near-duplicate evidence, keep, reason.

    `graphs` (node-link JSON) and `ops` give the near-duplicate evidence; `predicted_ms` (else `eager_ms`, for a
    task without a prediction) against the log-middle of `window` (> 0) picks each near cluster's representative."""
    n = len(task_ids)
    order = sorted(range(n), key=lambda i: task_ids[i])
    ids = [task_ids[i] for i in order]

    def pick(col: Sequence[Any] | None) -> list[Any]:
        return [None] * n if col is None else [col[i] for i in order]

    keys = {"exact": [exact_key(codes[i]) for i in order], "structural": pick(graph_hashes)}
    rows = [{"task_id": t, "exact_cluster": None, "structural_cluster": None, "near_cluster": None,
             "canonical_graph": None, "near_evidence": None, "near_code_jaccard": None,
             "representative_reason": None, "keep": True, "reason": ""} for t in ids]
    for kind, col in keys.items():
        first: dict[str, int] = {}
        sizes: dict[str, int] = {}
        for pos, key in enumerate(col):
            if key:
                first.setdefault(key, pos)
                sizes[key] = sizes.get(key, 0) + 1
        for pos, key in enumerate(col):
            if key and sizes[key] > 1:
                rows[pos][f"{kind}_cluster"] = ids[first[key]]
    # first kept task of each key: a task dropped under one kind cannot make another task's duplicate kept
    kept_by: dict[str, dict[str, int]] = {"exact": {}, "structural": {}}
    for pos in range(n):
        for kind in ("exact", "structural"):
            key = keys[kind][pos]
            if key and key in kept_by[kind]:
                rows[pos].update(keep=False, reason=f"{kind} duplicate of {ids[kept_by[kind][key]]}")
                break
        else:
            for kind in ("exact", "structural"):
                if keys[kind][pos]:
                    kept_by[kind][keys[kind][pos]] = pos

    gkeys = [canonical_graph_key(g) for g in pick(graphs)]
    op_list = pick(ops)
    for pos, k in enumerate(gkeys):
        rows[pos]["canonical_graph"] = k
    _near(rows, ids, [pos for pos in range(n) if rows[pos]["keep"]], gkeys,
          [ops_multiset(o) for o in op_list], [codes[i] for i in order],
          [_runtime(e, p) for e, p in zip(pick(eager_ms), pick(predicted_ms), strict=True)], window, code_jaccard)
    return rows


def _near(rows: list[dict], ids: list[str], live: list[int], gkeys: list[str | None], multisets: list[str | None],
          codes: list[str], runtimes: list[tuple[float | None, str]], window: tuple[float, float],
          threshold: float) -> None:
    """Star clusters among the `live` positions, written into `rows`."""
    mid = log_middle(window)
    groups: dict[str, list[int]] = {}
    for pos in live:
        if multisets[pos]:
            groups.setdefault(multisets[pos], []).append(pos)
    sh: dict[int, frozenset[str]] = {}

    def code_of(pos: int) -> frozenset[str]:
        if pos not in sh:
            sh[pos] = shingles(detemplated_tokens(codes[pos]))
        return sh[pos]

    def distance(pos: int) -> float:
        ms = runtimes[pos][0]
        return abs(math.log(ms / mid)) if ms is not None else math.inf

    for members in groups.values():
        if len(members) < 2:
            continue
        waiting = sorted(members, key=lambda p: ids[p])
        while waiting:
            best = min(distance(p) for p in waiting)
            rep = next(p for p in waiting if distance(p) <= best + RUNTIME_TIE)  # first task_id among the ties
            rest, cluster = [], []
            for pos in waiting:
                if pos == rep:
                    continue
                jac = jaccard(code_of(rep), code_of(pos))
                if gkeys[rep] and gkeys[pos] == gkeys[rep]:
                    evidence = "same graph up to sizes"
                elif jac >= threshold:
                    evidence = f"same ops (de-templated code jaccard {jac:.3f})"
                else:
                    rest.append(pos)
                    continue
                cluster.append(pos)
                rows[pos].update(keep=False, near_cluster=ids[rep], near_evidence=evidence, near_code_jaccard=jac,
                                 reason=f"near duplicate of {ids[rep]}: {evidence}")
            if cluster:
                ms, source = runtimes[rep]
                why = (f"{source} {ms:.3g} ms nearest the window's log-middle {mid:.3g} ms among {len(cluster) + 1} "
                       f"(within {RUNTIME_TIE_PCT}% of the nearest: first task_id)"
                       if ms is not None else f"no runtime known: first task_id among {len(cluster) + 1}")
                rows[rep].update(near_cluster=ids[rep], representative_reason=why)
            waiting = rest
