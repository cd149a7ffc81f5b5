"""Torch's own metadata about the catalog, pinned in operators/torch_meta.json, and live ATen tag look-ups.

Per catalog entry (stochastic ones too) the pin holds the OpInfo entries of torch's test database
(`op_db`) and the ModuleInfo entries (`module_db`) that test the same operator, whether those say
float32 runs on the CPU (`float32_cpu`, null when torch has neither), and the torch.Tag names of every
ATen op the entry's pinned labels (aten_pins.json and the GPU's aten_pins_cuda.json) name (`aten_tags`; names torch cannot resolve are
listed in `unresolved`). It also holds the op_db operators that take float32 on the CPU and draw no
random numbers, the universe of `opsynth catalog --coverage`. `python -m pinning.torch_meta`
writes it (the only place that imports torch.testing._internal); runtime and tests read the JSON and ask
torch for tags live through `live_tags`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

META_FILE = Path(__file__).with_name("torch_meta.json")
REPIN = "python -m pinning.torch_meta"
SEEDED = "nondeterministic_seeded"
# fused attention kernels carry the seeded tag for their dropout_p argument alone: at dropout_p=0 they draw nothing
DROPOUT_ARG = "dropout_p"


@lru_cache(maxsize=1)
def meta() -> dict[str, Any]:
    """The pinned JSON: {"torch_version", "ops": {catalog name: entry}, "op_db_total", "op_db_universe", ...}."""
    from opsynth.errors import OpsynthError

    if not META_FILE.exists():
        raise OpsynthError(f"{META_FILE} is missing; run: {REPIN}")
    return json.loads(META_FILE.read_text())


def resolve(name: str) -> Any:
    """The torch object a catalog name spells (`F.gelu` -> torch.nn.functional.gelu); AttributeError if none."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F  # noqa: N812

    root, _, rest = name.partition(".")
    obj: Any = {"torch": torch, "nn": nn, "F": F, "Tensor": torch.Tensor}[root]
    for part in rest.split("."):
        obj = getattr(obj, part)
    return obj


def _packets(aten: str) -> list[Any]:
    """The overload packets an ATen name stands for: itself, or a canonical name's backends (labels.CANONICAL)."""
    import torch

    from operators.labels import CANONICAL

    names = [k for k, v in CANONICAL.items() if v == aten] or [aten]
    out = []
    for n in names:
        ns, _, op = n.partition(".")
        try:
            out.append(getattr(getattr(torch.ops, ns), op))
        except (AttributeError, RuntimeError):  # torch.ops raises either for an unknown op
            continue
    return out


@lru_cache(maxsize=4096)
def live_tags(aten: str) -> frozenset[str] | None:
    """torch.Tag names over every overload of `aten` (e.g. 'aten.add'), asked of the installed torch; a canonical
    name (aten._scaled_dot_product_fused_attention) unions its backends. None when torch has no such op."""
    packets = _packets(aten)
    if not packets:
        return None
    return frozenset(t.name for p in packets for ov in p.overloads() for t in getattr(p, ov).tags)


@lru_cache(maxsize=4096)
def seeded_kind(aten: str) -> str | None:
    """How an ATen op draws random numbers, per torch's tags: 'rng' (always may), 'dropout_p' (only through a
    dropout_p argument, the fused attention kernels), None (never, or torch has no such op)."""
    if SEEDED not in (live_tags(aten) or ()):
        return None
    args = {a.name for p in _packets(aten) for ov in p.overloads() for a in getattr(p, ov)._schema.arguments}
    return "dropout_p" if DROPOUT_ARG in args else "rng"


def seeded_ops(aten_ops: Iterable[str]) -> dict[str, str]:
    """The ops among `aten_ops` that torch tags nondeterministic_seeded, with their seeded_kind."""
    return {a: k for a in sorted(set(aten_ops)) if (k := seeded_kind(a))}


def stale_problem() -> str | None:
    """Why the pin does not describe the current catalog (None: it does): added or removed entries."""
    from operators.catalog import REGISTRY

    pinned = set(meta()["ops"])
    added, removed = sorted(set(REGISTRY) - pinned), sorted(pinned - set(REGISTRY))
    if not added and not removed:
        return None
    return f"operators/torch_meta.json is stale (new {added[:5]}, gone {removed[:5]}); run: {REPIN}"


def category_matches() -> dict[str, dict[str, int]]:
    """Per catalog category: entries, and how many have an OpInfo, a ModuleInfo, either (from the pin)."""
    from operators.catalog import CATEGORIES, REGISTRY

    ops = meta()["ops"]
    out = {c: {"entries": 0, "opinfo": 0, "moduleinfo": 0, "either": 0} for c in CATEGORIES}
    for name, spec in REGISTRY.items():
        row, e = out[spec.category], ops.get(name, {})
        row["entries"] += 1
        row["opinfo"] += bool(e.get("opinfo"))
        row["moduleinfo"] += bool(e.get("moduleinfo"))
        row["either"] += bool(e.get("opinfo") or e.get("moduleinfo"))
    return out


def coverage() -> dict[str, Any]:
    """op_db operators that take float32 on the CPU and draw no random numbers: how many the catalog matches,
    and the sorted names it lacks."""
    m = meta()
    universe = set(m["op_db_universe"])
    matched = {n for e in m["ops"].values() for n in e["opinfo"]}
    return {"universe": len(universe), "covered": len(universe & matched), "missing": sorted(universe - matched),
            "op_db_total": m["op_db_total"], "torch_version": m["torch_version"]}
