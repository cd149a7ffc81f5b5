"""The library call: `verify(task, candidate)` runs one verification in a worker subprocess (static check first,
then a timeout and a memory cap) and returns the result as a dict; `verify_batch` runs many pairs over a pool of
such workers. The verdict comes back on a private pipe with a per-job nonce; anything else the candidate writes
(stdout, a forged line on the pipe) counts for nothing or as a hack."""

from __future__ import annotations

import functools
import json
import os
import secrets
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from opsynth.errors import OpsynthError
from verify.policy import Policy, make_policy, to_job
from verify.reward import reward
from verify.static import check_candidate_source
from verify.task import load_task
from verify.timing import NEAR

TIMEOUT_S = 600.0
PRECISIONS = ("fp32", "tf32")
MEMORY_CAP_BYTES = 16 * 1024**3  # address-space cap of a CPU worker (CUDA reserves too much address space for one)


def _text(x: str | Path) -> str:
    p = Path(x) if not (isinstance(x, str) and "\n" in x) else None
    return p.read_text() if p is not None and p.is_file() else str(x)


def _clear_stale_locks(ext_dir: str | None) -> None:
    """A worker killed mid-build leaves torch's extension `lock` file: the next build of that name would wait on
    it forever."""
    if ext_dir and Path(ext_dir).is_dir():
        for lock in Path(ext_dir).glob("*/lock"):
            lock.unlink(missing_ok=True)


def _limits(cap: int) -> Any:
    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    return apply


@functools.cache
def check_device(device: str, gpus: tuple[int, ...] = ()) -> None:
    """A plain error (OpsynthError, one line) before any candidate runs when `device` is not a device of this
    machine: a bad name, `cuda` without a CUDA GPU (or a CPU build of torch), an index or a `gpus` entry past the
    GPUs there are. Once per device and process."""
    import torch

    try:
        d = torch.device(device)
    except (RuntimeError, TypeError):
        raise OpsynthError(f"--device {device!r} is not a device; use cuda, cuda:N or cpu") from None
    if d.type == "cpu":
        return
    if d.type != "cuda":
        raise OpsynthError(f"--device {device!r}: verify runs on cuda or cpu")
    if not torch.cuda.is_available():
        why = "this torch is a CPU build" if torch.version.cuda is None else "no CUDA GPU is visible"
        raise OpsynthError(f"--device {device}: {why} ({torch.__version__}); run on a GPU machine or pass --device cpu")
    n = torch.cuda.device_count()
    bad = [i for i in ([d.index] if d.index is not None else []) + list(gpus) if i >= n]
    if bad and not (gpus and os.environ.get("CUDA_VISIBLE_DEVICES")):
        raise OpsynthError(f"--device {device}: GPU {bad[0]} does not exist here ({n} visible: 0-{n - 1})")


def resolve_policy(policy: str | Policy | None = None, allow: Any = None, allow_torch: bool = False) -> Policy:
    """A Policy from the library call's words (see verify.policy.make_policy)."""
    if isinstance(policy, Policy):
        return policy
    return make_policy(policy, list(allow) if allow else None, allow_torch)


