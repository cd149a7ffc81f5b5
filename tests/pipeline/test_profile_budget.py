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
    rd.write_verdicts("decontaminate", [{"task_id": t["task_id"], "keep": True} for t in tanh_tasks(2)])  # profile's input
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
