"""True labels: which ATen ops each catalog operator runs, pinned, and the check of `ops` against a trace.

`aten_pins.json` maps every sampleable catalog operator to the ATen ops it was seen to execute on the
meta device over many sampled parameters and ranks (`python -m operators.labels` regenerates it; a
test checks it is current). `check_labels(ops, aten_ops)` then says, for any module (template or LLM
written), whether each labelled operator left its evidence in the trace and whether every kernel in
the trace is explained by some labelled operator. Layout-only ops (views, copies) never need a label.
"""

from __future__ import annotations

import json
import random
from functools import lru_cache
from pathlib import Path

PIN_FILE = Path(__file__).with_name("aten_pins.json")
# layout glue that any code may add without a label (reshapes, copies, casts, empties)
GLUE = frozenset({
    "aten.view", "aten._unsafe_view", "aten.reshape", "aten.expand", "aten.t", "aten.transpose",
    "aten.permute", "aten.unsqueeze", "aten.squeeze", "aten.as_strided", "aten.slice", "aten.select",
    "aten.alias", "aten.clone", "aten.contiguous", "aten.copy_", "aten.empty", "aten.empty_like",
    "aten.empty_strided", "aten.zeros", "aten.zeros_like", "aten.ones_like", "aten.fill_", "aten.zero_",
    "aten.split", "aten.split_with_sizes", "aten.unbind", "aten.flatten", "aten._reshape_alias",
    "aten.expand_as", "aten.new_empty", "aten.new_zeros", "aten.resize_", "aten.lift_fresh_copy",
    "aten.unsafe_split", "aten.view_as", "aten.squeeze_", "aten.unsqueeze_", "aten.scalar_tensor",
    "aten._local_scalar_dense", "aten.item", "aten.movedim", "aten.narrow",
})


@lru_cache(maxsize=1)
def pins() -> dict[str, frozenset[str]]:
    data = json.loads(PIN_FILE.read_text())
    return {k: frozenset(v) for k, v in data["ops"].items()}


def evidence(op: str) -> frozenset[str]:
    """ATen ops of which at least one must appear in the trace when `op` is used."""
    seen = pins().get(op, frozenset())
    real = seen - GLUE
    return real or seen


def check_labels(ops: list[str], aten_ops: list[str]) -> list[str]:
    """Mismatches between catalog labels and a trace of ATen ops (overload packets); [] = labels true."""
    table = pins()
    traced = set(aten_ops)
    problems = [f"unknown operator {op!r} (not in the pinned catalog)" for op in dict.fromkeys(ops) if op not in table]
    for op in dict.fromkeys(ops):
        ev = evidence(op)
        if op in table and ev and not ev & traced:
            problems.append(f"{op} is labelled but none of {sorted(ev)} ran")
    explained = set(GLUE).union(*(table.get(op, frozenset()) for op in ops))
    for name in sorted(traced - explained):
        problems.append(f"{name} ran but no labelled operator explains it")
    return problems


def pin_catalog(samples: int = 24, seed: int = 0) -> dict[str, list[str]]:
    """Run every sampleable operator alone on meta over `samples` draws per rank; union of ATen ops.

    Raises OpsynthError naming the entry if an operator never runs on meta at any rank.
    """
    from operators.catalog import sampleable
    from operators.sample import single_op_graph
    from pipeline.errors import OpsynthError

    out: dict[str, list[str]] = {}
    for spec in sampleable():
        seen: set[str] = set()
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
                    seen.update(d["aten"])
        if not seen:
            raise OpsynthError(f"operator spec {spec.name!r} cannot run on the meta device "
                               f"({errors[-1] if errors else 'no sample'}); fix or remove its catalog entry")
        out[spec.name] = sorted(seen)
    return out


def main() -> None:
    import torch

    ops = pin_catalog()
    PIN_FILE.write_text(json.dumps({"torch_version": torch.__version__, "ops": ops}, indent=1, sort_keys=True) + "\n")
    print(f"pinned {len(ops)} operators to {PIN_FILE}")


if __name__ == "__main__":
    main()
