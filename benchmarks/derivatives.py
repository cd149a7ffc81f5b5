"""Third-party derivative forms of KernelBench problems for the decontamination benchmark (seeded AST rewrites).

These are the forms in which other teams' repositories and datasets carry KernelBench problems, generated here
from the reference source itself (no third-party code is copied):

- `functional`: the problem as `module_fn(x, *params)` plus a thin `Model` that builds the original layers
  once, keeps their weights, buffers and settings, and passes them in (`forward(self, x, fn=module_fn)`);
  layers become `F.conv2d`, `F.batch_norm(..., training=True)`, ... Some rewrites drop a dropout, a few add a
  final `.mean()`. A problem whose forward calls layers this table cannot spell (a Sequential, a custom
  block, a helper method) keeps those as objects passed to `module_fn` (`partial` in the result).
- `cuda_graph`: the same module whose forward captures its eager forward in a CUDA graph on a stream built in
  `__init__` and replays it when the input is on the GPU, falling back to the eager forward on the CPU; one
  variant asks `torch.cuda.is_available()` instead, one moves the inputs with `.cuda()` and guards with `.item()`.
- `backend_flags`: cuDNN/TF32 switches at the top and `.cuda()` in get_inputs.
- `reformatted`: unparsed and re-commented; `lightly_edited`: renamed and reordered (benchmarks/disguise.py);
  `resized`: sizes scaled (benchmarks/disguise.py). `history` (v0 sources) is assembled by the benchmark.
"""

from __future__ import annotations

import ast
import copy
import random

# nn layer -> (functional call, its tensors, settings read off the built layer and passed as keywords)
LAYERS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    **{f"Conv{n}d": (f"F.conv{n}d", ("weight", "bias"), ("stride", "padding", "dilation", "groups"))
       for n in (1, 2, 3)},
    **{f"ConvTranspose{n}d": (f"F.conv_transpose{n}d", ("weight", "bias"),
                              ("stride", "padding", "output_padding", "groups", "dilation")) for n in (1, 2, 3)},
    "Linear": ("F.linear", ("weight", "bias"), ()),
    **{f"BatchNorm{n}d": ("F.batch_norm", ("running_mean", "running_var", "weight", "bias"), ("momentum", "eps"))
       for n in (1, 2, 3)},
    **{f"InstanceNorm{n}d": ("F.instance_norm", ("running_mean", "running_var", "weight", "bias"), ("momentum", "eps"))
       for n in (1, 2, 3)},
    "LayerNorm": ("F.layer_norm", ("normalized_shape", "weight", "bias"), ("eps",)),
    "GroupNorm": ("F.group_norm", ("num_groups", "weight", "bias"), ("eps",)),
    **{f"MaxPool{n}d": (f"F.max_pool{n}d", (), ("kernel_size", "stride", "padding", "dilation", "ceil_mode"))
       for n in (1, 2, 3)},
    "AvgPool1d": ("F.avg_pool1d", (), ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad")),
    **{f"AvgPool{n}d": (f"F.avg_pool{n}d", (), ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
                                                "divisor_override")) for n in (2, 3)},
    **{f"AdaptiveAvgPool{n}d": (f"F.adaptive_avg_pool{n}d", (), ("output_size",)) for n in (1, 2, 3)},
    **{a: (f"F.{f}", (), ()) for a, f in (("ReLU", "relu"), ("Tanh", "tanh"), ("Sigmoid", "sigmoid"), ("SiLU", "silu"),
                                          ("Mish", "mish"), ("Hardswish", "hardswish"), ("SELU", "selu"),
                                          ("Hardsigmoid", "hardsigmoid"), ("Softsign", "softsign"))},
    "GELU": ("F.gelu", (), ("approximate",)), "ELU": ("F.elu", (), ("alpha",)),
    "LeakyReLU": ("F.leaky_relu", (), ("negative_slope",)), "Hardtanh": ("F.hardtanh", (), ("min_val", "max_val")),
    "Softplus": ("F.softplus", (), ("beta", "threshold")), "Softmax": ("F.softmax", (), ("dim",)),
    "LogSoftmax": ("F.log_softmax", (), ("dim",)), "GLU": ("F.glu", (), ("dim",)),
    **{d: ("F.dropout", (), ("p",)) for d in ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d")},
    "Flatten": ("torch.flatten", (), ("start_dim", "end_dim")), "Identity": ("", (), ()),
}
POSITIONAL = {"F.layer_norm": ("normalized_shape",), "F.group_norm": ("num_groups",)}
# norms whose functional form takes positional running stats before the affine tensors
TRAINING = {"F.batch_norm": "training=True", "F.instance_norm": "use_input_stats=True", "F.dropout": "training=True"}


