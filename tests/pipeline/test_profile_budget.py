"""A profile call with a budget (time or task count) stops at a shard start: whole shards only, and the next call
measures exactly the rest; a measurement shard written before the run grew keeps its rows."""

import dataclasses

import pyarrow.parquet as pq
import pytest

from pipeline.rundir.config import load_preset
from pipeline.rundir.schema import TASKS, conform
from pipeline.rundir.store import RunDir
from pipeline.stages import profile


def _write_tasks(rd: RunDir, tasks: list[dict], shard_size: int = 2) -> None:
    n = len(tasks)
    for k in range(0, n, shard_size):
        rd.write_shard("tasks", k // shard_size, conform(tasks[k:k + shard_size], TASKS), TASKS)


def _run_dir(path, tasks: list[dict], shard_size: int = 2):
    n = len(tasks)
    cfg = load_preset("demo")
    cfg = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, workers=1, n=n, shard_size=shard_size),
                              profile=dataclasses.replace(cfg.profile, compile=False, warm_worker=False))
    rd = RunDir(path)
    rd.init(cfg)
    _write_tasks(rd, tasks, shard_size)
    return rd, cfg


class StepClock:
    """A clock that reads 0 for its first `calls` reads, then an hour: the budget is spent at a known point."""

    def __init__(self, calls: int) -> None:
        self.left = calls

    def __call__(self) -> float:
        self.left -= 1
        return 0.0 if self.left >= 0 else 3600.0


def _shards(rd: RunDir) -> dict[int, list[str]]:
    return {k: pq.read_table(rd.shard_path("measurements", k), columns=["task_id"]).column(0).to_pylist()
            for k in rd.done_shards("measurements")}


def test_time_budget_stops_at_a_shard_start_and_the_next_call_measures_the_rest(tmp_path, tanh_tasks):
    rd, cfg = _run_dir(tmp_path / "r", tanh_tasks(5))
    # reads: Budget start, the check before executor start, shard 0's start; shard 1's start sees the hour
    out = profile.run(rd, cfg, budget=profile.Budget(max_seconds=60, clock=StepClock(3)))
    assert out["stopped"] and out["measured_now"] == 2 and out["with_measurements"] == 2
    assert _shards(rd) == {0: ["t0", "t1"]}
    assert rd.manifest()["stages"]["profile"]["stopped"] is True
    out = profile.run(rd, cfg)
    assert not out["stopped"] and out["measured_now"] == 3
    assert _shards(rd) == {0: ["t0", "t1"], 1: ["t2", "t3"], 2: ["t4"]}
    assert {m["status"] for m in rd.read_rows("measurements")} == {"ok"}
    # each call's fixed costs: its own reading, the fork server's imports, until every worker was ready, and the
    # drain after the last task was handed out
    calls = rd.manifest()["stages"]["profile"]["calls"]
    for c in calls:  # each cost is rounded to 0.1 s and the call's seconds to 1 ms: a short call may read less
        within = c["seconds"] + 0.05
        assert 0 < c["workers_ready_s"] <= within and 0 <= c["tail_s"] <= within
        assert 0 <= c["tables_s"] <= within and 0 < c["fork_server_ready_s"] <= within


def test_limit_counts_whole_shards_and_a_spent_budget_starts_no_worker(tmp_path, tanh_tasks):
    rd, cfg = _run_dir(tmp_path / "r", tanh_tasks(5))
    out = profile.run(rd, cfg, budget=profile.Budget(limit=3))  # 3 rounds up to shards 0 and 1
    assert out["stopped"] and out["measured_now"] == 4
    assert sorted(_shards(rd)) == [0, 1]
    out = profile.run(rd, cfg, budget=profile.Budget(max_seconds=60, clock=StepClock(1)))
    assert out["stopped"] and out["measured_now"] == 0 and sorted(_shards(rd)) == [0, 1]


