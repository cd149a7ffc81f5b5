"""benchmarks/first_run_holds.py: which tasks a lock trace shows behind long first compiled runs, and what a first
compiled run does while it holds the GPU lock (profiled again, here on the CPU)."""

import dataclasses
import gzip
import json
import sys
from pathlib import Path

from pipeline.rundir.config import load_preset
from pipeline.rundir.schema import MEASUREMENTS, TASKS, conform
from pipeline.rundir.store import RunDir

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def _run(path: Path, tasks: list[dict], compile_: bool = True) -> RunDir:
    cfg = load_preset("demo")
    cfg = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, workers=1, n=len(tasks), shard_size=len(tasks)),
                              profile=dataclasses.replace(cfg.profile, compile=compile_))
    rd = RunDir(path)
    rd.init(cfg)
    rd.write_shard("tasks", 0, conform(tasks, TASKS), TASKS)
    return rd


def test_the_tasks_behind_long_first_runs_are_read_from_a_lock_trace(tmp_path, tanh_tasks):
    from first_run_holds import tasks_behind_long_holds

    rd = _run(tmp_path / "r", tanh_tasks(3))
    # worker 7 runs t0 (a 2.5 s first run) then t1 (0.1 s); worker 8 runs t2 (3 s) starting 10 ms after t1
    rows = [{"task_id": "t0", "status": "ok", "started_at": 100.0}, {"task_id": "t1", "status": "ok",
            "started_at": 110.0}, {"task_id": "t2", "status": "ok", "started_at": 200.0}]
    rd.write_shard("measurements", 0, conform(rows, MEASUREMENTS), MEASUREMENTS)
    lines = ["100.001 7 hold shared eager", "100.2 7 free shared eager", "101.0 7 hold shared compiled-run",
             "103.5 7 free shared compiled-run", "104.0 7 hold exclusive timing", "104.1 7 free exclusive timing",
             "110.005 7 hold shared eager", "110.1 7 free shared eager", "111.0 7 hold shared compiled-run",
             "111.1 7 free shared compiled-run",
             "199.5 8 hold shared free-memory", "199.6 8 free shared free-memory",
             "200.01 8 hold shared eager", "200.3 8 free shared eager", "201.0 8 hold shared compiled-run",
             "204.0 8 free shared compiled-run"]
    trace = tmp_path / "lock_trace.txt.gz"
    with gzip.open(trace, "wt") as f:
        f.write("\n".join(lines) + "\n")
    assert tasks_behind_long_holds(str(rd.path), str(trace), 0.5) == ["t0", "t2"]
    assert tasks_behind_long_holds(str(rd.path), str(trace), 2.8) == ["t2"]


def test_a_first_compiled_run_is_timed_and_profiled_where_the_run_profiles(tmp_path, tanh_tasks):
    from first_run_holds import main

    rd = _run(tmp_path / "r", tanh_tasks(2))
    out = tmp_path / "holds.json"
    assert main(["--run", str(rd.path), "--name-regex", "Tanh", "--limit", "1", "--workers", "1", "--over", "0",
                 "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["chosen"] == 1 and got["workers_failed"] == 0
    assert [t["task_id"] for t in got["tasks"]] == ["t0"] and got["tasks"][0]["compile_wall_s"] > 0
    # the warm-up's compile is left out: every hold is the task's, profiled (over 0 s), its frames in the graph's call
    assert got["holds"] and {h["task"] for h in got["holds"]} == {"t0"}
    assert all("aot_autograd" in h["frames"] for h in got["holds"])


def test_no_chosen_task_is_one_clear_line(tmp_path, tanh_tasks, capsys):
    from first_run_holds import main

    rd = _run(tmp_path / "r", tanh_tasks(1))
    assert main(["--run", str(rd.path), "--name-regex", "Conv"]) == 2
    assert "no task chosen" in capsys.readouterr().err


PROFILE = """   ncalls  tottime  percall  cumtime  percall filename:lineno(function)
        1    0.000    0.000    2.676    2.676 /x/lib/python3.12/site-packages/torch/_inductor/output_code.py:628(__call__)
        1    0.000    0.000    2.666    2.666 /tmp/torchinductor_me/u3/cu3q.py:115(call)
        2    0.000    0.000    2.649    1.325 /x/site-packages/torch/_inductor/runtime/triton_heuristics.py:1005(copy_args_to_cpu_if_needed)
        2    0.000    0.000    2.645    1.322 {built-in method torch.empty_strided}
        1    0.016    0.016    0.016    0.016 /usr/lib/python3.12/copy.py:118(deepcopy)
"""


def test_a_hold_profile_says_where_its_time_went_without_the_machine_folders():
    from first_run_holds import COPIES, innermost_heavy_frame, seconds_in, short_paths

    text = short_paths(PROFILE)
    assert "/x/" not in text and "/tmp/" not in text and "/usr/" not in text
    assert "compiled/u3/cu3q.py:115(call)" in text and "copy.py:118(deepcopy)" in text
    assert seconds_in(text, COPIES) == 2.649 and seconds_in(text, "nothing_here") == 0.0
    assert innermost_heavy_frame(text) == "{built-in method torch.empty_strided}"
