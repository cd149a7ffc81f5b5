"""The pinning tool for torch's own metadata: match every catalog entry to torch's OpInfo (op_db) and ModuleInfo
(module_db) test entries and write operators/torch_meta.json (`python -m pinning.torch_meta`, about
15 s; rerun after editing the catalog or upgrading torch; tests/operators/test_torch_meta.py flags a
stale pin). Only this module imports torch.testing._internal (it needs the `expecttest` package, in the dev
extra); operators/torch_meta.py reads the result.

An OpInfo matches an entry when one of its names (its own or an alias: `cumsum`, `nn.functional.gelu`,
`special.expit`) is the entry's name less its `torch.`/`Tensor.`/`F.` prefix (`F.` reads `nn.functional.`), or
when the entry's torch object is the OpInfo's function, method or operator variant (`torch.conv2d` is
F.conv2d; `Tensor.__add__` is operator.add). A ModuleInfo matches an `nn.` entry by its module class.
"""

from __future__ import annotations

import contextlib
import io
import json
import operator
import warnings
from collections.abc import Iterator
from typing import Any

from operators.torch_meta import META_FILE, live_tags, resolve, seeded_kind

# Python operators whose torch function is spelled differently from the operator module's name
_OPERATOR_NAMES = {"truediv": "true_divide", "floordiv": "floor_divide"}
_SAMPLES = 3  # sample inputs run per OpInfo to see whether it draws random numbers


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """torch's test databases warn and print while they import and run samples: keep it off the console."""
    sink = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        warnings.simplefilter("ignore")
        yield


def load_dbs() -> tuple[list[Any], list[Any]]:
    """torch's op_db and module_db, imported quietly (several seconds)."""
    from opsynth.errors import require

    require("expecttest", "dev")  # torch.testing._internal imports it
    with _quiet():
        from torch.testing._internal.common_methods_invocations import op_db
        from torch.testing._internal.common_modules import module_db
    return list(op_db), list(module_db)


def _spellings(name: str) -> set[str]:
    """The OpInfo names a catalog name may carry: torch.cumsum / Tensor.cumsum -> cumsum, F.gelu ->
    nn.functional.gelu, torch.special.expit -> special.expit, Tensor.__truediv__ -> true_divide."""
    root, _, rest = name.partition(".")
    if root == "F":
        return {f"nn.functional.{rest}"}
    if root == "Tensor" and rest.startswith("__") and rest.endswith("__"):
        stem = rest.strip("_")
        return {rest, _OPERATOR_NAMES.get(stem, stem)}
    return {rest} if root in ("torch", "Tensor") else set()


def _objects(name: str) -> list[Any]:
    """The torch objects an entry stands for: its own, and for a Tensor dunder the operator module's function."""
    try:
        objs = [resolve(name)]
    except AttributeError:
        return []
    rest = name.partition(".")[2]
    if name.startswith("Tensor.__") and hasattr(operator, rest):
        objs.append(getattr(operator, rest))
    return objs


def _opinfo_keys(op: Any) -> tuple[frozenset[str], frozenset[int]]:
    """An OpInfo's names and the ids of its callables. aten_name is the ATen op it tests, which torch.X and
    Tensor.X bind directly (torch.relu: nn.functional.relu)."""
    names = frozenset({op.name, *(a.name for a in op.aliases), op.aten_name})
    objs = (op.op, op.method_variant, op.operator_variant, *(v for a in op.aliases for v in (a.op, a.method_variant)))
    return names, frozenset(id(o) for o in objs if o is not None)


def match_opinfos(name: str, op_db: list[Any]) -> list[Any]:
    """The OpInfo entries (every variant) that test the operator catalog entry `name`."""
    spellings, ids = _spellings(name), {id(o) for o in _objects(name)}
    out = []
    for op in op_db:
        names, variants = _opinfo_keys(op)
        if spellings & names or ids & variants:
            out.append(op)
    return out


def match_moduleinfos(name: str, module_db: list[Any]) -> list[Any]:
    if not name.startswith("nn."):
        return []
    objs = _objects(name)
    return [m for m in module_db if any(m.module_cls is o for o in objs)]


def _float32_cpu(infos: list[Any]) -> bool | None:
    import torch

    if not infos:
        return None
    return any(torch.float32 in i.supported_dtypes("cpu") for i in infos)


def _runs_rng(op: Any) -> bool:
    """Whether an OpInfo draws random numbers: its ATen op is tagged nondeterministic_seeded (beyond a dropout_p
    argument), or running its first float32 CPU samples executes such an op (F.dropout2d, fractional pooling)."""
    import torch

    from operators.trace import _Recorder

    if op.aten_name and "." not in op.aten_name and seeded_kind(f"aten.{op.aten_name}") == "rng":
        return True
    rec = _Recorder()
    torch.manual_seed(0)
    try:  # the raw sample function: OpInfo.sample_inputs walks the Python stack per sample (minutes over op_db)
        for i, s in enumerate(op.sample_inputs_func(op, "cpu", torch.float32, False)):
            if i >= _SAMPLES:
                break
            with rec, torch.no_grad():
                op(s.input, *s.args, **s.kwargs)
    except Exception:  # noqa: BLE001 - an op whose samples fail here is judged by its tag alone
        pass
    return any(seeded_kind(a) == "rng" for a in set(rec.ops))


def op_db_universe(op_db: list[Any]) -> tuple[list[str], list[str]]:
    """(op_db names any of whose variants takes float32 on the CPU and none draws random numbers, the random ones)."""
    by_name: dict[str, list[Any]] = {}
    for op in op_db:
        by_name.setdefault(op.name, []).append(op)
    with _quiet():
        random = sorted(n for n, ops in by_name.items() if any(_runs_rng(o) for o in ops))
    universe = sorted(n for n, ops in by_name.items() if n not in random and _float32_cpu(ops))
    return universe, random


def entry_meta(name: str, op_db: list[Any], module_db: list[Any], pinned: set[str]) -> dict[str, Any]:
    """One entry of torch_meta.json; `pinned` is the union of the entry's ATen label sets (empty if unpinned)."""
    ops, mods = match_opinfos(name, op_db), match_moduleinfos(name, module_db)
    tags = {a: sorted(t) for a in sorted(pinned) if (t := live_tags(a)) is not None}
    return {
        "opinfo": sorted({o.name for o in ops}),
        "moduleinfo": sorted({m.name for m in mods}),
        "float32_cpu": _float32_cpu(ops) if ops else _float32_cpu(mods),
        "aten_tags": tags,
        "unresolved": sorted(set(pinned) - set(tags)),
    }


def build() -> dict[str, Any]:
    import torch

    from operators.catalog import REGISTRY
    from operators.labels import pins

    op_db, module_db = load_dbs()
    table = pins("cuda")  # the CPU pins and the GPU's: a kernel only a GPU runs must carry no seeded tag either
    ops = {name: entry_meta(name, op_db, module_db, set().union(*table.get(name, ())))
           for name in sorted(REGISTRY)}
    universe, random = op_db_universe(op_db)
    return {
        "torch_version": torch.__version__,
        "op_db_total": len({o.name for o in op_db}),
        "op_db_universe": universe,
        "op_db_random": random,
        "module_db_total": len(module_db),
        "ops": ops,
    }


def main() -> None:
    data = build()
    META_FILE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    matched = sum(bool(e["opinfo"] or e["moduleinfo"]) for e in data["ops"].values())
    print(f"pinned torch metadata of {len(data['ops'])} operators ({matched} matched in op_db/module_db) to {META_FILE}")


if __name__ == "__main__":
    main()