def test_a_shard_measured_before_the_run_grew_keeps_its_rows(tmp_path, tanh_tasks):
    rd, cfg = _run_dir(tmp_path / "r", tanh_tasks(3))
    profile.run(rd, cfg)
    assert rd.manifest()["stages"]["profile"]["profiled"] == 3
    before = {m["task_id"]: m for m in rd.read_rows("measurements")}
    assert _shards(rd) == {0: ["t0", "t1"], 1: ["t2"]}
    assert rd.grow(4) == (3, 4)
    _write_tasks(rd, tanh_tasks(4))  # what the sample stage does: the same tasks plus t3, which joins shard 1
    grown = RunDir(rd.path)
    assert grown.load_config().run.n == 4 and rd.manifest()["growth"][0]["to"] == 4
    unsafe = {**tanh_tasks(5)[4], "code": "import os\n" + tanh_tasks(5)[4]["code"]}  # refused by the static check
    assert grown.grow(5) == (4, 5)
    _write_tasks(grown, [*tanh_tasks(4), unsafe])
    grown = RunDir(rd.path)
    out = profile.run(grown, grown.load_config())
    assert out["measured_now"] == 1
    assert _shards(grown) == {0: ["t0", "t1"], 1: ["t2", "t3"], 2: ["t4"]}
    # the call's counts are of every row on disk, old ones too, whatever their status
    on_disk = [m["status"] for m in grown.read_rows("measurements")]
    assert sorted(on_disk) == ["ok"] * 4 + ["rejected_static"]
    assert out["with_measurements"] == out["profiled"] == 5 and grown.manifest()["stages"]["profile"]["profiled"] == 5
    after = {m["task_id"]: m for m in grown.read_rows("measurements")}
    assert after["t2"]["eager_ms"] == before["t2"]["eager_ms"] and after["t3"]["status"] == "ok"


def test_set_changes_how_this_call_measures_and_the_manifest_says_so(tmp_path, tanh_tasks):
    """`opsynth profile DIR --set profile.KEY=VALUE` reaches the workers for this call only (max_runs 3 and an
    unreachable IQR target: every task times exactly 3 runs) and is logged with the call; config.toml is kept."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    rd, cfg = _run_dir(tmp_path / "r", tanh_tasks(2))
    cfg_before = (rd.path / "config.toml").read_text()
    root = Path(__file__).resolve().parents[2]
    p = subprocess.run([sys.executable, "-m", "pipeline.cli", "profile", str(rd.path), "--set", "profile.min_runs=3",
                        "--set", "profile.max_runs=3", "--set", "profile.iqr_target=1e-9"],
                       cwd=root, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert {m["eager_runs"] for m in rd.read_rows("measurements")} == {3}
    call = json.loads((rd.path / "manifest.json").read_text())["stages"]["profile"]["calls"][-1]
    assert call["settings"] == {"profile.min_runs": 3, "profile.max_runs": 3, "profile.iqr_target": 1e-9}
    assert (rd.path / "config.toml").read_text() == cfg_before


def test_a_remeasure_copy_measures_exactly_the_given_indices_again(tmp_path, tanh_tasks):
    """benchmarks/remeasure_copy.py: the copy lacks the measurements of tasks [1, 4) (across shards, keeping the
    others and the markers), profile measures those three again, and the original run is left as it was."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from remeasure_copy import remeasure_copy, select_tasks

    rd, cfg = _run_dir(tmp_path / "r", tanh_tasks(5))
    profile.run(rd, cfg)
    before = {m["task_id"]: m["eager_ms"] for m in rd.read_rows("measurements")}
    assert remeasure_copy(rd.path, tmp_path / "copy", select_tasks(rd.path, "1:4", None)[2]) == 3
    copy = RunDir(tmp_path / "copy")
    assert sorted(m["task_id"] for m in copy.read_rows("measurements")) == ["t0", "t4"]
    out = profile.run(copy, copy.load_config())
    assert out["measured_now"] == 3 and _shards(copy) == {0: ["t0", "t1"], 1: ["t2", "t3"], 2: ["t4"]}
    assert {m["task_id"]: m["eager_ms"] for m in rd.read_rows("measurements")} == before


