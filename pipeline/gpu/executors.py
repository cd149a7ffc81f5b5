"""Executors that map pipeline.gpu.harness over tasks: local worker processes per GPU, or Ray actors.

Local: one group of long-lived worker processes per GPU (`CUDA_VISIBLE_DEVICES` set in each worker's
environment before torch loads), each running `python -m pipeline.gpu.harness`. Workers of one GPU share
it through pipeline.gpu.gpu_share (a lock that only timed runs hold exclusively, and a memory budget), so
compilation and checks overlap timing without disturbing it. The parent enforces the per-task
wall-clock timeout (the clock stops while a worker waits for the GPU or its memory share; a compile retried
in a private cache gets the timeout once more), stops the worker's whole process group on timeout (SIGTERM,
so a compiler deletes its half-written output, then SIGKILL), and replaces any worker that dies, hangs or
reports a poisoned CUDA context; that task alone is recorded (timeout | crashed | oom | error). With profile.mps the
workers of a GPU are clients of a private MPS server (pipeline/gpu/mps.py), and a fatal GPU fault reaches all of them,
busy or idle: the GPU's idle and still-starting workers are replaced, and each task whose worker saw its context
poisoned is measured once more, alone on that GPU (no other task starts there until it is done), so a task is
recorded as crashed only when it faults by itself. A worker stopped by SIGINT, SIGTERM or SIGHUP from outside is
an interruption of the run, not a result of its task.
On an exception (Ctrl-C included) every worker is stopped and none is started.

Ray: one actor per GPU (`num_gpus=1`, never a fraction: shared GPUs ruin timings), each running a local
executor over its own GPU, so isolation and lock behave exactly as on one box.

Inline (`kind="inline"`): the harness in this process, no isolation; for debugging only.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from pipeline.errors import Interrupted, OpsynthError
from pipeline.gpu.bytecode import with_cache as with_bytecode_cache
from pipeline.gpu.fork_server import ForkedProc, ForkServer
from pipeline.gpu.mps import MpsDaemon
from pipeline.gpu.worker_settings import WorkerSettings

ROOT = Path(__file__).resolve().parents[2]  # on the workers' path: they run `python -m pipeline.gpu.harness`
HARNESS = "pipeline.gpu.harness"
# what the fork server imports before it forks a worker (profile.fork_workers): the harness, and what a first compile
# imports when the workers compile
PRELOAD = (HARNESS,)
PRELOAD_COMPILE = ("torch._dynamo", "torch._inductor.compile_fx")
STARTUP_TIMEOUT_S = 300.0  # torch import + CUDA context on a cold machine
MAX_STARTUP_FAILURES = 3  # consecutive workers that die before `ready`: the environment is broken
STOP_GRACE_S = 3.0  # after SIGTERM, before SIGKILL: gcc's driver removes its unfinished output on SIGTERM
INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# after a fatal fault under MPS its server takes no new client until every old one has exited (a worker busy
# compiling notices only at its next CUDA call): replacements that fail to start meanwhile are not counted
MPS_RECOVERY_S = 60.0


def _base(task: dict, device: str, status: str, error: str, wall_s: float) -> dict:
    return {"task_id": task.get("task_id"), "status": status, "error": error[:300], "device": device,
            "wall_s": wall_s}


class Executor:
    """Maps the harness over task dicts; see `imap_unordered`. Also a context manager."""

    def imap_unordered(self, tasks: Iterable[dict]) -> Iterator[dict]:
        """tasks: dicts with task_id, code, flops, bytes_moved (code that passed the static check: the profile
        stage checks each task as it hands it out).
        Yields one measurement dict per task (keys = pipeline.rundir.schema.MEASUREMENTS names, plus
        achieved_tflops, achieved_tbps, roofline_fraction, gpu_busy_s where measured) as each finishes,
        including failures (status timeout|crashed|oom|error|early_reject with a one-line `error`)."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Worker:
    """One harness process: its pipes, its partial output line, the task it runs and that task's clock."""

    def __init__(self, group: str, env: dict, cfg: dict, log_dir: Path, serial: int,
                 forks: ForkServer | None = None) -> None:
        self.group = group
        self.log_path = log_dir / f"worker-{group}-{serial}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - lives as long as the process
        self.proc: subprocess.Popen | ForkedProc | None = None
        if forks is not None:
            with contextlib.suppress(OSError):  # the server cannot fork one: a fresh interpreter instead
                self.proc = forks.spawn(env, HARNESS, self._log)  # in its own session, as below
        if self.proc is None:
            self.proc = subprocess.Popen([sys.executable, "-P", "-m", HARNESS], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self._log, env=env,
                                         start_new_session=True)  # own process group: kill takes compilers too
        self.buf = b""
        self.ready = False
        self.warm_compiled = False  # its ready message says it compiled in its warm-up
        self.started = time.monotonic()
        self.task: dict | None = None
        self.task_start = 0.0
        self.deadline = 0.0
        self.wait_since: float | None = None
        self.extended = False
        self.killed = False
        self._write(cfg)

    def _write(self, msg: dict) -> bool:
        try:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
            return True
        except (BrokenPipeError, OSError):
            return False

    def start(self, task: dict, timeout_s: float) -> bool:
        self.task, self.task_start = task, time.monotonic()
        self.deadline, self.wait_since, self.extended = self.task_start + timeout_s, None, False
        return self._write(task)

    def read(self) -> tuple[list[dict], bool]:
        """Messages available now, and whether the pipe reached end of file."""
        try:
            chunk = os.read(self.proc.stdout.fileno(), 1 << 20)  # type: ignore[union-attr]
        except BlockingIOError:
            return [], False
        if not chunk:
            return [], True
        self.buf += chunk
        *lines, self.buf = self.buf.split(b"\n")
        msgs = []
        for line in lines:
            with contextlib.suppress(ValueError):  # only the harness writes here; never let a bad line stop the run
                msgs.append(json.loads(line))
        return msgs, False

    def kill(self) -> None:
        """Stop the process group: SIGTERM (a compiler it runs then deletes its unfinished output, which
        inductor would otherwise load in every later run), SIGKILL after a grace period."""
        self.killed = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=STOP_GRACE_S)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # the group: compilers may outlive the worker
        self.reap()

    def end_input(self) -> None:
        """Close the worker's stdin: its serve loop ends and it exits."""
        with contextlib.suppress(Exception):
            self.proc.stdin.close()  # type: ignore[union-attr]

    def reap(self) -> int:
        self.end_input()
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            rc = self.proc.wait()
        with contextlib.suppress(Exception):
            self.proc.stdout.close()  # type: ignore[union-attr]
        self._log.close()
        return rc

    def log_tail(self) -> str:
        try:
            lines = [ln.strip() for ln in self.log_path.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        # faulthandler's "Fatal Python error: Segmentation fault" says more than the traceback lines below it
        fatal = [ln for ln in lines if ln.startswith("Fatal Python error")]
        return (fatal or lines or [""])[-1][:200]


def _death(w: _Worker, rc: int) -> tuple[str, str]:
    """(status, error) for a worker that died while running a task."""
    if rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
        if -rc == signal.SIGKILL:
            return "oom", "worker killed by SIGKILL (likely the kernel's out-of-memory killer)"
        tail = w.log_tail()
        return "crashed", f"worker died with signal {name}" + (f": {tail}" if tail else "")
    tail = w.log_tail()
    return "crashed", f"worker exited with code {rc}" + (f": {tail}" if tail else "")


def compiler_problem(device: str) -> str | None:
    """Why torch.compile cannot work here, or None: inductor builds CPU kernels with a C++ compiler ($CXX, else
    g++; clang++ on macOS) and Triton builds its GPU launcher with a C compiler ($CC, else cc, gcc or clang)."""
    if device == "cpu":
        cxx = os.environ.get("CXX") or ("clang++" if sys.platform == "darwin" else "g++")
        if shutil.which(cxx) is None:
            return (f"torch.compile on the CPU needs a C++ compiler and `{cxx}` is not on PATH; install one "
                    "(e.g. apt-get install g++), point CXX at it, or set profile.compile = false in the config")
        return None
    cc = [os.environ["CC"]] if os.environ.get("CC") else ["cc", "gcc", "clang"]
    if not any(shutil.which(c) for c in cc):
        return (f"torch.compile on the GPU needs a C compiler for Triton and none of {', '.join(cc)} is on PATH; "
                "install one (e.g. apt-get install gcc), point CC at it, or set profile.compile = false")
    return None


def visible_gpus() -> list[str]:
    """GPU ids this process may use: CUDA_VISIBLE_DEVICES if set, else every device torch counts."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip()]
    import torch  # device_count reads NVML and does not create a CUDA context

    return [str(i) for i in range(torch.cuda.device_count())]


def worker_env(settings: WorkerSettings) -> dict[str, str]:
    """The environment every worker of this process starts from (the fork server's too): each adds its GPU, its
    MPS folders and its thread count."""
    env = dict(os.environ)
    if settings.profile.bytecode_cache:
        env = with_bytecode_cache(env)
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # workers compile in parallel already
    # freed blocks are returned to segments that grow and shrink, so a worker's reserved memory stays
    # near what it allocated and the memory budget holds
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def start_fork_server(settings: WorkerSettings) -> ForkServer | None:
    """A fork server importing PRELOAD (profile.fork_workers), started now and not waited for: a caller with
    seconds of its own work to do first (the profile stage reading its tables) passes it to LocalExecutor later."""
    if not settings.profile.fork_workers:
        return None
    # one thread while it imports (a thread pool made there would be every worker's; each sets its own count); the
    # GPUs stay visible: inductor decides at import which benchmarker it uses by whether CUDA is there (with
    # CUDA_VISIBLE_DEVICES="" it took one without the arguments profile.autotune_benchmark_ms needs)
    env = {**worker_env(settings), "OMP_NUM_THREADS": "1"}
    return ForkServer(env, preload_modules(settings))


def preload_modules(settings: WorkerSettings) -> list[str]:
    """What the fork server imports before it forks a worker: the harness, and Dynamo and inductor too unless
    profile.preload_compile is off (or nothing compiles)."""
    compiles = settings.profile.compile and settings.profile.preload_compile
    return [*PRELOAD, *(PRELOAD_COMPILE if compiles else ())]


def worker_config(device: str, settings: WorkerSettings, lock_path: str | None, threads: int,
                  replacement: bool = False) -> dict[str, Any]:
    """The first line a worker reads (pipeline.gpu.harness.read_worker_config is its other side). `replacement`: it
    starts in place of a worker that died (no compile warm-up)."""
    return {"device": device, "settings": settings.to_json(), "lock_path": lock_path, "threads": threads,
            "replacement": replacement}


class LocalExecutor(Executor):
    """Worker processes on this machine: `workers` per GPU on cuda, `workers` in all on cpu."""

    def __init__(self, device: str = "cpu", workers: int = 2, gpus: list[int] | list[str] | None = None,
                 *, settings: WorkerSettings, fork_server: ForkServer | None = None) -> None:
        if device not in ("cpu", "cuda"):
            raise OpsynthError(f"device must be 'cpu' or 'cuda' (got {device!r})")
        if workers < 1:
            raise OpsynthError(f"workers must be >= 1 (got {workers})")
        self.device, self.workers_per_group = device, workers
        self.settings = dataclasses.replace(settings, workers_per_gpu=workers)
        self.timeout_s = settings.profile.timeout_s
        if settings.profile.compile and (problem := compiler_problem(device)):
            raise OpsynthError(problem)  # else every worker dies at its warm-up compile: "fail to start"
        if device == "cuda":
            groups = [str(g) for g in gpus] if gpus is not None else visible_gpus()
            if not groups:
                raise OpsynthError("device 'cuda' but no GPU is visible; pass --device cpu or check CUDA_VISIBLE_DEVICES")
        else:
            groups = ["cpu"]
        self.groups = groups
        # started first: its imports overlap the MPS daemon's start (fork_server: one started earlier, now ours)
        self.forks = fork_server or start_fork_server(settings)
        self.tmp = Path(tempfile.mkdtemp(prefix="opsynth-exec-"))
        total = workers * len(groups)
        self.threads = max(1, (os.cpu_count() or 1) // total)
        self.mps = {g: MpsDaemon(self.tmp / f"mps-{g}", gpu=g) for g in groups if device == "cuda"}
        if device == "cuda" and settings.profile.mps:
            for d in self.mps.values():
                if problem := d.start():
                    print(f"opsynth: warning: {problem}", file=sys.stderr)
                    for started in self.mps.values():
                        started.stop()  # all GPUs alike: a fault is handled the same way on each
                    break
        self.uses_mps = bool(self.mps) and all(d.running for d in self.mps.values())
        # per GPU, tasks to measure once more, each alone (MPS faults), and the worker measuring one now
        self.again: dict[str, collections.deque[dict]] = {g: collections.deque() for g in groups}
        self.solo: dict[str, _Worker | None] = dict.fromkeys(groups)
        self.retried: set[str] = set()
        self.last_fault = -MPS_RECOVERY_S  # monotonic time of the last poisoned context under MPS
        self.started = time.monotonic()
        self.ready_s: float | None = None  # seconds from start until every worker was first ready (warm)
        self.sel = selectors.DefaultSelector()
        self.workers: list[_Worker] = []
        self.startup_failures = 0
        self._serial = 0
        self.closed = False
        try:
            for g in groups:
                for _ in range(workers):
                    self._spawn(g)
        except BaseException:
            self.close()  # no worker and no daemon left behind
            raise

    def _forks(self) -> ForkServer | None:
        """The fork server once it can fork workers; None (said once, on one line) when it cannot."""
        if self.forks is not None and (problem := self.forks.wait_ready()):
            print(f"opsynth: warning: profile.fork_workers: {problem}; workers start as fresh processes",
                  file=sys.stderr)
            self.forks.close()
            self.forks = None
        return self.forks

    def _spawn(self, group: str, replacement: bool = False) -> _Worker:
        env = worker_env(self.settings)
        env["CUDA_VISIBLE_DEVICES"] = "" if group == "cpu" else group
        env["OMP_NUM_THREADS"] = str(self.threads)
        if group in self.mps:
            env.update(self.mps[group].env())
        cfg = worker_config(self.device, self.settings, str(self.tmp / f"gpu-{group}.lock"), self.threads,
                            replacement)
        self._serial += 1
        w = _Worker(group, env, cfg, self.tmp, self._serial, self._forks())
        os.set_blocking(w.proc.stdout.fileno(), False)  # type: ignore[union-attr]
        self.sel.register(w.proc.stdout, selectors.EVENT_READ, w)
        self.workers.append(w)
        return w

    def _retire(self, w: _Worker, kill: bool) -> int:
        if self.solo.get(w.group) is w:
            self.solo[w.group] = None  # its retry is over, however it ended
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(w.proc.stdout)
        rc = w.proc.returncode if w.proc.returncode is not None else 0
        if kill:
            w.kill()
            rc = w.proc.returncode
        else:
            rc = w.reap()
        self.workers.remove(w)
        if not self.closed:
            self._spawn(w.group, replacement=True)
        return rc

    def _startup_failed(self, w: _Worker, why: str) -> None:
        if self.uses_mps and time.monotonic() - self.last_fault < MPS_RECOVERY_S:
            time.sleep(0.2)  # the server recovers once the poisoned clients are gone; no hot respawn loop
            return
        self.startup_failures += 1
        tail = w.log_tail()
        if self.startup_failures >= MAX_STARTUP_FAILURES:
            self.close()
            raise OpsynthError(f"profile workers fail to start ({why}: {tail or 'no output'}); "
                               f"check that `python -m {HARNESS}` runs here (torch installed, GPU visible)")

    def wait_ready(self, timeout_s: float = STARTUP_TIMEOUT_S) -> int:
        """Block until every worker has torch and its device up (benchmarks time the steady state);
        returns how many are ready."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end and not all(w.ready for w in self.workers):
            for key, _ in self.sel.select(0.5):
                w = key.data
                if w in self.workers:
                    msgs, eof = w.read()
                    for msg in msgs:
                        self._on_message(w, msg)
                    if eof:
                        self._startup_failed(w, "exited before it was ready")
                        self._retire(w, kill=False)
        return sum(w.ready for w in self.workers)

    def imap_unordered(self, tasks: Iterable[dict]) -> Iterator[dict]:
        if self.closed:
            raise OpsynthError("this executor is closed; make a new one")
        it = iter(tasks)
        exhausted = False
        for q in self.again.values():
            q.clear()  # a retry of a call the consumer left early is not this call's task
        try:
            while True:
                for w in list(self.workers):
                    if not (w.ready and w.task is None) or self.solo[w.group] is not None:
                        continue  # busy, warming up, or its GPU measures a retry alone
                    if self.again[w.group]:
                        if any(x.task is not None for x in self.workers if x.group == w.group):
                            continue  # the retry waits for its GPU to be free, and nothing new starts there
                        task = self.again[w.group].popleft()
                        self.solo[w.group] = w
                    elif exhausted:
                        continue
                    else:
                        task = next(it, None)
                        if task is None:
                            exhausted = True
                            continue
                    if not w.start(task, self.timeout_s):
                        w.task = None
                        yield self._dead(w, task)
                if exhausted and not any(self.again.values()) and all(w.task is None for w in self.workers):
                    return
                now = time.monotonic()
                waits = [w.deadline - now for w in self.workers if w.task is not None and w.wait_since is None]
                for key, _ in self.sel.select(max(0.0, min([1.0, *waits]))):
                    w = key.data
                    if w not in self.workers:
                        continue
                    msgs, eof = w.read()
                    for msg in msgs:
                        out = self._on_message(w, msg)
                        if out is not None:
                            yield out
                    if eof:
                        if w.task is not None:
                            yield self._dead(w, w.task)
                        else:
                            if not w.ready:
                                self._startup_failed(w, "exited before it was ready")
                            self._retire(w, kill=False)
                now = time.monotonic()
                for w in list(self.workers):
                    if w.task is not None and w.wait_since is None and now > w.deadline:
                        task, w.task = w.task, None
                        self._retire(w, kill=True)
                        yield _base(task, self.device, "timeout", f"timed out after {self.timeout_s:g}s",
                                    now - w.task_start)
                    elif not w.ready and now - w.started > STARTUP_TIMEOUT_S:
                        self._startup_failed(w, f"not ready after {STARTUP_TIMEOUT_S:g}s")
                        self._retire(w, kill=True)
        except GeneratorExit:
            # a consumer that stops early leaves tasks in flight: their workers are replaced
            for w in list(self.workers):
                if w.task is not None and not self.closed:
                    w.task = None
                    self._retire(w, kill=True)
            raise
        except BaseException:
            self.close()  # interrupted or failed: stop every worker and start none
            raise

    def _on_message(self, w: _Worker, msg: dict) -> dict | None:
        if msg.get("ready"):
            w.ready = True
            w.warm_compiled = bool(msg.get("warm_compiled"))
            self.startup_failures = 0
            if self.ready_s is None and all(x.ready for x in self.workers):
                self.ready_s = time.monotonic() - self.started
        elif msg.get("event") == "lock_wait":
            w.wait_since = time.monotonic()
        elif msg.get("event") == "lock_held" and w.wait_since is not None:
            w.deadline += time.monotonic() - w.wait_since
            w.wait_since = None
        elif msg.get("event") == "compile_retry" and w.task is not None and not w.extended:
            w.deadline += self.timeout_s  # a second compile, in an empty cache: its own time
            w.extended = True
        elif "result" in msg and w.task is not None:
            task, w.task = w.task, None
            if self.solo[w.group] is w:
                self.solo[w.group] = None
            if msg.get("fatal"):  # the worker exits on its own; a fresh one takes its place
                if self.uses_mps:
                    self._poisoned(w.group, source=w)
                self._retire(w, kill=False)
                if self.uses_mps and task.get("task_id") not in self.retried:
                    # under MPS a neighbour's fault poisons this context too: the task is not judged by it
                    self.retried.add(task.get("task_id"))
                    self.again[w.group].append(task)
                    return None
            return msg["result"]
        return None

    def _poisoned(self, group: str, source: _Worker) -> None:
        """A fatal fault under MPS reached every client of this GPU: replace those not running a task, ready or
        still starting (the next task of either would fail, and a retry measured alone must not meet a context
        poisoned before it began); those running one report it poisoned in turn. A worker started after this
        fault cannot be poisoned by it: the server takes no new client until every poisoned one has exited."""
        self.last_fault = time.monotonic()
        for x in [x for x in self.workers if x.group == group and x.task is None and x is not source]:
            self._retire(x, kill=True)

    def _dead(self, w: _Worker, task: dict) -> dict:
        w.task = None
        rc = self._retire(w, kill=False)
        if rc is not None and rc < 0 and -rc in INTERRUPTS:
            self.close()
            raise Interrupted(f"a worker was stopped by {signal.Signals(-rc).name}")
        status, error = _death(w, rc)
        return _base(task, self.device, status, error, time.monotonic() - w.task_start)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        idle = [w for w in self.workers if w.task is None and w.ready]
        for w in idle:
            w.end_input()  # closing stdin ends the serve loop: every idle worker exits at once, not one by one
        for w in list(self.workers):
            with contextlib.suppress(Exception):
                self.sel.unregister(w.proc.stdout)
            if w in idle:
                w.reap()
            else:
                w.kill()  # mid-task or still warming up (a compile): stop it now
        self.workers.clear()
        self.sel.close()
        if self.forks is not None:
            self.forks.close()  # after its workers: their exit codes came through it
        for d in self.mps.values():
            d.stop()  # after its clients: the server exits with the last of them
        shutil.rmtree(self.tmp, ignore_errors=True)


class InlineExecutor(Executor):
    """The harness in this process: no isolation, no timeout. For debugging a single task."""

    def __init__(self, device: str, settings: WorkerSettings) -> None:
        from pipeline.gpu import harness

        self.h = harness.Harness(device, settings.with_profile(memory_limit_gb=0.0))

    def imap_unordered(self, tasks: Iterable[dict]) -> Iterator[dict]:
        for task in tasks:
            m = self.h.profile(task)
            m.pop("_fatal", None)
            yield m


class _RayAgent:
    """Ray actor body: a local executor over the GPU Ray gave this actor (or the CPU)."""

    def __init__(self, device: str, workers: int, settings: WorkerSettings) -> None:
        self.ex = LocalExecutor(device=device, workers=workers, settings=settings)

    def run(self, tasks: list[dict]) -> list[dict]:
        return list(self.ex.imap_unordered(tasks))

    def close(self) -> None:
        self.ex.close()


def ray_chunks(ray: Any, actors: list, spawn: Callable[[], Any], items: Iterable[Any], chunk: int,
               retries: int = 0) -> Iterator[tuple[list, list | None, BaseException | None]]:
    """`items` in chunks of `chunk` through `actor.run.remote(chunk)` over `actors`, two chunks in flight per actor so
    its workers stay fed while results travel; yields (chunk, results, None) as each returns. An actor (or its node)
    that dies is replaced in `actors` by `spawn()`; its chunk is sent again up to `retries` times, then yielded as
    (chunk, None, the error)."""
    it = iter(items)
    inflight: dict[Any, tuple[int, list, int]] = {}  # ref -> (actor index, chunk, tries)

    def submit(a: int, part: list | None = None, tries: int = 0) -> None:
        part = part if part is not None else [x for _, x in zip(range(chunk), it, strict=False)]
        if part:
            inflight[actors[a].run.remote(part)] = (a, part, tries)

    for a in range(len(actors)):
        submit(a)
        submit(a)
    while inflight:
        done, _ = ray.wait(list(inflight), num_returns=1)
        a, part, tries = inflight.pop(done[0])
        try:
            results = ray.get(done[0])
        except Exception as e:  # noqa: BLE001 - the actor or its node died: a fresh actor takes its place
            with contextlib.suppress(Exception):
                ray.kill(actors[a])
            actors[a] = spawn()
            if tries < retries:
                submit(a, part, tries + 1)
                continue
            yield part, None, e
        else:
            yield part, results, None
        submit(a)


class RayExecutor(Executor):
    """One actor per GPU of a Ray cluster (`num_gpus=1`), each running `workers` harness processes."""

    def __init__(self, device: str = "cpu", workers: int = 2, gpus: list[int] | None = None,
                 ray_address: str | None = None, *, settings: WorkerSettings) -> None:
        from pipeline.errors import require

        ray = require("ray", "ray")
        self.ray, self.device = ray, device
        self.owns_ray = not ray.is_initialized()
        if self.owns_ray:
            ray.init(address=ray_address, include_dashboard=False, log_to_driver=False)
        n_gpu = int(ray.cluster_resources().get("GPU", 0))
        n = len(gpus) if gpus else n_gpu
        if device == "cuda" and n == 0:
            raise OpsynthError("executor 'ray' with device 'cuda' but the Ray cluster has no GPU; "
                               "start Ray nodes with GPUs or pass --device cpu")
        self._agent = ray.remote(num_gpus=1 if n_gpu else 0, num_cpus=0)(_RayAgent)
        self._args = (device, workers, settings)
        self.actors = [self._agent.remote(*self._args) for _ in range(max(1, n))]
        self.chunk = workers

    def imap_unordered(self, tasks: Iterable[dict]) -> Iterator[dict]:
        spawn = lambda: self._agent.remote(*self._args)  # noqa: E731
        for chunk, results, error in ray_chunks(self.ray, self.actors, spawn, tasks, self.chunk):
            if error is not None:  # an actor (or its node) died: those tasks crashed
                results = [_base(t, self.device, "crashed", f"ray actor failed: {type(error).__name__}", 0.0)
                           for t in chunk]
            yield from results

    def close(self) -> None:
        for a in self.actors:
            with contextlib.suppress(Exception):
                self.ray.get(a.close.remote(), timeout=60)
                self.ray.kill(a)
        self.actors = []
        if self.owns_ray:
            self.ray.shutdown()


def make_executor(kind: str = "local", device: str = "cpu", workers: int = 2, gpus: list[int] | None = None,
                  ray_address: str | None = None, settings: WorkerSettings | None = None,
                  fork_server: ForkServer | None = None) -> Executor:
    """An executor for the profile stage; its workers get `settings` (WorkerSettings.from_config(cfg)), with
    workers_per_gpu set to the workers each GPU runs. fork_server: one started earlier (start_fork_server) for the
    local executor's workers."""
    if settings is None:
        raise OpsynthError("an executor needs the workers' settings: WorkerSettings.from_config(cfg)")
    if kind == "local":
        return LocalExecutor(device=device, workers=workers, gpus=gpus, settings=settings, fork_server=fork_server)
    if kind == "ray":
        return RayExecutor(device=device, workers=workers, gpus=gpus, ray_address=ray_address, settings=settings)
    if kind == "inline":
        return InlineExecutor(device=device, settings=settings)
    raise OpsynthError(f"unknown executor {kind!r}; choose local, ray or inline")
