"""Operator graphs on networkx: building them op by op on the meta device, and re-running them at new sizes.

A graph's nodes are its tensors: input nodes (`kind="input"`: shape expressions over module-level
constants, how get_inputs draws them) and op nodes (`kind="op"`: the catalog name, sampled params, the
rendered constructor/attribute/call expressions, the traced ATen ops and the output shape). Edges run
from each argument to the op, with the argument's key. Graph attributes hold the constants, the
__init__ argument names and the output node. `execute` evaluates exactly the strings `render` writes.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

import networkx as nx
import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: N812 - the spelling task code uses

from operators import batch_scale
from operators.cost import UNNAMED, CostMode, OpCost, aten_names
from operators.spec import Code, Dim, OpSpec, Reject, accepts, out_domain

BASE_NS = {"torch": torch, "nn": nn, "F": F, "math": math}
_CODE: dict[str, Any] = {}
_MODULES: dict[tuple, Any] = {}
# node memo: (call, init, tensors, the constants they read, argument layouts) -> what torch gave on meta
# (output layout and ATen records, or the error). Ops repeat at equal shapes across draws, retries and the
# re-runs of one task; a hit replays torch's own earlier answer instead of re-running its Python meta kernels.
_MEMO: dict[tuple, tuple] = {}
MEMO_SIZE = 100_000
_STATIC: dict[tuple, tuple[str, ...]] = {}
_TENSORS: dict[int, tuple] = {}  # id(module) -> (module, its parameters and buffers)
DIM_NAMES = {
    2: ("batch_size", "in_features"),
    3: ("batch_size", "in_channels", "length"),
    4: ("batch_size", "in_channels", "height", "width"),
    5: ("batch_size", "in_channels", "depth", "height", "width"),
}
SEQ_NAMES = ("batch_size", "seq_len", "embed_dim")
TOKEN_NAMES = ("batch_size", "seq_len")


class MetaError(Exception):
    """An op's call failed on meta (a replay of a failure the node memo recorded)."""


class OpFailed(Exception):
    """The operator cannot take this input (its call failed on meta, or its sampler rejected it)."""


def compiled(expr: str):
    code = _CODE.get(expr)
    if code is None:
        if len(_CODE) > 50_000:
            _CODE.clear()
        code = _CODE[expr] = compile(expr, "<op>", "eval")
    return code


def draw_expr(draw: str, shape: str, fmt: dict[str, str] | None = None) -> str:
    if draw.startswith("randint:"):
        high = draw.split(":", 1)[1].format(**(fmt or {}))
        return f"torch.randint(0, {high}, ({shape}))"
    return {"randn": f"torch.randn({shape})", "rand": f"torch.rand({shape})",
            "rand1": f"torch.rand({shape}) + 1.0",
            "sign": f"torch.randint(0, 2, ({shape})).float() * 2 - 1"}[draw]


def shape_tuple(exprs: Iterable[str]) -> str:
    exprs = list(exprs)
    return ", ".join(exprs) + ("," if len(exprs) == 1 else "")