def test_a_remeasure_copy_of_named_tasks_forgets_only_those(tmp_path, tanh_tasks):
    """benchmarks/remeasure_copy.py --ids: only the named tasks (e.g. the ones that stalled a call) are unmeasured
    in the copy; an id the run lacks is one error line naming it, and no copy is made."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "remeasure_copy.py"
    rd, cfg = _run_dir(tmp_path / "r", tanh_tasks(5))
    profile.run(rd, cfg)
    r = subprocess.run([sys.executable, str(script), "--run", str(rd.path), "--out", str(tmp_path / "copy"),
                        "--ids", "t3,t1"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    copy = RunDir(tmp_path / "copy")
    assert sorted(m["task_id"] for m in copy.read_rows("measurements")) == ["t0", "t2", "t4"]
    assert profile.run(copy, copy.load_config())["measured_now"] == 2
    bad = subprocess.run([sys.executable, str(script), "--run", str(rd.path), "--out", str(tmp_path / "c2"),
                          "--index", "0:2", "--ids", "t3"], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "t3" in bad.stderr and not (tmp_path / "c2").exists()


def test_arms_compare_pairs_only_tasks_every_arm_measured(tmp_path):
    """benchmarks/arms_compare.py: an arm cut short compares on what all arms finished; throughput is the worker
    time per task over the workers; timings are each arm's over the first arm's on tasks ok in both."""
    import sys
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from arms_compare import compare, read_arm

    def row(t, wall, eager, status="ok"):
        return {"task_id": t, "status": status, "wall_s": wall, "cpu_s": 1.0, "eager_ms": eager, "compile_ms": eager / 2}

    for arm, rows in {"a": [row("t0", 4.0, 2.0), row("t1", 4.0, 4.0), row("t2", 8.0, 1.0),
                            {"task_id": "t3", "status": "skipped", "wall_s": None}],
                      "b": [row("t0", 2.0, 2.2), row("t1", 2.0, 4.0, status="error")]}.items():
        (tmp_path / arm).mkdir()
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / arm / "part-00000.parquet")
    arms = {k: read_arm(tmp_path / k) for k in ("a", "b")}
    assert sorted(arms["a"]) == ["t0", "t1", "t2"]  # the skipped row is no measurement
    res = compare(arms, workers=2)
    a, b = res["arms"]
    assert res["tasks"] == 2 and a["wall_s"] == 4.0 and b["wall_s"] == 2.0
    assert a["s_per_task_at_full_occupancy"] == 2.0 and b["s_per_task_at_full_occupancy"] == 1.0
    assert b["ok"] == 1 and b["eager_over_first"]["tasks"] == 1 and b["eager_over_first"]["median_ratio"] == 1.1
    assert b["compile_over_first"]["median_ratio"] == 1.1


def test_profile_arms_measure_the_same_tasks_with_each_arms_settings(tmp_path, tanh_tasks):
    """benchmarks/profile_arms.py: each arm profiles the tasks [1, 3) again in its own copy with its own --set, the
    run itself is left as it was, and arms.json sets the arms side by side on those tasks."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    rd, cfg = _run_dir(tmp_path / "r", tanh_tasks(4))
    profile.run(rd, cfg)
    before = {m["task_id"]: m["eager_runs"] for m in rd.read_rows("measurements")}
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "profile_arms.py"
    out = tmp_path / "arms"
    r = subprocess.run([sys.executable, str(script), "--run", str(rd.path), "--index", "1:3", "--out", str(out),
                        "--arm", "base",
                        "--arm", "more_runs=profile.min_runs=9,profile.iqr_target=1.0,profile.max_runs=9,workers=2",
                        "--set", "profile.max_runs=20", "--workers", "1"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((out / "arms.json").read_text())
    assert res["tasks"] == 2 and [a["arm"] for a in res["arms"]] == ["base", "more_runs"]
    assert [x["measured"] for x in res["runs"]] == [2, 2] and res["runs"][1]["settings"][-1] == "profile.max_runs=9"
    assert [x["workers"] for x in res["runs"]] == [1, 2] and [x["workers"] for x in res["arms"]] == [1, 2]
    more_wall = res["arms"][1]["wall_s"]
    assert res["arms"][1]["s_per_task_at_full_occupancy"] == round(more_wall / 2, 4)
    base, more = (RunDir(out / n) for n in ("base", "more_runs"))
    runs = {n: {m["task_id"]: m["eager_runs"] for m in d.read_rows("measurements")} for n, d in
            (("base", base), ("more", more))}
    # the arm's settings were the ones measured with (min = max: a loaded CPU's spread cannot add a batch)
    assert runs["more"]["t1"] == runs["more"]["t2"] == 9
    assert runs["more"]["t0"] == before["t0"] and runs["base"]["t3"] == before["t3"]  # the others kept
    assert {m["task_id"]: m["eager_runs"] for m in rd.read_rows("measurements")} == before


def test_an_arm_names_profile_settings_and_workers_only():
    import sys
    from pathlib import Path

    import pytest

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from profile_arms import parse_arm

    assert parse_arm("base") == ("base", [], None)
    assert parse_arm("w20=workers=20,profile.mps=true") == ("w20", ["profile.mps=true"], 20)
    for bad in ("x=run.seed=3", "x=workers=0", "x=profile.mps", "a b=profile.mps=true"):
        with pytest.raises(SystemExit, match="give NAME or NAME=ITEM"):
            parse_arm(bad)


def test_a_remeasure_copy_takes_back_kept_rows_in_their_shards(tmp_path, tanh_tasks):
    """benchmarks/remeasure_copy.py --rows: rows kept from an earlier re-measure go back into the shards of their
    tasks, in task order with markers, so the copy is whole again without a GPU; rows of tasks it has are refused."""
    import sys
    from pathlib import Path

    import pytest

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from remeasure_copy import remeasure_copy, restore_rows, select_tasks

    rd, cfg = _run_dir(tmp_path / "r", tanh_tasks(5))
    profile.run(rd, cfg)
    rows = {m["task_id"]: m for m in rd.read_rows("measurements")}
    kept = [dict(rows[t], eager_ms=100.0 + i) for i, t in enumerate(["t3", "t1", "t2"])]  # any order
    remeasure_copy(rd.path, tmp_path / "copy", select_tasks(rd.path, "1:4", None)[2])
    assert restore_rows(tmp_path / "copy", kept) == 3
    copy = RunDir(tmp_path / "copy")
    assert _shards(copy) == {0: ["t0", "t1"], 1: ["t2", "t3"], 2: ["t4"]}
    got = {m["task_id"]: m["eager_ms"] for m in copy.read_rows("measurements")}
    assert got == {"t0": rows["t0"]["eager_ms"], "t1": 101.0, "t2": 102.0, "t3": 100.0, "t4": rows["t4"]["eager_ms"]}
    with pytest.raises(SystemExit, match="does not lack"):
        restore_rows(tmp_path / "copy", [rows["t0"]])


def test_budget_trace_counts_whole_cap_retries_and_their_waits(tmp_path, other_pid, monkeypatch):
    """benchmarks/budget_trace.py on a trace the real MemoryBudget wrote: one worker's task outgrows its share and
    runs again with the whole cap, which waits for the other worker's task to end."""
    import sys
    import threading
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from budget_trace import read_trace, tasks_of, waits, whole_cap

    from pipeline.gpu.gpu_share import MemoryBudget

    trace = tmp_path / "trace.txt"
    monkeypatch.setenv("OPSYNTH_BUDGET_TRACE", str(trace))
    path = str(tmp_path / "gpu.mem")
    a, b = MemoryBudget(path, 10, lambda _: None, owner=other_pid), MemoryBudget(path, 10, lambda _: None)
    a.reserve(4)
    b.reserve(3)
    b.release()  # b's first attempt failed: it asks for the whole cap (8), more than the 6 left beside a's 4
    t = threading.Thread(target=lambda: b.reserve(8))
    t.start()
    t.join(0.3)
    assert t.is_alive()
    a.release()
    t.join(5)
    b.release()
    rows = read_trace(trace)
    assert whole_cap(rows) == 8
    tasks = tasks_of(rows, 8)
    assert sorted((t["whole_cap"], t["retried"]) for t in tasks) == [(False, False), (False, True), (True, False)]
    w = waits(rows, cap=8)
    assert w["whole_cap"]["waits"] == 1 and w["whole_cap"]["seconds"] >= 0.3 and w["other"]["waits"] == 0


def test_pipeline_yield_counts_reservation_retries_only_where_rows_record_them():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from pipeline_yield import reservation_retries

    rows = [{"task_id": "old"}, {"task_id": "old2", "reservation_retry": None},  # measured before the column
            {"task_id": "a", "reservation_retry": ""}, {"task_id": "b", "reservation_retry": "7.00 GiB: oom: CUDA"},
            {"task_id": "c", "reservation_retry": "6.20 GiB: oom in compiled-run: CUDA out of memory"},
            {"task_id": "d", "reservation_retry": "5.00 GiB: oom in compiled-run: CUDA"},
            {"task_id": "e", "reservation_retry": "5.00 GiB: timing alloc retries 2"}]
    got = reservation_retries(rows)
    assert got["tasks_recorded"] == 5 and got["retried"] == 4 and got["examples"][0] == "b: 7.00 GiB: oom: CUDA"
    assert got["by_step"] == {"oom in compiled-run": 2, "oom": 1, "timing alloc retries": 1}


def test_pipeline_yield_names_the_first_compiled_runs_that_held_the_gpu_longest():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from pipeline_yield import long_first_compiled_runs

    rows = [{"task_id": "old"}, {"task_id": "a", "gpu_busy_compile_s": 0.4}, {"task_id": "b", "gpu_busy_compile_s": 48.5},
            {"task_id": "c", "gpu_busy_compile_s": 12.0}, {"task_id": "d", "gpu_busy_compile_s": 10.0}]
    got = long_first_compiled_runs(rows)
    assert got["tasks"] == 2 and got["gpu_busy_s"] == 60.5 and got["examples"] == ["b: 48.5 s", "c: 12.0 s"]
    assert long_first_compiled_runs(rows, over_s=0.1)["tasks"] == 4


def test_pipeline_yield_finish_timeline_shows_a_stalled_pool():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from pipeline_yield import finish_timeline

    # four tasks finish in each 10 s bin except the third, where the pool waited behind one long shared section
    rows = [{"task_id": f"t{b}{i}", "started_at": str(1000.0 + b * 10 + i), "wall_s": 0.5}
            for b in (0, 1, 3, 4) for i in range(4)] + [{"task_id": "old"}]
    got = finish_timeline(rows, bin_s=10.0)
    assert got["finished"] == [[4, 4, 0, 4, 4]] and got["median"] == 4 and got["stalled_s"] == 10.0
    # a second call an hour later is its own list: the hour between them is no stall
    later = [{"task_id": f"u{i}", "started_at": str(4600.0 + i), "wall_s": 0.5} for i in range(8)]
    got = finish_timeline(rows + later, bin_s=10.0)
    assert got["finished"] == [[4, 4, 0, 4, 4], [8]] and got["stalled_s"] == 10.0
    assert finish_timeline([{"task_id": "old"}]) is None


def test_budget_trace_keeps_the_files_order_where_times_tie(tmp_path):
    """A worker's release and its next task's first request within one millisecond: the file's order (written under
    the budget's lock) says which came first, not the event names."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from budget_trace import read_trace, tasks_of

    trace = tmp_path / "trace.txt"
    trace.write_text("1.000 7 admit 5 0 5 10 1 0 0 1\n2.000 7 release 5 0 5 10 1 0 0 1\n"
                     "2.000 7 admit 6 0 6 10 1 0 0 1\n3.000 7 release 6 0 6 10 1 0 0 1\n")
    tasks = tasks_of(read_trace(trace), cap=6)
    assert [[e[3] for e in t["events"] if e[2] == "admit"] for t in tasks] == [[5], [6]]


def test_budget_trace_replays_the_waits_with_retries_sized_on_what_they_outgrew(tmp_path):
    """Budget 10: worker 7's task outgrew 3 and holds the whole cap 8; worker 9 waits 2 s for 4. At 2x what it
    outgrew the retry would have held 6, and 6 + 4 fits: both seconds of the wait; as it was, none."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from budget_trace import read_trace, retry_replay

    trace = tmp_path / "trace.txt"
    trace.write_text("0.000 7 admit 3 0 3 10 1 0 0 1\n1.000 7 release 3 0 3 10 1 0 0 1\n"
                     "1.000 7 admit 8 0 8 10 1 0 0 1\n2.000 9 wait 4 8 8 10 1 1 0 1\n"
                     "4.000 7 release 8 0 8 10 1 1 0 1\n4.000 9 admit 4 0 4 10 1 0 0 1\n")
    rows = read_trace(trace)
    sized = retry_replay(rows, cap=8, factor=2.0)
    assert sized["worker_s_waited"] == 2.0 and sized["worker_s_that_would_fit"] == 2.0
    assert sized["worker_s_that_fit_as_it_was"] == 0.0
    assert sized["whole_cap_share_of_budget"] == round(3 * 8 / 4 / 10, 3)  # 8 of 10 held for 3 of the 4 s
    assert retry_replay(rows, cap=8, factor=3.0)["worker_s_that_would_fit"] == 0.0  # 9 is over the cap: 8 + 4 > 10


def test_pipeline_yield_reads_the_steady_state_apart_from_the_start(tmp_path):
    """Utilisation over the busy span counts the workers' start; the figure after the span's first minute must not."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from pipeline_yield import smi_utilisation

    lines = ["timestamp, index, utilization.gpu [%], memory.used [MiB]"]
    for k in range(240):  # 120 s at 500 ms: idle, a slow start, then busy
        util = 0 if k < 4 else 20 if k < 124 else 90
        lines.append(f"2026/12/02 09:{k // 120:02d}:{(k % 120) // 2:02d}.{500 * (k % 2):03d}, 0, {util} %, 1000 MiB")
    path = tmp_path / "smi.csv"
    path.write_text("\n".join(lines) + "\n")
    u = smi_utilisation(path)
    assert u["mean_after_first_minute"] == 90.0
    assert 50 < u["mean_busy_span"] < 60
    assert u["mean_steady_state"] == 90.0  # busy to the end: no tail to leave out
    path.write_text("\n".join(line.replace("2026/12/02 ", "") for line in lines) + "\n")  # no dates: no steady figure
    assert smi_utilisation(path)["mean_after_first_minute"] is None and smi_utilisation(path)["mean_steady_state"] is None


def test_pipeline_yield_weighs_a_stage_of_several_calls_by_their_samples(tmp_path):
    """A stage profiled in two calls: each call's own figures, and the stage's mean over every sample of both (a
    short call weighs less than a long one, not half)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from pipeline_yield import stage_utilisation

    def call(path: Path, samples: int, util: int) -> Path:
        rows = [f"2026/12/02 09:{k // 120:02d}:{(k % 120) // 2:02d}.{500 * (k % 2):03d}, 0, {util} %, 1000 MiB"
                for k in range(samples)]
        path.write_text("timestamp, index, utilization.gpu [%], memory.used [MiB]\n" + "\n".join(rows) + "\n")
        return path

    long, short = call(tmp_path / "a.csv", 300, 90), call(tmp_path / "b.csv", 100, 50)
    u = stage_utilisation([long, short])
    assert [c["mean_all"] for c in u["calls"]] == [90, 50] and u["samples"] == 400
    assert u["mean_all"] == 80.0  # (300 * 90 + 100 * 50) / 400, not (90 + 50) / 2
    assert stage_utilisation([long])["mean_all"] == 90 and "calls" not in stage_utilisation([long])
    assert stage_utilisation([]) is None


def test_pipeline_yield_leaves_the_tail_out_of_the_steady_state(tmp_path):
    """The last TAIL_S seconds of the busy span (the last tasks finishing) count after the first minute, not in the
    steady state."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from pipeline_yield import TAIL_S, smi_utilisation

    lines = ["timestamp, index, utilization.gpu [%], memory.used [MiB]"]
    n = 360  # 180 s at 500 ms: 60 s start, 90 s busy, a tail of TAIL_S at 10%
    tail_from = n - int(2 * TAIL_S)
    for k in range(n):
        util = 30 if k < 120 else 90 if k < tail_from else 10
        lines.append(f"2026/12/02 09:{k // 120:02d}:{(k % 120) // 2:02d}.{500 * (k % 2):03d}, 0, {util} %, 1000 MiB")
    path = tmp_path / "smi.csv"
    path.write_text("\n".join(lines) + "\n")
    u = smi_utilisation(path)
    assert u["mean_steady_state"] == 90.0
    assert u["mean_after_first_minute"] == round((90 * (tail_from - 120) + 10 * (n - tail_from)) / (n - 120), 1)


def test_pipeline_yield_projects_a_call_to_other_lengths(tmp_path):
    """The projection keeps the call's first minute and last TAIL_S seconds and stretches what lies between: at the
    call's own length it gives back the mean over all samples, and longer calls approach the middle's mean."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from pipeline_yield import TAIL_S, call_length_projection, smi_utilisation

    lines = ["timestamp, index, utilization.gpu [%], memory.used [MiB]"]
    n = 360  # 180 s at 500 ms: an idle first half minute, a slow second one, 90 s at 92%, a tail of TAIL_S at 40%
    tail_from = n - int(2 * TAIL_S)
    vals = [0 if k < 60 else 50 if k < 120 else 92 if k < tail_from else 40 for k in range(n)]
    for k, util in enumerate(vals):
        lines.append(f"2026/12/02 09:{k // 120:02d}:{(k % 120) // 2:02d}.{500 * (k % 2):03d}, 0, {util} %, 1000 MiB")
    path = tmp_path / "smi.csv"
    path.write_text("\n".join(lines) + "\n")
    u = smi_utilisation(path)
    assert u["first_minute_idle_gpu_s"] == 30 + 15  # 30 s idle, 30 s at half
    assert u["last_seconds_idle_gpu_s"] == 18.0
    assert u["middle_mean"] == 92.0
    when = [1000.0 + 0.5 * k for k in range(n)]
    own = call_length_projection(vals, when, minutes=(3,))["projected_mean_all_3_min"]
    assert own == round(sum(vals) / n, 1)
    assert own < u["projected_mean_all_15_min"] < u["projected_mean_all_60_min"] < 92.0
    assert call_length_projection(vals[:150], when[:150]) == {}  # no middle between the first minute and the tail


def test_a_remeasure_copy_refuses_a_run_with_other_unmeasured_tasks(tmp_path, tanh_tasks):
    """The copy's profile takes pending tasks in order: with tasks of the run unmeasured outside the chosen ones it
    would measure those first, so the copy is refused with one line naming where they start, and none is made."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from remeasure_copy import remeasure_copy, select_tasks

    rd, cfg = _run_dir(tmp_path / "r", tanh_tasks(5))
    profile.run(rd, cfg)
    copy = tmp_path / "copy"
    remeasure_copy(rd.path, copy, select_tasks(rd.path, "3:5", None)[2])  # 3 and 4 unmeasured in the copy
    with pytest.raises(SystemExit, match="unmeasured tasks besides the chosen ones .the first at index 3."):
        remeasure_copy(copy, tmp_path / "copy2", select_tasks(copy, "4:5", None)[2])
    assert not (tmp_path / "copy2").exists()
    assert remeasure_copy(copy, tmp_path / "copy3", select_tasks(copy, "3:5", None)[2]) == 0  # the pending ones: fine


def test_profile_arms_that_measured_nothing_in_common_say_so_in_one_line(tmp_path, tanh_tasks):
    """An arm stopped before it finished any of the chosen tasks: the script ends on one error line (it raised a
    TypeError formatting the missing figures before), arms.json kept."""
    import subprocess
    import sys
    from pathlib import Path

    rd, cfg = _run_dir(tmp_path / "r", tanh_tasks(3))
    profile.run(rd, cfg)
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "profile_arms.py"
    out = tmp_path / "arms"
    r = subprocess.run([sys.executable, str(script), "--run", str(rd.path), "--index", "0:3", "--out", str(out),
                        "--arm", "base", "--workers", "1", "--max-seconds", "0.01"],
                       capture_output=True, text=True, timeout=300)
    # (the arm's own profile, interrupted while it starts, may print above it)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines()[-1].startswith("error: no task of --index/--ids was measured by every arm")
    assert (out / "arms.json").exists()


def test_pipeline_yield_reads_output_checksums_and_none_from_shards_written_before_them(tmp_path):
    """A repeat says which side of a compile check moved from the output checksums; a run measured before they were
    recorded (its shards lack the columns) reads as none, not as an unreadable shard."""
    import sys
    from pathlib import Path

    import pyarrow as pa

    from pipeline.rundir.schema import MEASUREMENTS, conform
    from pipeline.rundir.store import RunDir

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from pipeline_yield import measured

    rd = RunDir(tmp_path / "run")
    rd.write_shard("measurements", 0, conform([{"task_id": "a", "status": "ok", "eager_checksum": 1.5,
                                                "compile_checksum": 2.5}], MEASUREMENTS), MEASUREMENTS)
    older = pa.schema([f for f in MEASUREMENTS if f.name not in ("eager_checksum", "compile_checksum")])
    rd.write_shard("measurements", 1, conform([{"task_id": "b", "status": "ok"}], older), older)
    cols = ("eager_checksum", "compile_checksum", "compile_rerun_checksum")
    got = {t: {c: m[c] for c in cols} for t, m in measured(rd).items()}
    assert got["a"] == {"eager_checksum": 1.5, "compile_checksum": 2.5, "compile_rerun_checksum": None}
    assert got["b"] == {"eager_checksum": None, "compile_checksum": None, "compile_rerun_checksum": None}


def test_pipeline_yield_counts_compiled_graphs_whose_bits_changed_within_a_run():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from pipeline_yield import compiled_reruns

    rows = [{"task_id": "old"},  # measured before the checksums
            {"task_id": "untimed", "compile_checksum": 3.0, "compile_rerun_checksum": None},  # no warm-up ran
            {"task_id": "same", "compile_checksum": 3.0, "compile_rerun_checksum": 3.0},
            {"task_id": "moved", "compile_checksum": 3.0, "compile_rerun_checksum": 3.5}]
    assert compiled_reruns(rows) == {"tasks_recorded": 2, "differ": 1, "examples": ["moved"]}


def test_verdict_flips_probes_a_task_in_fresh_processes_beside_a_busy_neighbour(tmp_path):
    """benchmarks/verdict_flips.py on the CPU: a deterministic task gives one eager and one compiled checksum over
    its fresh processes and one verdict, while a neighbour keeps the device busy; an id the run lacks is one line."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = ("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n"
            "        return torch.softmax(x, dim=1).cumsum(1)\n"
            "def get_inputs():\n    return [torch.randn(8, 32)]\ndef get_init_inputs():\n    return []\n")
    rd, _ = _run_dir(tmp_path / "run", [{"task_id": "t1", "code": code}], shard_size=1)
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = tmp_path / "flips.json"
    done = subprocess.run([sys.executable, "benchmarks/verdict_flips.py", "--run", str(rd.path), "--ids", "t1",
                           "--reps", "2", "--neighbours", "1", "--device", "cpu", "--out", str(out)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(out.read_text())
    assert got["summary"]["t1"] == {"processes": 2, "eager_checksums": 1, "compiled_checksums": 1, "verdicts": [True]}
    assert got["neighbours"] == 1 and all(r["eager"] != 0 for r in got["rows"])
    missing = subprocess.run([sys.executable, "benchmarks/verdict_flips.py", "--run", str(rd.path), "--ids", "nope",
                              "--device", "cpu", "--out", str(out)], cwd=root, env=env, capture_output=True,
                             text=True, timeout=600)
    assert missing.returncode != 0 and "has no task nope" in missing.stderr
