"""How the workers of one GPU share it (pipeline.gpu.gpu_share): the shared/exclusive lock and the memory budget."""

import os
import subprocess
import sys
import threading
import time

import pytest

from pipeline.gpu.gpu_share import GpuLock, MemoryBudget, guard_benchmarks, holder_core_split


def _in_thread(fn) -> tuple[threading.Thread, threading.Event]:
    done = threading.Event()

    def run():
        fn()
        done.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, done


def test_shared_holders_overlap_and_exclusive_waits_for_them(tmp_path):
    path = str(tmp_path / "gpu.lock")
    events: list[str] = []
    a, b = GpuLock(path, events.append), GpuLock(path, events.append)
    a.acquire()
    b.acquire()  # a second shared holder gets in at once
    assert a.mode == b.mode == "shared" and events == []
    c = GpuLock(path, events.append)
    _, got = _in_thread(lambda: c.acquire(exclusive=True))
    assert not got.wait(0.3)  # a timed run waits for untimed work to finish
    a.release()
    assert not got.wait(0.2)
    b.release()
    assert got.wait(5) and c.mode == "exclusive"
    assert events[:1] == ["lock_wait"] and "lock_held" in events
    c.release()
    assert c.exclusive_s > 0
    assert c.held_s == c.exclusive_s
    # the wait to time alone is told apart from waits for shared sections
    assert c.wait_exclusive_s >= 0.4 and c.wait_exclusive_s == c.wait_s
    a.acquire()
    assert a.wait_s == 0 and a.wait_exclusive_s == 0
    c.acquire()  # shared beside a: no wait
    a.release()
    d = GpuLock(path, events.append)
    c.acquire(exclusive=False)
    _, got = _in_thread(lambda: d.acquire(exclusive=True))
    assert not got.wait(0.2)
    c.release()
    assert got.wait(5)
    before, before_excl = c.wait_s, c.wait_exclusive_s
    _, got = _in_thread(c.acquire)  # shared waits behind d's exclusive: counted as a wait, not an exclusive one
    assert not got.wait(0.2)
    d.release()
    assert got.wait(5) and c.wait_s - before >= 0.2 and c.wait_exclusive_s == before_excl


def test_waiting_exclusive_holder_is_not_starved_by_new_shared_holders(tmp_path):
    path = str(tmp_path / "gpu.lock")
    reader, writer, late = (GpuLock(path, lambda _: None) for _ in range(3))
    reader.acquire()
    order: list[str] = []
    _, w_got = _in_thread(lambda: (writer.acquire(exclusive=True), order.append("writer")))
    time.sleep(0.2)  # the writer now waits in the turnstile
    _, r_got = _in_thread(lambda: (late.acquire(), order.append("late reader")))
    assert not r_got.wait(0.3)  # the newcomer queues behind the waiting writer
    reader.release()
    assert w_got.wait(5)
    assert not r_got.wait(0.2)
    writer.release()
    assert r_got.wait(5)
    assert order == ["writer", "late reader"]
    late.release()


def test_switching_modes_releases_first_and_syncs(tmp_path):
    syncs: list[int] = []
    lock = GpuLock(str(tmp_path / "gpu.lock"), lambda _: None, sync=lambda: syncs.append(1))
    with lock.hold():
        with lock.hold(exclusive=True):
            assert lock.mode == "exclusive"
        assert lock.mode is None
    assert len(syncs) == 2  # once per release: the shared hold, then the exclusive one


def test_memory_budget_admits_by_room_and_frees_on_release(tmp_path, other_pid):
    path = str(tmp_path / "gpu.mem")
    events: list[str] = []
    a, b = MemoryBudget(path, 10, events.append, owner=other_pid), MemoryBudget(path, 10, events.append)
    a.reserve(6)
    _, got = _in_thread(lambda: b.reserve(6))
    assert not got.wait(0.3)  # 6 + 6 > 10
    a.release()
    assert got.wait(5) and b.reserved == 6
    assert events == ["lock_wait", "lock_held"]


def test_memory_budget_trace_logs_each_reservation_change_not_each_poll(tmp_path, other_pid, monkeypatch):
    trace = tmp_path / "trace.txt"
    monkeypatch.setenv("OPSYNTH_BUDGET_TRACE", str(trace))
    path = str(tmp_path / "gpu.mem")
    a, b = MemoryBudget(path, 10, lambda _: None, owner=other_pid), MemoryBudget(path, 10, lambda _: None)
    a.reserve(6)
    _, got = _in_thread(lambda: b.reserve(6))
    assert not got.wait(0.3)  # polled every 20 ms meanwhile: one "wait" line, not fifteen
    a.release()
    assert got.wait(5)
    rows = [line.split() for line in trace.read_text().splitlines()]
    # when, who, event, bytes, held by the others, held in all, budget, holders, waiters, ahead, passable
    assert [(int(r[1]), r[2], int(r[3])) for r in rows] == [
        (other_pid, "admit", 6), (b.owner, "wait", 6), (other_pid, "release", 6), (b.owner, "admit", 6)]
    assert [int(r[4]) for r in rows] == [0, 6, 0, 0] and [int(r[8]) for r in rows] == [0, 1, 1, 0]


