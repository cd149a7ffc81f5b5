"""OpSpec, the record describing one catalog operator, and the small helpers the spec tables use.

Templates are `str.format` strings. Keys: `x` (the primary input), `y`, `z` (operands), `m` (the module
attribute), each `attrs` entry by its key, every sampled parameter, and the input's dimensions: `N`
(dim 0), `C` (dim 1), `L` (last dim), `R` (rank), `d0`..`d4`. The same rendered strings are evaluated
on the meta device for shape propagation and written into the task, so what is measured is what runs.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

CATEGORIES: tuple[str, ...] = (
    "matmul_linear", "convolution", "normalization", "pooling", "activation", "elementwise",
    "reduction", "softmax", "indexing", "shape", "attention_embedding", "loss", "scan", "comparison",
)

# value domains, ordered so that a larger rank satisfies every smaller need (unit = (0, 1) is also pos)
DOMAINS = {"any": 0, "nonneg": 1, "pos": 2, "unit": 3}
POSITIVE = ("pos", "unit")  # the domains of inputs > 0 (`x > 0` is always true there: see OpSpec.flat_on)


class Code(str):
    """A parameter value written into the code as is (a tuple body, a shape), not as a Python literal."""


class Reject(ValueError):
    """Raised by a parameter sampler when the input cannot take this operator (e.g. too many channels)."""


@dataclass(frozen=True)
class Dim:
    """One tensor dimension: its size and the expression that renders it (a constant name or a literal)."""

    value: int
    expr: str

    def __str__(self) -> str:
        return self.expr


@dataclass(frozen=True)
class Operand:
    """An extra forward input: a fresh graph input drawn in get_inputs (or, for joins, another branch)."""

    key: str = "y"
    shape: str = "same"  # same | a format template of a shape tuple, e.g. "({N}, {L}, {out_features})"
    draw: str = "randn"  # randn | rand | randint:HIGH_TEMPLATE | sign (random +-1 labels)


Params = Callable[[random.Random, tuple[Dim, ...]], dict[str, Any]]


def no_params(rng: random.Random, dims: tuple[Dim, ...]) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class OpSpec:
    name: str                    # as users write it: nn.Conv2d, torch.tanh, F.gelu, Tensor.cumsum
    category: str
    call: str                    # forward expression template
    ranks: tuple[int, ...] = (2, 3, 4, 5)  # ranks of the primary input
    init: str = ""               # constructor template (nn modules)
    attrs: tuple[tuple[str, str], ...] = ()  # (key, template) extra tensors created in __init__
    operands: tuple[Operand, ...] = ()
    params: Params = no_params
    consts: tuple[str, ...] = ()  # parameters written as module-level size constants
    needs: str = "any"           # input domain: any | nonneg | pos | unit
    out: str = "any"             # output domain: any | nonneg | pos | unit | same | sign
    terminal: bool = False       # integer/bool/scalar output: only as the last operator
    join: bool = False           # binary op whose operand `y` has x's shape: may rejoin two branches
    token_input: str = ""        # first op only: x is an index tensor in [0, params[token_input])
    stochastic: bool = False     # dropout, rand*, bernoulli...: listed, never sampled
    layout: str = "channels"     # rank-3 input layout when this op starts a graph: channels | seq
    flat_on: tuple[str, ...] = ()  # input domains on which the output is constant (signbit of x >= 0): not drawn there

    @property
    def kind(self) -> str:
        if self.init:
            return "module"
        return "method" if self.name.startswith("Tensor.") else "function"

    @property
    def short(self) -> str:
        """snake_case stem for variable and attribute names: nn.Conv2d -> conv2d, F.gelu -> gelu."""
        return _snake(self.name)


@functools.lru_cache(maxsize=4096)
def _snake(name: str) -> str:
    stem = name.rsplit(".", 1)[-1].strip("_")
    out = []
    for i, ch in enumerate(stem):
        if ch.isupper() and i and (stem[i - 1].islower() or (i + 1 < len(stem) and stem[i + 1].islower())):
            out.append("_")
        out.append(ch.lower())
    return "".join(out).replace("__", "_")


def out_domain(spec: OpSpec, have: str, others: tuple[str, ...] = ()) -> str:
    """The value domain of spec's output from its input's (`have`) and its other tensor operands' (`others`): an
    output that takes its operands' values (cat, hstack, maximum, where) has the widest of their domains."""
    if spec.out == "same":
        return widest([have, *others])
    if spec.out == "sign":
        return "pos" if have == "unit" else have
    return spec.out


def widest(domains: list[str]) -> str:
    """The domain of values drawn from any of `domains`: positive and unit values together are non-negative."""
    kinds = set(domains)
    if len(kinds) == 1:
        return kinds.pop()
    return "any" if "any" in kinds else "nonneg"


def accepts(spec: OpSpec, rank: int, domain: str) -> bool:
    """The op may take an input of this rank and value domain: its needs are met, and its output would not be
    the same for every draw (a task whose output ignores its input is rejected on the GPU, after profiling)."""
    return rank in spec.ranks and DOMAINS[domain] >= DOMAINS[spec.needs] and domain not in spec.flat_on




def fn(name: str, category: str, args: str = "", **kw: Any) -> OpSpec:
    """A function (`torch.x`, `F.x`, `torch.special.x`) or a method (`Tensor.x`) taking x first."""
    sep = ", " if args else ""
    if name.startswith("Tensor."):
        call = f"{{x}}.{name[7:]}({args})"
    else:
        call = f"{name}({{x}}{sep}{args})"
    return OpSpec(name=name, category=category, call=call, **kw)


def mod(name: str, category: str, args: str = "", call: str = "{m}({x})", **kw: Any) -> OpSpec:
    """An nn module built in __init__ as `self.<attr> = name(args)` and called in forward."""
    return OpSpec(name=name, category=category, init=f"{name}({args})", call=call, **kw)


def pick(**choices: Any) -> Params:
    """A sampler drawing each parameter independently from its list of choices."""

    def sample(rng: random.Random, dims: tuple[Dim, ...]) -> dict[str, Any]:
        return {k: rng.choice(v) for k, v in choices.items()}

    return sample