def _model(tree: ast.Module) -> tuple[ast.ClassDef, ast.FunctionDef, ast.FunctionDef] | None:
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        return None
    init = next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    fwd = next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    return (model, init, fwd) if init is not None and fwd is not None else None


def _layer_type(value: ast.AST) -> str | None:
    if isinstance(value, ast.Call):
        f = value.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name | ast.Attribute) and f.attr in LAYERS:
            return f.attr
    return None


def functional(code: str, rng: random.Random) -> tuple[str, bool]:
    """(rewritten source, fully functional?) of the `functional` form; raises ValueError if not applicable."""
    tree = ast.parse(code)
    found = _model(tree)
    if found is None:
        raise ValueError("no Model with __init__ and forward")
    model, init, fwd = found
    methods = {n.name for n in model.body if isinstance(n, ast.FunctionDef)}
    layers: dict[str, str] = {}
    for s in init.body:
        if (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Attribute)
                and isinstance(s.targets[0].value, ast.Name) and s.targets[0].value.id == "self"):
            t = _layer_type(s.value)
            if t:
                layers[s.targets[0].attr] = t
    # how forward uses self.NAME: a layer called directly is spelled functionally, anything else is passed in
    called: set[str] = set()
    for node in ast.walk(fwd):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "self" and node.func.attr in layers):
            called.add(node.func.attr)
    used = {n.attr for n in ast.walk(fwd) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == "self"}
    if used & methods:
        raise ValueError("forward calls a helper method")
    if any(isinstance(n, ast.Name) and n.id == "self" for n in ast.walk(fwd)) and not all(
            isinstance(p, ast.Attribute) for p in _parents_of_self(fwd)):
        raise ValueError("forward uses `self` itself")
    spelled = {a for a in called if sum(1 for n in ast.walk(fwd) if isinstance(n, ast.Attribute)
                                        and isinstance(n.value, ast.Name) and n.value.id == "self"
                                        and n.attr == a) == sum(1 for n in ast.walk(fwd) if isinstance(n, ast.Call)
                                                                and isinstance(n.func, ast.Attribute)
                                                                and isinstance(n.func.value, ast.Name)
                                                                and n.func.value.id == "self" and n.func.attr == a)}
    passed = sorted(used - spelled)  # parameters, settings and layers passed in as they are
    dropped = {a for a in spelled if layers[a].startswith("Dropout") and rng.random() < 0.5}

    params: list[str] = []
    new_init: list[ast.stmt] = []
    for s in init.body:
        tgt = s.targets[0] if isinstance(s, ast.Assign) and len(s.targets) == 1 else None
        name = tgt.attr if isinstance(tgt, ast.Attribute) and isinstance(tgt.value, ast.Name) and tgt.value.id == "self" else None
        if name in spelled:
            fn, tensors, settings = LAYERS[layers[name]]
            local = f"_{name}_layer"  # not `name`: a constructor argument may carry that name
            new_init.append(ast.Assign(targets=[ast.Name(local, ast.Store())], value=s.value, lineno=0))
            for t in tensors:
                if t in ("weight", "bias"):
                    new_init.append(ast.parse(f"self.{name}_{t} = nn.Parameter({local}.{t}.detach().clone()) "
                                              f"if {local}.{t} is not None else None").body[0])
                else:
                    new_init.append(ast.parse(f"self.{name}_{t} = {local}.{t}").body[0])
                params.append(f"{name}_{t}")
            if settings:
                # spelled out: the static check refuses getattr with a computed name (such a copy is compared by text)
                cfg = ", ".join(f"{k!r}: {local}.{k}" for k in settings)
                new_init.append(ast.parse(f"self.{name}_cfg = {{{cfg}}}").body[0])
                params.append(f"{name}_cfg")
        else:
            new_init.append(s)
    init.body = new_init or [ast.Pass()]

    args = [a.arg for a in fwd.args.args[1:]]

    class Body(ast.NodeTransformer):
        def visit_Call(self, node):
            f = node.func
            layer = isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self" and (
                f.attr in spelled)
            node.args = [self.visit(a) for a in node.args]
            node.keywords = [self.visit(k) for k in node.keywords]
            if not layer:
                node.func = self.visit(node.func)
            if layer:
                name = f.attr
                fn, tensors, settings = LAYERS[layers[name]]
                x = node.args[0] if node.args else ast.Name("x", ast.Load())
                if not fn or name in dropped:
                    return x
                pos = [f"{name}_{t}" for t in tensors]
                extra = [TRAINING[fn]] if fn in TRAINING else []
                kw = [f"**{name}_cfg"] if settings else []
                text = f"{fn}(_X_, {', '.join([*pos, *extra, *kw])})"
                call = ast.parse(text, mode="eval").body
                call.args[0] = x
                return call
            return node

        def visit_Attribute(self, node):
            self.generic_visit(node)
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                return ast.Name(node.attr, ast.Load())
            return node

    body = [Body().visit(copy.deepcopy(s)) for s in fwd.body]
    mean = rng.random() < 0.125
    if mean:  # a rewrite that reports a scalar summary of the result
        for s in body:
            for node in ast.walk(s):
                if isinstance(node, ast.Return) and node.value is not None:
                    node.value = ast.Call(ast.Attribute(node.value, "mean", ast.Load()), [], [])
    fn_args = args + params + passed
    fn_def = ast.parse(f"def module_fn({', '.join(fn_args)}):\n    pass").body[0]
    doc = ast.Expr(ast.Constant("Functional implementation of the module: parameters are passed in explicitly."))
    fn_def.body = [doc, *body]
    call = ", ".join(args + [f"self.{p}" for p in params] + [f"self.{p}" for p in passed])
    star = fwd.args.vararg is not None
    if star:
        raise ValueError("forward takes *args")
    fwd.args.args.append(ast.arg("fn"))
    fwd.args.defaults.append(ast.Name("module_fn", ast.Load()))
    for a in fwd.args.args:
        a.annotation = None
    fwd.body = [ast.parse(f"return fn({call})").body[0]]
    fwd.returns = None
    tree.body.insert(tree.body.index(model), fn_def)
    if not any(isinstance(n, ast.ImportFrom | ast.Import) and any(a.asname == "F" for a in n.names) for n in tree.body):
        tree.body.insert(0, ast.parse("import torch.nn.functional as F").body[0])
    return ast.unparse(ast.fix_missing_locations(tree)), not [p for p in passed if p in layers or p not in
                                                                _init_attrs(init)]


