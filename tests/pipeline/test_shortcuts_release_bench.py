"""benchmarks/shortcuts_release.py: the re-check's progress over a release's tables, and where its workers' seconds
went (the shortcuts rows' call_* columns; rows written before those columns are left out of that split)."""

import sys
from pathlib import Path


def _summarize():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from shortcuts_release import summarize

    return summarize


def test_counts_and_the_split_of_worker_seconds():
    measurements = [{"task_id": t, "status": "ok"} for t in "abcd"]
    verdicts = [{"task_id": "d", "stage": "filter", "keep": False}]
    timed = {"call_wall_s": 10.0, "call_gpu_busy_s": 2.0, "call_lock_wait_s": 1.0, "call_budget_wait_s": 3.0}
    shortcuts = [{"task_id": "a", "status": "ok", "shortcut_checks": "dead", "dead_inputs": ["y"], **timed},
                 {"task_id": "b", "status": "ok", "shortcut_checks": "dead,skip,fragile", **timed,
                  "call_wall_s": 20.0, "gpu_busy_fragile_s": 1.5, "fragile_weights": "fresh"},
                 {"task_id": "c", "status": "ok", "shortcut_checks": "dead,skip,fragile"},  # before call_* existed
                 {"task_id": "d", "status": "ok", "shortcut_checks": "dead", **timed}]  # dropped before: not counted
    calls = [{"seconds": 50.0, "measured_now": 4, "settings": {"profile.shortcuts_only": True}},
             {"seconds": 30.0, "measured_now": 6, "gpus": 2, "workers_ready_s": 5.0,
              "settings": {"profile.shortcuts_only": True}},
             {"seconds": 900.0, "measured_now": 100, "settings": {}}]
    s = _summarize()(measurements, verdicts, shortcuts, calls)
    assert (s["tasks_to_check"], s["checked"], s["found"], s["left"]) == (3, 3, {"dead": 1, "any": 1}, 0)
    assert s["tasks_per_s"] == 10 / 80.0
    # the latest shortcuts-only call on its own (the figure a change of the checks is judged by)
    assert s["latest_call"]["rows"] == 6 and s["latest_call"]["gpus"] == 2 and s["latest_call"]["seconds"] == 30.0
    g = s["check_gpu_s"]
    assert g["rows"] == 2 and g["fragile"] == 1.5 and g["fragile_per_row"]["fresh"] == {"rows": 1, "mean_s": 1.5}
    w = s["worker_seconds"]
    assert w["rows"] == 2 and w["wall"] == 30.0 and w["gpu_busy"] == 4.0 and w["budget_wait"] == 6.0
    assert w["host"] == 30.0 - 4.0 - 2.0 - 6.0 and w["median_wall_s"] == 20.0


def test_the_reservations_count_tasks_at_the_largest_one():
    measurements = [{"task_id": t, "status": "ok"} for t in "abcd"]
    timed = {"call_wall_s": 5.0, "call_gpu_busy_s": 1.0, "call_lock_wait_s": 0.0, "call_budget_wait_s": 3.0}
    gib = {"a": 6.5, "b": 26.0, "c": 26.0, "d": None}  # d: a row from before the column
    shortcuts = [{"task_id": t, "status": "ok", "shortcut_checks": "dead,skip,fragile", **timed,
                  **({"call_reserved_gib": g} if g is not None else {})} for t, g in gib.items()]
    g = _summarize()(measurements, [], shortcuts, [])["reservations"]
    assert g == {"rows": 3, "median_gib": 26.0, "largest_gib": 26.0, "at_largest": 2}
