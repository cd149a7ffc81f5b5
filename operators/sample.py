"""The sampler's public entry: `sample_tasks` draws graphs, sizes them, renders them and checks their labels.

A task is drawn from an RNG seeded by (seed, index) and, on retry, (seed, index, attempt): whatever else
runs, index i always gives the same task. Chains apply ops one after another; DAGs take one of three
shapes: a residual (x -> body -> join(x, body)), two branches that rejoin, or two inputs that meet,
each with a trunk before and a tail after. Every op is evaluated on meta as it is added; an op that
fails there is resampled, never written. A draw whose ATen op signature equals a reference problem's
(`avoid_reference`) is resampled too: decontaminate would drop it before the GPU.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import math
import random
import warnings
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from hashlib import blake2b

import networkx as nx

from detectors.contamination import op_signature
from operators.catalog import CATEGORIES, REGISTRY, OpSpec, sampleable
from operators.cost import CostMode, aten_names, peak_bytes, predict_ms
from operators.graph import (
    DIM_NAMES,
    SEQ_NAMES,
    TOKEN_NAMES,
    GraphBuilder,
    OpFailed,
    execute,
    is_dag,
    op_nodes,
    records_cost,
)
from operators.labels import check_labels, require_pinned
from operators.peak import draw_peak
from operators.render import render, task_name
from operators.sizing import base_sizes, output_cap, per_sample_budget, solve_batch
from operators.spec import accepts
from operators.value_scale import cannot_matter, normalizes_normal, pole_at_zero

MAX_ATTEMPTS = 40
OP_TRIES = 24
SPATIAL = ("length", "height", "width", "depth", "seq_len")
# A task sized for the GPU reads ~1e8 random values; an output of a few numbers is then a statistic of them,
# the same for every draw to well within the verifier's 1e-2, so a kernel returning constants passes.
MIN_OUTPUT_NUMEL = 32


class TaskRejected(Exception):
    """This draw cannot become a task (no op fits, off the runtime window, labels disagree)."""


@dataclass
class Stats:
    """Why draws were thrown away; the benchmark reports these."""

    attempts: int = 0
    duplicates: int = 0
    label_mismatches: int = 0
    rejected: dict | None = None

    def reject(self, why: str) -> None:
        self.rejected = self.rejected or {}
        key = why.split(":")[0]
        self.rejected[key] = self.rejected.get(key, 0) + 1


@lru_cache(maxsize=16)
def _pool(categories: tuple[str, ...], weights: tuple[tuple[str, float], ...]) -> tuple:
    specs = sampleable(categories)
    require_pinned([s.name for s in specs])
    by_cat: dict[str, list[OpSpec]] = {}
    by_join: dict[str, list[OpSpec]] = {}
    for s in specs:
        by_cat.setdefault(s.category, []).append(s)
        if s.join:
            by_join.setdefault(s.category, []).append(s)
    w = dict(weights)
    cats = [c for c in CATEGORIES if c in by_cat and w.get(c, 1.0) > 0]
    jcats = [c for c in cats if c in by_join]
    return cats, [w.get(c, 1.0) for c in cats], by_cat, jcats, [w.get(c, 1.0) for c in jcats], by_join


class _Draw:
    def __init__(self, cfg, rng: random.Random) -> None:
        self.cfg, self.rng = cfg, rng
        pool = _pool(tuple(cfg.categories), tuple(sorted(cfg.category_weights.items())))
        self.cats, self.weights, self.by_cat, self.jcats, self.jweights, self.by_join = pool
        self.b = GraphBuilder(rng)

    def pick(self, rank: int | None, domain: str, last: bool, join: bool = False) -> OpSpec:
        """Category by weight, then an operator uniformly within it; rank None: a first operator."""
        cats, weights, by_cat = (self.jcats, self.jweights, self.by_join) if join else (
            self.cats, self.weights, self.by_cat)
        if not cats:
            raise TaskRejected("no join operator in the allowed categories")
        for _ in range(64):
            spec = self.rng.choice(by_cat[self.rng.choices(cats, weights)[0]])
            if spec.terminal and not last:
                continue
            if rank is None:
                return spec
            if spec.token_input or not accepts(spec, rank, domain):
                continue
            return spec
        raise TaskRejected("no operator fits")

    def start(self, preserve: bool = False) -> str:
        """Create the input from a first operator's needs and apply it; returns the op's node."""
        for _ in range(OP_TRIES):
            spec = self.pick(None, "any", last=self.k == 1)
            cp = self.b.checkpoint()
            rank = 2 if spec.token_input else self.rng.choice(spec.ranks)
            layout = "tokens" if spec.token_input else (spec.layout if rank == 3 else "channels")
            per = per_sample_budget(self.rng, self.target_ms, self.cfg.bandwidth_gbps, self.k) * self.shrink
            sizes = base_sizes(self.rng, rank, layout, per)
            batch = self.rng.choice([8, 16, 32])
            names = TOKEN_NAMES if layout == "tokens" else SEQ_NAMES if layout == "seq" else DIM_NAMES[rank]
            if spec.token_input:
                x = self._token_input(spec, names, [batch, *sizes])
            else:
                draw = "rand" if spec.needs != "any" else self.rng.choice(["randn", "randn", "rand"])
                if draw == "rand" and "unit" in spec.flat_on:
                    draw = "randn"
                if getattr(self.cfg, "value_scale_rule", False):
                    if draw == "randn" and normalizes_normal(spec.name):
                        draw = "rand"  # a norm of ~N(0, 1) values is about the identity: give it values it changes
                    elif draw == "rand" and pole_at_zero(spec.name):
                        draw = "rand1"  # a real-size torch.rand input holds exact zeros: [1, 2) keeps it finite
                x = self.b.add_input(names, [batch, *sizes], draw)
            self.x = x
            try:
                return self.b.try_op(spec, x, preserve=preserve)
            except OpFailed:
                self.b.rollback(cp)
        raise TaskRejected("no first operator fits")

    def _token_input(self, spec: OpSpec, names: tuple[str, ...], sizes: list[int]) -> str:
        """Index input for an embedding: its range is the vocabulary the op's sampler draws, as a constant."""
        vocab = spec.params(random.Random(self.rng.random()), ())[spec.token_input]
        self.b.const(spec.token_input, vocab)
        return self.b.add_input(names, sizes, "randint", high=spec.token_input)

    def op(self, x: str, last: bool, preserve: bool = False) -> str:
        rank, dom = len(self.b.dims[x]), self.b.domain[x]
        for _ in range(OP_TRIES):
            spec = self.pick(rank, dom, last)
            try:
                return self.b.try_op(spec, x, preserve=preserve, bias=spec.join and self.rng.random() < 0.5)
            except OpFailed:
                continue
        raise TaskRejected("no operator fits the tensor")

    def join(self, a: str, b: str, last: bool) -> str:
        rank, dom = len(self.b.dims[a]), self.b.domain[a]
        for _ in range(OP_TRIES):
            spec = self.pick(rank, dom, last, join=True)
            try:
                return self.b.try_op(spec, a, join_with=b)
            except OpFailed:
                continue
        raise TaskRejected("no join fits")


