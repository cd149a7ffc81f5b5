"""The pinning tool for true labels: run every sampleable catalog operator alone over many draws and write
the ATen ops it executes to operators/aten_pins.json (`python -m operators.pin_labels`, about a minute;
rerun after editing the catalog or upgrading torch; a test flags stale pins)."""

from __future__ import annotations

import contextlib
import json
import random

from operators.labels import PIN_FILE, canonical


def pin_spec(spec, samples: int = 24, seed: int = 0) -> list[list[str]]:
    """The distinct sets of ATen ops `spec` runs alone over `samples` draws per rank, traced on meta and,
    where the CPU dispatches differently (fused attention, one_hot), executed for real on CPU at tiny sizes
    (and at a batch of one).

    Raises OpsynthError naming the entry if it never runs on meta at any rank.
    """
    from operators.sample import single_op_graph
    from pipeline.errors import OpsynthError

    seen: set[frozenset[str]] = set()
    errors: list[str] = []
    for i in range(samples * len(spec.ranks)):
        rng = random.Random(f"{seed}:{spec.name}:{i}")
        try:
            g = single_op_graph(spec, rng, spec.ranks[i % len(spec.ranks)])
        except Exception as e:  # noqa: BLE001 - collected, reported if nothing ever runs
            errors.append(str(e))
            continue
        for _, d in g.nodes(data=True):
            if d["kind"] == "op":
                seen.add(frozenset(canonical(d["aten"])))
        if i < 4 * len(spec.ranks):
            seen.add(frozenset(canonical(_cpu_trace(g))))
            # a batch of one takes other CPU paths (MultiheadAttention: one addmm into the fused kernel); ops
            # that refuse it (BatchNorm in training) are not asked
            with contextlib.suppress(Exception):
                seen.add(frozenset(canonical(_cpu_trace(g, {"batch_size": 1}))))
    if not seen:
        raise OpsynthError(f"operator spec {spec.name!r} cannot run on the meta device "
                           f"({errors[-1] if errors else 'no sample'}); fix or remove its entry in operators/ops_*.py")
    return sorted(sorted(s) for s in seen)


def _cpu_trace(g, constants: dict[str, int] | None = None) -> list[str]:
    import warnings

    from operators.render import render
    from operators.trace import trace_code

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return trace_code(render(g, constants), device="cpu")


def pin_catalog(samples: int = 24, seed: int = 0) -> dict[str, list[list[str]]]:
    from operators.catalog import sampleable

    return {spec.name: pin_spec(spec, samples, seed) for spec in sampleable()}


def main() -> None:
    import torch

    ops = pin_catalog()
    PIN_FILE.write_text(json.dumps({"torch_version": torch.__version__, "ops": ops}, indent=1, sort_keys=True) + "\n")
    print(f"pinned {len(ops)} operators to {PIN_FILE}")


if __name__ == "__main__":
    main()

