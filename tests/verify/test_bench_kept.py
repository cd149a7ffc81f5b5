"""benchmarks/verify_bench.py's kept section: the stored corpus figures counted again over the pairs whose task the
shortcut checks keep, from a corpus_task_checks result; it refuses a recount it cannot make whole."""

import argparse
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("verify_bench", ROOT / "benchmarks/verify_bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _setup(tmp_path, checked):
    corpus = tmp_path / "pairs.jsonl"
    corpus.write_text("".join(json.dumps({"task": f"DS:{t}", "candidate": f"{t}.py"}) + "\n" for t in "abc"))
    checks = tmp_path / "checks.json"
    checks.write_text(json.dumps({"rows": checked}))
    args = argparse.Namespace(corpus=[str(corpus)], n_honest=None, task_checks=[str(checks)])
    stored = {"corpus": {"pairs": 3, "listed": 3, "penalized": 3, "penalized_pairs": [
        {"task": "DS:a", "rewards": [-1, -1]}, {"task": "DS:b", "rewards": [1, -1]}]}}
    return args, stored


def test_pairs_on_dropped_tasks_leave_the_count_and_the_rest_stay(tmp_path):
    vb = _bench()
    args, stored = _setup(tmp_path, [{"task_id": "a", "dropped_by": "fragile: 16-ulp input move"},
                                     {"task_id": "b", "dropped_by": ""}, {"task_id": "c", "dropped_by": ""}])
    got = vb.kept(args, "unused", stored)
    assert (got["pairs"], got["verified"], got["penalized"]) == (2, 4, 1)
    assert got["dropped"] == {"a": "fragile: 16-ulp input move"}


def test_a_corpus_task_the_checks_did_not_reach_stops_the_recount(tmp_path):
    vb = _bench()
    args, stored = _setup(tmp_path, [{"task_id": "a", "dropped_by": ""}, {"task_id": "b", "error": "timeout"},
                                     {"task_id": "c", "dropped_by": ""}])
    with pytest.raises(SystemExit, match="lack 1 corpus task"):
        vb.kept(args, "unused", stored)