def test_memory_budget_never_blocks_a_lone_task_or_a_raise_without_wait(tmp_path, other_pid):
    path = str(tmp_path / "gpu.mem")
    a, b = MemoryBudget(path, 10, lambda _: None, owner=other_pid), MemoryBudget(path, 10, lambda _: None)
    a.reserve(50)  # larger than the budget, but nothing else holds memory: it runs alone
    assert a.reserved == 50
    b.reserve(4, wait=False)  # recorded without waiting (mid-task raise)
    assert b.reserved == 4


def test_memory_budget_drops_reservations_of_dead_workers(tmp_path):
    path = str(tmp_path / "gpu.mem")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    with open(path, "w") as f:
        f.write(f"{int(dead.stdout)} 9\n")
    b = MemoryBudget(path, 10, lambda _: None)
    _, got = _in_thread(lambda: b.reserve(6))
    assert got.wait(5)  # the dead worker's 9 no longer counts
    holders = [line.split()[0] for line in open(path).read().splitlines() if line.strip()]
    assert str(int(dead.stdout)) not in holders and str(os.getpid()) in holders


def test_memory_budget_serves_waiters_first_come_first_served(tmp_path, other_pid):
    """A large waiter is not overtaken by a later small request that would fit: no starvation."""
    path = str(tmp_path / "gpu.mem")
    third = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        holder = MemoryBudget(path, 10, lambda _: None, owner=other_pid)
        big = MemoryBudget(path, 10, lambda _: None, owner=third.pid)
        small = MemoryBudget(path, 10, lambda _: None)
        holder.reserve(6)
        _, big_in = _in_thread(lambda: big.reserve(10))
        time.sleep(0.2)  # big is queued now
        _, small_in = _in_thread(lambda: small.reserve(2))
        assert not small_in.wait(0.3)  # 6 + 2 fits, but big came first
        holder.release()
        assert big_in.wait(5) and not small_in.wait(0.2)
        big.release()
        assert small_in.wait(5)
    finally:
        third.kill()
        third.wait()


def test_memory_budget_backfills_young_waiters_only(tmp_path, other_pid):
    """With backfill, a later small request that fits passes a large waiter that has waited less than backfill_s;
    once the large one has waited longer, nobody passes it; a task growing back after compiling is never passed."""
    path = str(tmp_path / "gpu.mem")
    third = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        holder = MemoryBudget(path, 10, lambda _: None, owner=other_pid, backfill_s=0.6)
        big = MemoryBudget(path, 10, lambda _: None, owner=third.pid, backfill_s=0.6)
        small = MemoryBudget(path, 10, lambda _: None, backfill_s=0.6)
        holder.reserve(6)
        _, big_in = _in_thread(lambda: big.reserve(10))
        time.sleep(0.1)  # big is queued now, and young
        small.reserve(2)  # 6 + 2 fits: passes at once
        assert small.reserved == 2 and not big_in.wait(0.1)
        small.release()
        time.sleep(0.7)  # big has now waited longer than backfill_s
        _, small_in = _in_thread(lambda: small.reserve(2))
        assert not small_in.wait(0.3)  # fits, but big is too old to pass
        holder.release()
        assert big_in.wait(5) and not small_in.wait(0.2)
        big.release()
        assert small_in.wait(5)
        small.release()
        # a growth is never passed, however young
        small.reserve(6)
        small.reserve(3)  # shrink while compiling
        holder.reserve(5)
        _, grown = _in_thread(lambda: small.reserve(6))
        time.sleep(0.1)
        _, late_in = _in_thread(lambda: big.reserve(1))
        assert not grown.wait(0.2) and not late_in.wait(0.2)  # 3 + 5 + 1 fits, but the growth is ahead
        holder.release()
        assert grown.wait(5) and late_in.wait(5)
    finally:
        third.kill()
        third.wait()


def test_yield_lets_a_waiting_exclusive_holder_in_between_steps(tmp_path):
    path = str(tmp_path / "gpu.lock")
    reader, writer = GpuLock(path, lambda _: None), GpuLock(path, lambda _: None)
    reader.acquire()
    order: list[str] = []
    _, w_got = _in_thread(lambda: (writer.acquire(exclusive=True), order.append("writer"), time.sleep(0.2),
                                   writer.release()))
    time.sleep(0.2)
    reader.yield_()  # returns only after the writer has had its turn
    order.append("reader again")
    assert w_got.wait(5) and order == ["writer", "reader again"] and reader.mode == "shared"
    reader.release()