def _split(rng: random.Random, n: int, parts: int) -> list[int]:
    cuts = sorted(rng.randint(0, n) for _ in range(parts - 1))
    return [b - a for a, b in zip([0, *cuts], [*cuts, n], strict=True)]


def build_graph(cfg, rng: random.Random, k: int, dag: bool, target_ms: float, shrink: float = 1.0) -> GraphBuilder:
    d = _Draw(cfg, rng)
    d.k, d.target_ms, d.shrink = k, target_ms, shrink
    if not dag:
        cur = d.start()
        for j in range(1, k):
            cur = d.op(cur, last=j == k - 1)
        d.b.finish(cur)
        return d.b
    pattern = rng.choice(["residual", "branch", "inputs"])
    if pattern == "branch" and k < 3:
        pattern = "residual"
    rest = k - 1  # ops besides the join
    need = 2 if pattern == "branch" else 1
    trunk, tail, extra = _split(rng, rest - need, 3)
    b1 = 1 + extra if pattern != "branch" else 1 + extra // 2
    b2 = 0 if pattern == "residual" else (1 + extra - extra // 2 if pattern == "branch" else rng.randint(0, extra))
    if pattern == "inputs":  # a second input of the trunk's output shape meets the first branch
        b1 = 1 + extra - b2
        if trunk:
            h = d.start()
            for _ in range(trunk - 1):
                h = d.op(h, last=False)
            a = h
        else:
            a = h = d.start(preserve=True)
            b1 -= 1
        for _ in range(b1):
            a = d.op(a, last=False, preserve=True)
        y = d.b._input(d.b.dims[h], d.b.g.nodes[d.x]["draw"])
        bb = y
        for _ in range(b2):
            bb = d.op(bb, last=False, preserve=True)
        cur = d.join(a, bb, last=tail == 0)
    else:
        if trunk:
            h = d.start()
            for _ in range(trunk - 1):
                h = d.op(h, last=False)
            a = d.op(h, last=False, preserve=True)
        else:
            a = d.start(preserve=True)
            h = d.x
        for _ in range(b1 - 1):
            a = d.op(a, last=False, preserve=True)
        bb = h
        for _ in range(b2):
            bb = d.op(bb, last=False, preserve=True)
        cur = d.join(a, bb, last=tail == 0)
    for j in range(tail):
        cur = d.op(cur, last=j == tail - 1)
    d.b.finish(cur)
    return d.b


def single_op_graph(spec: OpSpec, rng: random.Random, rank: int, unit_last: bool = False) -> nx.DiGraph:
    """One operator on a small input of `rank` (catalog validation, label pins, tests); with `unit_last` the input's
    last dim is 1, as a keepdim reduction upstream hands it over."""
    b = GraphBuilder(rng)
    layout = "tokens" if spec.token_input else (spec.layout if rank == 3 else "channels")
    sizes = base_sizes(rng, 2 if spec.token_input else rank, layout, rng.choice([256, 1024, 4096]))
    if unit_last and not spec.token_input:
        sizes[-1] = 1
    names = TOKEN_NAMES if layout == "tokens" else SEQ_NAMES if layout == "seq" else DIM_NAMES[rank]
    if spec.token_input:
        b.const(spec.token_input, spec.params(random.Random(rng.random()), ())[spec.token_input])
        x = b.add_input(names, [4, *sizes], "randint", high=spec.token_input)
    else:
        x = b.add_input(names, [4, *sizes], "rand" if spec.needs != "any" else "randn")
    out = b.try_op(spec, x)
    return b.finish(out)


def sized_op_graph(spec: OpSpec, rng: random.Random, rank: int, cfg) -> tuple[nx.DiGraph, int]:
    """One operator alone at the sizes the sampler gives a first operator under the sample section `cfg`
    (a per-sample budget for a runtime target, a batch of 8-32), and the batch solved for that target under
    the memory cap, checked on meta (label pins trace device kernels chosen by size). Raises when it does not
    fit."""
    target = math.exp(rng.uniform(math.log(cfg.target_min_ms), math.log(cfg.target_max_ms)))
    b = GraphBuilder(rng)
    rank = 2 if spec.token_input else rank
    layout = "tokens" if spec.token_input else (spec.layout if rank == 3 else "channels")
    sizes = base_sizes(rng, rank, layout, per_sample_budget(rng, target, cfg.bandwidth_gbps, 1))
    batch0 = rng.choice([8, 16, 32])
    names = TOKEN_NAMES if layout == "tokens" else SEQ_NAMES if layout == "seq" else DIM_NAMES[rank]
    if spec.token_input:
        b.const(spec.token_input, spec.params(random.Random(rng.random()), ())[spec.token_input])
        x = b.add_input(names, [batch0, *sizes], "randint", high=spec.token_input)
    else:
        x = b.add_input(names, [batch0, *sizes], "rand" if spec.needs != "any" else "randn")
    g = b.finish(b.try_op(spec, x))
    inputs_bytes = sum(v.numel() * v.element_size() for n, v in b.values.items() if g.nodes[n]["kind"] == "input")
    fixed = sum(t.numel() * t.element_size() for t in b._fixed_tensors())
    cap = int(cfg.max_peak_memory_gb * cfg.peak_headroom * 2**30)
    batch = solve_batch(b.mode.records, batch0, target, cap, inputs_bytes, fixed, cfg.bandwidth_gbps,
                        cfg.tflops_fp32, cfg.launch_overhead_us)
    # re-run at that batch and held to the memory cap as sample_one holds a task (not every op is linear in the
    # batch); the runtime window is not asked: a size just under it runs the same kernels. The tensors count
    # too: the cost records miss casts (F.one_hot(x).float() counts as bool), so a batch over the cap by them
    # shrinks once
    for _ in range(2):
        mode = CostMode()
        _, values = execute(g, {**g.graph["constants"], "batch_size": batch}, mode)
        in_bytes = sum(values[n].numel() * values[n].element_size() for n, d in g.nodes(data=True)
                       if d["kind"] == "input")
        need = max(peak_bytes(mode.records, in_bytes, fixed), sum(v.nbytes for v in values.values()) + fixed)
        if need <= cap:
            return g, batch
        batch = max(1, int(batch * cap / need * 0.9))
    raise TaskRejected("over the memory cap")


def _hashes(g: nx.DiGraph) -> tuple[str, str]:
    """(canonical graph hash over ops, params and shapes; task_id over that hash and the constants)."""
    labels = {}
    for n, d in g.nodes(data=True):
        if d["kind"] == "input":
            labels[n] = f"input|{d['draw']}|{d['shape']}"
        else:
            labels[n] = f"{d['op']}|{json.dumps(d['params'], sort_keys=True)}|{d['call'].count('self.')}|{d['shape']}"
    wl = wl_hash(labels, [(u, v, str(d["arg"])) for u, v, d in g.edges(data=True)])
    shapes = json.dumps(sorted(g.graph["constants"].items()))
    task_id = hashlib.sha256(f"{wl}|{shapes}".encode()).hexdigest()[:16]
    return wl, task_id


def wl_hash(labels: dict[str, str], edges: list[tuple[str, str, str]], iterations: int = 3) -> str:
    """networkx's directed `weisfeiler_lehman_graph_hash(node_attr=..., edge_attr=...)`, digit for digit,
    without building a second graph (a test compares the two)."""
    succ: dict[str, list[tuple[str, str]]] = {n: [] for n in labels}
    pred: dict[str, list[tuple[str, str]]] = {n: [] for n in labels}
    for u, v, arg in edges:
        succ[u].append((arg, v))
        pred[v].append((arg, u))
    counts: list[tuple[str, int]] = []
    for _ in range(iterations):
        new = {}
        for n, label in labels.items():
            out = "".join(sorted(a + labels[v] for a, v in succ[n]))
            inn = "".join(sorted(a + labels[u] for a, u in pred[n]))
            new[n] = blake2b((label + out + inn).encode("ascii"), digest_size=16).hexdigest()
        labels = new
        counts.extend(sorted(Counter(new.values()).items()))
    return blake2b(str(tuple(counts)).encode("ascii"), digest_size=16).hexdigest()


def _graph_json(g: nx.DiGraph) -> str:
    """networkx's node_link_data(edges="edges") as JSON, built directly (key order kept: constants render in
    order)."""
    return json.dumps({"directed": True, "multigraph": False, "graph": g.graph,
                       "nodes": [{**d, "id": n} for n, d in g.nodes(data=True)],
                       "edges": [{**d, "source": u, "target": v} for u, v, d in g.edges(data=True)]})


def _variants(g: nx.DiGraph, consts: dict[str, int], built_batch: int = 0) -> list[dict[str, int]]:
    """Two other size settings the task runs on (verified on meta), smaller than the sampled one.

    The batch the graph was built at comes first when smaller: its ops replay from the node memo."""
    batch = consts.get("batch_size", 1)
    spatial = {n: consts[n] for n in SPATIAL if n in consts}
    cands = [{"batch_size": built_batch}] if 0 < built_batch < batch else []
    if spatial:
        cands.append({"batch_size": max(1, batch // 2), **{n: max(4, v * 3 // 4) for n, v in spatial.items()}})
    cands += [{"batch_size": max(1, batch // 2)}, {"batch_size": max(1, batch // 4)},
              {"batch_size": max(1, batch - 1)}]
    if spatial:
        cands.append({n: max(4, v // 2) for n, v in spatial.items()})
    out: list[dict[str, int]] = []
    for c in cands:
        if c == {k: consts.get(k) for k in c} or c in out:
            continue
        try:
            execute(g, {**consts, **c}, CostMode())
        except Exception:  # noqa: BLE001 - a variant that does not run is skipped
            continue
        out.append(c)
        if len(out) == 2:
            break
    return out


def _draw_peak(g: nx.DiGraph, values: dict) -> int:
    """Peak bytes of get_inputs drawing the graph's inputs (operators.peak.draw_peak), in node order."""
    return draw_peak((d["draw"], values[n].numel(), values[n].element_size())
                     for n, d in g.nodes(data=True) if d["kind"] == "input")


def sample_one(cfg, rng: random.Random, task_seed: int, stats: Stats | None = None) -> dict:
    lo, hi = cfg.min_ops, cfg.max_ops
    k = rng.choices(range(lo, hi + 1), cfg.depth_weights[lo - 1:hi])[0]
    dag = k >= 2 and rng.random() < cfg.dag_share
    target = math.exp(rng.uniform(math.log(cfg.target_min_ms), math.log(cfg.target_max_ms)))
    cap = int(cfg.max_peak_memory_gb * cfg.peak_headroom * 2**30)
    bw, tf, launch = cfg.bandwidth_gbps, cfg.tflops_fp32, cfg.launch_overhead_us
    shrink = 1.0
    for _ in range(3):
        b = build_graph(cfg, rng, k, dag, target, shrink)
        g = b.g
        consts = dict(g.graph["constants"])
        batch0 = consts["batch_size"]
        ins = [v for n, v in b.values.items() if g.nodes[n]["kind"] == "input"]
        inputs_bytes = sum(v.numel() * v.element_size() for v in ins)
        fixed = sum(t.numel() * t.element_size() for t in b._fixed_tensors())
        draws = _draw_peak(g, b.values)
        batch = solve_batch(b.mode.records, batch0, target, cap, inputs_bytes, fixed, bw, tf, launch, draws,
                            b.values[g.graph["output"]].nbytes)
        t1 = predict_ms(b.mode.records, bw, tf, launch, batch / batch0)
        if batch == 1 and t1 > cfg.target_max_ms:
            shrink *= cfg.target_max_ms / t1 / 2
            continue
        break
    else:
        raise TaskRejected("too slow even at batch 1")
    consts["batch_size"] = batch
    mode = CostMode()
    try:
        _, values = execute(g, consts, mode)
    except Exception as e:  # noqa: BLE001
        raise TaskRejected(f"sized graph fails on meta: {type(e).__name__}") from None
    ms = predict_ms(mode.records, bw, tf, launch)
    in_bytes = sum(values[n].numel() * values[n].element_size() for n, d in g.nodes(data=True) if d["kind"] == "input")
    peak = peak_bytes(mode.records, in_bytes, fixed, draw_bytes=_draw_peak(g, values))
    if not cfg.target_min_ms <= ms <= cfg.target_max_ms:
        raise TaskRejected(f"off window: {ms:.3g} ms")
    if peak > cap:
        raise TaskRejected("over the memory cap")
    out_cap = output_cap(cap)
    if out_cap is not None and values[g.graph["output"]].nbytes > out_cap:
        raise TaskRejected("output over the memory cap")
    if values[g.graph["output"]].numel() < MIN_OUTPUT_NUMEL:
        raise TaskRejected("output of a few numbers")
    g.graph["constants"] = consts
    for n in op_nodes(g):
        g.nodes[n]["shape"] = list(values[n].shape)
    for n, d in g.nodes(data=True):
        if d["kind"] == "input":
            d["shape"] = list(values[n].shape)
    ops = [g.nodes[n]["op"] for n in op_nodes(g)]
    aten = aten_names(mode.records)
    bad = check_labels(ops, aten)
    if bad:
        if stats:
            stats.label_mismatches += 1
        raise TaskRejected(f"labels: {bad[0]}")
    if cfg.avoid_reference and op_signature(aten) in _reference_signatures(tuple(cfg.avoid_reference)):
        raise TaskRejected("reference op signature")  # decontaminate would drop it: a copy of a reference problem
    if getattr(cfg, "value_scale_rule", False) and (why := cannot_matter(g, values)):
        raise TaskRejected(f"value scale: {why}")  # operators/value_scale.py: a shortcut by its parameters
    out = g.graph["output"]
    feeds = nx.ancestors(g, out)  # one walk per task: n reaches the output iff n is among its ancestors
    if any(n not in feeds for n in op_nodes(g) if n != out):
        raise TaskRejected("dead op")
    variants = _variants(g, consts, batch0)
    if len(variants) < 2:
        raise TaskRejected("fewer than two shape variants run")
    graph_hash, task_id = _hashes(g)
    flops, moved = records_cost(mode.records)
    return {
        "task_id": task_id, "name": task_name(g), "code": render(g), "ops": ops,
        "categories": sorted({REGISTRY[o].category for o in ops}), "data_source": f"torch#{len(ops)}",
        "num_ops": len(ops), "is_dag": is_dag(g), "graph": _graph_json(g), "graph_hash": graph_hash,
        "aten_ops": aten, "flops": int(flops), "bytes_moved": int(moved), "predicted_ms": float(ms),
        "predicted_peak_bytes": int(peak), "shape_variants": json.dumps(variants), "composer": "template",
        "composer_note": "", "seed": task_seed,
    }


def _reference_signatures(specs: tuple[str, ...]) -> frozenset[str]:
    """Op signatures of the reference problems in `specs` (read once per process)."""
    from detectors.reference_index import reference_op_signatures

    return reference_op_signatures(specs)


def task_seed(seed: int, index: int, attempt: int) -> int:
    key = f"{seed}:{index}" if attempt == 0 else f"{seed}:{index}:{attempt}"
    return int(hashlib.sha256(key.encode()).hexdigest()[:15], 16)


_HEAP_FROZEN = False
# Sampling runs with automatic collection off and collects the young generations itself every GC_EVERY tasks,
# between tasks, where nothing of a task is alive: its garbage cycles (each draw's networkx graph holds some)
# go then, and the caches' new entries move to the old generation once, never to be walked again while
# sampling. Automatic collection walked those entries in every middle-generation pass and, ~every 400 tasks,
# the whole growing cache in a full pass (~9% of sampling time). Results do not depend on it.
GC_EVERY = 20


def _freeze_heap() -> None:
    """Once per process: take what is alive now (mostly torch's ~330k import-time objects) out of the cyclic
    collector's full passes. Sampling allocates enough tensors and records to trigger one every ~150 tasks,
    and each walked the whole torch heap (~0.3 s, 10-25% of sampling time; cProfile does not show it).
    Frozen objects are still freed by reference counting; only a cycle through one of them is never
    collected. Results do not depend on it."""
    global _HEAP_FROZEN
    if not _HEAP_FROZEN:
        _HEAP_FROZEN = True
        gc.collect()
        gc.freeze()


def seen_keys(cfg, row: dict) -> set[str]:
    """What a later draw may not share with this task: its task_id (the same graph at the same sizes) and, with
    cfg.avoid_near_duplicates, its operator graph up to sizes and literal values (dedupe's near-duplicate key)."""
    keys = {row["task_id"]}
    if getattr(cfg, "avoid_near_duplicates", False):
        from filters.dedupe import canonical_graph_key

        g = canonical_graph_key(row.get("graph"))
        if g:
            keys.add(f"graph:{g}")
    return keys


def sample_tasks(cfg, seed: int, indices: range, seen: set[str], stats: Stats | None = None,
                 screen=None) -> list[dict]:
    """Deterministic: the task at index i is drawn from an RNG seeded by (seed, i) (then (seed, i, attempt) on
    retry). A task with a key in `seen` (`seen_keys`: same canonical graph at the same shapes, and with
    cfg.avoid_near_duplicates the same graph at any sizes) is resampled; each returned task's keys are added. Each row conforms to pipeline.rundir.schema.TASKS (all columns).
    `screen` (operators.prescreen.Screen): a draw it returns a reason for is resampled."""
    stats = stats if stats is not None else Stats()
    _freeze_heap()
    collecting = gc.isenabled()
    gc.disable()  # see GC_EVERY
    try:
        with warnings.catch_warnings():  # deprecation chatter of torch ops on meta is not the user's concern
            warnings.simplefilter("ignore")
            return _sample(cfg, seed, indices, seen, stats, collecting, screen)
    finally:
        if collecting:
            gc.collect(1)
            gc.enable()


def _sample(cfg, seed: int, indices: range, seen: set[str], stats: Stats, collect: bool = True,
            screen=None) -> list[dict]:
    from opsynth.errors import OpsynthError

    rows = []
    for n, i in enumerate(indices, 1):
        if collect and n % GC_EVERY == 0:
            gc.collect(1)
        for attempt in range(MAX_ATTEMPTS):
            ts = task_seed(seed, i, attempt)
            stats.attempts += 1
            try:
                row = sample_one(cfg, random.Random(ts), ts, stats)
            except TaskRejected as e:
                stats.reject(str(e))
                continue
            keys = seen_keys(cfg, row)
            if keys & seen:
                stats.duplicates += 1
                continue
            why = screen(row) if screen is not None else ""
            if why:
                stats.reject(f"prescreen {why}")
                continue
            seen.update(keys)
            rows.append(row)
            break
        else:
            raise OpsynthError(f"could not sample task {i} in {MAX_ATTEMPTS} attempts (last: {stats.rejected}); "
                               "widen sample.categories or the runtime window")
    return rows


@contextlib.contextmanager
def _spawned_ignoring_sigint():
    """Pool workers start with Ctrl-C ignored (an ignored signal survives exec; a handler would not): it reaches
    the whole process group, and the parent, not each worker, stops the pool."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def _init_worker() -> None:
    import torch

    torch.set_num_threads(1)  # meta ops compute nothing: intra-op threads only contend with other workers
    warnings.filterwarnings("ignore")


def _sample_chunk(args: tuple) -> list[dict]:
    cfg, seed, start, stop, screen = args
    return sample_tasks(cfg, seed, range(start, stop), set(), screen=screen)


def sample_parallel(cfg, seed: int, indices: range, seen: set[str], processes: int, chunk: int = 32,
                    stats: Stats | None = None, screen=None):
    """`sample_tasks` over a process pool, yielding (index, row) in index order: the same rows, the same `seen`.

    Each worker samples a chunk with only that chunk's keys as `seen`, a subset of the keys a serial run
    would have seen at each index: a row none of whose keys is among the keys before it is exactly the serial
    row (every attempt the worker skipped, serial would skip too); any other row is redrawn here, serially,
    against the full set. With `processes` <= 1 it samples in this process."""
    if processes <= 1:
        for i in indices:
            yield i, sample_tasks(cfg, seed, range(i, i + 1), seen, stats, screen)[0]
        return
    import multiprocessing as mp

    bounds = [(a, min(a + chunk, indices.stop)) for a in range(indices.start, indices.stop, chunk)]
    with _spawned_ignoring_sigint():
        pool = mp.get_context("spawn").Pool(processes, initializer=_init_worker)
    with pool:
        for (a, _), rows in zip(bounds, pool.imap(_sample_chunk, [(cfg, seed, a, b, screen) for a, b in bounds]),
                                strict=True):
            for i, row in enumerate(rows, a):
                keys = seen_keys(cfg, row)
                if keys & seen:
                    row = sample_tasks(cfg, seed, range(i, i + 1), seen, stats, screen)[0]
                else:
                    seen.update(keys)
                yield i, row
