"""What a profile worker does with one task: load it, check it, time it. torch, pyarrow and stdlib only: its
siblings pipeline.gpu.gpu_share (the GPU lock and memory budget), measures.tensor_checks and pipeline.gpu.worker_settings
(what the parent tells it), the eager checks filters.checks owns, so a task they reject is not compiled, and
operators.trace's ATen naming, so the ops it records are the vocabulary the labels are pinned in.

Started by pipeline.gpu.executors as `python -P -m pipeline.gpu.harness` with the repo root on PYTHONPATH (it runs
on a bare GPU image), it speaks JSON lines: the first stdin line is the worker config ({"device",
"settings": WorkerSettings.to_json(), "lock_path", "threads", "replacement"}), then one task per line; it answers {"ready": ...} once torch and the device are
up, {"event": ...} while it waits for or holds the GPU lock or its memory share (so the parent's timeout
clock skips those waits), and one {"result": measurement} per task. The protocol uses a duplicate of the
original stdout; fd 1 is pointed at stderr so a task that prints cannot corrupt it.

Per task: exec the module as KernelBench does; weights and inputs from one seed, created on the GPU itself
(KernelBench draws on the CPU and moves them: same shapes and distribution, other values, and a CPU draw of
several GB per worker would exhaust host memory and time); a quick eager run (early reject far outside the
window or over the memory cap); determinism (three eager runs on the same inputs); input sensitivity (also at
the verifier's tolerance) and degenerate outputs over `input_draws` draws; ATen ops executed; peak memory;
then, unless those checks already reject the task, `torch.compile` (fresh `torch._dynamo.reset()`), its
agreement with eager on every draw at 1e-4 and 1e-2 and graph breaks; last, eager and compiled timing in one
exclusive hold of the GPU. Untimed device work holds the GPU lock shared and compilation (CPU work) holds
nothing, so several workers per GPU overlap one's CPU work (compiling, launching) with another's kernels (the
kernels of different processes take turns on a GPU without MPS) without ever disturbing a timed run; timed runs
go in phases (pipeline.gpu.gpu_share.GpuLock) so the shared sections drain once for all workers waiting to time. Memory: one input
set is alive at a time (the first draw is dropped before the others and drawn again from its seed for the
compile check and timing), and the task's reservation in the GPU's budget is also the worker's hard allocator
cap.
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import gc
import inspect
import json
import math
import os
import re
import resource
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from filters.base import decide
from filters.checks import EAGER_CHECKS, UNTIMED_CHECKS
from filters.determinism import deterministic
from measures.tensor_checks import (
    agreement,
    checksum,
    draw_checks,
    flatten,
    max_diff,
    out_of_memory,
    quantiles,
    sample_stride,
    tensors,
)
from operators.peak import LiveBytes
from operators.trace import SKIP_OPS, aten_name
from pipeline.gpu.compile_cache import InductorCache
from pipeline.gpu.compiled_code import benchmarks_run, code_hashes_since, code_mark, count_benchmarks
from pipeline.gpu.gpu_share import GpuLock, MemoryBudget, guard_benchmarks, holder_core_split
from pipeline.gpu.kernel_warmup import KernelWarmup
from pipeline.gpu.worker_settings import WorkerSettings
from pipeline.rundir.config import ConfigError

L2_FLUSH_BYTES = 256 * 1024 * 1024  # KernelBench flushes 256 MB; the H200's L2 is 60 MB
WORKSPACE_SLACK = 256 * 1024 * 1024  # cuBLAS/cuDNN workspaces and the allocator's rounding, beside a task
# what inductor may allocate on the device while it compiles (constants, RNG state), beside what is alive
COMPILE_SLACK = 512 * 1024 * 1024
# The fragility check's float64 forward holds the task's weights, inputs, intermediates and output in float64, twice
# their float32 bytes, beside the float32 reference: a task whose checks run it reserves this many times one forward's
# peak and output. With one forward's need alone, 1,423 of 1,614 v1 rows in a shortcuts-only call on an H100 ran out
# of memory in it and ran again with the worker's whole cap (26 GiB), so that about four tasks held the GPU at once.
FLOAT64_NEED = 2.0
# Reservations over a task's peak: profile.reserve_margin_predicted / _measured and reserve_slack_gb. Since the GPU
# calibration (operators/calibration.json), measured over predicted peak is p99 1.07 on the H200 (call 19: 2 of
# 898 tasks above 1.1x + 0.5 GiB); the earlier 1.5x (and 1.25x once measured) let about 14 of 16 workers hold ~6 GiB
# tasks at once: the rest waited for memory.
# a slow quick run is confirmed by one run alone on the GPU: over this many times the window's upper bound, the
# task is too slow whatever its timed median (a single uncontended run of a >100 ms task is within a few % of it)
EARLY_REJECT_ALONE = 1.5
# Messages of CUDA errors after which the context is unusable: the worker must exit after reporting.
_FATAL_CUDA = ("CUDA error", "device-side assert", "illegal memory access", "misaligned address",
               "unspecified launch failure", "CUBLAS_STATUS_EXECUTION_FAILED", "cudaError", "CUDNN_STATUS_EXECUTION")


class TaskError(Exception):
    """A task outcome other than ok, with its measurement status."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


def one_line(e: BaseException) -> str:
    inner = getattr(e, "inner_exception", None)
    if isinstance(inner, BaseException) and inner is not e:
        # dynamo's BackendCompilerFailed says only "backend=<object at 0x...> raised:" on its first line
        return f"{type(e).__name__} ({one_line(inner)})"[:300]
    text = str(e).strip().splitlines()
    first = text[0] if text else ""
    asked = re.search(r"Tried to allocate ([\d.]+ [KMGT]?i?B)", first)
    if asked:  # CUDA's OOM line lists every process on the card first: keep what explains this task's failure
        allowed = re.search(r"([\d.]+ [KMGT]?i?B) allowed", first)
        first = f"CUDA out of memory: tried to allocate {asked.group(1)}" + (
            f" with {allowed.group(1)} allowed (the task's reserved cap)" if allowed else "")
        # what torch held: allocated, and reserved but unallocated (fragmentation of its cached segments)
        held = [re.search(p, str(e)) for p in (r"[\d.]+ [KMGT]?i?B is allocated by PyTorch",
                                               r"[\d.]+ [KMGT]?i?B is reserved by PyTorch but unallocated")]
        first += "".join(f"; {h.group(0)}" for h in held if h)
    return f"{type(e).__name__}: {first}"[:300]


def _classify(e: BaseException) -> tuple[str, bool]:
    """(status, fatal) for an exception raised by task code; fatal: the CUDA context is poisoned."""
    msg = str(e)
    if out_of_memory(e):
        return "oom", False
    if any(m in msg for m in _FATAL_CUDA):
        return "crashed", True
    return "error", False