def test_memory_budget_growth_after_a_shrink_waits_in_place_and_counts_what_it_holds(tmp_path, other_pid):
    """A task that shrank its share while compiling queues to grow back: the 3 it still holds count against
    newcomers, and a newcomer that would fit beside the running task does not overtake the growth."""
    path = str(tmp_path / "gpu.mem")
    third = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        grower = MemoryBudget(path, 10, lambda _: None)
        running = MemoryBudget(path, 10, lambda _: None, owner=other_pid)
        late = MemoryBudget(path, 10, lambda _: None, owner=third.pid)
        grower.reserve(6)
        grower.reserve(3)  # shrink: never waits
        assert grower.reserved == 3
        running.reserve(6)  # 3 + 6 <= 10
        _, grown = _in_thread(lambda: grower.reserve(6))
        assert not grown.wait(0.3)  # 6 + 6 > 10: waits, still holding 3
        assert grower.reserved == 3
        _, late_in = _in_thread(lambda: late.reserve(1))
        assert not late_in.wait(0.3)  # 6 + 3 + 1 fits, but the growth is ahead in the queue
        running.release()
        assert grown.wait(5) and grower.reserved == 6
        assert late_in.wait(5)  # 6 + 1 fits once the growth is in
    finally:
        third.kill()
        third.wait()


def test_memory_budget_growers_never_wait_for_each_other_forever(tmp_path, other_pid):
    """Two tasks that both shrank and both want to grow past the budget: with nobody running, the first goes."""
    path = str(tmp_path / "gpu.mem")
    a, b = MemoryBudget(path, 10, lambda _: None), MemoryBudget(path, 10, lambda _: None, owner=other_pid)
    a.reserve(4)
    b.reserve(4)
    _, b_grown = _in_thread(lambda: b.reserve(9))
    assert not b_grown.wait(0.3)  # a is running with 4: 4 + 9 > 10
    _, a_grown = _in_thread(lambda: a.reserve(9))
    assert b_grown.wait(5) or a_grown.wait(5)  # both wait to grow: nobody runs, so the first in the queue goes


def test_guarded_benchmarks_let_a_waiting_timed_run_in_before_each_call(tmp_path):
    """A long shared section of many calls (inductor benchmarking a kernel's configs) lets a waiting exclusive
    holder in between two calls, not only at its end."""
    path = str(tmp_path / "gpu.lock")
    compiler, timer = GpuLock(path, lambda _: None), GpuLock(path, lambda _: None)

    class Bench:
        def benchmark_gpu(self, ms):
            order.append(f"bench {ms} {compiler.mode}")
            return ms

    order: list[str] = []
    bench = Bench()
    assert guard_benchmarks(bench, "benchmark_gpu", compiler)
    assert not guard_benchmarks(bench, "benchmark_gpu", compiler)  # wrapped once
    assert not guard_benchmarks(bench, "no_such_method", compiler)
    compiler.acquire()
    _, timed = _in_thread(lambda: (timer.acquire(exclusive=True), order.append("timed"), timer.release()))
    time.sleep(0.2)
    assert not timed.is_set()  # the shared section holds it back
    assert bench.benchmark_gpu(2) == 2  # the timed run goes first, then the benchmark
    assert timed.wait(5) and order == ["timed", "bench 2 shared"] and compiler.mode == "shared"
    compiler.release()


@pytest.mark.parametrize("yield_first", [True, False])
def test_a_benchmark_outside_any_hold_waits_for_a_timed_run_and_holds_the_lock_shared(tmp_path, yield_first):
    """inductor's pad_mm benchmarks matmuls while it compiles, and compiling holds no lock: such a call takes the
    lock shared for its length, so it never runs beside a neighbour's timed run, and gives it back after."""
    path = str(tmp_path / "gpu.lock")
    compiler, timer = GpuLock(path, lambda _: None), GpuLock(path, lambda _: None)
    order: list[str] = []

    class Bench:
        def benchmark_gpu(self, ms):
            order.append(f"bench {ms} {compiler.mode}")
            return ms

    bench = Bench()
    assert guard_benchmarks(bench, "benchmark_gpu", compiler, yield_first=yield_first)
    timer.acquire(exclusive=True)
    t, done = _in_thread(lambda: bench.benchmark_gpu(1))
    assert not done.wait(0.3) and order == []  # a timed run holds the GPU: the benchmark waits
    order.append("timed")
    timer.release()
    assert done.wait(5) and order == ["timed", "bench 1 shared"]
    assert compiler.mode is None and compiler.held_s > 0  # given back, and counted as held
    compiler.acquire(exclusive=True)
    assert bench.benchmark_gpu(3) == 3 and compiler.mode == "exclusive"  # inside a timed hold: unchanged
    compiler.release()


