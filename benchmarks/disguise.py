"""Disguised copies of KernelBench problems for the decontamination benchmark (AST rewrites, seeded).

Each function takes a source and an RNG and returns new source with the same computation in another
spelling: identifiers renamed, independent statements reordered, module vs functional forms swapped,
sizes changed, no-op wrapping added. `disguise(code, kind, rng)` applies one kind, or all of them.
"""

from __future__ import annotations

import ast
import copy
import random

KEEP = {"Model", "forward", "__init__", "get_inputs", "get_init_inputs", "self", "super", "torch", "nn", "F",
        "math", "np", "numpy", "einops", "range", "len", "int", "float", "list", "tuple", "dict", "min", "max",
        "sum", "abs", "zip", "enumerate", "isinstance", "print", "getattr", "hasattr", "type", "str",
        "bool", "reversed", "sorted", "any", "all", "map", "round", "pow", "divmod", "slice", "ValueError",
        "NotImplementedError", "AssertionError", "RuntimeError", "Exception", "None", "True", "False", "object"}

FUNC_TO_MODULE = {"relu": "ReLU", "sigmoid": "Sigmoid", "tanh": "Tanh", "gelu": "GELU", "silu": "SiLU",
                  "mish": "Mish", "hardswish": "Hardswish", "softplus": "Softplus", "elu": "ELU",
                  "selu": "SELU", "hardtanh": "Hardtanh", "softsign": "Softsign", "hardsigmoid": "Hardsigmoid"}
MODULE_TO_FUNC = {m: f for f, m in FUNC_TO_MODULE.items()}
BINOP_FUNC = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div"}


def _name(rng: random.Random) -> str:
    return "v_" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(6))


def rename(tree: ast.Module, rng: random.Random) -> ast.Module:
    names: set[str] = set()
    attrs: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name) and node.value.id == "self"):
            attrs.add(node.attr)
    class_level = {t.id for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for s in c.body
                   if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)}
    class_level |= {s.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for s in c.body
                    if isinstance(s, ast.FunctionDef)}  # methods, called as self.NAME
    imported = {a.asname or a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)
                for a in n.names}
    # class attributes (BasicBlock.expansion) are also read off other names (block.expansion): keep them
    class_attrs = {t.id for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for s in c.body
                   if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)}
    nmap = {n: _name(rng) for n in sorted(names - KEEP - imported - class_attrs)}
    amap = {a: _name(rng) for a in sorted(attrs)}
    amap.update({a: nmap[a] for a in class_level if a in nmap})  # read back as self.NAME
    class_names = {nmap[c.name] for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and c.name in nmap}

    class T(ast.NodeTransformer):
        def visit_Name(self, node):
            node.id = nmap.get(node.id, node.id)
            return node

        def visit_arg(self, node):
            node.arg = nmap.get(node.arg, node.arg)
            return node

        def visit_FunctionDef(self, node):
            node.name = nmap.get(node.name, node.name)
            self.generic_visit(node)
            return node

        def visit_ClassDef(self, node):
            node.name = nmap.get(node.name, node.name)
            self.generic_visit(node)
            return node

        def visit_Attribute(self, node):
            self.generic_visit(node)
            if isinstance(node.value, ast.Name) and (node.value.id == "self" or node.value.id in class_names):
                node.attr = amap.get(node.attr, node.attr)
            return node

        def visit_Call(self, node):
            # keyword arguments of the module's own classes and functions follow their renamed parameters
            own = (isinstance(node.func, ast.Name) and node.func.id in nmap) or (
                isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "self" and node.func.attr in amap)
            if own:
                for kw in node.keywords:
                    if kw.arg in nmap:
                        kw.arg = nmap[kw.arg]
            self.generic_visit(node)
            return node

    return T().visit(tree)