class GraphBuilder:
    """Grows one graph op by op, evaluating every op on meta as it is added (under one CostMode)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.g = nx.DiGraph(constants={}, init_args=[], output="")
        self.values: dict[str, torch.Tensor] = {}
        self.dims: dict[str, tuple[Dim, ...]] = {}
        self.domain: dict[str, str] = {}
        self.self_ns = SimpleNamespace()
        self.mode = CostMode()
        self.counts: dict[str, int] = {}

    # ---- naming
    def _unique(self, stem: str) -> str:
        n = self.counts.get(stem, 0) + 1
        self.counts[stem] = n
        return stem if n == 1 else f"{stem}_{n}"

    def const(self, name: str, value: int) -> Dim:
        consts = self.g.graph["constants"]
        if name in consts and consts[name] == value:
            return Dim(value, name)
        base, n = name, 1
        while name in consts:
            n += 1
            name = f"{base}_{n}"
        consts[name] = value
        return Dim(value, name)

    def checkpoint(self) -> tuple:
        return (dict(self.g.graph["constants"]), dict(self.counts), len(self.mode.records), list(self.g.nodes),
                set(vars(self.self_ns)))

    def rollback(self, cp: tuple) -> None:
        consts, counts, n_rec, nodes, attrs = cp
        for attr in set(vars(self.self_ns)) - attrs:
            delattr(self.self_ns, attr)
        self.g.graph["constants"].clear()
        self.g.graph["constants"].update(consts)
        self.counts = counts
        del self.mode.records[n_rec:]
        keep = set(nodes)
        for node in list(self.g.nodes):
            if node not in keep:
                self.g.remove_node(node)
                self.values.pop(node, None)
                self.dims.pop(node, None)

    # ---- inputs
    def add_input(self, names: tuple[str, ...], sizes: list[int], draw: str, high: str = "") -> str:
        dims = tuple(self.const(n, s) for n, s in zip(names, sizes, strict=True))
        return self._input(dims, draw if not high else f"randint:{high}")

    def _input(self, dims: tuple[Dim, ...], draw: str) -> str:
        n_inputs = sum(1 for _, d in self.g.nodes(data=True) if d["kind"] == "input")
        var = self._unique("xyzuvw"[n_inputs] if n_inputs < 6 else "inp")
        shape = [d.expr for d in dims]
        expr = draw_expr(draw, shape_tuple(shape))
        dtype = torch.int64 if draw.startswith("randint") else torch.float32
        t = torch.empty([d.value for d in dims], dtype=dtype, device="meta")
        self.g.add_node(var, kind="input", shape_expr=shape, draw=draw, expr=expr, shape=list(t.shape),
                        dtype=str(t.dtype).replace("torch.", ""))
        self.values[var], self.dims[var] = t, dims
        self.domain[var] = {"randn": "any", "rand": "unit", "rand1": "pos", "sign": "any"}.get(draw, "any")
        return var

    # ---- ops
    def try_op(self, spec: OpSpec, x: str, join_with: str | None = None, preserve: bool = False,
               bias: bool = False) -> str:
        """Add `spec` applied to x; its operand `y` is `join_with` (another node), a learned tensor
        broadcast against x (`bias`), or else a fresh input. Raise OpFailed and leave no trace."""
        if not accepts(spec, len(self.dims[x]), self.domain[x]):
            raise OpFailed("rank or domain")
        dims = self.dims[x]
        cp = self.checkpoint()
        try:
            return self._add_op(spec, x, dims, join_with, preserve, bias)
        except Exception as e:  # noqa: BLE001 - any failure of the op on meta means: resample
            self.rollback(cp)
            raise OpFailed(f"{spec.name}: {type(e).__name__}: {str(e)[:200]}") from None

    def _add_op(self, spec: OpSpec, x: str, dims: tuple[Dim, ...], join_with: str | None, preserve: bool,
                bias: bool) -> str:
        try:
            params = spec.params(self.rng, dims)
        except Reject as e:
            raise OpFailed(str(e)) from None
        if spec.token_input in self.g.graph["constants"]:  # the vocabulary the index input was drawn from
            params[spec.token_input] = self.g.graph["constants"][spec.token_input]
        var = self._unique(spec.short)
        ctx_init: dict[str, str] = {"N": dims[0].expr, "C": dims[min(1, len(dims) - 1)].expr, "L": dims[-1].expr,
                                    "R": str(len(dims))}
        ctx_call: dict[str, str] = {"N": self._size(x, dims, 0), "C": self._size(x, dims, min(1, len(dims) - 1)),
                                    "L": self._size(x, dims, len(dims) - 1), "R": str(len(dims))}
        for i, d in enumerate(dims):
            ctx_init[f"d{i}"], ctx_call[f"d{i}"] = d.expr, self._size(x, dims, i)
        new_consts: list[Dim] = []
        rendered: dict[str, Any] = {}
        for key, value in params.items():
            if key in spec.consts and isinstance(value, int) and not isinstance(value, bool):
                d = self.const(key, value)
                new_consts.append(d)
                rendered[key] = d.expr
            else:
                rendered[key] = _literal(value)
        ctx_init.update(rendered)
        ctx_call.update(rendered)
        consts_ns = {**BASE_NS, **self.g.graph["constants"]}
        node: dict[str, Any] = {"kind": "op", "op": spec.name, "category": spec.category,
                                "params": {k: _jsonable(v) for k, v in params.items()}, "attr": "", "init": "",
                                "tensors": [], "args": {"x": x}}
        # no torch.device("meta") around this: build_module enters it, and a second one stacked on it made every
        # torch call in a module constructor pass two Python modes; inputs are made on meta explicitly
        if spec.init:
            attr = self._unique(f"attr_{spec.short}")[5:]
            node["attr"], node["init"] = attr, spec.init.format(**ctx_init)
            setattr(self.self_ns, attr, build_module(node["init"], consts_ns))
            ctx_call["m"] = f"self.{attr}"
        for key, template in spec.attrs:
            attr = self._unique(f"attr_{var}_{key}")[5:]
            expr = template.format(**ctx_init)
            node["tensors"].append([attr, expr])
            setattr(self.self_ns, attr, build_module(expr, consts_ns, tensor=True))
            ctx_call[key] = f"self.{attr}"
        for operand in spec.operands:
            if operand.key == "y" and join_with is not None:
                other = join_with
            elif operand.key == "y" and bias:
                attr, expr = self._bias(var, dims)
                node["tensors"].append([attr, expr])
                setattr(self.self_ns, attr, build_module(expr, consts_ns, tensor=True))
                ctx_call["y"] = f"self.{attr}"
                continue
            else:
                other = self._operand(operand, dims, {**ctx_init, "N": dims[0].expr})
            node["args"][operand.key] = other
            ctx_call[operand.key] = other
        ctx_call["x"] = x
        node["call"] = spec.call.format(**ctx_call)
        first = len(self.mode.records)
        key = node_key(node, self.g.graph["constants"], self.values)
        out = _replay(key, self.mode)
        if out is None:
            self.mode.fixed_ids = {id(t) for t in self._fixed_tensors()}
            ns = {**BASE_NS, "self": self.self_ns, **self.values}
            out = _run_call(key, node["call"], ns, self.mode)
            _remember_batch(spec.name, key, self.g.graph["constants"].get(batch_scale.BATCH))
        if not isinstance(out, torch.Tensor):
            raise OpFailed("output is not a tensor")
        if preserve and tuple(out.shape) != tuple(self.values[x].shape):
            raise OpFailed("shape not preserved")
        if not out.is_floating_point():
            raise OpFailed("non-float output")
        node["aten"] = aten_names(self.mode.records[first:])
        if not node["aten"]:
            raise OpFailed("does nothing at this shape")
        if not any(not r.view and r.name not in UNNAMED for r in self.mode.records[first:]) \
                and spec.category not in ("shape", "indexing"):
            raise OpFailed("no kernel runs")
        node["shape"] = list(out.shape)
        self.g.add_node(var, **node)
        for key, src in node["args"].items():
            self.g.add_edge(src, var, arg=key)
        self.values[var] = out
        self.dims[var] = _out_dims(dims, tuple(out.shape), new_consts)
        # every tensor operand counts (a learned bias is randn): softmax hstacked with a randn input went to
        # nn.BCELoss as "unit" and tripped its device-side range assert on the GPU (under MPS every worker restarts)
        others = tuple(self.domain[v] for k, v in node["args"].items() if k != "x" and v in self.domain)
        self.domain[var] = out_domain(spec, self.domain[x], others + (("any",) if bias else ()))
        return var

    def _size(self, x: str, dims: tuple[Dim, ...], i: int) -> str:
        return dims[i].expr if dims[i].expr.isdigit() else f"{x}.size({i})"

    def _operand(self, operand, dims: tuple[Dim, ...], ctx: dict[str, str]) -> str:
        if operand.shape == "same":
            new_dims = dims
        else:
            exprs = [e.strip() for e in operand.shape.format(**ctx).strip("()").split(",") if e.strip()]
            consts = self.g.graph["constants"]
            new_dims = tuple(Dim(int(eval(compiled(e), dict(consts))), e) for e in exprs)  # noqa: S307
        draw = operand.draw
        if draw.startswith("randint:"):
            draw = "randint:" + draw.split(":", 1)[1].format(**ctx)
        return self._input(new_dims, draw)

    def _fixed_tensors(self):
        for v in vars(self.self_ns).values():
            if isinstance(v, nn.Module):
                yield from module_tensors(v)
            elif isinstance(v, torch.Tensor):
                yield v

    def _bias(self, var: str, dims: tuple[Dim, ...]) -> tuple[str, str]:
        """A learned tensor broadcast against x (a per-channel or per-feature bias or scale)."""
        shape = [dims[1].expr] + ["1"] * (len(dims) - 2) if len(dims) > 2 else [dims[-1].expr]
        attr = self._unique(f"attr_{var}_param")[5:]
        return attr, f"nn.Parameter(torch.randn({shape_tuple(shape)}) * 0.1)"

    def finish(self, output: str) -> nx.DiGraph:
        g = self.g
        g.graph["output"] = output
        init_names: set[str] = set()
        for _, d in g.nodes(data=True):
            if d["kind"] == "op":
                for expr in [d["init"], *(e for _, e in d["tensors"])]:
                    if expr:
                        init_names.update(compiled(expr).co_names)
        g.graph["init_args"] = [c for c in g.graph["constants"] if c in init_names]
        return g


def _literal(value: Any) -> str:
    if isinstance(value, Dim):
        return value.expr
    if isinstance(value, Code):
        return str(value)
    return repr(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Dim):
        return value.value
    if isinstance(value, Code):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def _out_dims(dims: tuple[Dim, ...], shape: tuple[int, ...], new: list[Dim]) -> tuple[Dim, ...]:
    """Carry dimension names through an op where the size clearly is the same dimension."""
    out = []
    named = {d.value: d for d in dims if not d.expr.isdigit()}
    unique = {v: d for v, d in named.items() if sum(1 for e in dims if e.value == v) == 1}
    for i, s in enumerate(shape):
        if len(shape) == len(dims) and dims[i].value == s:
            out.append(dims[i])
        elif i == 0 and dims and dims[0].value == s:
            out.append(dims[0])
        elif any(c.value == s for c in new):
            out.append(next(c for c in new if c.value == s))
        elif s in unique and len(shape) != len(dims):
            out.append(unique[s])
        else:
            out.append(Dim(s, str(s)))
    return tuple(out)


def build_module(init: str, consts_ns: dict[str, Any], tensor: bool = False) -> Any:
    """Construct an nn module or a learned tensor on meta; instances are cached by expression and the constants
    it reads (meta objects hold no data, so runs may share them).

    A learned tensor (`tensor`: `nn.Parameter(torch.randn(C, 1, 1) * 0.1)`, a buffer) is built under a CostMode,
    whose exact pointwise path gives the `* 0.1` without torch's Python meta decomposition of mul (~0.6 ms
    a build, most of it); modules' constructors run as they are."""
    code = compiled(init)
    key = (init, tuple(consts_ns.get(n) for n in code.co_names if n in consts_ns and n not in BASE_NS))
    m = _MODULES.get(key)
    if m is None:
        if len(_MODULES) > 5000:
            _MODULES.clear()
            _TENSORS.clear()
        with torch.device("meta"):
            if tensor:
                with CostMode():
                    m = eval(code, consts_ns)  # noqa: S307
            else:
                m = eval(code, consts_ns)  # noqa: S307
        _MODULES[key] = m
    return m