def test_inductor_still_has_the_benchmarker_the_worker_guards():
    """The worker wraps torch._inductor's benchmarker (autotuning in a compiled graph's first run, pad_mm while it
    compiles); a torch that renames it, or whose pad_mm stops looking it up at call time, must fail here, not
    silently lose the guard."""
    from torch._inductor.fx_passes import pad_mm
    from torch._inductor.runtime import benchmarking

    from pipeline.gpu.harness import _guard_benchmarks

    lock = GpuLock(None, lambda _: None)
    try:
        assert _guard_benchmarks(lock, yield_first=True)
        assert getattr(benchmarking.benchmarker.benchmark_gpu, "_guarded_by", None) is lock
        assert getattr(pad_mm.get_do_bench().func, "_guarded_by", None) is lock
    finally:
        del benchmarking.benchmarker.benchmark_gpu  # the class's method again


def _phase_lock(path: str, gather_s: float = 0.0, wait_out_s: float = 0.0) -> GpuLock:
    return GpuLock(path, lambda _: None, phases=True, gather_s=gather_s, wait_out_s=wait_out_s)


def test_timed_runs_go_in_phases_no_shared_section_between_two_waiting_timers(tmp_path):
    """While a worker waits to time, a newcomer to shared work waits too, and a second worker that comes to time
    meanwhile times right after the first: the shared sections drain once for both. Without phases the
    newcomer, queued first, gets in between them and the second timer waits for its section to drain."""
    path = str(tmp_path / "gpu.lock")
    holder, timer1, reader, timer2 = (_phase_lock(path) for _ in range(4))
    order: list[str] = []

    def timed(lock, name):
        lock.acquire(exclusive=True)
        order.append(name)
        time.sleep(0.3)
        lock.release()

    holder.acquire()
    _, t1_done = _in_thread(lambda: timed(timer1, "timer 1"))
    time.sleep(0.2)  # timer 1 waits for the holder's section to drain
    _, r_done = _in_thread(lambda: (reader.acquire(), order.append("reader"), reader.release()))
    time.sleep(0.2)  # the reader is queued now
    assert order == []
    holder.release()
    time.sleep(0.05)  # timer 1 times; the reader queued before timer 2 comes to time
    _, t2_done = _in_thread(lambda: timed(timer2, "timer 2"))
    assert t1_done.wait(5) and t2_done.wait(5) and r_done.wait(5)
    assert order == ["timer 1", "timer 2", "reader"]


def test_a_phase_ends_when_every_announced_timer_has_timed(tmp_path):
    """Shared work resumes after the phase; a yield in a shared section waits out the whole phase."""
    path = str(tmp_path / "gpu.lock")
    worker, timer = _phase_lock(path), _phase_lock(path)
    worker.acquire()
    _, done = _in_thread(lambda: (timer.acquire(exclusive=True), time.sleep(0.3), timer.release()))
    time.sleep(0.1)
    t0 = time.perf_counter()
    worker.yield_()
    assert done.wait(5) and time.perf_counter() - t0 >= 0.3 and worker.mode == "shared"
    assert worker.wait_s >= 0.3 and worker.wait_exclusive_s == 0
    worker.release()
    timer.acquire()  # nobody announced: shared at once
    assert timer.mode == "shared"
    timer.release()


def test_gathering_waits_gather_s_alone_but_joins_an_announced_timer_at_once(tmp_path):
    path = str(tmp_path / "gpu.lock")
    lone = _phase_lock(path, gather_s=0.3)
    t0 = time.perf_counter()
    lone.acquire(exclusive=True)
    assert time.perf_counter() - t0 >= 0.3 and lone.gather_s_spent >= 0.3
    assert lone.wait_exclusive_s >= lone.gather_s_spent
    # another timer comes while lone holds the GPU: it sees an announced timer and queues at once, no gathering
    late = _phase_lock(path, gather_s=5.0)
    _, got = _in_thread(lambda: late.acquire(exclusive=True))
    time.sleep(0.2)
    lone.release()
    assert got.wait(2) and late.gather_s_spent < 1.0
    late.release()


def test_a_killed_timer_ends_its_phase(tmp_path):
    """The announcement is a flock: a worker killed while waiting to time frees shared work."""
    path = str(tmp_path / "gpu.lock")
    holder = _phase_lock(path)
    holder.acquire()
    script = ("import sys; sys.path.insert(0, '.'); from pipeline.gpu.gpu_share import GpuLock; "
              f"GpuLock({path!r}, lambda _: None, phases=True).acquire(exclusive=True)")
    child = subprocess.Popen([sys.executable, "-c", script])
    try:
        time.sleep(1.0)  # the child has announced and waits for the holder's section to drain
        other = _phase_lock(path)
        _, got = _in_thread(other.acquire)
        assert not got.wait(0.3)  # gated by the child's announcement
    finally:
        child.kill()
        child.wait()
    assert got.wait(5) and other.mode == "shared"
    other.release()
    holder.release()


def _lock_trace_module():
    from pipeline.gpu import lock_trace

    return lock_trace


