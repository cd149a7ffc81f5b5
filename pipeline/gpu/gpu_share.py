"""How the profile workers of one GPU share it: a shared/exclusive lock (only timed runs hold the GPU alone)
and a memory budget whose reservations are each worker's hard allocator cap. Stdlib only: file locks, so a
killed worker frees what it held."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import time
from collections.abc import Callable
from typing import Any


def holder_core_split(keep: int) -> tuple[frozenset[int], frozenset[int]] | None:
    """(all cores, cores for a worker holding nothing) when `keep` of this process's cores are kept for workers
    holding the GPU (profile.holder_cores): the highest-numbered ones. None when nothing is kept, the host cannot
    spare them (no core left for the rest) or the platform sets no affinity."""
    if keep <= 0 or not hasattr(os, "sched_getaffinity"):
        return None
    every = frozenset(os.sched_getaffinity(0))
    if len(every) <= keep:
        return None
    return every, frozenset(sorted(every)[:-keep])


class GpuLock:
    """One GPU shared by its workers: timed runs hold it exclusively; other device work (setup, checks, the
    first compiled call with inductor's autotuning) holds it shared, so neighbours overlap untimed work with
    each other but never with a timed run. flock, so a killed holder frees it; a turnstile file queues
    newcomers behind a waiting exclusive holder, so timing is never starved by a stream of shared holders.
    `sync` runs before every release: no kernel of ours may still be running when a neighbour starts timing.

    With `phases`, timed runs go in phases: a worker about to time announces it (a shared flock on the intent
    file), and while any worker is announced no new shared section starts, so every worker that comes to time
    during one drain of the shared sections times right after the one before it, and the drain (which bounded
    throughput, 0.37 s per task on the H200 in calls 26-28) is paid once per phase, not once per timed task.
    `gather_s` lets the first worker of a phase wait that long (shared work goes on meanwhile) for others to
    come to time before it closes the gate. Without `phases` a shared holder may get in between two timed runs.

    `announce` closes the gate from inside a shared hold: the worker goes on with untimed device work of its own (its
    timing inputs and warm-up runs) while the neighbours' sections drain, and its exclusive hold follows without
    reopening the gate; whichever way that hold ends (a release, a failed task), the announcement ends with it.

    With `wait_out_s` (and phases), a worker about to close the gate first waits up to that long, shared work going
    on, for the shared sections labelled `wait_out_label` in flight to end, and no new such section starts meanwhile.
    Why: a compiled graph's first run is mostly host work (call 63: 25 of 35 drains over 0.3 s ended with one,
    holds of 1.2-2.9 s), and a drain behind it left the GPU idle while every other worker waited at the gate; now
    the others go on with their shared work until it ends, and the drain that follows waits for short sections
    only. The wait is bounded, so it can never deadlock; a timer that finds the gate closed already joins at once.

    With `cores` (all, free: `holder_core_split`), the holding thread runs on all cores and on `free` otherwise, so the
    cores outside `free` only ever run GPU holders."""

    POLL_S = 0.005  # how often a gathering worker looks for an announced one

    def __init__(self, path: str | None, notify: Callable[[str], None],
                 sync: Callable[[], None] = lambda: None, phases: bool = False, gather_s: float = 0.0,
                 wait_out_s: float = 0.0, wait_out_label: str = "compiled-run",
                 cores: tuple[frozenset[int], frozenset[int]] | None = None) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600) if path else None
        self.turnstile = os.open(path + ".turn", os.O_RDWR | os.O_CREAT, 0o600) if path else None
        self.intent = os.open(path + ".intent", os.O_RDWR | os.O_CREAT, 0o600) if path and phases else None
        # held shared by every announced worker beside `intent`, and probed only by `_announced` under `probe`:
        # probing `intent` itself read the momentary exclusive flock of another prober, or of a worker waiting for
        # a phase to end, as an announcement (call 75: three timers waiting out a 6.5 s first run all stopped
        # after 0.6 s, at one such collision, and the drain behind it idled the GPU)
        self.mark = os.open(path + ".mark", os.O_RDWR | os.O_CREAT, 0o600) if path and phases else None
        self.probe = os.open(path + ".probe", os.O_RDWR | os.O_CREAT, 0o600) if path and phases else None
        waits_out = bool(path and phases and wait_out_s > 0)
        # held shared by each worker inside a `wait_out_label` section; by a timer waiting those out (its own gate)
        self.sections = os.open(path + ".sections", os.O_RDWR | os.O_CREAT, 0o600) if waits_out else None
        self.section_gate = os.open(path + ".sgate", os.O_RDWR | os.O_CREAT, 0o600) if waits_out else None
        self.wait_out_s, self.wait_out_label = float(wait_out_s), wait_out_label
        self._in_section = False  # this worker holds `sections` shared
        self._gating_sections = False  # this worker holds `section_gate` shared (it waits out sections, then times)
        self.wait_out_spent = 0.0  # part of wait_exclusive_s: waiting out `wait_out_label` sections
        self.gather_s = float(gather_s)
        self.notify, self.sync = notify, sync
        self.mode: str | None = None  # None | "shared" | "exclusive"
        self.held_s = 0.0
        self.exclusive_s = 0.0
        self.wait_s = 0.0
        self._want_exclusive = False
        self._announced_here = False  # this worker holds the intent file: it announced, its timed runs are next
        self.wait_exclusive_s = 0.0  # part of wait_s: waiting to time alone (neighbours' shared sections drain)
        self.gather_s_spent = 0.0  # part of wait_exclusive_s: waiting for others to come to time (gather_s)
        self._since = 0.0
        # OPSYNTH_LOCK_TRACE=FILE: every worker appends each change of its hold there (when, who, what: `want`
        # exclusive, the gate closes for new shared holders, `unwant` when it opens without a timed run; `hold`/`free`
        # shared or exclusive), so the seconds
        # nvidia-smi reads idle can be laid beside who held the GPU then (python -m pipeline.gpu.lock_trace)
        self.trace = os.environ.get("OPSYNTH_LOCK_TRACE") or None
        self.pid = os.getpid()
        self.label = ""  # what the holder does (the harness's step: eager, compiled-run, timing...), for the trace
        self.cores = cores
        self._pin(held=False)

    def _pin(self, held: bool) -> None:
        if self.cores is not None:
            with contextlib.suppress(OSError):  # a container that forbids it: the worker runs where it may
                os.sched_setaffinity(0, self.cores[0] if held else self.cores[1])

    def _trace(self, event: str, mode: str) -> None:
        if self.trace:
            with contextlib.suppress(OSError), open(self.trace, "a") as f:
                # one short line, appended whole
                f.write(f"{time.time():.4f} {self.pid} {event} {mode} {self.label or '-'}\n")

    @property
    def held(self) -> bool:
        return self.mode is not None

    def _count_wait(self, t0: float) -> None:
        waited = time.perf_counter() - t0
        self.wait_s += waited
        if self._want_exclusive:
            self.wait_exclusive_s += waited

    def _flock(self, fd: int, op: int) -> None:
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
        except BlockingIOError:
            t0 = time.perf_counter()
            self.notify("lock_wait")
            fcntl.flock(fd, op)
            self.notify("lock_held")
            self._count_wait(t0)

    def _announced(self) -> bool:
        """Whether some worker has announced that it is about to time (holds the mark file shared). Probes take
        turns, so one never mistakes another's probe for an announcement."""
        fcntl.flock(self.probe, fcntl.LOCK_EX)  # type: ignore[arg-type]  # microseconds: no wait to count
        try:
            fcntl.flock(self.mark, fcntl.LOCK_EX | fcntl.LOCK_NB)  # type: ignore[arg-type]
        except BlockingIOError:
            return True
        else:
            fcntl.flock(self.mark, fcntl.LOCK_UN)  # type: ignore[arg-type]
            return False
        finally:
            fcntl.flock(self.probe, fcntl.LOCK_UN)  # type: ignore[arg-type]

    def _mark_announced(self) -> None:
        """Take the intent file shared (the gate for new shared holders) and the mark that `_announced` reads."""
        self._flock(self.intent, fcntl.LOCK_SH)
        fcntl.flock(self.mark, fcntl.LOCK_SH)  # type: ignore[arg-type]  # waits for a probe at most

    def _unmark_announced(self) -> None:
        fcntl.flock(self.mark, fcntl.LOCK_UN)  # type: ignore[arg-type]  # first: the gate never looks open twice
        fcntl.flock(self.intent, fcntl.LOCK_UN)  # type: ignore[arg-type]

    def _gather(self) -> None:
        """Wait up to gather_s for another worker to announce (then join its phase at once)."""
        t0 = deadline = time.perf_counter()
        deadline += self.gather_s
        if self._announced():
            return
        self.notify("lock_wait")
        while time.perf_counter() < deadline and not self._announced():
            time.sleep(self.POLL_S)
        self.notify("lock_held")
        self.gather_s_spent += time.perf_counter() - t0
        self._count_wait(t0)

    def _wait_out_sections(self) -> None:
        """Before closing the gate: keep new `wait_out_label` sections from starting and wait up to wait_out_s for
        those in flight to end (shared work goes on meanwhile). Leaves the section gate held: `_open_section_gate`
        once the main gate is closed, so none starts in between. Nothing when a phase is on already."""
        if self.sections is None or self._announced():
            return
        fcntl.flock(self.section_gate, fcntl.LOCK_SH)  # type: ignore[arg-type]
        self._gating_sections = True
        t0 = time.perf_counter()
        deadline = t0 + self.wait_out_s
        waited = False
        while True:
            try:
                fcntl.flock(self.sections, fcntl.LOCK_EX | fcntl.LOCK_NB)  # type: ignore[arg-type]
            except BlockingIOError:
                if time.perf_counter() >= deadline or self._announced():
                    break
                if not waited:
                    waited = True
                    self.notify("lock_wait")
                    self._trace("waitout", "shared")
                time.sleep(self.POLL_S)
                continue
            fcntl.flock(self.sections, fcntl.LOCK_UN)  # type: ignore[arg-type]
            break
        if waited:
            self.notify("lock_held")
            self._trace("waitedout", "shared")
            self.wait_out_spent += time.perf_counter() - t0
            self._count_wait(t0)

    def _open_section_gate(self) -> None:
        if self._gating_sections:
            fcntl.flock(self.section_gate, fcntl.LOCK_UN)  # type: ignore[arg-type]
            self._gating_sections = False

    def _enter_section(self) -> None:
        """Before a `wait_out_label` section takes the lock: wait while a timer waits sections out, then count in."""
        self._flock(self.section_gate, fcntl.LOCK_EX)  # type: ignore[arg-type]
        fcntl.flock(self.section_gate, fcntl.LOCK_UN)  # type: ignore[arg-type]
        fcntl.flock(self.sections, fcntl.LOCK_SH)  # type: ignore[arg-type]  # only ever probed exclusively
        self._in_section = True

    def _leave_section(self) -> None:
        if self._in_section:
            fcntl.flock(self.sections, fcntl.LOCK_UN)  # type: ignore[arg-type]
            self._in_section = False

    def announce(self, label: str = "") -> None:
        """From inside a shared hold, announce a timed run (gathering first, as `acquire` does) and keep the hold:
        no new shared section starts, the neighbours' sections drain while this worker does untimed device work of
        its own, and `acquire(exclusive=True)` follows. A no-op without phases or outside a shared hold."""
        if self.mode != "shared" or self.intent is None or self._announced_here:
            return
        self._want_exclusive = True  # the gathering below is part of the wait to time
        if self.gather_s > 0:
            self._gather()
        self._wait_out_sections()
        self._mark_announced()
        self._open_section_gate()
        self._announced_here = True
        self._trace("want", "exclusive")
        self.acquire(label=label)  # the same shared hold, relabelled

    def acquire(self, exclusive: bool = False, label: str = "") -> None:
        mode = "exclusive" if exclusive else "shared"
        if self.mode == mode:
            if label and label != self.label:  # the same hold goes on to another step: the trace says so
                self._trace("free", mode)
                if label != self.wait_out_label:
                    self._leave_section()
                self.label = label
                self._trace("hold", mode)
            return
        upgrade = exclusive and self._announced_here  # announced from a shared hold: the gate stays closed
        self.release(keep_announced=upgrade)
        self.label = label
        self._want_exclusive = exclusive
        if self.fd is not None and self.turnstile is not None:
            if exclusive and self.intent is not None and not upgrade:
                if self.gather_s > 0:
                    self._gather()
                self._wait_out_sections()
                self._mark_announced()  # announced: the gate below closes for new shared holders
                self._open_section_gate()
                self._trace("want", mode)
            elif not exclusive and self.sections is not None and label == self.wait_out_label:
                self._enter_section()
            while True:
                self._flock(self.turnstile, fcntl.LOCK_EX)
                if exclusive or self.intent is None or not self._announced():
                    break
                # a phase of timed runs is on: wait outside the turnstile until every announced worker has timed
                fcntl.flock(self.turnstile, fcntl.LOCK_UN)
                self._flock(self.intent, fcntl.LOCK_EX)
                fcntl.flock(self.intent, fcntl.LOCK_UN)
            try:
                self._flock(self.fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            finally:
                fcntl.flock(self.turnstile, fcntl.LOCK_UN)
        self.mode, self._since = mode, time.perf_counter()
        self._pin(held=True)
        self._trace("hold", mode)

    def release(self, keep_announced: bool = False) -> None:
        """End the hold (after a sync); an announcement made from it ends too unless `keep_announced` (the step
        up to the exclusive hold it announced)."""
        if self.mode is None:
            return
        with contextlib.suppress(Exception):  # a poisoned context fails here too; the task has its status
            self.sync()
        dt = time.perf_counter() - self._since
        self._trace("free", self.mode)
        self._leave_section()
        self.held_s += dt
        if self.mode == "exclusive":
            self.exclusive_s += dt
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            if (self.mode == "exclusive" or self._announced_here) and self.intent is not None and not keep_announced:
                self._unmark_announced()
                if self._announced_here and self.mode == "shared":
                    self._trace("unwant", "exclusive")  # announced, then gave up before timing (the task failed)
                self._announced_here = False
        self.mode = None
        self._pin(held=False)

    def yield_(self) -> None:
        """Between steps of a shared section: let a waiting exclusive holder in (the turnstile queues this
        worker behind it), so a timed run waits for one step of each neighbour, not a whole section. Not once
        this worker has announced: its own timed runs are what the others wait for."""
        if self.mode == "shared" and not self._announced_here:
            label = self.label
            self.release()
            self.acquire(label=label)

    @contextlib.contextmanager
    def hold(self, exclusive: bool = False, label: str = ""):
        self.acquire(exclusive, label)
        try:
            yield
        finally:
            self.release()


def guard_benchmarks(obj: Any, name: str, lock: GpuLock, yield_first: bool = True) -> bool:
    """Make every call of `obj.name` (inductor's benchmarker) run under the GPU lock: one made while the worker
    holds nothing (inductor's pad_mm times padded matmul operands while it compiles, and compiling holds no
    lock) takes the lock shared for the call, so it can never run beside a neighbour's timed run; with
    `yield_first`, one made inside a shared section first lets a waiting timed run in (as between the eager
    draws), so a long section of many calls (autotuning a compiled graph's new kernels config by config) no
    longer holds every neighbour's timing back to its end. A call inside an exclusive hold is unchanged. False
    when obj has no such method or it is guarded already."""
    fn = getattr(obj, name, None)
    if fn is None or getattr(fn, "_guarded_by", None) is lock:
        return False

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if lock.mode is None:
            with lock.hold(label="benchmark"):
                return fn(*args, **kwargs)
        if yield_first:
            lock.yield_()
        return fn(*args, **kwargs)

    guarded._guarded_by = lock  # type: ignore[attr-defined]
    setattr(obj, name, guarded)
    return True


class MemoryBudget:
    """GPU memory admission shared by the workers of one GPU: a task reserves its expected footprint before
    it touches the device and waits while the others' reservations leave no room, so workers never meet
    with their largest tasks at once and OOM for each other. Waiters are served in arrival order with bounded
    backfill: a later request that fits in the room left now may pass a waiting new task that has waited less than
    `backfill_s` (the room a large task waits for would otherwise sit idle while smaller ones queue behind it); a
    waiter older than that, or one growing back, is passed by nobody, so a large reservation (a task retried with
    the worker's whole cap) is never starved by small ones. backfill_s = 0 is first come, first served. A worker may
    shrink its reservation while it only compiles (CPU work) and grow it again afterwards: the growth waits in its
    original place in the queue while what it still holds counts as held. The state is a file of
    `pid bytes held|wait base since` lines, in arrival order, under flock (`base`: bytes a waiter already holds;
    `since`: when it began to wait); lines of dead workers are dropped on every read, so a crashed worker frees
    its share."""

    def __init__(self, path: str | None, total_bytes: int, notify: Callable[[str], None],
                 owner: int | None = None, backfill_s: float = 0.0) -> None:
        self.path, self.total, self.notify = path, int(total_bytes), notify
        self.backfill_s = float(backfill_s)
        self.owner = owner or os.getpid()  # a live process id: the entry dies with it
        self.fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600) if path else None
        self.reserved = 0
        self.wait_s = 0.0
        # OPSYNTH_BUDGET_TRACE=FILE: every worker appends each change of its reservation there (when, who, what,
        # what the others held, how many held and waited): where admission waits come from, lined up with nvidia-smi
        self.trace = os.environ.get("OPSYNTH_BUDGET_TRACE") or None

    def _entries(self) -> list[list]:
        out: list[list] = []
        with contextlib.suppress(FileNotFoundError), open(self.path) as f:  # type: ignore[arg-type]
            for line in f:
                parts = line.split()
                with contextlib.suppress(ValueError, IndexError):
                    out.append([int(parts[0]), int(parts[1]), parts[2], int(parts[3]) if len(parts) > 3 else 0,
                                float(parts[4]) if len(parts) > 4 else 0.0])
        live = []
        for e in out:
            try:
                os.kill(e[0], 0)
            except ProcessLookupError:
                continue
            except PermissionError:
                pass
            live.append(e)
        return live

    def _write(self, entries: list[list]) -> None:
        tmp = f"{self.path}.{self.owner}"
        with open(tmp, "w") as f:
            f.write("".join(f"{pid} {n} {state} {base} {since:.3f}\n" for pid, n, state, base, since in entries))
        os.replace(tmp, self.path)  # type: ignore[arg-type]

    def _try(self, nbytes: int, force: bool) -> bool:
        """Admit (or queue) this worker for nbytes; nbytes=0 leaves the queue."""
        fcntl.flock(self.fd, fcntl.LOCK_EX)  # type: ignore[arg-type]
        try:
            entries = self._entries()
            mine = next((e for e in entries if e[0] == self.owner), None)
            if nbytes == 0:
                self._write([e for e in entries if e[0] != self.owner])
                if self.trace:
                    self._trace(time.time(), "release", self.reserved, 0, entries, [], True)
                self.reserved = 0
                return True
            now = time.time()
            changed = mine is None or (mine[2] == "held" and mine[1] != nbytes)
            if mine is None:
                mine = [self.owner, nbytes, "wait", 0, now]
                entries.append(mine)
            elif mine[2] == "held" and nbytes > mine[1] and not force:
                mine[2], mine[3], mine[4] = "wait", mine[1], now  # grow in place: what it holds stays counted
            mine[1] = nbytes
            others = [e for e in entries if e[0] != self.owner]
            held = sum(e[1] if e[2] == "held" else e[3] for e in others)
            running = any(e[2] == "held" for e in others)
            ahead = [e for e in entries[:entries.index(mine)] if e[2] == "wait"]
            # a waiter may be passed only while it is young and new (a growth holds memory idle while it waits)
            passable = all(e[3] == 0 and now - e[4] < self.backfill_s for e in ahead)
            # with nobody else running, the first in the queue goes: otherwise waiters holding their compile-time
            # share could wait for each other forever
            ok = force or mine[2] == "held" or (not ahead and not running) or (
                passable and held + nbytes <= self.total)
            if ok:
                mine[2], mine[3] = "held", 0
                self.reserved = nbytes
            self._write(entries)
            if self.trace and (changed or ok):
                self._trace(now, "admit" if ok else "wait", nbytes, held, entries, ahead, passable)
            return ok
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)  # type: ignore[arg-type]

    def _trace(self, now: float, event: str, nbytes: int, held: int, entries: list[list], ahead: list[list],
               passable: bool) -> None:
        held_all = sum(e[1] if e[2] == "held" else e[3] for e in entries)
        waiting = sum(e[2] == "wait" for e in entries)
        with contextlib.suppress(OSError), open(self.trace, "a") as f:  # type: ignore[arg-type]
            f.write(f"{now:.3f} {self.owner} {event} {nbytes} {held} {held_all} {self.total} "
                    f"{sum(e[2] == 'held' for e in entries)} {waiting} {len(ahead)} {int(passable)}\n")

    def reserve(self, nbytes: int, wait: bool = True) -> None:
        """Hold nbytes (replacing this worker's reservation); a shrink never waits, a growth waits in this
        worker's place in the queue. wait=False records it without waiting: used to change a reservation
        mid-task while holding the GPU lock, where waiting could deadlock two workers."""
        if self.fd is None or nbytes == self.reserved:
            return
        if self._try(nbytes, force=not wait):
            return
        t0 = time.perf_counter()
        self.notify("lock_wait")
        while not self._try(nbytes, force=False):
            time.sleep(0.02)
        self.notify("lock_held")
        self.wait_s += time.perf_counter() - t0

    def release(self) -> None:
        if self.fd is not None and self.reserved:
            self._try(0, force=True)
