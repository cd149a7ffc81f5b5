"""The operator catalog: one OpSpec per PyTorch operator the sampler may draw, keyed by the name users write.

An OpSpec (operators/spec.py) says how the operator becomes code: an optional constructor template
(`init`, for nn modules; the instance is stored as `self.<attr>`), a call template (`call`), extra learned
tensors (`attrs`: nn.Parameter or index buffers), extra forward inputs (`operands`), a parameter sampler
and the constraints the sampler must respect (input ranks, value domain, whether the output may feed
more ops). Entries live in ops_nn.py, ops_pointwise.py and ops_tensor.py. `python -m pinning.labels`
runs every non-stochastic entry on the meta device (and on CPU at tiny sizes), fails naming an entry
that cannot run, and pins the ATen ops each one executes (operators/aten_pins.json); the sampler
refuses to start if an entry has no pins.
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
    """{"total", "sampleable", "by_category": {cat: [names]}, "stochastic": [names]} for `opsynth catalog` (torch's
    OpInfo/ModuleInfo matches per category: operators.torch_meta.category_matches, `--torch`)."""
    by_cat: dict[str, list[str]] = {c: [] for c in CATEGORIES}
    for spec in REGISTRY.values():
        by_cat[spec.category].append(spec.name)
    return {
        "total": len(REGISTRY),
        "sampleable": sum(not s.stochastic for s in REGISTRY.values()),
        "by_category": {c: sorted(v) for c, v in by_cat.items()},
        "stochastic": sorted(s.name for s in REGISTRY.values() if s.stochastic),
    }


def sample_config_problem(categories: tuple[str, ...], weights: dict[str, float], min_ops: int) -> str | None:
    """Why a sample section cannot produce tasks from this catalog (None: it can). Used by config.validate."""
    unknown = sorted(set(weights) - set(CATEGORIES))
    if unknown:
        return f"sample.category_weights has unknown {unknown}; known: {sorted(CATEGORIES)}"
    negative = sorted(c for c, w in weights.items() if not w >= 0)
    if negative:
        return f"sample.category_weights must be >= 0 (got {negative})"
    live = [c for c in (categories or CATEGORIES) if weights.get(c, 1.0) > 0]
    if not live:
        return "sample.categories / category_weights leave no category with a positive weight; give one a weight > 0"
    specs = sampleable(tuple(live))
    if not specs:
        return f"sample.categories {live} hold no sampleable (non-stochastic) operator"
    if min_ops >= 2 and all(s.terminal for s in specs):
        return (f"sample.categories {live} only hold operators that end a graph (losses, integer outputs); "
                f"min_ops={min_ops} needs a category such as 'activation' or 'elementwise'")
    return None