def verify(task: str | Path | dict, candidate: str | Path, device: str = "cuda", allow_torch: bool = False,
           compile: bool | None = None, seed: int = 0, draws: int = 5, rounds: int = 10, timeout_s: float = TIMEOUT_S,
           off: tuple[str, ...] = (), extensions_dir: str | None = None, timing_lock: str | None = None,
           gpu: int | None = None, near: float = NEAR, gpu_memory_cap: int | None = None,
           lock_wait_grace_s: float = 0.0, policy: str | Policy | None = None, allow: Any = None,
           precision: str = "fp32") -> dict:
    """Verify `candidate` (a file or source defining ModelNew) against `task` (a KernelBench file, DATASET_DIR:task_id,
    or a dict from `load_task`). `policy`: "strict" (default), "library" with `allow` (["aten::cumsum"] or a named
    set such as "inductor-fallbacks"), or "torch" (`allow_torch=True` is its alias). `precision`: "fp32" (default)
    or "tf32" (eager, torch.compile and the candidate with TF32 matmuls and convolutions). A bad `device`, policy or
    precision raises OpsynthError before anything runs. `off` switches checks off by name (for tests of the checks
    themselves).
    `gpu_memory_cap`: bytes the worker's CUDA allocator may hold (verify_batch passes a verification's reservation,
    so a candidate that allocates past it runs out of memory instead of starving its neighbours; None: the GPU).
    `near`: how close (relative) a speedup must lie to the reward's 5% line to get the extra timed rounds.
    `timing_lock`: a lock file shared by the workers of one device (verify_batch makes one per device); `gpu`: the
    GPU the worker sees alone (CUDA_VISIBLE_DEVICES). `lock_wait_grace_s`: with a timing lock, the seconds the worker
    spends waiting for it (a neighbour times, or holds it for its draws) do not count against `timeout_s`, up to this
    many in all: a neighbour that hangs while it holds the lock then costs this candidate no timeout (0: every second
    counts). The worker reports its waits on a pipe of their own; a candidate that fakes them gains at most
    the grace, so no verification runs longer than timeout_s + lock_wait_grace_s."""
    pol = resolve_policy(policy, allow, allow_torch)
    if precision not in PRECISIONS:
        raise OpsynthError(f"--precision {precision!r}: choose fp32 or tf32")
    check_device(device, (gpu,) if gpu is not None else ())
    t = task if isinstance(task, dict) else load_task(task)
    src = _text(candidate)
    res: dict[str, Any] = {"task_id": t["task_id"], "device": device, "policy": pol.tier, "allow": list(pol.asked),
                           "precision": precision, "library_calls": [], "correct": False, "reward": -1, "hack": None}
    why = None if "static" in off else check_candidate_source(src)
    if why:
        res["hack"] = f"hack: static check: {why}"
        return res
    nonce = secrets.token_hex(16)
    job = {"task": t["code"], "candidate": src, "device": device, "policy": to_job(pol), "precision": precision,
           "seed": seed,
           "draws": draws, "rounds": rounds, "off": list(off), "shape_variants": t.get("shape_variants") or [],
           "compile": device.startswith("cuda") if compile is None else compile, "nonce": nonce,
           "timing_lock": timing_lock, "near": near, "gpu_memory_cap": gpu_memory_cap}
    env = dict(os.environ)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        res["gpu"] = gpu
    if extensions_dir:
        env["TORCH_EXTENSIONS_DIR"] = extensions_dir
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    r, w = os.pipe()
    # the worker's lock waits, on a pipe of their own (never the verdict's): they extend its deadline up to the grace
    er, ew = os.pipe() if timing_lock and lock_wait_grace_s > 0 else (None, None)
    argv = [sys.executable, "-m", "verify.worker", str(w)] + ([str(ew)] if ew is not None else [])
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            pass_fds=(w,) if ew is None else (w, ew), env=env, cwd=root,
                            preexec_fn=None if device.startswith("cuda") else _limits(MEMORY_CAP_BYTES))
    os.close(w)
    waits = None
    if ew is not None:
        os.close(ew)
        waits = LockWaits(er)
    try:
        _, err = _communicate(proc, json.dumps(job).encode(), t0, timeout_s, waits, lock_wait_grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        _clear_stale_locks(env.get("TORCH_EXTENSIONS_DIR"))
        os.close(r)
        credit = waits.stop(lock_wait_grace_s) if waits else 0.0
        waited = f" of its own, and {credit:.0f} s waiting for the device's timing lock" if credit >= 0.5 else ""
        res.update(hack=None, error=f"timed out after {timeout_s:.0f} s{waited}", wall_s=time.monotonic() - t0,
                   lock_wait_credit_s=credit)
        return res
    if waits:
        waits.stop(lock_wait_grace_s)
    with os.fdopen(r) as f:
        lines = [ln for ln in f.read().splitlines() if ln.strip()]
    res["wall_s"] = time.monotonic() - t0
    verdicts = []
    for ln in lines:
        try:
            verdicts.append(json.loads(ln))
        except ValueError:
            verdicts.append({})
    # the worker's first line says its own setup passed, before any candidate code ran (its nonce: only the worker
    # had it then); without it, a worker that left no verdict failed in the verifier, not in the candidate
    ready = bool(verdicts) and isinstance(verdicts[0], dict) and verdicts[0] == {"nonce": nonce, "ready": True}
    if ready:
        verdicts = verdicts[1:]
    if len(verdicts) != 1 or not isinstance(verdicts[0], dict) or verdicts[0].get("nonce") != nonce:
        tail = err.decode(errors="replace")[-300:].strip()
        res["stderr_tail"] = tail
        if not verdicts and not ready:
            last = tail.splitlines()[-1] if tail else "no message"
            res["error"] = (f"the verifier's worker failed before the candidate ran (rc {proc.returncode}): {last}; "
                            "this is not the candidate's doing: report it with stderr_tail")
            return res
        res["hack"] = "hack: " + (f"verdict channel: {len(verdicts)} lines, nonce {'ok' if verdicts and verdicts[-1].get('nonce') == nonce else 'wrong'}"
                                  if verdicts else f"the worker exited (rc {proc.returncode}) without a verdict")
        return res
    v = verdicts[0]["verdict"]
    return _result(res, v, t)


class LockWaits:
    """Reads a worker's lock events (b"w": waiting for the timing lock, b"h": holding it) from `fd` on a thread, and
    says how many seconds it has waited so far."""

    def __init__(self, fd: int) -> None:
        import threading

        self.fd, self.total, self.since = fd, 0.0, None
        self._stop = threading.Event()
        self._mu = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        import select

        try:
            while not self._stop.is_set():
                if not select.select([self.fd], [], [], 0.2)[0]:
                    continue
                data = os.read(self.fd, 256)
                if not data:
                    break  # the worker is gone
                now = time.monotonic()
                with self._mu:
                    for b in data:
                        if b == ord("w") and self.since is None:
                            self.since = now
                        elif b == ord("h") and self.since is not None:
                            self.total += now - self.since
                            self.since = None
        finally:
            with self._mu:
                if self.since is not None:
                    self.total += time.monotonic() - self.since
                    self.since = None
            os.close(self.fd)

    def credit(self, grace: float) -> float:
        """Seconds waited so far (a wait in progress included), at most `grace`."""
        with self._mu:
            ongoing = time.monotonic() - self.since if self.since is not None else 0.0
            return min(grace, self.total + ongoing)

    def stop(self, grace: float) -> float:
        credit = self.credit(grace)
        self._stop.set()
        self._thread.join(timeout=2)
        return credit


def _communicate(proc: subprocess.Popen, data: bytes, t0: float, timeout_s: float, waits: LockWaits | None,
                 grace: float) -> tuple[Any, bytes]:
    """proc.communicate with a deadline of t0 + timeout_s, pushed back by the lock waits `waits` credits (at most
    `grace`); raises subprocess.TimeoutExpired past it."""
    if waits is None:
        return proc.communicate(data, timeout=timeout_s)
    first = True
    while True:
        left = t0 + timeout_s + waits.credit(grace) - time.monotonic()
        if left <= 0:
            raise subprocess.TimeoutExpired(proc.args, timeout_s)
        try:
            return proc.communicate(data if first else None, timeout=min(left, 1.0))
        except subprocess.TimeoutExpired:
            first = False


def _result(res: dict, v: dict, t: dict) -> dict:
    times = v.get("times_ms") or {}
    med = {k: x["median"] for k, x in times.items()}
    c = med.get("candidate")
    se = med["eager"] / c if c and "eager" in med else None
    sc = med["compile"] / c if c and "compile" in med else None
    correct = bool(v.get("correct")) and not v.get("hack")
    res.update(correct=correct, hack=v.get("hack"), built=v.get("built"), build_message=v.get("build_message"),
               error=v.get("error"), draws_passed=v.get("draws"), worst_diff=v.get("worst_diff"),
               failing_draw=v.get("failing_draw"), mismatch=v.get("mismatch"), precision_err=v.get("precision_err"),
               times_ms=times, speedup_eager=se, speedup_compile=sc, reward=reward(correct, se, sc),
               release_eager_ms=t.get("eager_ms"), release_compile_ms=t.get("compile_ms"),
               timing_lock_wait_s=v.get("timing_lock_wait_s"),
               check_lock_wait_s=v.get("check_lock_wait_s"), timed_region=v.get("timed_region"),
               timed_checks=v.get("timed_checks"), timed_rounds=v.get("timed_rounds"), phase_s=v.get("phase_s"),
               worker_s=v.get("worker_s"), gpu_peak_bytes=v.get("gpu_peak_bytes"), task_peak_bytes=t.get("peak_memory_bytes"),
               library_calls=v.get("library_calls") or [], extensions=v.get("extensions") or [],
               kernels=v.get("kernels"))
    if res["hack"]:
        res["hack"] = f"hack: {res['hack']}" if not res["hack"].startswith("hack:") else res["hack"]
    return res


# GPU memory one verification holds, as a multiple of the task's measured forward peak: the reference and the
# candidate with their outputs, two copies of the inputs (the candidate's and the reference's, which is also the
# in-place check's pristine copy) and the float64 reference of the precision check. Each result's gpu_peak_bytes
# (over task_peak_bytes) is what a verification held: over 76 verifications of the inductor corpus on an H100 a
# median 4.3x, 8.6x at p90 and 9.3x at most (one attention task aside, whose float64 reference takes the math path
# and holds its attention matrix). The reservation is the typical hold, so verifications share a GPU
MEMORY_FACTOR = 5
# and whatever the task's size: the timing phase's 256 MiB L2-flush buffer and the libraries' workspaces
FIXED_BYTES = 512 * 2**20
# a batch worker's CUDA allocator cap, over its reservation: above the largest hold measured (at 1.5x, 12 of the 76
# outgrew it and ran again alone, one after another), and still a bound on a candidate that allocates without end
CAP_OVER_RESERVATION = 2.5
OOM = "out of memory"


class MemoryGate:
    """Admits a verification on a GPU while the reservations of those running there fit its memory; one runs
    whatever its size when nothing else does (a task larger than the budget still gets its turn, alone)."""

    def __init__(self, budget: int | None) -> None:
        import threading

        self.budget, self.used, self.running = budget, 0, 0
        self._cv = threading.Condition()

    def take(self, nbytes: int) -> None:
        with self._cv:
            self._cv.wait_for(lambda: self.budget is None or self.running == 0 or self.used + nbytes <= self.budget)
            self.used += nbytes
            self.running += 1

    def give(self, nbytes: int) -> None:
        with self._cv:
            self.used -= nbytes
            self.running -= 1
            self._cv.notify_all()


def gpu_memory_bytes(gpu: int | None) -> int | None:
    """A GPU's total memory from nvidia-smi (no CUDA context in this process), or None where it cannot say."""
    cmd = ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", str(gpu or 0)]
    try:
        return int(float(subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.split()[0])) * 2**20
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def verify_batch(pairs: list[tuple[Any, Any]], workers: int = 2, progress: Any = None, gpus: list[int] | None = None,
                 memory_budget: int | None = None, on_result: Any = None, memory_factor: float = MEMORY_FACTOR,
                 **kw: Any) -> list[dict]:
    """Verify (task, candidate) pairs over `workers` concurrent worker subprocesses; results in input order.
    Workers build and check concurrently, but time alone: each device has a lock file (in a temporary directory of
    this batch) that a worker holds shared for its draws and exclusively for its timed rounds. `gpus`: worker slot
    k runs on GPU gpus[k % len(gpus)] (CUDA_VISIBLE_DEVICES), one lock per GPU. On a GPU, a verification starts only
    while `memory_factor` (MEMORY_FACTOR) x its task's measured peak fits beside the others' (`memory_budget` per
    GPU; default 90% of its memory); one that still runs out of memory is verified again alone after the others (`retried_alone`), so
    a neighbour's memory never costs a candidate its reward. `on_result(i, result)` hears each pair's final result as
    it lands (a retried one after its retry), so a caller can keep results of a batch that is cut short."""
    import queue
    import tempfile

    pol = resolve_policy(kw.pop("policy", None), kw.pop("allow", None), kw.pop("allow_torch", False))
    kw["policy"] = pol  # named sets resolved once, not per pair
    check_device(str(kw.get("device", "cuda")), tuple(gpus or ()))
    n = max(1, workers)
    cuda = str(kw.get("device", "cuda")).startswith("cuda")
    slots: queue.Queue[int] = queue.Queue()
    for k in range(n):
        slots.put(k)
    gates: dict[Any, MemoryGate] = {}
    for g in (gpus or [None]):
        total = memory_budget or (int(0.9 * t) if cuda and (t := gpu_memory_bytes(g)) else None)
        gates[g] = MemoryGate(total if cuda and n > 1 else None)
    out: list[dict | None] = [None] * len(pairs)
    with tempfile.TemporaryDirectory(prefix="opsynth-verify-locks-") as locks:
        def one(task: Any, cand: Any) -> dict:
            t = task if isinstance(task, dict) else load_task(task)
            k = slots.get()
            g = gpus[k % len(gpus)] if gpus else None
            gate = gates[g]
            peak = t.get("peak_memory_bytes")
            need = int(memory_factor * peak) + FIXED_BYTES if peak else (gate.budget or 0) // n
            gate.take(need)
            try:
                name = f"gpu{g}" if g is not None else str(kw.get("device", "cuda")).replace(":", "")
                # a cap above the reservation (CAP_OVER_RESERVATION x): past it a candidate fails, and is retried alone
                cap = int(CAP_OVER_RESERVATION * need) if cuda and gate.budget is not None and need > 0 else None
                return verify(t, cand, timing_lock=str(Path(locks) / f"{name}.lock"), gpu=g, gpu_memory_cap=cap,
                              **kw)
            finally:
                gate.give(need)
                slots.put(k)

        retry = lambda r: cuda and n > 1 and OOM in str(r.get("error") or "").lower()  # noqa: E731
        with ThreadPoolExecutor(max_workers=n) as pool:
            futs = {pool.submit(one, t, c): i for i, (t, c) in enumerate(pairs)}
            for done, fut in enumerate(_as_completed(futs), 1):
                i = futs[fut]
                out[i] = fut.result()
                if progress:
                    progress(done, len(pairs))
                if on_result and not retry(out[i]):
                    on_result(i, out[i])
        for i, r in enumerate(out):
            if r is not None and retry(r):
                t, c = pairs[i]
                g = gpus[0] if gpus else None
                out[i] = verify(t, c, timing_lock=str(Path(locks) / "alone.lock"), gpu=g, **kw)
                out[i]["retried_alone"] = True
                if on_result:
                    on_result(i, out[i])
    return [o for o in out if o is not None]


def _as_completed(futs: dict) -> Any:
    from concurrent.futures import as_completed

    return as_completed(futs)