def module_tensors(m: nn.Module) -> tuple[torch.Tensor, ...]:
    """A module's parameters then buffers, listed once per cached module (no catalog module adds or replaces
    one after construction; a lazy module, which would, is listed afresh each time)."""
    hit = _TENSORS.get(id(m))
    if hit is not None and hit[0] is m:
        return hit[1]
    tensors = (*m.parameters(), *m.buffers())
    if not isinstance(m, nn.modules.lazy.LazyModuleMixin):
        if len(_TENSORS) > 5000:
            _TENSORS.clear()
        _TENSORS[id(m)] = (m, tensors)  # holding m keeps its id from being reused
    return tensors


def _shape_code(exprs: list[str]):
    """One code object evaluating an input's shape expressions to a tuple (one eval instead of one per dim)."""
    return compiled("(" + "".join(f"{e}, " for e in exprs) + ")")


def execute(g: nx.DiGraph, constants: dict[str, int], mode: CostMode | None = None) -> tuple[torch.Tensor, dict]:
    """Run the graph on meta with the given constants; returns the output and the meta tensors by node."""
    ns = {**BASE_NS, **constants}
    holder = SimpleNamespace()
    values: dict[str, torch.Tensor] = {}
    fixed: list[torch.Tensor] = []
    # modules are built on meta by build_module, inputs explicitly (no second device mode around them)
    for var, d in g.nodes(data=True):
        if d["kind"] == "input":
            shape = eval(_shape_code(d["shape_expr"]), ns)  # noqa: S307
            values[var] = torch.empty(shape, dtype=getattr(torch, d["dtype"]), device="meta")
        else:
            if d["init"]:
                m = build_module(d["init"], ns)
                setattr(holder, d["attr"], m)
                fixed += module_tensors(m)
            for attr, expr in d["tensors"]:
                t = build_module(expr, ns, tensor=True)
                setattr(holder, attr, t)
                fixed.append(t)
    mode = mode if mode is not None else CostMode()
    mode.fixed_ids = {id(t) for t in fixed}
    fwd = {**BASE_NS, "self": holder}
    for var, d in g.nodes(data=True):
        if d["kind"] != "op":
            continue
        key = node_key(d, constants, values)
        out = _replay(key, mode)
        if out is None:
            batch = constants.get(batch_scale.BATCH)
            bkey = batch_scale.batch_key(d["op"], key, _STATIC[key[0]], batch)
            hit = batch_scale.derive(bkey, batch) if bkey else None
            if hit is not None:
                mode.records.extend(hit[1])
                out = _rebuild(hit[0])
            else:
                fwd.update(values)
                out = _run_call(key, d["call"], fwd, mode)
                if bkey:
                    _remember_batch(d["op"], key, batch)
        values[var] = out
        for key in _same_operands(d["op"]):
            if key not in d["args"]:  # a learned bias/scale in its place broadcasts by design
                continue
            a, b = values[d["args"]["x"]], values[d["args"][key]]
            if a.shape != b.shape:  # e.g. a loss target drawn from constants that no longer give x's shape
                raise MetaError(f"{var}: operand {key} has shape {list(b.shape)}, x has {list(a.shape)}")
    return values[g.graph["output"]], values