class _Recorder(LiveBytes):
    """ATen ops executed, in order, beside LiveBytes' peak of the tensors they created (the CPU memory estimate)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = aten_name(func)
        if name not in SKIP_OPS:
            self.ops.append(name)
        return super().__torch_dispatch__(func, types, args, kwargs)


def _to(obj: Any, device: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, list | tuple):
        return type(obj)(_to(o, device) for o in obj)
    return obj


def _flat(out: Any) -> Any:
    flat = flatten(out)
    if flat is None:
        raise TaskError("error", f"forward returned no tensor ({type(out).__name__})")
    return flat


class _LockedBackend:
    """A torch.compile backend that compiles (CPU work) without the GPU lock and takes it (shared) when the
    compiled graph is called while the worker holds nothing; everything else is delegated, so it behaves as the
    inner backend. Not when compiling returns: Dynamo's own CPU work after the backend (guards, bytecode) held
    the lock before the graph ran, and a worker waiting to time waited for it. `around` (enter, leave) runs just
    before and after compiling: the harness gives back the memory share a task does not use while it compiles."""

    def __init__(self, inner: Any, lock: GpuLock,
                 around: tuple[Callable[[], None], Callable[[], None]] | None = None) -> None:
        self._inner, self._lock, self._around = inner, lock, around
        self.compile_s = 0.0  # wall seconds inside the inner backend, over all graphs

    def __call__(self, gm, example_inputs):
        self._lock.release()
        shrunk = self._around is not None
        if shrunk:
            self._around[0]()
        # no hold while inductor compiles: the label names the step an OOM here happened in (or "benchmark")
        self._lock.label = "compile"
        t0 = time.perf_counter()
        try:
            try:
                fn = self._inner(gm, example_inputs)
            except Exception as e:
                if not (shrunk and _classify(e)[0] == "oom"):
                    raise
                # inductor also runs kernels while it compiles (pad_mm times padded matmul operands at their real
                # sizes): 17 of 900 tasks ran out of the shrunk share (call 16). Grow back and compile again.
                shrunk = False
                self._around[1]()
                fn = self._inner(gm, example_inputs)
        finally:
            self.compile_s += time.perf_counter() - t0
            if shrunk:
                self._around[1]()
        lock = self._lock

        def locked(*args: Any, **kwargs: Any) -> Any:
            if not lock.held:  # inside a shared or timed hold the graph runs as it is
                lock.acquire(label="compiled-run")
            return fn(*args, **kwargs)

        if getattr(fn, "_boxed_call", False):  # called with one list of inputs: so is the wrapper
            locked._boxed_call = True  # type: ignore[attr-defined]
        return locked

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _inductor_benchmarker() -> Any:
    """torch._inductor's benchmarker (it times the configs of each new kernel in a compiled graph's first run), or
    None on a torch without one."""
    try:
        from torch._inductor.runtime import benchmarking
    except ImportError:
        return None
    return getattr(benchmarking, "benchmarker", None)


def _guard_benchmarks(lock: GpuLock, yield_first: bool) -> bool:
    """Every benchmark inductor runs goes under the GPU lock (pipeline.gpu.gpu_share.guard_benchmarks): those of its
    compile passes (pad_mm), which run while the worker holds nothing, take it shared; with `yield_first`
    (profile.yield_in_autotuning), a timed run waiting for the lock gets in between two autotuning benchmarks of
    a compiled graph's first run (0.44 s of lock per task on the H200, calls 26-28) instead of after all of them.
    False when this torch has no such benchmarker (nothing changes then)."""
    return guard_benchmarks(_inductor_benchmarker(), "benchmark_gpu", lock, yield_first)


def next_batch(batch: int, runs: int, max_runs: int) -> int:
    """How many timed runs the next batch adds after `runs` (the last batch was `batch`): half the runs so far,
    at least as many as before, never past max_runs."""
    return min(max(batch, runs // 2), max_runs - runs)


def timed_enough(med: float, iqr: float, runs: int, s: Any) -> bool:
    """Whether timed runs may stop (profile section `s`): their spread is under iqr_target of the median, or the
    median is known within median_precision (the notch half-width 1.57 * IQR / sqrt(runs), McGill et al. 1978),
    or max_runs ran."""
    if runs >= s.max_runs or iqr <= s.iqr_target * med:
        return True
    return s.median_precision > 0 and 1.57 * iqr / runs ** 0.5 <= s.median_precision * med


AUTOTUNE_WARMUP_ITERS = 10  # L2-flush warm-ups before a config's timed iterations when autotune_benchmark_ms is set


def _bound_autotuning(ms: float) -> bool:
    """Make inductor's benchmark of each autotuning config time at most `ms` milliseconds after
    AUTOTUNE_WARMUP_ITERS flushes (its defaults: 25 ms after 100): the configs of a new kernel are benchmarked in
    the compiled graph's first run, the largest part of a task's GPU time after its timed runs. False when this
    torch's benchmarker takes no such arguments (nothing changes then)."""
    bench = _inductor_benchmarker()
    fn = getattr(bench, "benchmark_gpu", None)
    if fn is None or getattr(fn, "_bounded_to", None) is not None:
        return False
    if not {"max_benchmark_duration", "memory_warmup_iters"} <= set(inspect.signature(fn).parameters):
        return False

    @functools.wraps(fn)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        kwargs["max_benchmark_duration"] = min(kwargs.get("max_benchmark_duration", ms), ms)
        kwargs["memory_warmup_iters"] = min(kwargs.get("memory_warmup_iters", AUTOTUNE_WARMUP_ITERS),
                                            AUTOTUNE_WARMUP_ITERS)
        return fn(*args, **kwargs)

    bounded._bounded_to = ms  # type: ignore[attr-defined]
    bench.benchmark_gpu = bounded
    return True


def require_autotuning_bound(ms: float) -> None:
    """Bound inductor's autotuning benchmarks to `ms` (_bound_autotuning) or raise ConfigError: a worker whose
    bound silently did not apply would be measured as if it had."""
    if _bound_autotuning(ms) or getattr(getattr(_inductor_benchmarker(), "benchmark_gpu", None),
                                        "_bounded_to", None) == ms:
        return
    raise ConfigError(f"profile.autotune_benchmark_ms = {ms:g} needs inductor's benchmarker with "
                      f"max_benchmark_duration and memory_warmup_iters, which torch {torch.__version__} lacks (or "
                      f"it is bounded to another value in this process): set it to 0")


class _SlowConfig(Exception):
    """Raised inside inductor's benchmark of a config whose first run took longer than the cap (args: its ms)."""


def _cap_autotune_configs(cap_ms: float) -> bool:
    """A config whose first run (the benchmarker's warm-up, which it synchronizes before anything else) took over
    `cap_ms` is not benchmarked further: that first run's time is its result, so inductor still ranks such
    configs by how slow they are and picks a faster one where there is one. Their further runs (five estimates,
    warm-ups, timed iterations) held the GPU lock for 84 s on a pathological reduction config (call 33); a batch
    norm over 25x4x128^3 kept the GPU busy 48 s in its compiled first run (call 45) while every worker waiting to
    time waited. False when this torch has no benchmarker or it is capped already."""
    bench = _inductor_benchmarker()
    fn = getattr(bench, "benchmark_gpu", None)
    if fn is None or getattr(fn, "_capped_at", None) is not None:
        return False

    @functools.wraps(fn)
    def capped(*args: Any, **kwargs: Any) -> Any:
        args = list(args)
        inner = kwargs.pop("_callable") if "_callable" in kwargs else args.pop(0)
        seen: list[float] = []

        def watched() -> Any:
            # the second call starts after the first one's synchronize: their distance is the first run's time
            if len(seen) == 1 and (first_ms := (time.perf_counter() - seen[0]) * 1e3) > cap_ms:
                raise _SlowConfig(first_ms)
            seen.append(time.perf_counter())
            return inner()

        try:
            return fn(watched, *args, **kwargs)
        except _SlowConfig as slow:
            return slow.args[0]

    capped._capped_at = cap_ms  # type: ignore[attr-defined]
    bench.benchmark_gpu = capped
    return True


UNTIMED_MS = 1.0  # what every untimed benchmark reads: all candidates tie


