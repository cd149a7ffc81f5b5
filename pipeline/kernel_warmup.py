"""CUDA kernels that torch compiles at their first use, compiled in the workers' warm-up instead of inside a task.

On CUDA a number of pointwise operators (special functions: erfcx, i0/i0e/i1/i1e, ndtri, log_ndtr, entr, sinc,
exp2, erfc, erfinv, digamma/polygamma, Bessel functions, ...) are "jiterator" kernels: NVRTC compiles them the
first time a process runs them, seconds of CPU each (erfcx 7.5-9.8 s on the H200 host, calls 43 and 45), and
writes them to torch's kernel cache on disk, which every later process on the machine reads. Inside a task that
compile ran under the GPU lock: a worker waiting to time had closed the gate, so no other worker could start GPU
work and nvidia-smi read 0% for as long (the longest idle stretches of calls 43 and 45). Each of the first
workers of a GPU runs a share of the catalog's pointwise operators once at tiny sizes, before its first task, so
the shares together fill the disk cache in parallel while the workers warm up anyway. Which of them compile is
torch's business (the operators that do not cost microseconds), so every pointwise operator is run, not a list
that a torch upgrade would make stale.
"""

from __future__ import annotations

import random
import time
from typing import Any

# the catalog categories whose CUDA kernels include runtime-compiled ones (pointwise math and activations)
CATEGORIES = ("elementwise", "activation")


def warmup_codes(share: int, of: int) -> list[str]:
    """The task modules of warm-up share `share` of `of`: the catalog's pointwise operators, each alone at
    tiny sizes (one draw, deterministic), every `of`-th from `share` on, so `of` shares cover them all once."""
    if not 0 <= share < of:
        raise ValueError(f"share must be in [0, {of}) (got {share})")
    from operators.catalog import sampleable
    from operators.render import render
    from operators.sample import single_op_graph

    specs = sorted((s for s in sampleable() if s.category in CATEGORIES), key=lambda s: s.name)
    codes = []
    for spec in specs[share::of]:
        rng = random.Random(f"kernel-warmup:{spec.name}")
        try:
            codes.append(render(single_op_graph(spec, rng, spec.ranks[0])))
        except Exception:  # noqa: BLE001 - a draw that does not fit; the warm-up is an optimisation only
            continue
    return codes


def run_codes(codes: list[str], device: Any) -> dict[str, float]:
    """Run each warm-up module once on `device` (weights and inputs created there); a module that fails is
    counted, never raised: a warm-up must not stop a worker. Returns counts and seconds."""
    import torch

    ran = failed = 0
    t0 = time.perf_counter()
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
    return {"ran": ran, "failed": failed, "seconds": time.perf_counter() - t0}
