"""One verification in a worker subprocess: `python -m verify.worker FD` reads the job (JSON) on stdin and writes
one verdict line (JSON, with the job's nonce) to the private pipe FD. stdout is sent to stderr and never read, so a
printed result counts for nothing. Per draw the candidate runs first, then the reference on its own copy of the
inputs: while the candidate runs, the expected output of that draw does not exist yet. With a timing lock in the
job (verify_batch), the draws hold it shared and the timed rounds (verify/timing.py) exclusively."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

from verify.guard import library_calls
from verify.policy import from_job
from verify.timing import Hack, time_kinds
from verify.timing import _perf_counter as _perf_counter  # bound before any candidate code exists
from verify.timing import tensors as _tensors


def _load(code: str, name: str) -> dict:
    import linecache

    # the source where inspect.getsource finds it: @triton.jit reads its kernel's source back (as it does from a file)
    linecache.cache[f"<{name}>"] = (len(code), None, code.splitlines(True), f"<{name}>")
    ns: dict[str, Any] = {"__name__": name}
    exec(compile(code, f"<{name}>", "exec"), ns)  # noqa: S102 - task and candidate run only in this worker
    return ns


def _storage_span(t: Any) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def _overlaps(outs: list, others: list) -> bool:
    spans = [_storage_span(o) for o in others if o.numel()]
    return any(a < d and c < b for t in outs if t.numel() for (a, b) in [_storage_span(t)] for (c, d) in spans)


def set_precision(precision: str) -> None:
    """The float32 matmul and convolution mode of the whole job (reference, torch.compile and candidate alike), set
    before any of their code runs: fp32 (TF32 off for cuBLAS and cuDNN) or tf32 (both on)."""
    import torch

    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")


def _flags() -> dict:
    import torch

    return {"matmul_tf32": torch.backends.cuda.matmul.allow_tf32, "cudnn_tf32": torch.backends.cudnn.allow_tf32,
            "fp32_precision": torch.get_float32_matmul_precision(),
            "reduced_fp16": torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
            "reduced_bf16": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction}


_GUARDS: list = []  # every guard of this job: a refused call counts even when the candidate's error hides it


def run_job(job: dict, ready: Any = None, notify: Any = None) -> dict:
    """Load the task and the candidate (the build), then `_checked` under the device's timing lock. `ready()` is
    called once the verifier's own setup is done, just before the candidate's code first runs; `notify(event)` hears
    the lock's "lock_wait" and "lock_held" events (verify() credits the waits against its deadline)."""
    import torch

    off = set(job.get("off", []))
    dev = torch.device(job["device"])
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda *a: None)
    # bound before the candidate loads: a candidate cannot patch the verifier's own syncs away
    stream_sync = (lambda s=torch.cuda.Stream.synchronize: s(torch.cuda.current_stream())) if cuda else (lambda: None)
    if cuda and job.get("gpu_memory_cap"):  # before any candidate code: its allocations count against the cap
        index = dev.index if dev.index is not None else torch.cuda.current_device()  # "cuda" names no index
        total = torch.cuda.get_device_properties(index).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, job["gpu_memory_cap"] / total), index)
    identities = {"torch.cuda.synchronize": torch.cuda.synchronize, "time.perf_counter": time.perf_counter,
                  "time.time": time.time, "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
                  "torch.cuda.Event.record": torch.cuda.Event.record}
    out: dict[str, Any] = {"built": False, "build_message": None, "correct": False, "hack": None, "draws": 0,
                           "worst_diff": None, "failing_draw": None, "times_ms": {}}
    from verify import layers

    set_precision(job.get("precision", "fp32"))
    objects0 = layers.loaded_objects()  # the process's own libraries: whatever loads after them is the candidate's
    try:
        ref_ns = _load(job["task"], "reference")
    except Exception as e:  # noqa: BLE001 - the task's own error, before any candidate code: no hack, no build
        out["error"] = f"the task failed to load: {type(e).__name__}: {str(e)[:400]}"
        return out
    flags0 = _flags()
    compiled_calls: list[str] = []
    real_compile = torch.compile

    def tripwire(*a: Any, **k: Any) -> Any:
        compiled_calls.append("torch.compile")
        return real_compile(*a, **k)

    if "compile_tripwire" not in off:
        torch.compile = tripwire
    t0 = _perf_counter()
    if ready is not None:
        ready()
    try:
        cand_ns = _load(job["candidate"], "candidate")
        out["built"] = True
        out["phase_s"] = {"load": _perf_counter() - t0}
    except Exception as e:  # noqa: BLE001 - a build error is the candidate's, reported with its message
        out["build_message"] = f"{type(e).__name__}: {e}"[-4000:]
        return out
    if "ModelNew" not in cand_ns:
        out["build_message"] = "the candidate defines no ModelNew"
        return out
    policy = from_job(job)
    guard_on = policy.tier != "torch" and "guard" not in off
    # what each extension the candidate built imports from libtorch, before any of its forwards runs
    scan = layers.ExtensionScan(objects0, policy, on="extension_symbols" not in off and policy.tier != "torch")
    why = scan.check()
    if why:
        out["hack"] = why
        out["extensions"] = scan.report()
        return out
    lock = _timing_lock(job, sync, notify)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    try:
        return _checked(job, out, lock, dev, sync, stream_sync, ref_ns, cand_ns, guard_on, identities, flags0,
                        compiled_calls, policy, scan)
    finally:
        out["library_calls"] = list(dict.fromkeys(library_calls(_GUARDS) + scan.library))
        out["extensions"] = scan.report()
        lock.release()
        if cuda:  # what the verification held at most: the base of verify_batch's memory reservation per task
            out["gpu_peak_bytes"] = torch.cuda.max_memory_allocated()
        out.update(timing_lock_wait_s=lock.wait_exclusive_s, check_lock_wait_s=lock.wait_s - lock.wait_exclusive_s)


