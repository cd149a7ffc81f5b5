"""Stage 3, profile: measure every task in isolated workers and stream the results to shards.

Measurement shard k covers the tasks at positions [k*S, (k+1)*S) of the tasks table. Results arrive
in completion order from the executor; a shard is written (atomically, then its marker) as soon as all
of its tasks have come back, so a killed run loses at most the shards in flight and a rerun measures
exactly those again. A done shard that covers fewer tasks than its positions now hold (the run grew) keeps
its rows and is written again once its new tasks are measured.

A Budget (`--max-minutes`, `--limit`) is checked only before the first task of a shard is handed out: once
it is spent no shard starts, the shards already started are finished and written, and the call returns with
`stopped` set. So a stop never leaves a shard half measured, and the next call starts at the next shard.
The last few shards a call starts (profile.longest_first_last_shards) are handed out as one, so those are in
flight together near its end: the run's last shards, or the last ones the budget lets start (a task limit says
exactly which; with a time limit, the seconds left at the pace shards have started so far).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from filters.base import decide, reason_kind
from filters.checks import CHECKS
from filters.static_check import check_task_source
from pipeline.gpu.fork_server import ForkServer
from pipeline.gpu.task_order import ExpectedWall
from pipeline.gpu.worker_settings import WorkerSettings
from pipeline.progress import Progress
from pipeline.rundir.config import Config
from pipeline.rundir.schema import MEASUREMENTS, SHORTCUT_CALL_COLUMNS, SHORTCUTS, conform
from pipeline.rundir.store import RunDir, chunks, map_shards

# run directory -> tasks an interrupted call measured into shards it did not write (for the command's last line)
UNWRITTEN: dict[str, int] = {}


@dataclass
class Budget:
    """How much one profile call may do: wall-clock seconds from its start and tasks handed to workers (None:
    no bound). Both are checked at shard starts only, so a call overruns by the shards it has started."""

    max_seconds: float | None = None
    limit: int | None = None
    clock: Callable[[], float] = time.monotonic
    start: float = field(init=False)
    submitted: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.start = self.clock()

    def spent(self) -> bool:
        over_time = self.max_seconds is not None and self.clock() - self.start >= self.max_seconds
        return over_time or (self.limit is not None and self.submitted >= self.limit)

    def elapsed(self) -> float:
        return self.clock() - self.start


def _by_shard(shards: list[list[dict[str, Any]]], budget: Budget, stop: list[bool],
              handed: list[float] | None = None,
              order: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
              refuse: Callable[[dict[str, Any]], bool] | None = None,
              merge_last: int = 0) -> Iterator[dict[str, Any]]:
    """The tasks of `shards`, shard by shard, until the budget is spent at a shard start (then stop[0] is set);
    handed[0] is when the last one was handed out. order: how a shard's tasks are handed out, decided when its
    first one is (what the call has measured by then may decide it). refuse: True for a task no worker may get
    (it has recorded why); such a task is not counted against the budget. merge_last: once at most that many
    shards are left to start in this call (the run's last ones, or the last the budget lets start), they are
    ordered as one: their long tasks start first, instead of the last shard's longest ending the call alone."""
    shards = [rows for rows in shards if rows]
    i, started, first = 0, 0, None
    while i < len(shards):
        if budget.spent():
            stop[0] = True
            return
        now = budget.clock()
        first = now if first is None else first
        # seconds between shard starts so far: how many more this call will start before its time is up
        interval = (now - first) / started if started else None
        left = _shards_left(budget, [len(rows) for rows in shards[i:]], interval)
        take = left if left is not None and 1 < left <= merge_last else 1
        group = [t for rows in shards[i:i + take] for t in rows]
        i, started = i + take, started + take
        for t in order(group) if order else group:
            if refuse is not None and refuse(t):
                continue
            budget.submitted += 1
            if handed is not None:
                handed[0] = time.monotonic()
            yield t


def _shards_left(budget: Budget, sizes: list[int], interval: float | None) -> int | None:
    """How many of the shards of `sizes` (the next first) this call will start: all of them, or as many as the
    task limit lets start, or as many as start before the time is up at one start each `interval` seconds; None
    when the time bounds them and no interval is known yet (at the call's first shard)."""
    left = len(sizes)
    if budget.limit is not None:
        room, fits = budget.limit - budget.submitted, 0
        while fits < left and room > 0:
            room -= sizes[fits]
            fits += 1
        left = min(left, max(fits, 1))
    if budget.max_seconds is not None:
        if not interval:
            return None
        remaining = budget.max_seconds - budget.elapsed()
        left = min(left, max(1, math.ceil(remaining / interval)))
    return left


def _left_to_measure(rd: RunDir, k: int, ids: set[str], on_disk: dict[int, Counter],
                     table_name: str = "measurements", stale: Any = None) -> dict[str, dict[str, Any]] | None:
    """None when measurement shard k is done and covers `ids` (the tasks at its positions); else the rows it
    already holds for them: none for a shard not written yet, some for one written before the run grew.
    on_disk[k]: the statuses of the rows the shard holds on disk now, when it has any. stale(row): a held row
    this call measures again (its shard is then rewritten with the others kept)."""
    import pyarrow.parquet as pq

    if not rd.is_done(table_name, k):
        return {}
    path = rd.shard_path(table_name, k)
    if stale is not None:
        rows = pq.read_table(path).to_pylist()
        on_disk[k] = Counter(r["status"] for r in rows)
        held = {r["task_id"]: r for r in rows if r["task_id"] in ids and not stale(r)}
        return None if set(held) == ids and len(rows) == len(ids) else held
    table = pq.read_table(path, columns=["task_id", "status"])
    on_disk[k] = Counter(table.column("status").to_pylist())
    if set(table.column("task_id").to_pylist()) == ids:
        return None
    return {r["task_id"]: r for r in pq.read_table(path).to_pylist() if r["task_id"] in ids}


def checked_weaker(p: Any) -> Any:
    """stale(row) for a shortcuts-only call: a row whose fragility check passed more weakly than this call's
    would check it, with one model for every draw (written before profile.shortcut_fresh_weights) while this call
    builds each draw's own weights, with a smaller ulp move than profile.shortcut_ulp_steps (a row from before
    the move was recorded moved one ulp), or without a float64 reference and no reason for its absence. It is
    measured again. A finding stands whatever the weights or the move,
    and so does a row whose checks stopped earlier. None when the call checks no stored row's fragility again (it is
    not shortcuts-only, or runs no fragility check)."""
    if not (p.shortcuts_only and "fragile" in p.shortcut_checks):
        return None

    def stale(row: dict[str, Any]) -> bool:
        if row.get("status") != "ok" or "fragile" not in (row.get("shortcut_checks") or "").split(",") \
                or row.get("fragile"):
            return False
        # a cheap call takes an exhaustive row or a cheap one (weights "scaled"); an exhaustive call with fresh
        # weights takes only its own kind of row
        enough = ("fresh", "scaled") if p.shortcut_mode == "cheap" else ("fresh",)
        # a float64 reference missing with no reason recorded: a row from before out-of-memory was told apart from a
        # forward that cannot run in float64 (the reason is recorded since), whose reference may never have run
        unmeasured_f64 = row.get("fragile_f64_ratio") is None and not row.get("fragile_f64_error")
        return (p.shortcut_fresh_weights and row.get("fragile_weights") not in enough) \
            or (row.get("fragile_ulp_steps") or 1) < p.shortcut_ulp_steps or unmeasured_f64

    return stale


def _out_before_shortcuts(rd: RunDir) -> dict[str, tuple[str, str]]:
    """Tasks a shortcuts-only call spends nothing on: not measured ok, or dropped by the stored filter verdicts."""
    out = {r["task_id"]: ("profile", r["status"]) for r in rd.read_rows("measurements", ["task_id", "status"])
           if r["status"] != "ok"}
    for v in rd.read_rows("verdicts"):
        if v["stage"] == "filter" and not v["keep"]:
            out.setdefault(v["task_id"], ("filter", v["reason"]))
    return out


def _static_rejection(task: dict[str, Any], reason: str, device: str) -> dict[str, Any]:
    return {"task_id": task["task_id"], "status": "rejected_static", "error": reason, "device": device}


def _attach_screen_ratios(rd: RunDir, tasks: list[dict[str, Any]]) -> None:
    """The pre-screen's ratio maps (prescreen/, the draw that became the task) onto each task it screened in full,
    for profile.shortcut_screen_margin; a task without them is measured in full."""
    import pyarrow.parquet as pq

    from pipeline.rundir.pack import PROFILE_PRESCREEN_COLUMNS as cols

    shards = rd.done_shards("prescreen")
    if not shards or not set(cols) <= set(pq.read_schema(rd.shard_path("prescreen", shards[0])).names):
        return  # no screen, or one from before the ratio maps
    # a screen that measured no operator (it stopped on another finding) says nothing of this task's parts
    screens = {r["task_id"]: r for r in rd.read_rows("prescreen", list(cols))
               if r["status"] == "ok" and not r["resampled"] and r["input_ratios"] is not None
               and r["op_ratios"] not in (None, "{}")}
    for t in tasks:
        if (r := screens.get(t["task_id"])) is not None:
            t["screen_input_ratios"], t["screen_op_ratios"] = r["input_ratios"], r["op_ratios"]


def run(rd: RunDir, cfg: Config, executor: str = "local", gpus: list[int] | None = None,
        ray_address: str | None = None, skip_dropped: bool = False, budget: Budget | None = None,
        settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """Measure the tasks of `rd`. skip_dropped: tasks an earlier stage already dropped (decontaminate, when
    `opsynth run` puts it first) get a `skipped` row instead of GPU time. budget: stop starting shards once it
    is spent (the result then has stopped=True; a rerun continues). settings: the profile settings this call
    changed from the run's config.toml (`--set`), recorded with the call in the manifest so every measurement
    can be traced to how it was taken."""
    from pipeline.gpu.executors import start_fork_server

    t0 = time.time()
    started = time.monotonic()
    # the workers' fork server imports torch while this process reads its tables (seconds each on a large run)
    early = start_fork_server(WorkerSettings.from_config(cfg)) if executor == "local" else None
    try:
        return _run(rd, cfg, executor, gpus, ray_address, skip_dropped, budget, settings, t0, started, early)
    finally:
        if early is not None:
            early.close()  # the executor closed it already when it used it: closing again does nothing


def _run(rd: RunDir, cfg: Config, executor: str, gpus: list[int] | None, ray_address: str | None,
         skip_dropped: bool, budget: Budget | None, settings: dict[str, Any] | None, t0: float, started: float,
         early: ForkServer | None) -> dict[str, Any]:
    """run's body; t0: when the call began (wall clock), `started` the same on the monotonic clock."""
    from pipeline.gpu.executors import make_executor
    from pipeline.rundir.selection import first_rejection
    from pipeline.rundir.stage_defs import CODE_STAGES

    # only the columns it uses: the graphs and traced ops are most of a 20,000-task run's bytes (4 of 6 s)
    tasks = rd.require_table("tasks", "sample", ["task_id", "code", "ops", "flops", "bytes_moved",
                                                 "predicted_peak_bytes"]).to_pylist()
    size = cfg.run.shard_size
    pending: dict[int, list[dict[str, Any]]] = {}
    results: dict[int, dict[str, dict[str, Any]]] = {}
    # the statuses of every shard on disk, kept up to date as shards are written: the call's summary needs no
    # second read of them all (4.5 s of a 35,000-task run on a 2-core host, after the workers are gone)
    on_disk: dict[int, Counter] = {}
    shards = dict(chunks(tasks, size))
    # profile.shortcuts_only: the shortcut checks alone, into shortcuts/ beside the stored measurements (same shards)
    table, schema = ("shortcuts", SHORTCUTS) if cfg.profile.shortcuts_only else ("measurements", MEASUREMENTS)
    p = cfg.profile
    stale = checked_weaker(p)
    left = map_shards(lambda k: _left_to_measure(rd, k, {t["task_id"] for t in shards[k]}, on_disk, table, stale),
                      list(shards))
    for (k, rows), before in zip(shards.items(), left, strict=True):
        if before is not None:
            pending[k], results[k] = rows, before
    shard_of = {t["task_id"]: k for k, rows in pending.items() for t in rows if t["task_id"] not in results[k]}
    ops_of = {t["task_id"]: t["ops"] for t in tasks}
    # only the stages before profile decide what it skips: a filter verdict is drawn from measurements, so a lost
    # shard's tasks must be measured again, not skipped because of the verdict their old measurements earned
    dropped = first_rejection(rd, CODE_STAGES) if skip_dropped else {}
    if cfg.profile.shortcuts_only:
        dropped = {**dropped, **_out_before_shortcuts(rd)}  # measured and dropped already: no GPU for them
    to_run: dict[int, list[dict[str, Any]]] = {k: [] for k in pending}
    for rows in pending.values():
        for t in rows:
            if t["task_id"] not in shard_of:
                continue  # measured before the run grew
            if t["task_id"] in dropped:
                stage, why = dropped[t["task_id"]]
                results[shard_of[t["task_id"]]][t["task_id"]] = {
                    "task_id": t["task_id"], "status": "skipped", "device": cfg.run.device,
                    "error": f"not profiled: dropped by {stage} ({why})"[:300]}
            else:
                to_run[shard_of[t["task_id"]]].append(t)

    if cfg.profile.shortcut_screen_margin > 0 and cfg.profile.shortcut_checks:
        _attach_screen_ratios(rd, [t for rows in to_run.values() for t in rows])
    accepted, reasons = 0, Counter()
    bar = Progress("profile", total=len(tasks), initial=len(tasks) - len(shard_of))

    def note(m: dict[str, Any]) -> None:
        nonlocal accepted
        keep, why = decide({**m, "ops": ops_of.get(m["task_id"])}, CHECKS, cfg.filter)  # the filter's verdict
        accepted += keep
        if not keep:
            reasons[reason_kind(why)] += 1
        top = ", ".join(f"{r} {c}" for r, c in reasons.most_common(2))
        bar.note(f"accepted {accepted}" + (f" | {top}" if top else ""))
        bar.update(1)

    def flush_ready() -> None:
        for k in [k for k, rows in pending.items() if len(results[k]) == len(rows)]:
            ordered = [results[k][t["task_id"]] for t in pending.pop(k)]
            if table == "shortcuts":  # a row measured now names its seconds as the call's; a stored row has them
                ordered = [{**r, **{c: r.get(src) for c, src in SHORTCUT_CALL_COLUMNS.items() if c not in r}}
                           for r in ordered]
            rd.write_shard(table, k, conform(ordered, schema), schema)
            on_disk[k] = Counter(r["status"] for r in ordered)

    def refuse(t: dict[str, Any]) -> bool:
        # the static check runs as each task is handed out, not on all of them first: ~1 ms a task, seconds of a
        # large call that would otherwise pass before the first worker could start
        reason = check_task_source(t["code"])
        if reason:
            m = _static_rejection(t, reason, cfg.run.device)
            results[shard_of[t["task_id"]]][t["task_id"]] = m
            note(m)
        return reason is not None

    budget = budget or Budget()
    stop = [False]
    uses_mps: bool | None = None  # whether this call's workers ran under MPS (local executor on cuda)
    # where a call's fixed costs go: starting and warming the workers, and the drain after the last task was handed
    # out (workers fall idle one by one); a time-boxed call pays both each time
    timing: dict[str, float] = {}
    handed = [0.0]
    def record(interrupted: bool = False) -> tuple[int, int]:
        """Log this call in the manifest (`stages.profile.calls`: what the card's cost table sums, and where
        benchmarks find a call's tasks); (profiled, skipped) over the shards on disk. An interrupted call is logged
        too, `interrupted` set: its GPU time was spent, and its finished shards stay."""
        statuses = sum(on_disk.values(), Counter())
        skipped = statuses.get("skipped", 0)
        profiled = sum(statuses.values()) - skipped
        rd.record_stage("profile", time.time() - t0, profiled=profiled, skipped=skipped,
                        device=cfg.run.device, executor=executor, workers=cfg.run.workers, stopped=stop[0],
                        gpus=(len(gpus) if gpus else 1) if cfg.run.device == "cuda" else 0,
                        measured_now=budget.submitted, **({"mps": uses_mps} if uses_mps is not None else {}),
                        **timing, **({"interrupted": True} if interrupted else {}),
                        **({"settings": {f"profile.{k}": v for k, v in settings.items()}} if settings else {}))
        return profiled, skipped

    with bar:
        for k in list(results):
            for m in results[k].values():
                if m["task_id"] in shard_of:
                    note(m)
        try:
            flush_ready()
            if any(to_run.values()):
                if budget.spent():  # nothing would start: spare the workers' startup
                    stop[0] = True
                else:
                    bar.restart_clock()
                    bar.phase("starting workers")
                    timing["tables_s"] = round(time.monotonic() - started, 1)  # this process's reading, before workers
                    with make_executor(executor, cfg.run.device, cfg.run.workers, gpus, ray_address,
                                       WorkerSettings.from_config(cfg), fork_server=early) as ex:
                        uses_mps = getattr(ex, "uses_mps", None) if cfg.run.device == "cuda" else None
                        expect = ExpectedWall()
                        order = expect.order if cfg.profile.longest_first else None
                        hand_out = _by_shard(list(to_run.values()), budget, stop, handed, order, refuse,
                                             merge_last=cfg.profile.longest_first_last_shards)
                        for m in ex.imap_unordered(hand_out):
                            bar.phase("")
                            expect.observe(ops_of.get(m["task_id"]), m.get("wall_s"))
                            results[shard_of[m["task_id"]]][m["task_id"]] = m
                            note(m)
                            flush_ready()
                        flush_ready()  # shards whose last tasks the static check refused
                        if getattr(ex, "ready_s", None) is not None:
                            timing["workers_ready_s"] = round(ex.ready_s, 1)
                        if early is not None and early.ready_s is not None:  # from the call's start
                            timing["fork_server_ready_s"] = round(early.started - started + early.ready_s, 1)
                            timing["fork_server_import_s"] = early.import_s
                            if early.compile_ahead:
                                timing["fork_server_compile_ahead"] = early.compile_ahead
                        if handed[0]:
                            timing["tail_s"] = round(time.monotonic() - handed[0], 1)
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM, a worker stopped from outside: the call cost GPU time too
            stop[0] = True
            # measured in this call into shards not written: not kept, measured again by the next call
            UNWRITTEN[str(rd.path)] = sum(1 for k in pending for t, m in results[k].items()
                                          if t in shard_of and m.get("status") != "skipped")
            with contextlib.suppress(Exception):  # the interruption is what the caller must see
                record(interrupted=True)
            raise
    profiled, skipped = record()
    return {"profiled": profiled, "skipped": skipped, "measured_now": budget.submitted,
            "tasks": len(tasks), "with_measurements": profiled + skipped, "stopped": stop[0],
            "minutes": round(budget.elapsed() / 60, 2)}