def _traced_locks(tmp_path, monkeypatch, *names: str):
    """Phase locks on one GPU lock file, each named in the OPSYNTH_LOCK_TRACE file they write (returned first)."""
    trace = tmp_path / "lock.trace"
    monkeypatch.setenv("OPSYNTH_LOCK_TRACE", str(trace))
    locks = [_phase_lock(str(tmp_path / "gpu.lock")) for _ in names]
    for lock, name in zip(locks, names, strict=True):
        lock.pid = name
    return trace, locks


def test_the_lock_trace_records_who_held_the_gpu_and_reads_back_as_states(tmp_path, monkeypatch):
    """OPSYNTH_LOCK_TRACE: a shared holder, a timer that announces and waits for it (drain), then times alone;
    pipeline/gpu/lock_trace.py reads the lines back as shared -> drain -> timing -> none."""
    trace, (holder, timer) = _traced_locks(tmp_path, monkeypatch, "holder", "timer")
    holder.acquire(label="checks")
    _, done = _in_thread(lambda: (timer.acquire(exclusive=True, label="timing"), time.sleep(0.1), timer.release()))
    time.sleep(0.2)
    holder.release()
    assert done.wait(5)
    rows = _lock_trace_module().read_trace(trace)
    assert [(who, ev, mode, step) for _, who, ev, mode, step in rows] == [
        ("holder", "hold", "shared", "checks"), ("timer", "want", "exclusive", "timing"),
        ("holder", "free", "shared", "checks"), ("timer", "hold", "exclusive", "timing"),
        ("timer", "free", "exclusive", "timing")]
    states = [s for _, s, _ in _lock_trace_module().state_changes(rows)]
    assert states[:2] == ["shared", "drain"] and states[-2:] == ["timing", "none"]


def test_lock_trace_shares_idle_gpu_seconds_out_by_the_lock_state():
    """One second each of shared work at 100%, a drain at 50% and timing at 90%: 0.5 idle GPU-s carried by
    the drain, 0.1 by timing, 80% over the span."""
    lt = _lock_trace_module()
    trace = [(100.0, "a", "hold", "shared", "eager"), (101.0, "b", "want", "exclusive", "timing"),
             (102.0, "a", "free", "shared", "eager"), (102.0, "b", "hold", "exclusive", "timing"),
             (103.0, "b", "free", "exclusive", "timing")]
    utils = [0, 100, 100, 50, 50, 90, 90]  # a sample reads the interval that ends at its time
    smi = [(100.0 + 0.5 * k, u) for k, u in enumerate(utils)]
    res = lt.analyse(trace, smi)
    st = res["states"]
    assert (st["shared"]["seconds"], st["drain"]["seconds"], st["timing"]["seconds"]) == (1.0, 1.0, 1.0)
    assert (st["shared"]["idle_s"], st["drain"]["idle_s"], st["timing"]["idle_s"]) == (0.0, 0.5, 0.1)
    assert res["utilisation"] == 80.0 and res["span_s"] == 3.0
    assert st["drain"]["mean_utilisation_when_it_fills_a_sample"] == 50.0
    assert res["by_step"]["drain"] == {"eager": {"seconds": 1.0, "idle_s": 0.5}}  # the drain waited for eager
    assert res["holds_by_step"]["eager"]["total_s"] == 2.0 and res["holds_by_step"]["timing"]["n"] == 1
    assert (res["drain_episodes"]["n"], res["drain_episodes"]["total_s"]) == (1, 1.0)


def test_a_relabelled_hold_shows_in_the_trace_as_the_next_step(tmp_path, monkeypatch):
    trace = tmp_path / "lock.trace"
    monkeypatch.setenv("OPSYNTH_LOCK_TRACE", str(trace))
    lock = _phase_lock(str(tmp_path / "gpu.lock"))
    lock.acquire(label="compiled-run")
    lock.acquire(label="compile-check")  # already held shared: the same hold, another step
    lock.release()
    rows = _lock_trace_module().read_trace(trace)
    assert [(ev, step) for _, _, ev, _, step in rows] == [
        ("hold", "compiled-run"), ("free", "compiled-run"), ("hold", "compile-check"), ("free", "compile-check")]


def test_an_announcement_from_a_shared_hold_drains_the_others_and_steps_up_to_time(tmp_path):
    """A worker announces from inside its shared hold: no newcomer gets in, its own hold goes on (untimed work beside
    the neighbours' draining sections, a yield does not give it up) and its exclusive hold follows once they drain,
    before the newcomer."""
    path = str(tmp_path / "gpu.lock")
    timer, neighbour, newcomer = (_phase_lock(path) for _ in range(3))
    order: list[str] = []
    timer.acquire()
    neighbour.acquire()
    timer.announce(label="warm")
    assert timer.mode == "shared" and timer.label == "warm"
    _, n_done = _in_thread(lambda: (newcomer.acquire(), order.append("newcomer"), newcomer.release()))
    assert not n_done.wait(0.3)  # the gate is closed
    t0 = time.perf_counter()
    timer.yield_()  # announced: it keeps its hold instead of queueing behind itself
    assert timer.mode == "shared" and time.perf_counter() - t0 < 0.2
    _, t_done = _in_thread(lambda: (timer.acquire(exclusive=True), order.append("timer"), time.sleep(0.2),
                                    timer.release()))
    assert not t_done.wait(0.3)  # the neighbour's section still runs
    neighbour.release()
    assert t_done.wait(5) and n_done.wait(5)
    assert order == ["timer", "newcomer"]
    assert timer.exclusive_s >= 0.2 and timer.wait_exclusive_s >= 0.3