def _timing_lock(job: dict, sync: Any, notify: Any = None) -> Any:
    """The batch's lock of this device (a no-op lock without one, or with `timing_lock` off): the draws hold it
    shared, the timed rounds exclusively, so no neighbour's verification runs while this worker times."""
    from pipeline.gpu.gpu_share import GpuLock

    path = job.get("timing_lock") if "timing_lock" not in job.get("off", []) else None
    return GpuLock(path, notify=notify or (lambda _: None), sync=sync)


def _lock_events(fd: int | None) -> Any:
    """notify for the lock: one byte per event on the parent's events pipe (b"w" waiting, b"h" holding)."""
    if fd is None:
        return None

    def notify(event: str) -> None:
        try:
            os.write(fd, b"w" if event == "lock_wait" else b"h")
        except OSError:
            pass
    return notify


def _reference64(r64: Any, ref: Any, xs: list, trs: list) -> list | None:
    """The reference's outputs in float64 (its weights copied from `ref`), or None when its forward cannot run in
    float64 (a float32 tensor it makes itself meets a float64 weight) or gives other shapes."""
    import torch

    r64 = r64.double().eval()
    r64.load_state_dict(ref.state_dict())
    try:
        o64 = _tensors(r64(*[x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                             for x in xs]))
    except RuntimeError:
        return None
    if len(o64) != len(trs) or any(a.shape != b.shape for a, b in zip(o64, trs, strict=True)):
        return None
    return o64