def _defs_uses(stmt: ast.stmt) -> tuple[set[str], set[str]]:
    defs, uses = set(), set()
    for n in ast.walk(stmt):
        if isinstance(n, ast.Name):
            (defs if isinstance(n.ctx, ast.Store) else uses).add(n.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
            (defs if isinstance(n.ctx, ast.Store) else uses).add("self." + n.attr)
    return defs, uses


def _shuffle_block(stmts: list[ast.stmt], rng: random.Random) -> list[ast.stmt]:
    """A random order of `stmts` that keeps every def-use, use-def and def-def order."""
    du = [_defs_uses(s) for s in stmts]
    deps = {i: {j for j in range(i) if (du[j][0] & du[i][1]) or (du[j][1] & du[i][0]) or (du[j][0] & du[i][0])}
            for i in range(len(stmts))}
    done: list[int] = []
    left = set(range(len(stmts)))
    while left:
        ready = sorted(i for i in left if deps[i] <= set(done))
        pick = rng.choice(ready)
        done.append(pick)
        left.remove(pick)
    return [stmts[i] for i in done]


def _calls_self_method(s: ast.stmt) -> bool:
    """self.helper(...) may read any attribute: such a statement stays where it is."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
               and n.func.value.id == "self" and n.func.attr.startswith("_") for n in ast.walk(s))


def _reorder_body(body: list[ast.stmt], rng: random.Random) -> list[ast.stmt]:
    out, run = [], []
    for s in body:
        if isinstance(s, ast.Assign) and not _calls_self_method(s) and not any(
                isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "super" for n in ast.walk(s)):
            run.append(s)
            continue
        out += _shuffle_block(run, rng)
        run = []
        out.append(s)
    return out + _shuffle_block(run, rng)


def reorder(tree: ast.Module, rng: random.Random) -> ast.Module:
    tree.body = _reorder_body(tree.body, rng)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            node.body = _reorder_body(node.body, rng)
    return tree


def _dotted(node: ast.AST) -> list[str]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else []


def swap_forms(tree: ast.Module, rng: random.Random) -> ast.Module:
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        return tree
    init = next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    fwd = next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if init is None or fwd is None:
        return tree
    # modules without arguments -> functional calls
    mod_attrs = {}
    for s in list(init.body):
        if (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Attribute)
                and isinstance(s.value, ast.Call) and not s.value.args and not s.value.keywords):
            d = _dotted(s.value.func)
            if d and d[-1] in MODULE_TO_FUNC:
                mod_attrs[s.targets[0].attr] = MODULE_TO_FUNC[d[-1]]
                init.body.remove(s)
    new_inits: list[ast.stmt] = []

    class T(ast.NodeTransformer):
        def visit_Call(self, node):
            self.generic_visit(node)
            d = _dotted(node.func)
            if len(d) == 2 and d[0] == "self" and d[1] in mod_attrs and len(node.args) == 1:
                return ast.parse(f"torch.nn.functional.{mod_attrs[d[1]]}(_)", mode="eval").body.__class__(
                    func=ast.parse(f"torch.nn.functional.{mod_attrs[d[1]]}", mode="eval").body, args=node.args,
                    keywords=[])
            if d and d[0] in ("torch", "F") and d[-1] in FUNC_TO_MODULE and len(node.args) == 1 and not node.keywords:
                attr = "act_" + _name(rng)[2:]
                new_inits.append(ast.parse(f"self.{attr} = nn.{FUNC_TO_MODULE[d[-1]]}()").body[0])
                return ast.Call(func=ast.parse(f"self.{attr}", mode="eval").body, args=node.args, keywords=[])
            if d and d[0] == "torch" and d[-1] == "matmul" and len(node.args) == 2:
                return ast.BinOp(left=node.args[0], op=ast.MatMult(), right=node.args[1])
            return node

        def visit_BinOp(self, node):
            self.generic_visit(node)
            fn = BINOP_FUNC.get(type(node.op))
            if fn and rng.random() < 0.7:
                return ast.Call(func=ast.parse(f"torch.{fn}", mode="eval").body, args=[node.left, node.right],
                                keywords=[])
            return node

    T().visit(fwd)
    init.body += new_inits
    return tree


def sizes(tree: ast.Module, rng: random.Random, only_batch: bool = False) -> ast.Module:
    """Scale module-level sizes; `only_batch` touches only batch-size names (always a valid program)."""
    factor = rng.choice([0.5, 2.0])

    class T(ast.NodeTransformer):
        def visit_Constant(self, node):
            v = node.value
            if isinstance(v, bool):
                return node
            if isinstance(v, int) and v >= 4:
                return ast.Constant(max(1, int(v * factor)))
            if isinstance(v, float) and v not in (0.0, 1.0):
                return ast.Constant(round(v * rng.uniform(0.5, 1.5), 4))
            return node

    for i, s in enumerate(tree.body):
        if isinstance(s, ast.Assign) and (not only_batch or any(
                isinstance(t, ast.Name) and "batch" in t.id.lower() for t in s.targets)):
            tree.body[i] = T().visit(s)
    return tree


def noop_wrap(tree: ast.Module, rng: random.Random) -> ast.Module:
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    fwd = model and next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    init = model and next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if fwd is None or init is None or not fwd.args.args[1:]:
        return tree
    first = fwd.args.args[1].arg
    init.body.append(ast.parse("self.passthrough = nn.Identity()").body[0])
    params = ", ".join(a.arg for a in fwd.args.args[1:])
    inner = ast.parse(f"def _body({params}):\n    pass").body[0]
    inner.body = fwd.body
    fwd.body = [ast.parse(f"{first} = self.passthrough({first})").body[0], inner,
                ast.parse(f"return _body({params})").body[0]]
    tree.body.insert(0, ast.parse("'''Auto-generated operator benchmark.'''").body[0])
    tree.body.append(ast.parse("def _unused_helper(t):\n    return t").body[0])
    return tree


# identity glue (operators/identity_glue.py): statements that leave a forward's first tensor unchanged, one kind each
GLUE_FORMS = {
    "arith": ["{x} = {x} * 1.0", "{x} = {x} + 0", "{x} = {x} / 1", "{x} = {x} ** 1", "{x} = torch.mul({x}, 1.0)",
              "{x} = torch.where(torch.tensor(True), {x}, {x} * 2)"],
    "copy": ["{x} = {x}.clone()", "{x} = {x}.contiguous()", "{x} = {x}.detach()", "{x} = torch.cat([{x}])",
             "{x} = torch.empty_like({x}).copy_({x})", "{x} = {x}.to({x}.dtype)"],
    "shape": ["{x} = {x}.view({x}.shape)", "{x} = {x}.unsqueeze(0).squeeze(0)", "{x} = {x}.transpose(0, -1).transpose(0, -1)",
              "{x} = {x}[:]", "{x} = torch.nn.functional.pad({x}, (0, 0))", "{x} = {x}.reshape({x}.size())"],
    "dropout": ["{x} = torch.nn.functional.dropout({x}, p=0.0, training=self.training)",
                "{x} = torch.nn.functional.dropout({x}, p=0.3, training=False)",
                "{x} = torch.dropout({x}, 0.0, True)"],
}
# a first op of these (on the first input) may be repeated: the same op on its own output changes nothing
IDEMPOTENT_CALLS = ("relu", "abs")
MATMUL_SPELLINGS = ["torch.mm({a}, {b})", "({a} @ {b})", "torch.einsum('...ij,...jk->...ik', {a}, {b})"]


def _forward(tree: ast.Module) -> ast.FunctionDef | None:
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    return model and next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)


def _glue(kind: str):
    def insert(tree: ast.Module, rng: random.Random) -> ast.Module:
        """One glue statement at the top of forward, the docstring moved below it (as a careless copy has it)."""
        fwd = _forward(tree)
        if fwd is None or not fwd.args.args[1:]:
            return tree
        x = fwd.args.args[1].arg
        doc = fwd.body[:1] if fwd.body and isinstance(fwd.body[0], ast.Expr) and isinstance(
            getattr(fwd.body[0], "value", None), ast.Constant) else []
        rest = fwd.body[len(doc):]
        glue = ast.parse(rng.choice(GLUE_FORMS[kind]).format(x=x)).body
        fwd.body = glue + doc + rest
        return tree
    return insert


def idempotent(tree: ast.Module, rng: random.Random) -> ast.Module:
    """relu(x) -> relu(relu(x)) (abs likewise) wherever the source calls one; unchanged when it calls none."""
    class T(ast.NodeTransformer):
        def visit_Call(self, node: ast.Call) -> ast.AST:
            self.generic_visit(node)
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in IDEMPOTENT_CALLS and isinstance(f.value, ast.Name) and \
                    f.value.id in ("torch", "F") and len(node.args) == 1 and not node.keywords:
                return ast.Call(func=f, args=[copy.deepcopy(node)], keywords=[])
            return node
    return T().visit(tree)


def spelling(tree: ast.Module, rng: random.Random) -> ast.Module:
    """torch.matmul(a, b) of two 2-D operands written as mm, @ or an einsum; unchanged without one."""
    class T(ast.NodeTransformer):
        def visit_Call(self, node: ast.Call) -> ast.AST:
            self.generic_visit(node)
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr == "matmul" and isinstance(f.value, ast.Name) and \
                    f.value.id == "torch" and len(node.args) == 2 and not node.keywords:
                a, b = (ast.unparse(x) for x in node.args)
                return ast.parse(rng.choice(MATMUL_SPELLINGS).format(a=a, b=b), mode="eval").body
            return node
    return T().visit(tree)


GLUE_KINDS = {**{k: _glue(k) for k in GLUE_FORMS}, "idempotent": idempotent, "spelling": spelling}
KINDS = {"rename": rename, "reorder": reorder, "swap_forms": swap_forms, "sizes": sizes, "noop_wrap": noop_wrap}
ALL_ORDER = ("sizes", "swap_forms", "reorder", "noop_wrap", "rename")  # sizes first: it reads the names


def disguise(code: str, kind: str, rng: random.Random, only_batch: bool = False) -> str:
    """`kind`: one of KINDS, `all`, `glue_<k>` for an identity-glue kind (GLUE_KINDS) alone, `glue_<k>+all` for it
    combined with every disguise, or `glue_all` (every glue kind) / `glue_all+all`."""
    tree = ast.parse(code)
    glue, _, rest = kind.partition("+") if kind.startswith("glue_") else ("", "", kind)
    steps = list(ALL_ORDER if rest == "all" else [rest] if rest else [])
    gk = glue[len("glue_"):]
    glue_steps = list(GLUE_KINDS) if gk == "all" else [gk] if gk else []
    for step in steps[:1] + glue_steps + steps[1:] if steps[:1] == ["sizes"] else glue_steps + steps:
        tree = (sizes(copy.deepcopy(tree), rng, only_batch) if step == "sizes"
                else GLUE_KINDS[step](copy.deepcopy(tree), rng) if step in GLUE_KINDS
                else KINDS[step](copy.deepcopy(tree), rng))
    return ast.unparse(ast.fix_missing_locations(tree))