def test_an_announcement_ends_with_a_hold_released_before_timing(tmp_path):
    """A task that fails between announcing and timing releases its hold: the gate opens again (else every
    neighbour would wait for a timed run that never comes)."""
    path = str(tmp_path / "gpu.lock")
    timer, newcomer = _phase_lock(path), _phase_lock(path)
    timer.acquire()
    timer.announce()
    _, got = _in_thread(newcomer.acquire)
    assert not got.wait(0.3)
    timer.release()
    assert got.wait(5) and newcomer.mode == "shared"
    newcomer.release()
    # announcing needs phases and a shared hold: otherwise nothing happens
    plain = GpuLock(path, lambda _: None)
    plain.acquire()
    plain.announce()
    other = _phase_lock(path)
    other.acquire()
    assert other.mode == "shared"
    other.release()
    plain.release()
    idle = _phase_lock(path)
    idle.announce()
    assert idle.mode is None and not idle._announced()


def test_an_announcement_from_a_shared_hold_reads_back_as_a_drain_and_a_given_up_one_ends_it(tmp_path, monkeypatch):
    """The trace of warm-ups in the drain: `want` while the worker still holds the GPU shared (the drain includes
    its own warm-up), then its timed hold; a worker that gives up after announcing writes `unwant`, and the state
    is shared again, not a drain that never ends."""
    trace, (timer, failing) = _traced_locks(tmp_path, monkeypatch, "timer", "failing")
    timer.acquire(label="warm")
    timer.announce(label="warm")
    timer.acquire(exclusive=True, label="timing")
    timer.release()
    failing.acquire(label="warm")
    failing.announce(label="warm")
    failing.release()
    lt = _lock_trace_module()
    rows = lt.read_trace(trace)
    assert [(who, ev, mode) for _, who, ev, mode, _ in rows] == [
        ("timer", "hold", "shared"), ("timer", "want", "exclusive"), ("timer", "free", "shared"),
        ("timer", "hold", "exclusive"), ("timer", "free", "exclusive"),
        ("failing", "hold", "shared"), ("failing", "want", "exclusive"), ("failing", "free", "shared"),
        ("failing", "unwant", "exclusive")]
    # times one apart, so each change is a state of its own
    rows = [(float(k), *r[1:]) for k, r in enumerate(rows)]
    states = [s for _, s, _ in lt.state_changes(rows)]
    assert states == ["shared", "drain", "handover", "timing", "none", "shared", "drain", "handover", "none"]


def test_occupancy_counts_the_workers_on_the_gpu_per_utilisation_band():
    """Two shared holders, then one timing alone, while the GPU is full; while it idles, one holder, a worker that
    announced and one waiting for memory; the first `after` seconds are left out."""
    lt = _lock_trace_module()
    trace = [(100.0, "a", "hold", "shared", "eager"), (100.0, "b", "hold", "shared", "eager"),
             (102.0, "b", "free", "shared", "eager"), (103.0, "c", "want", "exclusive", "timing"),
             (104.0, "a", "free", "shared", "eager"), (104.0, "c", "hold", "exclusive", "timing"),
             (106.0, "c", "free", "exclusive", "timing")]
    budget = [(102.5, "b", True), (104.5, "b", False)]
    # a sample reads the half second that ends at it: 100-102 full, 102-104 at 20%, 104-106 at 95%
    smi = [(100.0 + 0.5 * k, u) for k, u in enumerate([0, 100, 100, 100, 100, 20, 20, 20, 20, 95, 95, 95, 95])]
    occ = lt.occupancy(trace, smi, budget, after_s=1.0)
    assert occ["utilisation"] == (2 * 100 + 4 * 20 + 4 * 95) / 10
    full, idle = occ["bands"]["95-100%"], occ["bands"]["0-50%"]
    assert full["samples"] == 6 and idle["samples"] == 4 and set(occ["bands"]) == {"95-100%", "0-50%"}
    assert full["shared_holders"] == round(2 * 2 / 6, 2) and full["timing_holders"] == round(4 / 6, 2)
    assert full["waiting_for_memory"] == round(1 / 6, 2) and full["announced"] == 0
    assert idle["shared_holders"] == 1.0 and idle["announced"] == 0.5 and idle["waiting_for_memory"] == 0.75