def _checked(job: dict, out: dict, lock: Any, dev: Any, sync: Any, stream_sync: Any, ref_ns: dict, cand_ns: dict,  # noqa: C901, PLR0913
             guard_on: bool, identities: dict, flags0: dict, compiled_calls: list, policy: Any, scan: Any) -> dict:
    """The draws (correctness and the hack checks), then the timing phase; fills and returns `out`."""
    import torch

    from verify import layers
    from verify.guard import ComputeGuard, compute_calls

    off = set(job.get("off", []))
    atol = rtol = job.get("tol", 1e-2)
    variants = [{}] * job.get("draws", 5) + [{"__perturb__": True}] + list(job.get("shape_variants", []))
    defaults = {k: ref_ns[k] for v in variants for k in v if k in ref_ns}
    worst = 0.0
    keep = None  # the last plain draw's models and input seed, for timing
    t_checks = _perf_counter()
    try:
        for i, variant in enumerate(variants):
            if lock.held:
                lock.yield_()  # between draws a waiting timer goes first
            else:
                lock.acquire(label="draws")
            for k in defaults:
                ref_ns[k] = variant.get(k, defaults[k])
            seed = job["seed"] * 1000 + i
            torch.manual_seed(seed)
            init = ref_ns["get_init_inputs"]()
            with _on(dev):
                ref = ref_ns["Model"](*init).to(dev).eval()
            if variant.get("__perturb__"):
                with torch.no_grad():
                    for p in ref.parameters():
                        p.add_(torch.randn_like(p) * 0.1 * (p.abs().mean() + 1e-3))
            with _on(dev):
                cand = cand_ns["ModelNew"](*init).to(dev).eval()
            try:
                cand.load_state_dict(ref.state_dict())
            except Exception as e:  # noqa: BLE001 - a candidate whose weights do not match cannot be checked
                out["failing_draw"], out["build_message"] = i, f"load_state_dict: {str(e)[:300]}"
                return out
            torch.manual_seed(seed + 500)
            with _on(dev):
                xs = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in ref_ns["get_inputs"]()]
            xc = [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]
            guard = ComputeGuard(policy)
            _GUARDS.append(guard)
            threads0 = threading.active_count()  # threads the candidate's import and __init__ started are its own
            sync()
            with torch.no_grad():
                if guard_on:
                    with guard:
                        oc = cand(*xc)
                else:
                    oc = cand(*xc)
                # the output as the caller's stream sees it when forward returns: work left on another stream
                # (or a thread) lands only later, so it differs from what the device holds after a full sync
                early = None
                if "late_writes" not in off:
                    stream_sync()
                    early = [t.clone() for t in _tensors(oc)]
                sync()
                if compute_calls(guard):
                    raise Hack(f"PyTorch compute in forward: {', '.join(compute_calls(guard)[:5])}")
                if compiled_calls:
                    raise Hack("torch.compile called by the candidate")
                if _flags() != flags0 and "precision_flags" not in off:
                    raise Hack(f"precision flags changed: {_flags()} (were {flags0})")
                touts = _tensors(oc)
                tins = [x for x in xc if isinstance(x, torch.Tensor)]
                if "overlap" not in off and _overlaps(touts, tins + list(cand.parameters())):
                    raise Hack("output shares storage with an input or a weight")
                # xs, the reference's copy, is still as drawn: the reference runs after the candidate
                if "inplace" not in off and any(isinstance(a, torch.Tensor) and not torch.equal(a, b)
                                                for a, b in zip(xc, xs, strict=True)):
                    raise Hack("the candidate changed its inputs in place")
                if early is not None:
                    time.sleep(0.05)
                    sync()
                    if threading.active_count() > threads0:
                        raise Hack("the candidate left threads running")
                    if any(not torch.equal(a, b) for a, b in zip(early, touts, strict=True)):
                        raise Hack("the output changed after forward returned (late writes: another stream or "
                                   "a thread)")
                    early = None  # one output's copy less beside the reference's and the float64 one
                if i == 0 and "repeat" not in off:
                    with guard if guard_on else _null():
                        again = cand(*xc)
                    sync()
                    if compute_calls(guard):
                        raise Hack(f"PyTorch compute in forward: {', '.join(compute_calls(guard)[:5])}")
                    if _overlaps(_tensors(again), touts):
                        raise Hack("a second call returned the first call's output storage (cached result)")
                    del again
                if i == 0 and dev.type == "cuda" and "kernel_names" not in off and policy.tier != "torch":
                    # the kernels one forward launches, by name: libtorch's own are PyTorch compute whatever route
                    # launched them (a C++ call past the dispatch mode included)
                    with guard if guard_on else _null():
                        kernels = layers.profile_kernels(lambda c=cand, a=xc: c(*a), sync)
                    out["kernels"] = sorted({k for k, _ in kernels})[:50]
                    refused = layers.judge_kernels(kernels, policy)
                    if refused:
                        raise Hack(f"PyTorch kernels launched in forward: {', '.join(refused[:3])}")
                why = scan.check()  # an extension built during forward
                if why:
                    raise Hack(why)
                orf = ref(*xs)
                trs = _tensors(orf)
                if len(trs) != len(touts) or any(a.shape != b.shape for a, b in zip(trs, touts, strict=False)):
                    out["failing_draw"] = i
                    out["worst_diff"] = float("inf")
                    out["mismatch"] = f"output shapes {[tuple(t.shape) for t in touts]} vs {[tuple(t.shape) for t in trs]}"
                    return out
                for a, b in zip(touts, trs, strict=True):
                    d = (a.double() - b.double()).abs()
                    worst = max(worst, float(d.max()) if d.numel() else 0.0)
                    if a.dtype != b.dtype or not torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol):
                        out.update(failing_draw=i, worst_diff=float(d.max()) if d.numel() else 0.0,
                                   mismatch="dtype" if a.dtype != b.dtype else "values")
                        return out
                if i == 0 and "precision" not in off and trs and trs[0].is_floating_point():
                    with _on(dev):
                        r64 = ref_ns["Model"](*init).to(dev)
                    o64 = _reference64(r64, ref, xs, trs)
                    del r64
                    if o64 is None:  # the task itself cannot run in float64: no truth to hold the candidate to
                        out["precision_err"] = None
                    else:
                        e_ref = max(float((a.double() - b).abs().max()) for a, b in zip(trs, o64, strict=True))
                        e_c = max(float((a.double() - b).abs().max()) for a, b in zip(touts, o64, strict=True))
                        scale = max(float(b.abs().max()) for b in o64) or 1.0
                        out["precision_err"] = {"candidate": e_c, "reference": e_ref}
                        if e_c > 16 * e_ref + 1e-6 * scale:
                            raise Hack(f"lower precision than the reference: max error vs float64 {e_c:.3g}, "
                                       f"reference {e_ref:.3g}")
                    del o64
                out["draws"] = i + 1
                keep = (ref, cand, seed) if not variant else keep
                # no draw's inputs live into the next: one draw's copies at a time on the device
                del orf, trs, oc, touts, xs, xc
        out["worst_diff"] = worst
        patched = [k for k, v in identities.items() if _resolve(k) is not v]
        if patched and "identities" not in off:
            raise Hack(f"patched {', '.join(patched)}")
        ref, cand, seed = keep
        for k in defaults:  # the task's own shapes again, after the shape variants
            ref_ns[k] = defaults[k]
        torch.manual_seed(seed + 500)  # the kept draw's inputs, drawn again rather than held through the others
        with _on(dev):
            xs = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in ref_ns["get_inputs"]()]
        xc = [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]
        t_draws = _perf_counter()
        out["phase_s"]["draws"] = t_draws - t_checks
        timed = time_kinds(job, dev, ref, cand, xs, xc, guard_on, lock, _GUARDS, policy)
        warm = timed.pop("warmup_s")
        out["phase_s"].update(warmup=warm, timing=_perf_counter() - t_draws - warm)
        out.update(timed)
        patched = [k for k, v in identities.items() if _resolve(k) is not v]
        if patched and "identities" not in off:
            raise Hack(f"patched {', '.join(patched)}")
        why = scan.check()
        if why:
            raise Hack(why)
        out["correct"] = True
    except Hack as h:
        out["hack"] = str(h)
    except Exception as e:  # noqa: BLE001 - a crashing candidate is incorrect, with its error
        refused = [c for g in _GUARDS for c in compute_calls(g)]
        if refused:
            out["hack"] = f"PyTorch compute in forward: {', '.join(dict.fromkeys(refused))}"
        out["error"] = f"{type(e).__name__}: {str(e)[:500]}"
    return out


