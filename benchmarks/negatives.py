"""Real non-KernelBench modules for the decontamination benchmark's false-positive rate, by kind.

- `kb_style`: new compositions written in KernelBench's style: a level-2 problem's docstring, constructor
  boilerplate and first layer kept, the rest of forward replaced by a chain of other operators (seeded).
  The benchmark keeps only those whose traced ops share less than half with the problem they came from and
  match no problem at any op normalization (otherwise they compute a KernelBench problem).
- `module_db`: one small module per entry of torch's own `module_db` (torch.testing), built from its first
  sample input, rendered as a KernelBench-format task (plain style, not KernelBench's).
- `attention`: modules whose forward is one attention call but compute something else than level 1's
  full self-attention: KV-cached decoding (query length 1), speculative verification (a few query tokens),
  cross-attention (another key length), causal and masked attention, grouped-query heads.
- `ops6k` (assembled by the benchmark): CUDA-Agent-Ops-6K rows that compute no KernelBench problem (neither a
  problem's exact op signature, nor its live ops, nor a numbered KernelBench name).
"""

from __future__ import annotations

import ast
import random

TAILS = ("torch.sigmoid({x})", "torch.relu({x})", "F.gelu({x})", "torch.tanh({x})", "F.silu({x})", "torch.abs({x})",
         "{x} * 0.5", "{x} + 1.0", "torch.clamp({x}, -1.0, 1.0)", "F.hardswish({x})", "F.softplus({x})",
         "torch.exp(-{x}.abs())", "F.leaky_relu({x}, 0.1)", "torch.square({x})", "F.elu({x})", "torch.sin({x})",
         "torch.cumsum({x}, dim=1)", "torch.flip({x}, dims=[1])", "F.mish({x})", "torch.erf({x})")


def kb_style(code: str, rng: random.Random) -> str | None:
    """A new composition in the style of a KernelBench problem (its boilerplate kept), or None if its forward
    does not start with `x = ...` on its first argument."""
    tree = ast.parse(code)
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    fwd = model and next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if fwd is None or len(fwd.args.args) < 2:
        return None
    body = [s for s in fwd.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    x = fwd.args.args[1].arg
    first = body[0] if body else None
    if not (isinstance(first, ast.Assign) and len(first.targets) == 1 and isinstance(first.targets[0], ast.Name)
            and first.targets[0].id == x):
        return None
    chain = rng.sample(TAILS, rng.randint(2, 4))
    new = [first] + [ast.parse(f"{x} = {t.format(x=x)}").body[0] for t in chain] + [ast.parse(f"return {x}").body[0]]
    fwd.body = new
    if not any(isinstance(n, ast.Import | ast.ImportFrom) and any(a.asname == "F" for a in n.names) for n in tree.body):
        tree.body.insert(0, ast.parse("import torch.nn.functional as F").body[0])
    return ast.unparse(ast.fix_missing_locations(tree))


def _literal(v) -> str | None:
    """Source for a constructor argument, or None if it is not a plain literal."""
    if isinstance(v, bool | int | float | str) or v is None:
        return repr(v)
    if isinstance(v, tuple | list):
        parts = [_literal(x) for x in v]
        if any(p is None for p in parts):
            return None
        inner = ", ".join(parts) + ("," if isinstance(v, tuple) and len(v) == 1 else "")
        return f"({inner})" if isinstance(v, tuple) else f"[{inner}]"
    return None


def module_db_tasks(limit_per_module: int = 2) -> list[tuple[str, str]]:
    """(name, source) of KernelBench-format tasks built from torch's module_db sample inputs."""
    import torch
    from torch.testing._internal.common_modules import module_db

    out = []
    for mi in module_db:
        try:
            samples = mi.module_inputs_func(mi, device="cpu", dtype=torch.float32, requires_grad=False, training=False)
        except Exception:  # noqa: BLE001, S112 - an entry whose samples need CUDA or extras is skipped
            continue
        kept = 0
        for k, s in enumerate(samples):
            if kept >= limit_per_module:
                break
            ctor = s.constructor_input
            fwd = s.forward_input
            if fwd is None or ctor is None or fwd.kwargs:
                continue
            args = [_literal(a) for a in ctor.args]
            kwargs = {n: _literal(v) for n, v in ctor.kwargs.items()}
            shapes = [tuple(a.shape) if isinstance(a, torch.Tensor) and a.dtype == torch.float32 else None
                      for a in fwd.args]
            if any(a is None for a in args) or any(v is None for v in kwargs.values()) or not shapes or None in shapes:
                continue
            ctor_src = ", ".join(args + [f"{n}={v}" for n, v in kwargs.items()])
            names = [f"x{i}" for i in range(len(shapes))]
            inputs = ", ".join(f"torch.randn({', '.join(map(str, sh))}{',' if len(sh) == 1 else ''})" for sh in shapes)
            cls = mi.module_cls.__name__
            code = (f"import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                    f"    def __init__(self):\n        super().__init__()\n        self.m = nn.{cls}({ctor_src})\n\n"
                    f"    def forward(self, {', '.join(names)}):\n        return self.m({', '.join(names)})\n\n\n"
                    f"def get_inputs():\n    return [{inputs}]\n\n\ndef get_init_inputs():\n    return []\n")
            out.append((f"{cls}#{k}", code))
            kept += 1
    return out


ATTENTION = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """{doc}"""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v{extra})


batch_size = {b}
num_heads = {h}
head_dim = {d}


def get_inputs():
    q = torch.rand(batch_size, {hq}, {lq}, head_dim)
    k = torch.rand(batch_size, {hk}, {lk}, head_dim)
    v = torch.rand(batch_size, {hk}, {lk}, head_dim)
    return [q, k, v]


def get_init_inputs():
    return []
'''

ATTENTION_KINDS = (
    ("KV-cached decoding: one new query token against the cache.", "", "num_heads", 1, "num_heads", "{t}"),
    ("Speculative decoding: verify a few drafted tokens against the cache.", "", "num_heads", "{s}", "num_heads", "{t}"),
    ("Cross-attention from a short query sequence to a long memory.", "", "num_heads", "{s2}", "num_heads", "{t}"),
    ("Causal self-attention.", ", is_causal=True", "num_heads", "{t}", "num_heads", "{t}"),
    ("Grouped-query attention: fewer key/value heads.", ", enable_gqa=True", "num_heads", "{t}", "{hkv}", "{t}"),
    ("Decoding with a causal draft window.", ", is_causal=True", "num_heads", "{s}", "num_heads", "{s}"),
)


def attention_tasks(rng: random.Random, per_kind: int = 4) -> list[tuple[str, str]]:
    out = []
    for doc, extra, hq, lq, hk, lk in ATTENTION_KINDS:
        for i in range(per_kind):
            b, h, d = rng.choice([2, 4, 8, 16]), rng.choice([8, 16, 32]), rng.choice([64, 128])
            t, s, s2 = rng.choice([512, 1024, 2048, 4096]), rng.choice([3, 4, 5, 8]), rng.choice([16, 32, 77])
            fill = {"t": t, "s": s, "s2": s2, "hkv": max(1, h // 4)}
            code = ATTENTION.format(doc=doc, extra=extra, b=b, h=h, d=d, hq=hq.format(**fill), lq=str(lq).format(**fill),
                                    hk=hk.format(**fill), lk=str(lk).format(**fill))
            out.append((f"{doc.split(':')[0].split('.')[0]}#{i}", code))
    return out