@functools.cache
def _same_operands(op: str) -> tuple[str, ...]:
    """Operand keys of `op` that must have exactly x's shape (loss targets, join partners)."""
    from operators.catalog import REGISTRY

    spec = REGISTRY.get(op)
    return tuple(o.key for o in spec.operands if o.shape == "same") if spec else ()


def node_key(d: dict, constants: dict[str, int], values: dict[str, torch.Tensor]) -> tuple:
    """What decides an op node's result on meta: its expressions, the constants they read, its arguments'
    layouts (shape, strides, offset, dtype)."""
    tensors = tuple(e for _, e in d["tensors"])
    static = (d["call"], d["init"], tensors)
    names = _STATIC.get(static)
    if names is None:
        if len(_STATIC) > MEMO_SIZE:
            _STATIC.clear()
        names = _STATIC[static] = tuple(sorted(
            {n for e in (d["init"], *tensors) if e for n in compiled(e).co_names} - set(BASE_NS)))
    args = tuple((k, src, _layout(values[src])) for k, src in d["args"].items())
    return static, tuple(constants.get(n) for n in names), args


def _layout(t: torch.Tensor) -> tuple:
    return tuple(t.shape), t.stride(), t.storage_offset(), t.dtype


def _rebuild(layout: tuple) -> torch.Tensor:
    shape, stride, offset, dtype = layout
    if not offset:
        return torch.empty_strided(shape, stride, dtype=dtype, device="meta")
    span = 1 + sum((n - 1) * s for n, s in zip(shape, stride, strict=True)) if all(shape) else 0
    return torch.empty((offset + span,), dtype=dtype, device="meta").as_strided(shape, stride, offset)