def _parents_of_self(fn: ast.FunctionDef) -> list[ast.AST]:
    """The nodes directly holding each bare `self` in `fn` (an Attribute for `self.x`)."""
    out = []
    for node in ast.walk(fn):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Name) and child.id == "self":
                out.append(node)
    return out


def _init_attrs(init: ast.FunctionDef) -> set[str]:
    return {t.attr for s in ast.walk(init) if isinstance(s, ast.Assign) for t in s.targets
            if isinstance(t, ast.Attribute)}


GRAPH_FORWARD = '''
def forward(self, {args}):
    if not {cond}:
        return self._forward_eager({args})
    key = tuple(getattr(t, "shape", t) for t in ({args},))
    if self._graph is None or self._graph_key != key:
        self._static_inputs = [t.clone() if isinstance(t, torch.Tensor) else t for t in ({args},)]
        self._stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self._stream):
            for _ in range(3):
                self._forward_eager(*self._static_inputs)
        torch.cuda.current_stream().wait_stream(self._stream)
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph):
            self._static_output = self._forward_eager(*self._static_inputs)
        self._graph_key = key
    for static, t in zip(self._static_inputs, ({args},)):
        if isinstance(t, torch.Tensor):
            static.copy_(t)
    self._graph.replay()
    return self._static_output
'''