def _untime_compile_choices() -> bool:
    """Make every benchmark inductor asks for return UNTIMED_MS without running (profile.compile_timed_choices
    off): its autotuner keeps the first of tied configs and pad_mm, never faster padded, pads nothing. A reduction
    or scan kernel is first cut down to the one config inductor's deterministic mode keeps (its rule: no tiny
    RBLOCK, no XBLOCK 1 where that is slow, then the second largest blocks and warps): the first config alone ran
    scans and softmaxes up to 120x slower than timed ones (call 89). Choices an earlier, timed run left in the
    cache are not read either: the autotuner's best configs (autotune_local_cache) and pad_mm's decisions
    (shape_padding off). Nor does the autotuner save the arguments a kernel writes (`_skip_autotuning_copies`).
    False when this torch has no benchmarker or it is untimed already."""
    import torch._inductor.config as inductor_config

    inductor_config.autotune_local_cache = False
    inductor_config.shape_padding = False
    tests = getattr(inductor_config, "test_configs", None)
    if tests is not None and hasattr(tests, "force_filter_reduction_configs"):
        tests.force_filter_reduction_configs = True
    bench = _inductor_benchmarker()
    fn = getattr(bench, "benchmark_gpu", None)
    if fn is None or getattr(fn, "_untimed", False):
        return False

    @functools.wraps(fn)
    def untimed(*args: Any, **kwargs: Any) -> float:
        return UNTIMED_MS

    untimed._untimed = True  # type: ignore[attr-defined]
    bench.benchmark_gpu = untimed
    _skip_autotuning_copies()
    return True


def _skip_autotuning_copies() -> bool:
    """With untimed choices no config runs while inductor's autotuner picks one, so none can spoil an argument the
    kernel writes: stop it saving such arguments first. It copies each one larger than the allocator's headroom into
    freshly pinned host memory, a host-side wait of 1.8-4.6 s inside the compiled graph's first run, GPU lock held
    (cumulative sums, softmaxes, a convolution on the H200, call 97); drains behind such first runs idled the GPU
    16.8 s in a 9-minute call (call 95), 0.5 s without the copies (call 98). False when this torch's autotuner has no
    such step or it is skipped already."""
    try:
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    except ImportError:
        return False
    copies = getattr(CachingAutotuner, "copy_args_to_cpu_if_needed", None)
    if copies is None or getattr(copies, "_skipped", False):
        return False

    def no_copies(self: Any, *args: Any, **kwargs: Any) -> dict:
        return {}

    no_copies._skipped = True  # type: ignore[attr-defined]
    CachingAutotuner.copy_args_to_cpu_if_needed = no_copies  # type: ignore[method-assign]
    return True


def _set_pointwise_autotuning(on: bool) -> None:
    """inductor's triton.autotune_pointwise for every graph this worker compiles (profile.autotune_pointwise)."""
    import torch._inductor.config as inductor_config

    inductor_config.triton.autotune_pointwise = on


def _address_space_bytes() -> int:
    """This process's mapped address space now (what RLIMIT_AS counts)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (Triton's ptxas runs as a child)."""
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def collect_and_freeze() -> None:
    """Free what the last task left (Dynamo's caches of its compiled frames first, then its reference cycles) and
    move what survives into the collector's permanent generation: inductor's and Triton's modules and caches, imported
    at a worker's first compile, stay for the worker's life, and every full pass walked them (about 450k objects,
    0.27 s a pass on a 2-core host; two passes per task, and the automatic ones inside each
    compile) until frozen. What a later task leaves is young again, so its cycles are still found."""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:
        dynamo.reset()
    gc.collect()
    gc.freeze()


def _budget_bytes(settings: WorkerSettings, total: int) -> int:
    """Device memory the workers of one GPU may reserve for tasks: the card less 5% and about 1 GiB per worker
    for its CUDA context, cuBLAS/cuDNN workspaces and L2 flush."""
    return int(0.95 * total - settings.workers_per_gpu * 2**30)


def _outgrown_why(m: dict) -> str:
    """What an attempt that outgrew its reservation ran into, for the retry note: the step of an OOM, or the
    allocator's retries inside timed runs."""
    if m["status"] != "ok":
        return f"{m['status']} in {m.get('_step') or 'setup'}: {m['error']}"
    return f"timing alloc retries {m.get('timing_alloc_retries')}"


