"""The operator catalog: one OpSpec per PyTorch operator the sampler may draw, keyed by the name users write.

An OpSpec (operators/spec.py) says how the operator becomes code: an optional constructor template
(`init`, for nn modules; the instance is stored as `self.<attr>`), a call template (`call`), extra learned
tensors (`attrs`: nn.Parameter or index buffers), extra forward inputs (`operands`), a parameter sampler
and the constraints the sampler must respect (input ranks, value domain, whether the output may feed
more ops). Entries live in ops_nn.py, ops_pointwise.py and ops_tensor.py; operators.validate runs
every non-stochastic entry on the meta device once and fails naming an entry that cannot run.
"""

from __future__ import annotations

from operators.spec import CATEGORIES, OpSpec

__all__ = ["CATEGORIES", "REGISTRY", "OpSpec", "catalog_summary", "sampleable"]


def _build_registry() -> dict[str, OpSpec]:
    from operators import ops_nn, ops_pointwise, ops_tensor

    reg: dict[str, OpSpec] = {}
    for spec in (*ops_nn.SPECS, *ops_pointwise.SPECS, *ops_tensor.SPECS):
        if spec.name in reg:
            raise ValueError(f"operator catalog: duplicate entry {spec.name!r}")
        if spec.category not in CATEGORIES:
            raise ValueError(f"operator catalog: entry {spec.name!r} has unknown category {spec.category!r}")
        reg[spec.name] = spec
    return reg


REGISTRY: dict[str, OpSpec] = _build_registry()


def sampleable(categories: tuple[str, ...] = ()) -> list[OpSpec]:
    cats = set(categories or CATEGORIES)
    return [s for s in REGISTRY.values() if not s.stochastic and s.category in cats]


def catalog_summary() -> dict:
    """{"total", "sampleable", "by_category": {cat: [names]}, "stochastic": [names]} for `opsynth catalog`."""
    by_cat: dict[str, list[str]] = {c: [] for c in CATEGORIES}
    for spec in REGISTRY.values():
        by_cat[spec.category].append(spec.name)
    return {
        "total": len(REGISTRY),
        "sampleable": sum(not s.stochastic for s in REGISTRY.values()),
        "by_category": {c: sorted(v) for c, v in by_cat.items()},
        "stochastic": sorted(s.name for s in REGISTRY.values() if s.stochastic),
    }