def cuda_graph(code: str, rng: random.Random) -> str:
    """The `cuda_graph` form (three variants, picked by `rng`)."""
    tree = ast.parse(code)
    found = _model(tree)
    if found is None:
        raise ValueError("no Model with __init__ and forward")
    model, init, fwd = found
    args = [a.arg for a in fwd.args.args[1:]]
    if not args or fwd.args.vararg is not None:
        raise ValueError("forward takes no named tensor argument")
    variant = rng.randrange(3)
    cond = f"{args[0]}.is_cuda" if variant != 1 else "torch.cuda.is_available()"
    fwd.name = "_forward_eager"
    new = ast.parse(GRAPH_FORWARD.format(args=", ".join(args), cond=cond)).body[0]
    new.args = copy.deepcopy(fwd.args)  # the original parameters, defaults included
    if variant == 2:  # inputs moved to the GPU, and a finiteness guard read back with .item()
        new.body.insert(0, ast.parse(f"if not torch.isfinite({args[0]}).all().item():\n"
                                     "    raise ValueError('non-finite input')").body[0])
        new.body.insert(0, ast.parse(f"{args[0]} = {args[0]}.cuda() if torch.cuda.is_available() else {args[0]}"
                                     ).body[0])
    model.body.insert(model.body.index(fwd) + 1, new)
    init.body += ast.parse("self._stream = torch.cuda.Stream()\nself._graph = None\nself._graph_key = None").body
    return ast.unparse(ast.fix_missing_locations(tree))


def backend_flags(code: str, rng: random.Random) -> str:
    tree = ast.parse(code)
    flags = ast.parse("torch.backends.cudnn.benchmark = True\ntorch.backends.cuda.matmul.allow_tf32 = True\n"
                      "torch.backends.cudnn.allow_tf32 = True").body
    at = max(i for i, n in enumerate(tree.body) if isinstance(n, ast.Import | ast.ImportFrom)) + 1
    tree.body[at:at] = flags[: rng.randrange(1, 4)]
    for f in tree.body:
        if isinstance(f, ast.FunctionDef) and f.name == "get_inputs":
            for node in ast.walk(f):
                if isinstance(node, ast.Return) and isinstance(node.value, ast.List):
                    node.value.elts = [ast.Call(ast.Attribute(e, "cuda", ast.Load()), [], [])
                                       if not isinstance(e, ast.Starred) else e for e in node.value.elts]
    return ast.unparse(ast.fix_missing_locations(tree))


def reformatted(code: str, rng: random.Random) -> str:
    """Unparsed (quotes, spacing, parentheses normalized) with a new header comment and docstrings dropped."""
    tree = ast.parse(code)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(
                getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    header = rng.choice(["# Reference implementation\n", "# Auto-formatted\n# -*- coding: utf-8 -*-\n", ""])
    return header + ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def derive(code: str, form: str, rng: random.Random) -> tuple[str, str]:
    """(source, note) of `form` applied to a KernelBench problem; raises ValueError when it does not apply."""
    from benchmarks.disguise import disguise

    if form == "functional":
        out, full = functional(code, rng)
        return out, "full" if full else "partial"
    if form == "cuda_graph":
        return cuda_graph(code, rng), ""
    if form == "backend_flags":
        return backend_flags(code, rng), ""
    if form == "reformatted":
        return reformatted(code, rng), ""
    if form == "lightly_edited":
        tree = disguise(code, "reorder", rng)
        return disguise(tree, "rename", rng), ""
    if form == "resized":
        return disguise(code, "sizes", rng), ""
    raise ValueError(f"unknown form {form}")


FORMS = ("functional", "cuda_graph", "backend_flags", "reformatted", "lightly_edited", "resized")