class Harness:
    """One worker's state: torch, the device, the L2 flush buffer, the GPU lock; `profile` runs one task."""

    def __init__(self, device: str, settings: WorkerSettings, lock_path: str | None = None,
                 notify: Callable[[str], None] = lambda _: None) -> None:
        self.s = settings
        self.cuda = device.startswith("cuda")
        self.device = torch.device("cuda", 0) if self.cuda else torch.device("cpu")
        self.lock = GpuLock(lock_path, notify, sync=self._sync, phases=settings.profile.timing_phases,
                            gather_s=settings.profile.timing_gather_s, wait_out_s=settings.profile.first_run_wait_s,
                            wait_out_label="compiled-run",
                            cores=holder_core_split(settings.profile.holder_cores) if lock_path else None)
        self._lock_path = lock_path
        self.notify = notify
        self.cache = InductorCache(os.path.dirname(lock_path) if lock_path else None)
        self.compile_configured = False  # inductor imported and set up for this worker (_configure_compile)
        if settings.profile.compile and settings.profile.preload_compile:
            self._configure_compile()
        self.torch_version = torch.__version__
        limit = settings.profile.memory_limit_gb
        self.budget = MemoryBudget(None, 0, notify)
        self.task_cap = self.reserved_cap = 0
        self.retrying = False
        self.measured_need: tuple[int, int] | None = None
        self.f64_chunks = 1  # slices of the batch the task's float64 forward runs in (_float64_chunks)
        self.regrow_wait_s = 0.0
        self.kernels: KernelWarmup | None = KernelWarmup()  # the pointwise operators this worker has run once, unlocked, before a task
        self.warm_compiled = False  # whether warm() compiled (a replacement does not)
        if self.cuda:
            torch.cuda.init()
            props = torch.cuda.get_device_properties(self.device)
            self.gpu, self.total_memory = props.name, props.total_memory
            if limit > 0:
                # the checks hold about three outputs of a task whose one forward peaks at the filter's cap
                limit = max(limit, 3 * settings.filter.max_peak_memory_gb + 2)
                torch.cuda.set_per_process_memory_fraction(min(1.0, limit * 2**30 / props.total_memory), self.device)
            self.task_cap = int(min(limit * 2**30, props.total_memory)) if limit > 0 else int(props.total_memory)
            if lock_path:
                self.budget = MemoryBudget(lock_path + ".mem", _budget_bytes(settings, props.total_memory), notify,
                                           backfill_s=settings.profile.backfill_s)
            self.flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device=self.device)
            torch.zeros(1, device=self.device).sum().item()  # context and allocator warm
        else:
            self.gpu = ""
            self.flush = None
            if limit > 0:
                # over what the worker maps already: a CUDA build of torch maps ~3 GiB of libraries before any task
                # (3.3-3.4 GiB with inductor on the H200 host), and a forked worker maps what its server imported
                cap = _address_space_bytes() + int(limit * 2**30)
                resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    def tf32(self) -> bool:
        if not self.cuda:
            return False
        return bool(torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32)

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def _time(self, fn: Callable, args: tuple, done_runs: int) -> tuple[float, float, int]:
        """Median and IQR in ms over timed runs, each after an L2 flush on the GPU; runs until the IQR is
        under iqr_target of the median (at least min_runs, at most max_runs or max_timing_s)."""
        s = self.s.profile
        for _ in range(max(0, s.warmup - done_runs)):  # runs just before on the same inputs count
            fn(*args)
        self._sync()
        times: list[float] = []
        batch, max_runs = s.min_runs, s.max_runs
        budget_end = time.perf_counter() + s.max_timing_s
        while True:
            times += [self._run_ms(fn, args) for _ in range(batch)]
            med, iqr = quantiles(times)
            if timed_enough(med, iqr, len(times), s) or time.perf_counter() > budget_end:
                return med, iqr, len(times)
            batch = next_batch(batch, len(times), max_runs)

    def _run_ms(self, fn: Callable, args: tuple) -> float:
        """One timed run in ms: on the GPU after an L2 flush, between CUDA events and synchronized, as KernelBench
        times each run (launch gaps count)."""
        if not self.cuda:
            t0 = time.perf_counter()
            fn(*args)
            return (time.perf_counter() - t0) * 1e3
        self.flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    def _quick_ms(self, model: Any, x: tuple, base: int, m: dict) -> tuple[Any, float]:
        out = model(*x)  # the first run also pays lazy init (cuDNN/cuBLAS handles)
        self._sync()
        if self.cuda:  # the peak of one forward: weights, inputs, intermediates, output
            m["peak_memory_bytes"] = int(torch.cuda.max_memory_allocated(self.device) - base)
            self._reject_memory(m)  # before a second output would sit beside the first
            # the measured need replaces the prediction: one forward's peak beside the reference output kept
            # for the checks (x0 is dropped before any further draw, so that is the most they hold at once);
            # changed without waiting, since waiting while holding memory could deadlock
            out_bytes = sum(t.numel() * t.element_size() for t in tensors(out))
            self.measured_need = (m["peak_memory_bytes"], out_bytes)  # what the compiled phase's share is sized on
            if not self.retrying:  # a retry keeps the worker's whole cap: narrowing it again re-made the OOM
                self._reserve(self._footprint(m["peak_memory_bytes"], out_bytes, measured=True,
                                              checks=self._runs_float64()), wait=False)
        if self.s.profile.shortcuts_only:  # the stored measurements hold its time and determinism: one run
            return out, math.nan
        t0, host0 = time.perf_counter(), time.thread_time()
        again = model(*x)
        m["quick_host_ms"] = (time.thread_time() - host0) * 1e3  # launching (and any host work) before the sync
        self._sync()
        quick = (time.perf_counter() - t0) * 1e3
        # a third run to compare for determinism, at no extra run: a non-determinism that shows only in some runs
        # (a conv-transpose's cuDNN reduction) was caught by one of two comparisons of the same task (call 78, not 81)
        m["determinism_max_diff"] = max_diff(_flat(out), _flat(again))
        del again
        return out, quick

    def _configure_compile(self) -> None:
        """Import inductor and set it up as the profile section says (autotuning bounds, pointwise autotuning, the
        GPU lock around its benchmarks, their count, or no timed choice at all): at the worker's start, or with
        profile.preload_compile off just before its first compile. Once per worker."""
        if self.compile_configured:
            return
        p = self.s.profile
        if self.cuda and p.autotune_benchmark_ms > 0:
            require_autotuning_bound(p.autotune_benchmark_ms)
        _set_pointwise_autotuning(p.autotune_pointwise)
        if self.cuda and p.autotune_config_cap_ms > 0:
            _cap_autotune_configs(p.autotune_config_cap_ms)
        if self.cuda and self._lock_path:
            _guard_benchmarks(self.lock, p.yield_in_autotuning)
        count_benchmarks(_inductor_benchmarker())  # every benchmark inductor runs counts once
        if self.cuda and not p.compile_timed_choices:
            _untime_compile_choices()  # outermost: nothing below it runs, so the count stays 0
        # before anything compiles: a binary cut short by a killed worker may be the vector-ISA probe, whose failure
        # inductor takes silently (scalar code from then on)
        removed = self.cache.repair_shared()
        if removed:
            print(f"deleted {len(removed)} broken binaries from the inductor cache: {removed[:3]}", file=sys.stderr)
        self.compile_configured = True

    def warm(self, with_compile: bool = True) -> float:
        """Pay each process's one-time costs before the first task (inductor and Triton imports, Triton's
        launcher build, cuBLAS and cuDNN handles), so they never sit inside a task's GPU lock. Without `with_compile` (a
        replacement: a fault under MPS replaces every worker of the GPU at once, and the GPU idles until they
        are ready) the compile warm-up is left to the first task, which compiles with warm caches outside the lock."""
        t0 = time.perf_counter()
        lin = torch.nn.Linear(64, 64).to(self.device)
        conv = torch.nn.Conv2d(4, 4, 3).to(self.device)

        def fn(x, y):
            return torch.softmax(lin(x), dim=-1).sum(0), conv(y).relu().mean((2, 3))

        with torch.no_grad():
            x, y = torch.rand(32, 64, device=self.device), torch.rand(2, 4, 8, 8, device=self.device)
            with self.lock.hold(label="warm-up"):
                fn(x, y)
            if self.s.profile.compile and with_compile:
                import torch._dynamo as dynamo

                self._configure_compile()

                def compile_once() -> None:
                    dynamo.reset()
                    inner = torch._TorchCompileInductorWrapper(None, None, None)
                    torch.compile(fn, backend=_LockedBackend(inner, self.lock))(x, y)
                    self.lock.release()

                self._with_cache_repair(compile_once, "warm-up")  # raises only when compiling itself fails
                self.warm_compiled = True
                self.cache.use_shared()
                dynamo.reset()
        self._sync()
        return time.perf_counter() - t0

    def profile(self, task: dict) -> dict:
        """One measurement dict (MEASUREMENTS names plus roofline fields); never raises for task faults.
        `_fatal` is set when the CUDA context is poisoned and the worker must exit."""
        t0, cpu0, started_at = time.perf_counter(), _cpu_s(), time.time()
        self.lock.held_s = self.lock.exclusive_s = self.lock.wait_s = self.lock.wait_exclusive_s = 0.0
        self.lock.gather_s_spent = 0.0
        self.budget.wait_s = self.regrow_wait_s = 0.0
        base: dict[str, Any] = {"task_id": task.get("task_id"), "status": "ok", "error": "",
                                "device": "cuda" if self.cuda else "cpu", "gpu": self.gpu,
                                "torch_version": self.torch_version, "tf32": self.tf32(), "_fatal": False}
        self.retrying = False
        self.measured_need = None  # (eager peak, output bytes) once the task's quick run measured them
        self.f64_chunks = 1
        self.lock.label = ""  # the step names what this task did, not the last one
        m = self._attempt(task, base, self._footprint(task.get("predicted_peak_bytes"), checks=self._runs_float64()))
        first_cap = self.reserved_cap  # what the first attempt last held: a retry says it did not suffice
        if self._outgrew_reservation(m):
            # it outgrew its reservation (the hard cap that makes neighbours unable to OOM each other): run it
            # again with a larger one (profile.retry_reserve_factor), the worker's whole cap at last, so an OOM or a
            # disturbed timing is the task's own. (Reserving the whole GPU instead drained every worker for each
            # retry: 0.70 GPU-s per task instead of 0.44 on the H200, call 7.)
            self.retrying = True
            # the step the first attempt was in when it failed (the GPU lock's last label: eager, compiled-run,
            # compile-check, timing...) says which part of a task its reservation misses
            notes = [f"{first_cap / 2**30:.2f} GiB: {_outgrown_why(m)}"[:200]]
            for cap in self._retry_caps(first_cap):
                m = self._attempt(task, dict(base), cap)
                if cap >= self.task_cap or not self._outgrew_reservation(m):
                    break
                # not enough either: the whole cap next
                notes.append(f"{cap / 2**30:.2f} GiB: {_outgrown_why(m)}"[:95])
            m["reservation_retry"] = "; ".join(notes)[:300]
            held = "the worker's cap" if cap >= self.task_cap else f"{cap / 2**30:.2f} GiB"
            m["error"] = f"{m['error']} (retried with {held} reserved)" if m["status"] != "ok" else ""
        m.setdefault("reservation_retry", "")
        m.pop("_step", None)
        m["wall_s"] = time.perf_counter() - t0
        m["started_at"] = started_at
        m["gpu_busy_s"] = self.lock.held_s
        m["gpu_exclusive_s"] = self.lock.exclusive_s
        m["lock_wait_s"], m["budget_wait_s"] = self.lock.wait_s, self.budget.wait_s
        m["lock_wait_exclusive_s"] = self.lock.wait_exclusive_s
        m["lock_gather_s"] = self.lock.gather_s_spent  # part of lock_wait_exclusive_s
        m["regrow_wait_s"] = self.regrow_wait_s  # part of budget_wait_s: after compiling, before running
        m["cpu_s"] = _cpu_s() - cpu0
        m["reserved_gib"] = self.reserved_cap / 2**30 if self.budget.fd is not None else None
        return m

    def _retry_caps(self, outgrown: int) -> list[int]:
        """The reservations a task that outgrew `outgrown` runs again with: profile.retry_reserve_factor times it
        first (when that is under the worker's cap), then the whole cap."""
        factor = self.s.profile.retry_reserve_factor
        sized = int(factor * outgrown) if factor > 1 else self.task_cap
        return [sized, self.task_cap] if sized < self.task_cap else [self.task_cap]

    def _outgrew_reservation(self, m: dict) -> bool:
        """Whether a first attempt failed for want of memory its reservation did not give: an OOM, or timed runs in
        which the allocator had to free its cache and retry cudaMalloc under the cap (a slower timing that is
        the harness's, not the task's: 40 of the release's 12,000 tasks were dropped for it, most after a single
        retry). Only when a larger cap, the worker's whole one, is there to try."""
        if m["_fatal"] or self.budget.fd is None or self.reserved_cap >= self.task_cap:
            return False
        return m["status"] == "oom" or (m["status"] == "ok" and (m.get("timing_alloc_retries") or 0) > 0)

    def _reserve(self, nbytes: int, wait: bool = True) -> None:
        """Take nbytes of the GPU's budget and make it this process's hard allocator cap (plus the flush
        buffer and workspaces), so the budget is a guarantee, not an estimate: a task that outgrows its share
        fails alone instead of starving a neighbour (call 8: 34 of 160 tasks OOM with estimates only)."""
        self.budget.reserve(nbytes, wait=wait)
        if self.cuda and self.budget.fd is not None and nbytes:
            cap = min(nbytes + L2_FLUSH_BYTES + WORKSPACE_SLACK, self.total_memory)
            torch.cuda.set_per_process_memory_fraction(cap / self.total_memory, self.device)
            self.reserved_cap = nbytes

    def _attempt(self, task: dict, m: dict, reserve: int) -> dict:
        m = dict(m)
        try:
            self._reserve(reserve)
            with torch.no_grad():
                self._profile(task, m)
        except Exception as e:  # noqa: BLE001 - whatever the task does is a result
            status, fatal = (e.status, False) if isinstance(e, TaskError) else _classify(e)
            m.update(status=status, error=str(e) if isinstance(e, TaskError) else one_line(e), _fatal=fatal)
            # the step it failed in, before the clean-up below holds the lock for its own step ("free-memory")
            m["_step"] = self.lock.label
        finally:
            self.lock.release()
        if not m["_fatal"]:
            # tensors held by reference cycles (compiled frames, tracebacks) would otherwise count against the
            # next task's hard cap. The collection is CPU work and only returns blocks to torch's cache, so it
            # runs without the lock (under it, a 0.1-0.3 s pass delayed every neighbour's timed runs); the
            # cudaFree of empty_cache runs under the shared lock, since beside a neighbour's timed runs it is
            # suspected of slowing them (call 9: two of 30 tasks 65-90% slower than KernelBench's loop)
            collect_and_freeze()
            if self.cuda:
                self._empty_cache()
        self.budget.release()
        return m

    def _empty_cache(self) -> None:
        with self.lock.hold(label="free-memory"), contextlib.suppress(Exception):
            torch.cuda.empty_cache()

    def _compile_hooks(self) -> tuple[Callable[[], None], Callable[[], None]] | None:
        """While inductor compiles (seconds of CPU work) the task needs only what is alive (weights, one input
        set, the reference output): its share of the budget shrinks to that and grows back, queued like any
        reservation, before the compiled graph runs. Holding a whole forward's peak through compilation kept
        admitted tasks waiting for memory longer than they computed (budget wait 3.1 s per task, call 15)."""
        if not (self.cuda and self.budget.fd is not None and self.s.profile.shrink_while_compiling) or self.retrying:
            return None  # a retry keeps the worker's whole cap throughout
        full: list[int] = []

        def enter() -> None:
            full.append(self.budget.reserved)
            gc.collect()
            self._empty_cache()
            alive = int(torch.cuda.memory_reserved(self.device))
            if alive + COMPILE_SLACK < self.budget.reserved:
                self._reserve(alive + COMPILE_SLACK, wait=False)

        def leave() -> None:
            t0 = time.perf_counter()
            self._reserve(max(full.pop(), self._compiled_footprint()), wait=True)
            self.regrow_wait_s += time.perf_counter() - t0

        return enter, leave

    def _compiled_footprint(self) -> int:
        """The share of the compiled phase with profile.reserve_margin_compiled (0 when it is off or nothing was
        measured): a compiled graph may need more than the eager forward's peak."""
        margin, need = self.s.profile.reserve_margin_compiled, self.measured_need
        if not (margin and need and need[0]):
            return 0
        return self._footprint(*need, measured=True, margin=margin)

    def _float64_chunks(self, model: Any, x: tuple, out: Any) -> int:
        """Slices of the batch this task's float64 forward may run in (measures.shortcuts.batch_chunks, at
        profile.shortcut_f64_chunks), or 1: no float64 forward, or rows not computed apart. One float32 forward of
        the first slice's rows, beside draw 0's output."""
        chunks = self.s.profile.shortcut_f64_chunks
        if not self._runs_float64() or chunks <= 1:
            return 1
        from measures.shortcuts import batch_chunks

        return batch_chunks(model, x, _flat(out), self.s.filter.compile_tolerance, chunks)

    def _one_forward_share(self) -> None:
        """Shrink a reservation sized for the float64 forward to one forward's measured need (a shrink never waits;
        a retry keeps the worker's whole cap)."""
        if self.measured_need and not self.retrying:
            self._reserve(self._footprint(*self.measured_need, measured=True), wait=False)

    def _runs_float64(self) -> bool:
        """Whether this worker's shortcut checks run a float64 forward (the fragility check's reference)."""
        return "fragile" in self.s.profile.shortcut_checks

    def _footprint(self, peak: int | None, out_bytes: int = 0, measured: bool = False,
                   margin: float | None = None, checks: bool = False) -> int:
        """Device memory a task may hold at once: one forward's peak beside the reference output, with
        profile.reserve_margin_measured for the compiled graph's own buffers and allocator slack; before the first
        forward, the sampler's prediction with reserve_margin_predicted; reserve_slack_gb beside either; when
        nothing predicts the peak (imported tasks), the filter's peak cap: a task that needs more is rejected for its
        peak anyway (the worker's whole cap, 3x the filter's, let only about four such tasks run at once). A task that
        outgrows its share is retried with the whole cap. `margin` replaces the measured one (the compiled phase's).
        `checks`: the shortcut checks' float64 forward is still to run, FLOAT64_NEED times the peak and output."""
        if not self.task_cap:
            return 0
        p = self.s.profile
        f = FLOAT64_NEED if checks else 1.0
        if not peak:
            return min(self.task_cap, int((f * self.s.filter.max_peak_memory_gb + p.reserve_slack_gb) * 2**30))
        if measured:
            need = (margin or p.reserve_margin_measured) * f * (peak + out_bytes)
        else:
            need = p.reserve_margin_predicted * f * peak
        return min(self.task_cap, int(need + p.reserve_slack_gb * 2**30))

    def _device_ctx(self) -> Any:
        """Where weights and inputs are created: on the GPU directly (far faster than a CPU draw of GBs
        and no host-memory spike across workers)."""
        if self.cuda:
            return torch.device(self.device)
        return contextlib.nullcontext()

    def _draw(self, ns: dict, k: int) -> tuple:
        torch.manual_seed(self.s.seed + 1 + k)
        with self._device_ctx():
            return _to(tuple(ns["get_inputs"]()), self.device)

    def _fresh_model(self, ns: dict, k: int) -> Any:
        """The task's model built again with weights seeded `seed * 1000 + k`, as `opsynth verify` (same seed) builds
        the model of its draw k: the fragility check then holds the verifier's own weight draws."""
        torch.manual_seed(self.s.seed * 1000 + k)
        with self._device_ctx():
            model = ns["Model"](*ns["get_init_inputs"]())
        return model.to(self.device)

    def _profile(self, task: dict, m: dict) -> None:
        s, dev = self.s.profile, self.device
        ns: dict[str, Any] = {"__name__": f"task_{task.get('task_id')}"}
        exec(compile(task["code"], f"<task {task.get('task_id')}>", "exec"), ns)  # noqa: S102 - checked upstream
        draws = s.input_draws
        if s.shortcuts_only and s.shortcut_mode == "cheap":
            draws = min(draws, 2)  # the stored measurements judged the draws; the cheap checks read draws 0 and 1
        self._warm_kernels(task.get("ops") or [])
        with self.lock.hold(label="eager"):
            base = torch.cuda.memory_allocated(dev) if self.cuda else 0
            if self.cuda:
                torch.cuda.reset_peak_memory_stats(dev)
            torch.manual_seed(self.s.seed)
            with self._device_ctx():
                model = ns["Model"](*ns["get_init_inputs"]())
            model = model.to(dev)
            x0 = self._draw(ns, 0)
            out0, quick = self._quick_ms(model, x0, base, m)
            m["quick_eager_ms"] = quick  # what _early_reject judges
            m["gpu_busy_setup_s"] = time.perf_counter() - self.lock._since
            self._early_reject(quick, m, model, x0)
            if self._runs_float64():
                # inputs drawn again: a forward that writes its inputs must not change x0, which later runs read
                self.f64_chunks = self._float64_chunks(model, self._draw(ns, 0), out0)
                if self.f64_chunks > 1:  # a float64 forward in slices of the batch needs one forward's share
                    self._one_forward_share()
            self.lock.yield_()
            out1 = None
            if not s.shortcuts_only:  # a shortcuts-only call has the ATen ops and determinism stored already
                rec = _Recorder()
                with rec:
                    out1 = model(*x0)
                m["aten_ops"] = rec.ops
                if not self.cuda:
                    resident = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers(),
                                                                          *tensors(x0)])
                    m["peak_memory_bytes"] = int(resident + rec.peak)
            ref0 = _flat(out0)
            if out1 is not None:
                # compared before ref0 is copied: three outputs at once outgrew the reservation (peak beside one
                # output) of tasks with large outputs
                # NaN at the same place counts as equal
                diff, quick_diff = max_diff(ref0, _flat(out1)), m.get("determinism_max_diff", 0.0)
                m["determinism_max_diff"] = diff if math.isnan(diff) or diff > quick_diff else quick_diff
                m["deterministic"] = m["determinism_max_diff"] == 0.0
            m["eager_checksum"] = checksum(ref0)
            del out1
            owned = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers(), *tensors(x0)]}
            if ref0.numel() < 2**28 or ref0.untyped_storage().data_ptr() in owned:
                ref0 = ref0.clone()  # the next run may write into the same buffer (in-place on an input, say)
            del out0
            # other draws are kept as an even-strided sample of at most tensor_checks.SAMPLE elements (all of a small output),
            # so the checks need one output's memory, not input_draws of them
            stride = sample_stride(ref0.numel())
            subs = [ref0[::stride]]
            del x0  # a further draw beside x0 would need one more input set (call 9's OOMs under the hard cap)
            for k in range(1, draws):
                self.lock.yield_()
                subs.append(_flat(model(*self._draw(ns, k)))[::stride].clone())
            m.update(draw_checks(ref0, subs, self.s.filter.compile_tolerance))
            if s.shortcut_checks and not self._eager_rejection(m):  # a task out already needs no more forwards
                self._shortcuts(model, ns, ref0, subs, stride, m, task)
            if self._runs_float64() and not s.shortcuts_only:
                self._one_forward_share()  # the checks are done: the compiled phase and the timed runs need no more
        m["gpu_busy_eager_s"] = self.lock.held_s
        if s.shortcuts_only:  # the run holds every other measurement of the task already
            return
        compiled = None
        if s.compile:
            why = self._eager_rejection(m)
            if why and s.skip_compile_when_rejected:
                m["compile_error"] = f"skipped: {why}"  # compilation is the costliest step; the task is out anyway
            else:
                compiled = self._compile(model, ns, ref0, subs, stride, m)
        # the checks are done: their outputs would only crowd the timed runs' allocations under the hard cap
        del ref0, subs
        m["timing_skipped"] = ""
        if s.skip_timing_when_rejected and (why := decide(m, UNTIMED_CHECKS, self.s.filter)[1]):
            m["timing_skipped"] = why  # the filter rejects it for this whatever it times: no GPU held alone for it
            return
        x0, done_runs = self._warm_in_drain(ns, model, compiled, m) if s.warm_in_drain else (None, s.warmup - 1)
        # one exclusive section per task for all timed runs: each exclusive hold first waits for every
        # neighbour's shared section to end, and those drains, not the timed runs, bounded throughput. The input
        # is drawn inside it (unless drawn in the drain): a shared section of its own would wait out a whole
        # phase of timed runs first
        with self.lock.hold(exclusive=True, label="timing"):
            if x0 is None:
                x0 = self._draw(ns, 0)  # the same values: draws are seeded
            retries0 = self._alloc_retries()
            med, iqr, n = self._time(model, x0, done_runs=done_runs)
            m.update(eager_ms=med, eager_iqr_ms=iqr, eager_runs=n)
            if compiled is not None:
                med, iqr, n = self._time(compiled, x0, done_runs=done_runs)
                m.update(compile_ms=med, compile_iqr_ms=iqr, compile_runs=n)
        # the allocator freeing its cache and calling cudaMalloc again inside timed runs (a cap too tight
        # for the task) inflates them: recorded so such timings can be told apart
        m["timing_alloc_retries"] = self._alloc_retries() - retries0
        self._roofline(task, m)

    def _shortcuts(self, model: Any, ns: dict, ref0: Any, subs: list, stride: int, m: dict,
                   task: dict | None = None) -> None:
        """measures/shortcuts.py on the real sizes, inside the eager hold: reuses draw 0's output and the draws'
        samples, draws inputs again (seeded: the same values) rather than holding them, one forward's output at
        a time beside ref0, as the draws above."""
        from measures.shortcuts import KINDS, measure, screened_far
        from measures.tensor_checks import tolerance_ratio

        s, t = self.s.profile, time.perf_counter()
        tol = self.s.filter.compile_tolerance
        cheap = s.shortcut_mode == "cheap"
        # one tensor input: redrawing it alone is draw 1 against draw 0, measured above (exactly, unsampled)
        known = tolerance_ratio(subs[1], subs[0], tol) if stride == 1 and len(subs) > 1 else None
        # profile.shortcut_screen_margin: parts the pre-screen found far from tolerance are not measured again
        task = task or {}
        gate = s.shortcut_screen_margin > 0 and "screen_op_ratios" in task  # profile attaches screens that have them
        given = {"given_inputs": screened_far(task.get("screen_input_ratios"), s.shortcut_screen_margin),
                 "given_ops": screened_far(task.get("screen_op_ratios"), s.shortcut_screen_margin)} if gate else {}
        screened: list[str] = []
        ran: list[str] = []
        # one kind at a time, each timed: where the checks' GPU time goes decides which to make cheaper. The
        # cheapest kind first (KINDS' order); with shortcut_stop_first the task's checks end at the first kind that
        # finds one, as the filter drops on that finding alone (the fragility check, the dearest, is then spared)
        for kind in (k for k in KINDS if k in s.shortcut_checks):
            t_kind = time.perf_counter()
            if cheap and kind == "fragile":
                from measures.cheap_shortcuts import cheap_fragility, has_step

                got = cheap_fragility(model, lambda k: self._draw(ns, k), tol, subs, stride, s.shortcut_ulp_steps,
                                      s.shortcut_move_scale, has_step(task.get("ops")), s.shortcut_draws,
                                      (lambda k: self._fresh_model(ns, k)) if s.shortcut_fresh_weights else None,
                                      f64_chunks=self.f64_chunks)
                got.pop("fragile_scaled_ratio")
            else:
                kind_given = dict(given)
                if cheap and kind == "skip":
                    kind_given["given_ops"] = {**self._reduced_far(ns), **kind_given.get("given_ops", {})}
                got = measure(model, lambda k: self._draw(ns, k), ref0, tol,
                              kinds=(kind,), draws=s.shortcut_draws, subs=subs, stride=stride,
                              stop_first=s.shortcut_stop_first, known_ratio=known, ulp_steps=s.shortcut_ulp_steps,
                              model_for=(lambda k: self._fresh_model(ns, k)) if s.shortcut_fresh_weights else None,
                              f64_draws=s.shortcut_f64_draws, f64_chunks=self.f64_chunks, **kind_given)
            screened += got.pop("shortcut_screened", [])
            m.update(got)
            m[f"gpu_busy_{kind}_s"] = time.perf_counter() - t_kind
            ran.append(kind)
            if s.shortcut_stop_first and (got.get("dead_inputs") or got.get("skippable_ops") or got.get("fragile")):
                break
        if gate or (cheap and "skip" in ran):
            m["shortcut_screened"] = screened
        m["shortcut_checks"] = ",".join(ran)
        m["gpu_busy_shortcut_s"] = time.perf_counter() - t

    def _reduced_far(self, ns: dict) -> dict[str, float]:
        """The cheap skip check's operators taken as mattering: those whose skip ratio at the reduced batch
        (measures/cheap_shortcuts.py) is at least profile.shortcut_skip_margin. Empty when the task has no batch to
        cut or does not run at it: then every operator is measured at the real size."""
        from measures.cheap_shortcuts import reduced_op_ratios

        ratios = reduced_op_ratios(ns, self.s.seed, self.s.filter.compile_tolerance, self.device)
        margin = self.s.profile.shortcut_skip_margin
        return {o: r for o, r in (ratios or {}).items() if r >= margin}

    def _warm_in_drain(self, ns: dict, model: Any, compiled: Any, m: dict) -> tuple[tuple, int]:
        """Announce the timed runs from a shared hold (the compile check's, still held, or a new one) and, while
        the neighbours' sections drain, draw the timing inputs and run every warm-up of both models: untimed work,
        so it may overlap theirs, and the exclusive hold that follows holds the timed runs alone. (Drains were
        14.9% of call 53's span at 48% utilisation; the draw and warm-ups, 44 of its 184 exclusive GPU-s with the
        measured runs' flushes and syncs.) The inputs and how many runs `_time` may count as warm-up. The compiled
        warm-up's output is checksummed (`compile_rerun_checksum`): beside `compile_checksum`, of the compile check's
        run on the same draw, it says whether the compiled graph computed the same bits twice in one worker."""
        self.lock.acquire(label="timing-warm-up")
        self.lock.announce(label="timing-warm-up")
        x0 = self._draw(ns, 0)  # the same values: draws are seeded
        runs = min(1, self.s.profile.warmup)  # as many as `_time` runs otherwise: the checks' runs count
        for fn in (model, compiled) if compiled is not None else (model,):
            out = None  # the eager warm-up's output goes before the compiled one runs
            for _ in range(runs):
                out = fn(*x0)
            if fn is compiled and out is not None:
                m["compile_rerun_checksum"] = checksum(_flat(out))
            del out
        return x0, self.s.profile.warmup

    def _warm_kernels(self, ops: list[str]) -> None:
        """Run the task's pointwise operators this worker has not run yet, tiny and without the lock, so a kernel
        torch compiles at first use compiles here (pipeline.gpu.kernel_warmup), not inside a locked step."""
        if self.kernels is None:
            return
        try:
            self.kernels.before(list(ops), self.device)
        except Exception as e:  # noqa: BLE001 - an optimisation only: the task compiles what it uses
            print(f"kernel warm-up off for this worker: {one_line(e)}", file=sys.stderr)
            self.kernels = None

    def _alloc_retries(self) -> int:
        return int(torch.cuda.memory_stats(self.device).get("num_alloc_retries", 0)) if self.cuda else 0

    def _eager_rejection(self, m: dict) -> str:
        """The filter's verdict from the eager checks alone, at the config's filter thresholds, or '' when they
        keep the task."""
        # a shortcuts-only call does not measure determinism again: the stored measurement judges it
        checks = tuple(c for c in EAGER_CHECKS if c is not deterministic) if self.s.profile.shortcuts_only \
            else EAGER_CHECKS
        return decide(m, checks, self.s.filter)[1]

    def _early_reject(self, quick: float, m: dict, model: Any, x: tuple) -> None:
        """Skip the rest of a task whose quick eager run says it lies outside the window. The quick run holds the lock
        shared, and neighbours' kernels take turns with it: on the H200 it read 4.3x the timed median at q50 and up to
        49x (call 33). It is never faster than the task, so the fast side stands on it alone, early_reject_factor
        under the window. On the slow side a quick run over EARLY_REJECT_ALONE times the window's bound is checked by
        one run holding the GPU alone, which must be over that too: a too-slow task otherwise held the GPU alone for
        its timed runs (calls 33-38: 15 of 2,991 tasks measured 150-713 ms, 10% of all time held alone), while a
        quick run slowed by neighbours costs one run alone."""
        lo, hi = self.s.filter.min_eager_ms, self.s.filter.max_eager_ms
        factor = self.s.profile.early_reject_factor
        window = f"window {lo:g}-{hi:g} ms"
        if quick < lo / factor:
            m["eager_ms"] = quick
            raise TaskError("early_reject", f"quick eager run {quick:.4g} ms < {lo / factor:g} ms ({window}, "
                                            f"factor {factor:g})")
        if quick > hi * EARLY_REJECT_ALONE:
            alone = self._alone_ms(model, x)
            m["eager_alone_ms"] = alone
            if alone > hi * EARLY_REJECT_ALONE:
                m["eager_ms"] = alone
                raise TaskError("early_reject", f"eager run alone on the GPU {alone:.4g} ms > "
                                                f"{hi * EARLY_REJECT_ALONE:g} ms ({window}; quick run {quick:.4g} ms)")

    def _alone_ms(self, model: Any, x: tuple) -> float:
        """One timed eager run with the GPU held alone, from inside a shared hold, which it takes back after."""
        self.lock.acquire(exclusive=True, label="alone")
        try:
            return self._run_ms(model, x)
        finally:
            self.lock.acquire(label="eager")

    def _reject_memory(self, m: dict) -> None:
        cap = self.s.filter.max_peak_memory_gb
        if (m.get("peak_memory_bytes") or 0) > cap * 2**30:
            raise TaskError("early_reject", f"peak memory {m['peak_memory_bytes'] / 2**30:.2f} GiB > {cap:g} GiB")

    def _compile(self, model: Any, ns: dict, ref0: Any, subs: list, stride: int, m: dict) -> Any:
        """Compile (CPU work, no lock), run and check agreement on every draw (shared lock); the compiled
        module, or None when compilation failed (recorded in m)."""
        import torch._dynamo as dynamo

        self.cache.use_shared()  # a private cache of an earlier task's retry is done with
        self._configure_compile()  # a setup failure is the worker's, not this task's compile failure
        code_at, benchmarks_at = code_mark(), benchmarks_run()
        try:
            (compiled, out, compile_s), repaired = self._with_cache_repair(lambda: self._first_compiled_run(model, ns),
                                                                f"task {m.get('task_id')}")
        except Exception as e:  # noqa: BLE001 - a compile failure is a measurement
            status, fatal = _classify(e)
            if fatal or status == "oom":
                raise
            m.update(compile_ok=False, compile_error=one_line(e))
            m["graph_breaks"] = int(sum(dynamo.utils.counters["graph_break"].values()))
            return None
        m["compile_cache_repaired"] = repaired
        # which program the check ran and how many of its choices were timed: a verdict that differs between two runs
        # of the task says with these whether the program, a timed choice or the bits of one program moved
        m["compile_code"] = code_hashes_since(code_at)
        m["compile_benchmarks"] = benchmarks_run() - benchmarks_at
        m["gpu_busy_compile_s"] = self.lock.held_s - m["gpu_busy_eager_s"] + (
            time.perf_counter() - self.lock._since if self.lock.held else 0.0)
        m["compile_wall_s"] = compile_s
        # the hold goes on after the check (the caller's next step, the timing, ends it): the warm-ups of
        # profile.warm_in_drain need a shared hold, and a new one would wait out a whole phase of timed runs
        self.lock.acquire(label="compile-check")
        m["compile_checksum"] = checksum(out)
        errs = [agreement(out, ref0)]
        del out
        for k in range(1, len(subs)):
            self.lock.yield_()  # as between the eager draws: a waiting timed run goes first
            errs.append(agreement(_flat(compiled(*self._draw(ns, k)))[::stride], subs[k]))
        m["graph_breaks"] = int(sum(dynamo.utils.counters["graph_break"].values()))
        m.update(compile_ok=True, compile_error="",
                 compile_max_abs_err=max(e[0] for e in errs), compile_max_rel_err=max(e[1] for e in errs),
                 compile_agrees_1e4=all(e[2] for e in errs), compile_agrees_1e2=all(e[3] for e in errs))
        return compiled

    def _with_cache_repair(self, compile_fn: Callable[[], Any], what: str) -> tuple[Any, bool]:
        """compile_fn's result, and whether the inductor cache had to be repaired for it. A failure is believed
        only after the shared cache's broken binaries are deleted and after a private, empty cache fails too
        (pipeline/gpu/compile_cache.py): an artefact a killed compile cut short would otherwise fail the same task
        in every later run. Raises the first failure when every try fails; a poisoned CUDA context or an OOM
        is raised at once."""
        first: Exception | None = None
        for attempt in ("shared", "repaired", "private"):
            if attempt == "repaired" and not self.cache.repair_shared():
                continue  # nothing broken that a check can see
            if attempt == "private":
                self.cache.use_private()
            try:
                out = compile_fn()
            except Exception as e:  # noqa: BLE001 - judged below
                status, fatal = _classify(e)
                if fatal or status == "oom":
                    raise
                self.lock.release()
                if first is None:
                    first = e
                    self.notify("compile_retry")  # the parent gives a retried compile its own time
                continue
            if first is not None:
                purged = self.cache.purge_shared()
                print(f"{what}: compile failed with the shared inductor cache ({one_line(first)}); it compiled "
                      f"{'in a private cache' if attempt == 'private' else 'after broken binaries were deleted'}"
                      f"{f' ({len(purged)} shared binaries deleted)' if purged else ''}", file=sys.stderr)
            return out, first is not None
        assert first is not None
        raise first

    def _first_compiled_run(self, model: Any, ns: dict) -> tuple[Any, Any, float]:
        """A fresh torch.compile of `model`, its flattened output on draw 0 and the seconds inductor spent compiling
        it (compiling holds no lock)."""
        import torch._dynamo as dynamo

        dynamo.reset()
        dynamo.utils.counters.clear()
        backend_name = self.s.profile.compile_backend
        if backend_name == "inductor":
            inner = torch._TorchCompileInductorWrapper(None, None, None)
        else:
            inner = dynamo.lookup_backend(backend_name)
        backend = _LockedBackend(inner, self.lock, self._compile_hooks())
        compiled = torch.compile(model, backend=backend)
        with self.lock.hold(label="compiled-draw"):
            x0 = self._draw(ns, 0)
        out = _flat(compiled(*x0))  # compiles without the lock, runs with it
        del x0
        return compiled, out, backend.compile_s

    def _roofline(self, task: dict, m: dict) -> None:
        sec = m["eager_ms"] * 1e-3
        flops, nbytes = task.get("flops"), task.get("bytes_moved")
        if sec <= 0:
            return
        if flops:
            m["achieved_tflops"] = flops / sec / 1e12
        if nbytes:
            m["achieved_tbps"] = nbytes / sec / 1e12
        if flops or nbytes:
            tflops, tbps = self.s.peaks
            floor_s = max((flops or 0) / (tflops * 1e12), (nbytes or 0) / (tbps * 1e12))
            m["roofline_fraction"] = floor_s / sec


