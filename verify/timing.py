"""The worker's timing phase: candidate, eager and torch.compile in shuffled, interleaved rounds. Before every run
(outside the timed region) one randomly placed element of each floating input is set to another element's value,
so no run sees an input seen before and a cache keyed by a sample of the data returns a stale output; one run per
round, picked at random, has its output compared with the reference's on the same input. A speedup within 3% of
the reward's 5% line after the rounds asked for gets 20 rounds more, so a level on the line rests on a steadier
median. The rounds are the
timed region: with a timing lock (a GpuLock file shared by the batch's workers of one device) they hold it
exclusively, the warm-up before them holds it shared."""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

_perf_counter = time.perf_counter  # bound when the worker starts, before any candidate code exists
_monotonic = time.monotonic  # system-wide: the timed regions of workers are comparable


class Hack(Exception):
    """A check caught the candidate: the message is the reason."""


BOUNDARY = 1.05  # the reward's line: more than 5% faster than a baseline
NEAR = 0.03  # a speedup this close to the line (relative) after the first rounds gets the extra rounds


def near_boundary(samples: dict[str, list[float]], near: float = NEAR) -> bool:
    """Whether a speedup (baseline median / candidate median) lies within `near` of the reward's 5% line, where
    one run's noise could move the reward level."""
    if not samples.get("candidate"):
        return False
    c = statistics.median(samples["candidate"])
    return any(abs(statistics.median(v) / c / BOUNDARY - 1) < near for k, v in samples.items()
               if k != "candidate" and v and c > 0)


def _null() -> Any:
    import contextlib

    return contextlib.nullcontext()


def perturb(xs: list, rng: random.Random) -> list[tuple[int, tuple, tuple]]:
    """For each floating tensor input, a (position in xs, index, source index) pair of random places: applied with
    `apply`, the element at index takes the source's value (a value of the input's own distribution and domain)."""
    import torch

    out = []
    for p, x in enumerate(xs):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 1 and 0 not in x.stride():
            out.append((p, tuple(rng.randrange(s) for s in x.shape), tuple(rng.randrange(s) for s in x.shape)))
    return out


def apply(xs: list, changes: list[tuple[int, tuple, tuple]]) -> None:
    import torch

    with torch.no_grad():
        for p, i, j in changes:
            xs[p][i] = xs[p][j].clone()


def tensors(obj: Any) -> list:
    """The tensors of an output (a tensor, or nested lists/tuples of them), in order."""
    import torch

    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, list | tuple):
        return [t for o in obj for t in tensors(o)]
    return []


def _close(a: Any, b: Any, tol: float) -> bool:
    """The draws' criterion: same count, shapes and dtypes, allclose at atol = rtol = tol."""
    import torch

    ta, tb = tensors(a), tensors(b)
    return len(ta) == len(tb) and all(x.shape == y.shape and x.dtype == y.dtype and
                                      torch.allclose(x.double(), y.double(), atol=tol, rtol=tol)
                                      for x, y in zip(ta, tb, strict=True))


def time_kinds(job: dict, dev: Any, ref: Any, cand: Any, xs: list, xc: list, guard_on: bool, lock: Any,
               guards: list, policy: Any = None) -> dict:
    """Median and IQR (ms) per kind, plus `timed_region` (monotonic start, end) and the lock's waits. Each run is
    preceded by an input change, an L2 flush and a device-wide synchronize, and timed with the timer bound before
    the candidate was loaded."""
    import torch

    from verify.guard import ComputeGuard, compute_calls

    off = set(job.get("off", []))
    vary = "timed_outputs" not in off
    tol = job.get("tol", 1e-2)
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda *a: None)
    flush = torch.empty(256 * 1024 * 1024 // 4, device=dev) if cuda else None
    guard = ComputeGuard(policy)
    guards.append(guard)
    inputs = {"candidate": xc, "eager": xs}
    fns = {"candidate": lambda: cand(*xc), "eager": lambda: ref(*xs)}
    if job.get("compile"):
        comp = torch.compile(ref)
        fns["compile"] = lambda: comp(*xs)
        inputs["compile"] = xs
    rng = random.Random(job["seed"])
    samples: dict[str, list[float]] = {k: [] for k in fns}
    runs = job.get("runs_per_round", 3)
    checked = 0
    with torch.no_grad():
        w0 = _perf_counter()
        lock.acquire(label="warm-up")
        for k, f in fns.items():  # warm-up, also in shuffled order
            for _ in range(job.get("warmup", 2)):
                with guard if (k == "candidate" and guard_on) else _null():
                    f()
        sync()
        warmup_s = _perf_counter() - w0  # torch.compile's compile of the reference is in its first warm-up run
        lock.acquire(exclusive=True, label="timing")
        t_start = _monotonic()
        asked = rounds = job.get("rounds", 10)
        done = 0
        while done < rounds:
            done += 1
            order = list(fns)
            rng.shuffle(order)
            check_run = rng.randrange(runs)
            for k in order:
                for r in range(runs):
                    if vary:
                        apply(inputs[k], perturb(inputs[k], rng))
                    snap = [x.clone() if isinstance(x, torch.Tensor) else x for x in xc] \
                        if vary and k == "candidate" and r == check_run else None
                    if flush is not None:
                        flush.zero_()
                    sync()
                    t0 = _perf_counter()
                    with guard if (k == "candidate" and guard_on) else _null():
                        o = fns[k]()
                    sync()
                    samples[k].append((_perf_counter() - t0) * 1e3)
                    if snap is not None:
                        if not _close(o, ref(*snap), tol):
                            raise Hack(f"timed output differs from the reference on the same input (timed run "
                                       f"{len(samples[k])}, after {checked} matching checks)")
                        checked += 1
                    del o
            if done == asked and near_boundary(samples, job.get("near", NEAR)):
                rounds += job.get("extra_rounds", 20)  # a verdict on the line: a steadier median before it
        t_end = _monotonic()
        lock.release()
    if compute_calls(guard):
        raise Hack(f"PyTorch compute in timed forward: {', '.join(compute_calls(guard)[:5])}")
    res: dict[str, Any] = {}
    for k, v in samples.items():
        q = statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
        res[k] = {"median": statistics.median(v), "iqr": q[2] - q[0], "runs": len(v)}
    return {"times_ms": res, "timed_region": [t_start, t_end], "timed_checks": checked, "timed_rounds": done,
            "warmup_s": warmup_s}