def _remember_batch(op: str, key: tuple, batch: int | None) -> None:
    """Offer a node's fresh meta result to batch scaling (operators.batch_scale)."""
    hit = _MEMO.get(key)
    if hit is None or hit[0] is None:
        return
    bkey = batch_scale.batch_key(op, key, _STATIC[key[0]], batch)
    if bkey:
        batch_scale.remember(bkey, batch, *hit)


def _replay(key: tuple, mode: CostMode) -> torch.Tensor | None:
    """A memoized node result: its records appended to `mode`, a fresh meta tensor of the recorded layout."""
    hit = _MEMO.get(key)
    if hit is None:
        return None
    layout, records = hit
    if layout is None:
        raise MetaError(records)
    mode.records.extend(records)
    return _rebuild(layout)


def _run_call(key: tuple, call: str, ns: dict[str, Any], mode: CostMode) -> Any:
    """Evaluate a node's call under `mode` and memoize what torch said (tensor outputs and failures)."""
    if len(_MEMO) >= MEMO_SIZE:  # drop the oldest quarter (dicts keep insertion order)
        for k in list(itertools.islice(_MEMO, MEMO_SIZE // 4)):
            del _MEMO[k]
    first = len(mode.records)
    try:
        with mode, torch.no_grad():
            out = eval(compiled(call), ns)  # noqa: S307 - rendered from the catalog
    except Exception as e:
        msg = f"{type(e).__name__}: {str(e)[:300]}"
        _MEMO[key] = (None, msg)
        raise MetaError(msg) from None
    if isinstance(out, torch.Tensor) and out.device.type == "meta":
        _MEMO[key] = (_layout(out), tuple(mode.records[first:]))
    return out


def is_dag(g: nx.DiGraph) -> bool:
    """True unless the graph is one input feeding a simple chain of single-input ops."""
    inputs = [n for n, d in g.nodes(data=True) if d["kind"] == "input"]
    return len(inputs) > 1 or any(g.out_degree(n) > 1 for n in g.nodes) or any(g.in_degree(n) > 1 for n in g.nodes)


def op_nodes(g: nx.DiGraph) -> list[str]:
    return [n for n, d in g.nodes(data=True) if d["kind"] == "op"]


def records_cost(records: list[OpCost]) -> tuple[int, int]:
    """(FLOPs of every family, bytes moved) of one forward."""
    flops = sum(r.flops + r.family_flops for r in records)
    moved = sum(r.act_bytes + r.fixed_bytes for r in records if not r.view)
    return flops, moved