def _null():
    import contextlib

    return contextlib.nullcontext()


def _on(dev: Any) -> Any:
    """Where models and inputs are made: on the GPU itself (as the profile stage makes them), since a CPU draw of a
    release task's gigabytes and its copy over take most of a verification; on the CPU, as the task code says. Only
    construction and drawing run under it, never a forward (the guard watches those)."""
    return dev if dev.type == "cuda" else _null()


def _resolve(name: str) -> Any:
    import torch

    obj: Any = {"torch": torch, "time": time}[name.split(".")[0]]
    for part in name.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def main() -> None:
    fd = int(sys.argv[1])
    events = int(sys.argv[2]) if len(sys.argv) > 2 else None  # verify()'s lock_wait_grace_s: the lock's waits
    job = json.loads(sys.stdin.read())
    nonce = job.pop("nonce")
    os.dup2(2, 1)  # the candidate's prints go to stderr; the verdict has its own pipe
    writer = os.fdopen(fd, "w")
    t0 = _perf_counter()

    def ready() -> None:  # the verifier's setup passed: a worker that dies from here on died in candidate code
        writer.write(json.dumps({"nonce": nonce, "ready": True}) + "\n")
        writer.flush()

    verdict = run_job(job, ready, _lock_events(events))
    verdict["worker_s"] = _perf_counter() - t0
    writer.write(json.dumps({"nonce": nonce, "verdict": verdict}, default=str) + "\n")
    writer.flush()
    os._exit(0)  # no candidate atexit hook or thread runs after the verdict


if __name__ == "__main__":
    main()
