"""What the device label pin executes for one operator, and its fingerprint.

The plan is a list of rendered task modules: the operator alone at tiny sizes (the draws the CPU pin traces on
meta, a batch of one for the first of them) and at the sizes the h200 preset samples (kernels chosen by size:
cuDNN batch norm, SDPA backends, cuBLAS paths), a batch of one too; the first draws of each also with their
rank-3+ inputs in a permuted layout (what the GPU's fused attention hands the next operator). It is built on meta only, so a CPU box
recomputes it without a GPU: the fingerprint (a hash of the plan's codes) is stored beside each operator's
device behaviours in aten_pins_cuda.json and a test recomputes it to say which operators need a re-pin.
The batch a large step is solved to comes from the cost model (torch's meta kernels and FLOP formulas), so
the fingerprint reads that step at the batch it was drawn at: a CPU box on another torch than the GPU box's
recomputes the same value, and a change of the sampler, the catalog entry or the plan still shows.
"""

from __future__ import annotations

import hashlib
import random
import warnings
from dataclasses import dataclass
from functools import lru_cache

TINY = 6  # tiny draws per rank traced for real: the first of the 24 the CPU pin (pinning.labels.pin_spec) runs on meta
BATCH1 = 4  # of those, also traced at a batch of one, per rank (other paths: MultiheadAttention's addmm)
LARGE = 2  # draws per rank at the preset's sizes; the first per rank also at a batch of one
LARGE_TRIES = 4  # draws tried per wanted large size (some are over the memory cap or refused on meta)
PRESET = "h200"


@dataclass(frozen=True)
class Step:
    """One module to execute: `kind` is tiny | tiny-batch1 | large | large-batch1; a batch-1 step may fail
    (BatchNorm refuses a batch of one in training) without counting as an error."""

    kind: str
    code: str
    key: str = ""  # what the fingerprint reads, when not the code

    @property
    def optional(self) -> bool:
        return self.kind.endswith(("batch1", "permuted"))


@lru_cache(maxsize=1)
def _sample_cfg():
    from pipeline.rundir.config import load_preset

    return load_preset(PRESET).sample


def plan(spec, seed: int = 0, tiny: int = TINY, batch1: int = BATCH1, large: int = LARGE) -> list[Step]:
    """The modules the device pin runs for `spec`, in order (deterministic in the spec's sampler and seed)."""
    from operators.render import render
    from operators.sample import single_op_graph, sized_op_graph

    ranks = spec.ranks
    steps: list[Step] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(tiny * len(ranks)):
            # the same RNG keys as the CPU pin's draws: the device traces a prefix of what meta saw
            rng = random.Random(f"{seed}:{spec.name}:{i}")
            try:
                g = single_op_graph(spec, rng, ranks[i % len(ranks)])
            except Exception:  # noqa: BLE001 - a draw that does not fit; the CPU pin skips it too
                continue
            steps.append(Step("tiny", render(g)))
            if i < batch1 * len(ranks):
                steps.append(Step("tiny-batch1", render(g, {"batch_size": 1})))
                _add_permuted(steps, "tiny-permuted", g)
        for rank in ranks:
            got = 0
            for j in range(LARGE_TRIES * large):
                if got == large:
                    break
                rng = random.Random(f"{seed}:{spec.name}:large:{rank}:{j}")
                try:
                    g, batch = sized_op_graph(spec, rng, rank, _sample_cfg())
                except Exception:  # noqa: BLE001 - over the cap or refused on meta: not a size the sampler makes
                    continue
                steps.append(Step("large", render(g, {"batch_size": batch}), key=render(g)))
                if got == 0 and batch > 1:
                    steps.append(Step("large-batch1", render(g, {"batch_size": 1})))
                if got == 0:
                    _add_permuted(steps, "large-permuted", g, {"batch_size": batch})
                got += 1
    return steps


def _add_permuted(steps: list[Step], kind: str, g, constants: dict[str, int] | None = None) -> None:
    """The same module with its rank-3+ inputs in the layout a fused attention hands over (the CPU pin traces it
    too, pinning.labels.permuted_inputs): the GPU may run other kernels on it (a strided bmm, a copy first)."""
    from operators.render import render
    from pinning.labels import permuted_inputs

    h = permuted_inputs(g)
    if h is not None:
        steps.append(Step(kind, render(h, constants), key=render(h) if constants else ""))


def fingerprint(steps: list[Step]) -> str:
    """A hash of what a plan executes: equal on every device and machine for the same catalog entry and seed."""
    h = hashlib.sha256()
    for s in steps:
        h.update(f"{s.kind}\0{s.key or s.code}\0".encode())
    return h.hexdigest()[:16]
