"""CUDA kernels that torch compiles at their first use, compiled before a task takes the GPU lock.

On CUDA a number of pointwise operators (special functions: erfcx, i0/i0e/i1/i1e, ndtri, log_ndtr, entr, sinc,
exp2, erfc, erfinv, digamma/polygamma, Bessel functions, ...) are "jiterator" kernels: NVRTC compiles them the
first time a process runs them, seconds of CPU each (erfcx 7.5-9.8 s on the H200 host, calls 43 and 45), and
writes them to torch's kernel cache on disk, which later processes on the machine read. Inside a task that compile
ran under the GPU lock: a worker waiting to time had closed the gate, so no other worker could start GPU work and
nvidia-smi read 0% for as long. Compiled at the workers' start instead, held shared, it stalled the drains of the
workers already timing (call 48: 11.5 idle GPU-s behind warm-ups still compiling).

So a worker, before a task's first locked step, runs each of the task's pointwise operators it has not run yet
alone at tiny sizes, without the lock: the compile (CPU) waits for no one and keeps no one waiting, and the kernel
it then launches is a few elements long (microseconds beside a neighbour's timed run of at least a millisecond,
once per operator per worker). Which operators compile is torch's business, so every pointwise operator of the
catalog is run, not a list that a torch upgrade would make stale; the others cost a launch.
"""

from __future__ import annotations

import random
from functools import cache
from typing import Any

# the catalog categories whose CUDA kernels include runtime-compiled ones (pointwise math and activations)
CATEGORIES = ("elementwise", "activation")


@cache
def _specs() -> dict[str, Any]:
    from operators.catalog import sampleable

    return {s.name: s for s in sampleable() if s.category in CATEGORIES}


@cache
def warmup_code(op: str) -> str | None:
    """A task module of catalog operator `op` alone at tiny sizes (one deterministic draw), or None when `op` is no
    pointwise operator of the catalog or no tiny draw fits it."""
    spec = _specs().get(op)
    if spec is None:
        return None
    from operators.render import render
    from operators.sample import single_op_graph

    try:
        return render(single_op_graph(spec, random.Random(f"kernel-warmup:{op}"), spec.ranks[0]))
    except Exception:  # noqa: BLE001 - the warm-up is an optimisation only
        return None


class KernelWarmup:
    """One worker's record of the operators it has warmed; `before(ops, device)` warms the new ones."""

    def __init__(self) -> None:
        self.done: set[str] = set()

    def pending(self, ops: list[str]) -> list[str]:
        """The operators of `ops` this worker has not warmed and that have a warm-up module, in order, once each."""
        return [op for op in dict.fromkeys(ops) if op not in self.done and warmup_code(op) is not None]

    def before(self, ops: list[str], device: Any) -> int:
        """Warm the pending operators of a task on `device` (none on a CPU: nothing compiles there at first use);
        returns how many ran."""
        todo = self.pending(ops)
        self.done.update(todo)
        if not todo or getattr(device, "type", str(device)) != "cuda":
            return 0
        return run_codes([warmup_code(op) for op in todo], device)["ran"]  # type: ignore[misc]


def run_codes(codes: list[str], device: Any) -> dict[str, int]:
    """Run each warm-up module once on `device` (weights and inputs created there); a module that fails is
    counted, never raised: a warm-up must not stop a worker. Returns how many ran and how many failed."""
    import torch

    ran = failed = 0
    for code in codes:
        ns: dict[str, Any] = {"__name__": "kernel_warmup"}
        try:
            exec(compile(code, "<kernel warm-up>", "exec"), ns)  # noqa: S102 - rendered from the catalog
            with torch.no_grad(), torch.device(device):
                model = ns["Model"](*ns["get_init_inputs"]())
                model(*ns["get_inputs"]())
            ran += 1
        except Exception:  # noqa: BLE001 - counted
            failed += 1
    return {"ran": ran, "failed": failed}