def test_a_timer_waits_out_a_first_run_while_other_shared_work_goes_on(tmp_path):
    """With wait_out_s, a worker about to time lets a compiled graph's first run in flight end before it closes
    the gate: meanwhile another worker's eager step starts and ends (the GPU stays fed), a second first run waits,
    and the timer times once the first run is over, before the second one starts."""
    path = str(tmp_path / "gpu.lock")
    first, eager, second, timer = (_phase_lock(path, wait_out_s=5.0) for _ in range(4))
    order: list[str] = []
    first.acquire(label="compiled-run")
    _, timed = _in_thread(lambda: (timer.acquire(exclusive=True), order.append("timer"), timer.release()))
    time.sleep(0.2)  # the timer is waiting the first run out, and has not closed the gate
    assert order == [] and timer.wait_out_spent == 0
    _, eager_done = _in_thread(lambda: (eager.acquire(label="eager"), order.append("eager"), eager.release()))
    assert eager_done.wait(2)  # not gated: shared work goes on while the timer waits
    _, second_done = _in_thread(lambda: (second.acquire(label="compiled-run"), order.append("second"),
                                         second.release()))
    assert not second_done.wait(0.3)  # a new first run waits for the timer
    first.acquire(label="compile-check")  # the first run is over, the same hold goes on to its checks
    assert not timed.wait(0.3)  # the gate is closed now; the timer still waits for that shared hold to drain
    first.release()
    assert timed.wait(5) and second_done.wait(5)
    assert order == ["eager", "timer", "second"]
    assert timer.wait_out_spent >= 0.5 and timer.wait_exclusive_s >= timer.wait_out_spent


def test_waiting_out_first_runs_is_bounded_and_off_by_default(tmp_path):
    """A first run longer than wait_out_s: the timer closes the gate after wait_out_s and the drain waits for the
    run, as without waiting out. With wait_out_s 0 the gate closes at once: a newcomer's eager step waits."""
    path = str(tmp_path / "gpu.lock")
    long_run, timer = _phase_lock(path, wait_out_s=0.3), _phase_lock(path, wait_out_s=0.3)
    long_run.acquire(label="compiled-run")
    t0 = time.perf_counter()
    _, timed = _in_thread(lambda: (timer.acquire(exclusive=True), timer.release()))
    time.sleep(0.6)  # past wait_out_s: the gate is closed, a newcomer waits
    newcomer = _phase_lock(path, wait_out_s=0.3)
    _, got = _in_thread(lambda: (newcomer.acquire(label="eager"), newcomer.release()))
    assert not got.wait(0.3) and not timed.is_set()
    long_run.release()
    assert timed.wait(5) and got.wait(5)
    assert 0.3 <= timer.wait_out_spent < 0.6 and time.perf_counter() - t0 >= 0.9

    holder, plain = _phase_lock(path), _phase_lock(path)
    holder.acquire(label="compiled-run")
    _, timed = _in_thread(lambda: (plain.acquire(exclusive=True), plain.release()))
    time.sleep(0.2)
    _, got = _in_thread(lambda: (newcomer.acquire(label="eager"), newcomer.release()))
    assert not got.wait(0.3)  # gated at once: nothing is waited out
    holder.release()
    assert timed.wait(5) and got.wait(5) and plain.wait_out_spent == 0


def test_a_timer_announcing_from_a_shared_hold_waits_out_first_runs_and_joins_a_phase_at_once(tmp_path):
    """announce (profile.warm_in_drain) waits first runs out from inside its own shared hold; a timer that comes
    while a phase is on joins it without waiting anything out, even with a first run still in flight."""
    path = str(tmp_path / "gpu.lock")
    run, timer = _phase_lock(path, wait_out_s=5.0), _phase_lock(path, wait_out_s=5.0)
    run.acquire(label="compiled-run")
    timer.acquire(label="compile-check")
    _, announced = _in_thread(lambda: timer.announce(label="timing-warm-up"))
    assert not announced.wait(0.3)  # waiting the first run out, its own shared hold kept
    run.release()
    assert announced.wait(5) and timer.wait_out_spent >= 0.3 and timer.mode == "shared"
    timer.acquire(exclusive=True)
    timer.release()

    stuck, impatient, late = (_phase_lock(path, wait_out_s=w) for w in (5.0, 0.2, 5.0))
    stuck.acquire(label="compiled-run")
    _, first_timed = _in_thread(lambda: (impatient.acquire(exclusive=True), impatient.release()))
    time.sleep(0.5)  # the impatient timer gave up waiting after 0.2 s: the phase is on, the drain waits for `stuck`
    _, late_timed = _in_thread(lambda: (late.acquire(exclusive=True), late.release()))
    time.sleep(0.2)
    stuck.release()
    assert first_timed.wait(5) and late_timed.wait(5)
    assert late.wait_out_spent == 0 and 0.2 <= impatient.wait_out_spent < 0.5


