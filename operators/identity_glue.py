"""Identity glue: ops that provably leave their input unchanged, recognised while a forward is traced.

A copy of a benchmark problem stays a copy when someone inserts `x = x * 1.0`, a `.clone()`, a transpose that a
second transpose undoes or a dropout with p = 0, or spells `torch.matmul` as an `einsum`. The tracer
(`operators.trace`) asks `Glue.identity` about every ATen call; an op it names is not recorded, and the tensor it
returned carries its input's history on, so the ops that only fed the glue (the `ones_like` of `x * ones`, the first
of two cancelling transposes) fall out as dead. An op is removed only when its values prove the identity: a Python
constant or a tensor made by a constant factory, the shapes, strides and storage, the dtype, or the mode. A real
pointwise op is never removed, so a sampled matmul + GELU still differs from a level-1 matmul.

Six rules, each can be switched off (`RULES`):
- arith: mul/div by 1, add/sub of 0, pow 1, `where` with a constant condition;
- copy: clone, contiguous, detach, `_to_copy` to the same dtype and device, `copy_` into a fresh tensor, cat of one;
- shape: a view with the layout of a tensor already seen (transposes and permutes that cancel, whole-range slices,
  expand or view to the same shape), a contiguous view of a contiguous tensor (a reshape chain back to memory
  order, as unsqueeze + squeeze), zero padding, repeat/roll by nothing;
- dropout: native dropout with p = 0 or in eval mode, and a keep-mask drawn with probability 1;
- idempotent: relu(relu(x)), abs(abs(x)) and kin (the same op with the same arguments on its own output);
- spelling: a batched matmul over a batch of one is `mm` (einsum and `bmm` spellings of a matrix product).

`strip_source` applies the same rules to source text (the AST fingerprint reads through them).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import Any

RULES = ("arith", "copy", "shape", "dropout", "idempotent", "spelling")

IDEMPOTENT = frozenset({"relu", "abs", "floor", "ceil", "round", "trunc", "sign", "sgn", "clamp", "hardtanh",
                        "clamp_min", "clamp_max", "fix"})
COPY_OPS = frozenset({"clone", "contiguous", "detach", "lift_fresh", "lift_fresh_copy", "positive", "_to_copy",
                      "to"})
FACTORY_CONST = {"ones": 1.0, "ones_like": 1.0, "new_ones": 1.0, "zeros": 0.0, "zeros_like": 0.0, "new_zeros": 0.0}
FACTORY_FILL = frozenset({"full", "full_like", "new_full", "scalar_tensor", "fill"})
FRESH = frozenset({"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided", *FACTORY_CONST,
                   *FACTORY_FILL})
DROPOUTS = frozenset({"native_dropout", "dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout"})


def parse_rules(rules: Iterable[str] | str | None) -> frozenset[str]:
    """The rule set from names (or "all" / a comma list); unknown names are refused with the valid ones."""
    if rules is None:
        return frozenset()
    if isinstance(rules, str):
        rules = RULES if rules == "all" else [r for r in rules.split(",") if r]
    got = frozenset(rules)
    bad = got - set(RULES)
    if bad:
        raise ValueError(f"unknown identity-glue rule(s) {sorted(bad)}; choose from {', '.join(RULES)}")
    return got


def _base(name: str) -> str:
    """`aten.relu_` -> `relu`."""
    short = name.split(".", 1)[1] if name.startswith("aten.") else name
    return short.rstrip("_") if not short.startswith("_") else "_" + short[1:].rstrip("_")


def _storage(t: Any) -> int:
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, TypeError):
        return id(t)


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


class Glue:
    """Trace-time state of the rules: known constant tensors, fresh tensors, the layouts seen, who made what."""

    def __init__(self, rules: Iterable[str] | str | None = RULES) -> None:
        self.rules = parse_rules(rules)
        self.consts: dict[int, tuple[float, int]] = {}  # id(tensor) -> (value, storage)
        self.fresh: set[int] = set()  # ids of tensors a factory made and nothing wrote since
        self.layouts: dict[tuple, Any] = {}  # (storage, shape, stride, offset, dtype) -> first tensor seen so
        self.bases: dict[int, Any] = {}  # storage -> first tensor seen on it
        self.maker: dict[int, tuple] = {}  # id(tensor) -> (op, its non-tensor arguments) of the op that made it
        self.keep: list[Any] = []  # tensors whose ids are keys stay alive, so ids stay unique
        self.removed: dict[str, int] = {}

    # ---- what is known about a value -------------------------------------------------------------
    def const(self, v: Any) -> float | None:
        """The value of a Python number or a tensor made by a constant factory; None when unknown."""
        if isinstance(v, bool):
            return float(v)
        if _is_num(v):
            return float(v)
        got = self.consts.get(id(v))
        return got[0] if got is not None else None

    def note_value(self, t: Any, value: Any) -> None:
        """`t` holds `value` in every element (torch.tensor(1.0), torch.ones(...), a fill)."""
        import torch

        if isinstance(t, torch.Tensor) and (_is_num(value) or isinstance(value, bool)):
            self.consts[id(t)] = (float(value), _storage(t))
            self.keep.append(t)

    def see(self, tensors: Iterable[Any]) -> None:
        """Register layouts and bases of tensors at first sight."""
        for t in tensors:
            try:
                key = (_storage(t), tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype)
            except (RuntimeError, NotImplementedError, TypeError):
                continue
            if key not in self.layouts:
                self.layouts[key] = t
                self.keep.append(t)
            self.bases.setdefault(key[0], t)

    # ---- the rules ---------------------------------------------------------------------------------
    def identity(self, name: str, args: tuple, kwargs: dict, out: Any) -> tuple[str, Any] | None:
        """(rule, the input tensor `out` equals) when the call is identity glue under an enabled rule, else None.
        The result inherits what is known of that input (a constant, a fresh tensor, its maker)."""
        hit = self._identity(name, args, kwargs, out)
        if hit is not None:
            res = out[0] if isinstance(out, tuple) else out
            src = hit[1]
            if id(src) in self.consts:
                self.consts[id(res)] = self.consts[id(src)]
            if id(src) in self.fresh and _storage(src) == _storage(res):
                self.fresh.add(id(res))
            if id(src) in self.maker:
                self.maker[id(res)] = self.maker[id(src)]
            self.keep.append(res)
        return hit

    def _identity(self, name: str, args: tuple, kwargs: dict, out: Any) -> tuple[str, Any] | None:
        import torch

        if not self.rules:
            return None
        op = _base(name)
        res = out[0] if op in DROPOUTS and isinstance(out, tuple) and out else out
        if not isinstance(res, torch.Tensor):
            return None
        tens = [a for a in args if isinstance(a, torch.Tensor)]
        x = args[0] if args and isinstance(args[0], torch.Tensor) else None

        def same(t: Any) -> bool:  # `res` has t's shape, dtype and device: nothing broadcast, promoted or moved
            return (isinstance(t, torch.Tensor) and tuple(t.shape) == tuple(res.shape) and t.dtype == res.dtype
                    and t.device == res.device)

        if "arith" in self.rules and len(args) >= 2 and not kwargs.get("rounding_mode"):
            a, b = args[0], args[1]
            if op == "mul":
                for t, c in ((a, b), (b, a)):
                    if same(t) and self.const(c) == 1.0:
                        return "arith", t
            if op == "div" and same(a) and self.const(b) == 1.0:
                return "arith", a
            if op in ("add", "sub") and same(a) and self.const(b) == 0.0:
                return "arith", a
            if op == "add" and same(b) and self.const(a) == 0.0 and kwargs.get("alpha", 1) == 1:
                return "arith", b
            if op == "pow" and same(a) and self.const(b) == 1.0:
                return "arith", a
            if op == "where" and len(args) == 3:
                c = self.const(a)
                pick = args[1] if c == 1.0 else args[2] if c == 0.0 else None
                if same(pick):
                    return "arith", pick
        if "copy" in self.rules and x is not None:
            if op in COPY_OPS and len(tens) == 1 and same(x):
                return "copy", x
            if op == "copy" and len(args) >= 2 and id(x) in self.fresh and same(args[1]):
                return "copy", args[1]
        if "copy" in self.rules and op == "cat" and args and isinstance(args[0], list | tuple) and len(args[0]) == 1:
            if same(args[0][0]):
                return "copy", args[0][0]
        if "shape" in self.rules and x is not None:
            if op == "constant_pad_nd" and len(args) >= 2 and all(p == 0 for p in args[1]) and same(x):
                return "shape", x
            if op == "repeat" and len(args) >= 2 and all(r == 1 for r in args[1]) and same(x):
                return "shape", x
            if op == "roll" and len(args) >= 2 and all(s == 0 for s in (args[1] if isinstance(args[1], list | tuple)
                                                                        else [args[1]])) and same(x):
                return "shape", x
            hit = self._view_identity(res, args)
            if hit is not None:
                return "shape", hit
        if "dropout" in self.rules and op in DROPOUTS and x is not None and len(args) >= 3:
            p, train = args[1], args[2]
            if (self.const(p) == 0.0 or train is False) and same(x):
                return "dropout", x
        if "idempotent" in self.rules and op in IDEMPOTENT and x is not None and same(x):
            made = self.maker.get(id(x))
            if made is not None and made == (op, self._extra(args, kwargs)):
                return "idempotent", x
        return None

    def _view_identity(self, res: Any, args: tuple) -> Any:
        """The tensor a view `res` equals: one seen with its exact layout, or a contiguous base of which `res` is a
        contiguous reshape (same storage, offset, size); None when `res` is no view or a real rearrangement."""
        import torch

        ins = [a for a in args if isinstance(a, torch.Tensor)]
        if not ins or any(res is a for a in ins):
            return None  # in place, or no tensor argument
        st = _storage(res)
        if all(_storage(a) != st for a in ins):
            return None  # a fresh result, not a view
        key = (st, tuple(res.shape), tuple(res.stride()), res.storage_offset(), res.dtype)
        seen = self.layouts.get(key)
        if seen is not None and seen is not res:
            return seen
        base = self.bases.get(st)
        if (base is not None and base is not res and base.dtype == res.dtype and base.is_contiguous()
                and res.is_contiguous() and base.storage_offset() == res.storage_offset()
                and base.numel() == res.numel()):
            return base
        return None

    @staticmethod
    def _extra(args: tuple, kwargs: dict) -> tuple:
        import torch

        return tuple(repr(a) for a in args[1:] if not isinstance(a, torch.Tensor)) + tuple(sorted(
            (k, repr(v)) for k, v in kwargs.items()))

    def rename(self, name: str, args: tuple) -> str:
        """Spelling: `bmm` over a batch of one is `mm` (the einsum and bmm spellings of one matrix product)."""
        import torch

        if "spelling" in self.rules and _base(name) == "bmm" and args and isinstance(args[0], torch.Tensor) and (
                args[0].dim() == 3 and args[0].shape[0] == 1):
            self.count("spelling")
            return "aten.mm"
        return name

    def after(self, name: str, args: tuple, kwargs: dict, out: Any) -> None:
        """Bookkeeping after a kept op: constants it made, fresh tensors, what it wrote, who made its result."""
        import torch

        op = _base(name)
        inplace = name.endswith("_") and args and isinstance(args[0], torch.Tensor)
        if inplace:  # a write: the target is no longer fresh or constant (nor anything on its storage)
            st = _storage(args[0])
            self.fresh.discard(id(args[0]))
            for k in [k for k, (_, s) in self.consts.items() if s == st]:
                del self.consts[k]
        res = args[0] if inplace else out
        if not isinstance(res, torch.Tensor):
            return
        if op in FACTORY_CONST:
            self.note_value(res, FACTORY_CONST[op])
        elif op in FACTORY_FILL:
            vals = [a for a in (*args[1:], *kwargs.values()) if _is_num(a) or isinstance(a, bool)]
            if op == "scalar_tensor" and args:
                vals = [args[0]]
            if vals:
                self.note_value(res, vals[-1] if op != "scalar_tensor" else vals[0])
        elif op == "bernoulli" and "dropout" in self.rules and len(args) >= 2 and self.const(args[1]) == 1.0:
            self.note_value(res, 1.0)  # a dropout keep-mask drawn with probability 1 is all ones
        if op in FRESH and not inplace:
            self.fresh.add(id(res))
        self.maker[id(res)] = (op, self._extra(args, kwargs))
        self.keep.append(res)

    def constants(self) -> Any:
        """A torch-function mode that notes the value of `torch.tensor(1.0)` and kin (on meta, their data is gone
        by the time an ATen call sees them)."""
        from torch.overrides import TorchFunctionMode

        glue = self

        class _Notes(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if getattr(func, "__name__", "") in ("tensor", "as_tensor", "scalar_tensor") and args:
                    v = args[0]
                    if _is_num(v) or isinstance(v, bool):
                        glue.note_value(out, v)
                return out

        return _Notes()

    def count(self, rule: str) -> None:
        self.removed[rule] = self.removed.get(rule, 0) + 1


# ---- the same rules on source text ------------------------------------------------------------------
_API = frozenset({"torch", "F", "nn", "functional"})
_MATMUL = frozenset({"mm", "matmul", "bmm"})
_COPY_METHODS = frozenset({"clone", "contiguous", "detach", "float"})
_IDEM_CALLS = frozenset({"relu", "abs", "floor", "ceil", "round", "trunc", "sign"})
_NOOP_MODULES = frozenset({"Identity"})
_DROPOUT_MODULES = frozenset({"Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout"})


def _num(node: ast.AST) -> float | None:
    if isinstance(node, ast.Constant) and _is_num(node.value):
        return float(node.value)
    return None


def _func_name(call: ast.Call) -> tuple[str | None, ast.AST | None]:
    """(name, receiver): `torch.relu(x)` -> ("relu", None); `x.relu()` -> ("relu", x); `relu(x)` -> ("relu", None)."""
    f = call.func
    if isinstance(f, ast.Attribute):
        v = f.value
        while isinstance(v, ast.Attribute):
            v = v.value
        if isinstance(v, ast.Name) and v.id in _API:
            return f.attr, None
        return f.attr, f.value
    if isinstance(f, ast.Name):
        return f.id, None
    return None, None


def _arg(call: ast.Call, i: int, kw: str) -> ast.AST | None:
    if len(call.args) > i:
        return call.args[i]
    return next((k.value for k in call.keywords if k.arg == kw), None)


def _same(a: ast.AST | None, b: ast.AST | None) -> bool:
    """The same expression (load or store alike)."""
    if a is None or b is None:
        return False
    if isinstance(a, ast.Name) and isinstance(b, ast.Name):
        return a.id == b.id
    return type(a) is type(b) and ast.unparse(a) == ast.unparse(b)


_MATMUL_EQ = ("ij,jk->ik", "bij,bjk->bik", "...ij,...jk->...ik", "mk,kn->mn", "bmk,bkn->bmn")


class _Strip(ast.NodeTransformer):
    """Rewrites identity glue out of an AST (the source-text side of the rules)."""

    def __init__(self, rules: frozenset[str], noop_attrs: set[str]) -> None:
        self.rules = rules
        self.noop_attrs = noop_attrs
        self.changes = 0

    def visit(self, node: ast.AST) -> Any:
        new = super().visit(node)
        if new is not node:
            self.changes += 1
        return new

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if "arith" in self.rules:
            left, right = _num(node.left), _num(node.right)
            if isinstance(node.op, ast.Mult) and (right == 1.0 or left == 1.0):
                return node.left if right == 1.0 else node.right
            if isinstance(node.op, ast.Div | ast.Pow) and right == 1.0:
                return node.left
            if isinstance(node.op, ast.Add | ast.Sub) and right == 0.0:
                return node.left
            if isinstance(node.op, ast.Add) and left == 0.0:
                return node.right
        if "spelling" in self.rules and isinstance(node.op, ast.MatMult):
            return ast.Call(func=ast.Attribute(value=ast.Name("torch", ast.Load()), attr="matmul", ctx=ast.Load()),
                            args=[node.left, node.right], keywords=[])
        return node

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        if "shape" not in self.rules:
            return node
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        whole = all((isinstance(p, ast.Slice) and p.lower is None and p.upper is None and p.step is None)
                    or (isinstance(p, ast.Constant) and p.value is Ellipsis) for p in parts)
        return node.value if whole and isinstance(node.ctx, ast.Load) else node

    def visit_Call(self, node: ast.Call) -> ast.AST:  # noqa: C901 - one branch per glue form
        self.generic_visit(node)
        name, recv = _func_name(node)
        first = recv if recv is not None else (node.args[0] if node.args else None)
        rest = 0 if recv is not None else 1  # index of the first argument after the tensor
        r = self.rules
        if first is None or name is None:
            return node
        if "arith" in r:
            c = _num(_arg(node, rest, "other")) if _arg(node, rest, "other") is not None else None
            if name in ("mul", "div", "true_divide", "pow") and c == 1.0 or name in ("add", "sub") and c == 0.0:
                return first
            if name == "where" and recv is None and len(node.args) == 3 and isinstance(node.args[0], ast.Constant):
                return node.args[1] if node.args[0].value else node.args[2]
        if "copy" in r and name in _COPY_METHODS and recv is not None and not node.args and not node.keywords:
            return first
        if "copy" in r and name == "clone" and recv is None and len(node.args) == 1:
            return first
        if "copy" in r and name == "cat" and recv is None and node.args and isinstance(node.args[0], ast.List | ast.Tuple) \
                and len(node.args[0].elts) == 1:
            return node.args[0].elts[0]
        if "shape" in r:
            arg = _arg(node, rest, "shape")
            if name in ("view", "reshape") and arg is not None and len(node.args) == rest + 1 and isinstance(
                    arg, ast.Attribute | ast.Call):
                # x.view(x.shape) / x.reshape(x.size())
                target = arg.value if isinstance(arg, ast.Attribute) and arg.attr == "shape" else (
                    arg.func.value if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute)
                    and arg.func.attr == "size" and not arg.args else None)
                if _same(target, first):
                    return first
            if name in ("view_as", "reshape_as", "expand_as", "type_as") and _same(_arg(node, rest, "other"), first):
                return first
            if name == "pad" and recv is None and len(node.args) >= 2 and isinstance(node.args[1], ast.Tuple | ast.List) \
                    and all(_num(e) == 0.0 for e in node.args[1].elts):
                return first
            inner = first if isinstance(first, ast.Call) else None
            if inner is not None:
                iname, irecv = _func_name(inner)
                ifirst = irecv if irecv is not None else (inner.args[0] if inner.args else None)
                irest = 0 if irecv is not None else 1
                mine = [ast.dump(a) for a in node.args[rest:]]
                theirs = [ast.dump(a) for a in inner.args[irest:]]
                if (iname, name) == ("unsqueeze", "squeeze") and mine == theirs and mine:
                    return ifirst
                if iname == name == "t" and not mine and not theirs:
                    return ifirst
                if iname == name == "transpose" and len(mine) == 2 and sorted(mine) == sorted(theirs):
                    return ifirst
                if iname == name == "permute" and _inverse(inner.args[irest:], node.args[rest:]):
                    return ifirst
        if "dropout" in r and name in ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout") and recv is None:
            p = _arg(node, 1, "p")
            train = _arg(node, 2, "training") if name != "dropout" or len(node.args) < 3 else node.args[2]
            if (p is not None and _num(p) == 0.0) or (isinstance(train, ast.Constant) and train.value is False):
                return first
        if "idempotent" in r and name in _IDEM_CALLS and isinstance(first, ast.Call):
            iname, _ = _func_name(first)
            if iname == name and len(node.args) == rest and len(first.args) == (0 if _func_name(first)[1] else 1):
                return first
        if ("copy" in r or "dropout" in r) and recv is not None and isinstance(node.func, ast.Attribute) and isinstance(
                recv, ast.Name) and recv.id == "self" and node.func.attr in self.noop_attrs and len(node.args) == 1:
            return node.args[0]  # self.drop(x) with self.drop = nn.Dropout(0.0), nn.Identity()
        if "spelling" in r and name in _MATMUL and name != "matmul" and recv is None and len(node.args) == 2:
            self.changes += 1
            node.func = ast.Attribute(value=ast.Name("torch", ast.Load()), attr="matmul", ctx=ast.Load())
        if "spelling" in r and name == "einsum" and recv is None and len(node.args) == 3 and isinstance(
                node.args[0], ast.Constant) and str(node.args[0].value).replace(" ", "") in _MATMUL_EQ:
            return ast.Call(func=ast.Attribute(value=ast.Name("torch", ast.Load()), attr="matmul", ctx=ast.Load()),
                            args=node.args[1:], keywords=[])
        return node


def _inverse(a: list[ast.AST], b: list[ast.AST]) -> bool:
    """Two literal permutations (as call arguments or one tuple) that undo each other."""
    def lit(xs: list[ast.AST]) -> list[int] | None:
        if len(xs) == 1 and isinstance(xs[0], ast.Tuple | ast.List):
            xs = list(xs[0].elts)
        vals = [x.value for x in xs if isinstance(x, ast.Constant) and isinstance(x.value, int)]
        return vals if len(vals) == len(xs) and xs else None
    p, q = lit(a), lit(b)
    return p is not None and q is not None and len(p) == len(q) and all(p[q[i]] == i for i in range(len(q))) \
        if p is not None and q is not None and sorted(p) == list(range(len(p))) == sorted(q) else False


def _noop_modules(tree: ast.AST, rules: frozenset[str]) -> set[str]:
    """`self.<attr>` names bound to modules that do nothing: nn.Identity(), a dropout with p = 0."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Call)):
            continue
        t = node.targets[0]
        if not (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"):
            continue
        name, _ = _func_name(node.value)
        if name in _NOOP_MODULES and "copy" in rules:
            out.add(t.attr)
        p = _arg(node.value, 0, "p")
        if name in _DROPOUT_MODULES and "dropout" in rules and p is not None and _num(p) == 0.0:
            out.add(t.attr)
    return out


def _drop_statements(body: list[ast.stmt], noop_attrs: set[str], rules: frozenset[str],
                     dropped: list[int]) -> list[ast.stmt]:
    """Statements that became `x = x` (or bind a no-op module, or repeat an idempotent op) are dropped (counted in
    `dropped[0]`)."""
    out: list[ast.stmt] = []
    for stmt in body:
        for field in ("body", "orelse", "finalbody"):
            if isinstance(getattr(stmt, field, None), list) and getattr(stmt, field):
                setattr(stmt, field, _drop_statements(getattr(stmt, field), noop_attrs, rules, dropped)
                        or [ast.Pass()])
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            t, v = stmt.targets[0], stmt.value
            if _same(t, v) or (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                               and t.value.id == "self" and t.attr in noop_attrs):
                dropped[0] += 1
                continue
            if ("idempotent" in rules and out and isinstance(out[-1], ast.Assign) and isinstance(t, ast.Name)
                    and isinstance(v, ast.Call) and _func_name(v)[0] in _IDEM_CALLS and _same(out[-1].targets[0], t)
                    and isinstance(out[-1].value, ast.Call) and _func_name(out[-1].value)[0] == _func_name(v)[0]
                    and len(v.args) == 1 and isinstance(v.args[0], ast.Name) and v.args[0].id == t.id):
                dropped[0] += 1
                continue  # x = relu(...); x = relu(x)
        out.append(stmt)
    return out


def strip_source(tree: ast.Module, rules: Iterable[str] | str | None = RULES) -> tuple[ast.Module, int]:
    """(`tree` with identity glue rewritten away, in place; how many rewrites): `x * 1.0` is `x`, `x.clone()` is
    `x`, `A @ B` and `torch.mm` are `torch.matmul`, statements left as `x = x` are gone. On text the values proven
    are literals."""
    got = parse_rules(rules)
    if not got:
        return tree, 0
    noop = _noop_modules(tree, got)
    strip = _Strip(got, noop)
    tree = strip.visit(tree)
    dropped = [0]
    tree.body = _drop_statements(tree.body, noop, got, dropped)
    return tree, strip.changes + dropped[0]