class WorkerConfig(NamedTuple):
    """What the first line a worker reads says (pipeline.gpu.executors.worker_config writes it)."""

    device: str
    settings: WorkerSettings
    lock_path: str | None
    threads: int
    replacement: bool  # started in place of a worker that died: the caches are warm, no compile warm-up


def read_worker_config(line: str) -> WorkerConfig:
    """The worker config from its JSON line; settings that do not fit the contract raise ConfigError."""
    cfg = json.loads(line)
    return WorkerConfig(cfg["device"], WorkerSettings.from_json(cfg["settings"]), cfg.get("lock_path"),
                        int(cfg.get("threads") or 0), bool(cfg.get("replacement")))


def serve() -> None:
    """Script side of the local executor's worker protocol (see the module docstring)."""
    faulthandler.enable()
    # the parent stops its workers itself (they run in their own session); a stray Ctrl-C must not turn the
    # task in hand into a result
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def send(msg: dict) -> None:
        proto.write(json.dumps(msg, default=str) + "\n")
        proto.flush()

    cfg = read_worker_config(sys.stdin.readline())
    settings = cfg.settings
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    h = Harness(cfg.device, settings, cfg.lock_path, notify=lambda ev: send({"event": ev}))
    # the device part of the warm-up always runs (handles); the compile part is the setting's
    warm_s = h.warm(with_compile=settings.profile.warm_worker and not cfg.replacement)
    collect_and_freeze()  # torch's import-time objects (and inductor's, when the warm-up compiled)
    send({"ready": True, "pid": os.getpid(), "gpu": h.gpu, "torch_version": h.torch_version, "warm_s": warm_s,
          "warm_compiled": h.warm_compiled})
    for line in sys.stdin:
        if not line.strip():
            continue
        result = h.profile(json.loads(line))
        fatal = result.pop("_fatal", False)
        send({"result": result, "fatal": fatal})
        if fatal:  # a poisoned CUDA context: exit without teardown; the parent starts a fresh worker
            proto.flush()
            os._exit(3)
    os._exit(0)


if __name__ == "__main__":
    serve()