def test_the_lock_trace_marks_a_wait_out_and_lock_trace_reads_it_beside_nvidia_smi(tmp_path, monkeypatch):
    """A timer's wait for a first run in flight is traced (`waitout` ... `waitedout`) and stays a shared state
    (no drain yet); pipeline/gpu/lock_trace.py gives its length and the GPU's utilisation inside it."""
    trace = tmp_path / "lock.trace"
    monkeypatch.setenv("OPSYNTH_LOCK_TRACE", str(trace))
    run, timer = (_phase_lock(str(tmp_path / "gpu.lock"), wait_out_s=5.0) for _ in range(2))
    run.pid, timer.pid = "run", "timer"
    run.acquire(label="compiled-run")
    _, done = _in_thread(lambda: (timer.acquire(exclusive=True, label="timing"), timer.release()))
    time.sleep(0.4)
    run.release()
    assert done.wait(5)
    lt = _lock_trace_module()
    spans = lt.read_wait_outs(trace)
    assert len(spans) == 1 and 0.3 <= spans[0][1] - spans[0][0] < 2.0
    rows = lt.read_trace(trace)
    want = next(t for t, who, ev, _, _ in rows if ev == "want")
    assert want >= spans[0][1]  # the gate closes after the wait-out: the shared work went on until then
    a, b = spans[0]
    smi = [(a - 0.5, 10), (a + 0.1, 80), (b - 0.05, 60), (b + 0.5, 0)]
    got = lt.wait_outs(spans, smi)
    assert got["n"] == 1 and got["samples_inside"] == 2 and got["mean_utilisation_inside"] == 70.0
    assert lt.wait_outs([], smi) == {"n": 0}


def test_holder_cores_are_the_highest_numbered_and_never_all_of_them():
    every = os.sched_getaffinity(0)
    assert holder_core_split(0) is None
    assert holder_core_split(len(every)) is None  # nothing left for the workers holding nothing
    if len(every) >= 2:
        split = holder_core_split(1)
        assert split == (frozenset(every), frozenset(every - {max(every)}))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two host cores")
def test_a_holder_runs_on_every_core_and_a_worker_holding_nothing_off_the_kept_ones(tmp_path):
    """The pinning is per thread: a worker's other threads and the test process are untouched."""
    split = holder_core_split(1)
    seen: list[set[int]] = []

    def worker():
        lock = GpuLock(str(tmp_path / "gpu.lock"), lambda _: None, cores=split)
        seen.append(os.sched_getaffinity(0))  # from its start
        for exclusive in (False, True):
            with lock.hold(exclusive=exclusive):
                seen.append(os.sched_getaffinity(0))
                lock.yield_()
                seen.append(os.sched_getaffinity(0))
            seen.append(os.sched_getaffinity(0))

    before = os.sched_getaffinity(0)
    t, done = _in_thread(worker)
    t.join(10)
    assert done.is_set()
    free, every = set(split[1]), set(split[0])
    assert seen == [free, every, every, free, every, every, free]
    assert os.sched_getaffinity(0) == before


def test_neither_a_probe_nor_a_worker_waiting_for_a_phase_reads_as_an_announcement(tmp_path):
    """A worker waiting for a phase to end holds the intent file exclusively for an instant, and so does (did) a
    timer probing for announcements: neither may look like an announced timer, or a timer waiting out a first
    run stops early and closes the gate behind it (call 75)."""
    import fcntl

    path = str(tmp_path / "gpu.lock")
    timer, other = _phase_lock(path, wait_out_s=5.0), _phase_lock(path, wait_out_s=5.0)
    fcntl.flock(other.intent, fcntl.LOCK_EX)  # what a phase-waiter (and an old-style probe) holds for an instant
    try:
        assert not timer._announced()
    finally:
        fcntl.flock(other.intent, fcntl.LOCK_UN)
    other.acquire(label="eager")
    other.announce(label="timing-warm-up")
    assert timer._announced()  # a real announcement is seen
    other.release()
    assert not timer._announced()  # and its end


def test_timers_probing_together_all_wait_out_a_first_run_to_its_end(tmp_path):
    """Three timers wait out one long first run at once, probing for announcements all the while: none stops
    early; they time after the run ends, not at the wait-out bound or before."""
    path = str(tmp_path / "gpu.lock")
    first = _phase_lock(path, wait_out_s=3.0)
    timers = [_phase_lock(path, wait_out_s=3.0) for _ in range(3)]
    first.acquire(label="compiled-run")
    started = time.perf_counter()
    done = [_in_thread(lambda t=t: (t.acquire(exclusive=True), t.release()))[1] for t in timers]
    time.sleep(1.2)
    assert not any(d.is_set() for d in done)
    # nobody closed the gate meanwhile: a newcomer's shared step gets in at once
    newcomer = _phase_lock(path)
    _, got = _in_thread(lambda: (newcomer.acquire(label="eager"), newcomer.release()))
    assert got.wait(1.0)
    first.release()
    assert all(d.wait(5) for d in done)
    assert time.perf_counter() - started >= 1.2
    assert all(t.wait_out_spent >= 1.0 for t in timers)
