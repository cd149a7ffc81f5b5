"""publish with the v2 additions: a held-out `validation` split of whole operator multisets that datasets loads
beside `train`, a `profile_call` per row pointing into the manifest's `profile_calls`, and the card's "What
changed" and difficulty sections."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from pipeline.outputs.provenance import multiset_key, validation_ids
from pipeline.outputs.publish import publish
from pipeline.rundir.config import load_preset
from pipeline.rundir.schema import MEASUREMENTS, TASKS
from tests.pipeline.test_publish import _measurement, _task

OPS = [["nn.Linear", "torch.relu"], ["nn.Linear", "torch.tanh"], ["torch.relu", "nn.Linear"], ["F.gelu"]]


def _run(tmp_path: Path, share: float):
    from pipeline.rundir.store import RunDir

    n = 40
    cfg = load_preset("demo")
    cfg = dataclasses.replace(cfg, publish=dataclasses.replace(cfg.publish, validation_share=share),
                              run=dataclasses.replace(cfg.run, n=n, shard_size=n))
    rd = RunDir(tmp_path / "run")
    rd.init(cfg)
    # the multiset decides the split: vary it enough that some land in each split
    tasks = [{**_task(i), "ops": OPS[i % 4] + [f"torch.op{i % 13}"]} for i in range(n)]
    rd.write_shard("tasks", 0, tasks, TASKS)
    started = time.time() - 5
    rd.write_shard("measurements", 0, [{**_measurement(i), "started_at": started} for i in range(n)], MEASUREMENTS)
    rd.record_stage("profile", 10.0, profiled=n, settings={"profile.shortcut_checks": ["dead"]})
    shortcut = {5: "dead input: y (ratio 0.1)", 6: "skippable operator: 0:torch.renorm (mean, ratio 0.2)",
                7: "fragile: one-ulp input move (ratio 3)"}
    rd.write_verdicts("filter", [{"task_id": f"{i:016x}", "keep": i not in shortcut, "reason": shortcut.get(i, "")}
                                 for i in range(n)])
    for stage in ("decontaminate", "dedupe"):
        rd.write_verdicts(stage, [{"task_id": f"{i:016x}", "keep": True, "reason": ""} for i in range(n)])
    return rd, tasks


def test_validation_split_loads_beside_train_and_shares_no_multiset(tmp_path: Path):
    from datasets import load_dataset

    rd, tasks = _run(tmp_path, share=0.3)
    out = publish(rd, tmp_path / "out", allow_incomplete=True)
    dd = load_dataset(str(out), cache_dir=str(tmp_path / "hf"))
    assert set(dd) == {"train", "validation"}
    train, val = dd["train"], dd["validation"]
    assert len(val) > 0 and len(train) > 0 and len(train) + len(val) == 37  # 3 shortcut tasks dropped
    keys = {multiset_key(r) for r in train["ops_list"]}
    assert not keys & {multiset_key(r) for r in val["ops_list"]}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["splits"] == {"train": len(train), "validation": len(val)}
    calls = {c["id"]: c for c in manifest["profile_calls"]}
    assert set(train["profile_call"]) == {"p00"} and calls["p00"]["settings"] == {"profile.shortcut_checks": ["dead"]}
    card = (out / "README.md").read_text()
    assert "## What changed" in card and "**dead input**: 1 tasks removed" in card
    assert "**skippable operator**: 1 tasks" in card and "**fragile**: 1 tasks" in card
    assert "measured 0 of the 37 rows published; the others were kept unchecked" in card
    assert "shortcut checks failed" not in card  # none failed here
    assert "## Difficulty signals" in card and "`compile_speedup` < 1 in 0 rows" in card


def test_no_share_keeps_train_only():
    rows = [{"task_id": str(i), "ops_list": [f"op{i}"]} for i in range(200)]
    assert validation_ids(rows, 0.0) == set()
    held = validation_ids(rows, 0.02)
    assert 0 < len(held) < 20


def test_rows_say_which_inputs_and_operators_matter_from_either_table(tmp_path: Path):
    """Shortcut columns reach the published rows from measurements/ and, over them, from shortcuts/ (a
    shortcuts-only call); a row neither measured says null."""
    from datasets import load_dataset

    from pipeline.rundir.schema import SHORTCUTS

    rd, _ = _run(tmp_path, share=0.0)
    meas = rd.read_rows("measurements")
    meas[0].update(shortcut_checks="dead,skip,fragile", inputs_that_matter=["x"], ops_that_matter=["0:nn.Linear"],
                   fragile_ulp_ratio=0.02, fragile_f64_ratio=0.001)
    rd.write_shard("measurements", 0, meas, MEASUREMENTS)
    later = {"task_id": f"{1:016x}", "status": "ok", "shortcut_checks": "dead,skip,fragile",
             "inputs_that_matter": ["x", "y"], "ops_that_matter": ["0:nn.Linear", "1:torch.tanh"],
             "fragile_ulp_ratio": 0.5, "fragile_f64_ratio": 0.25}
    rd.write_shard("shortcuts", 0, [later], SHORTCUTS)
    out = publish(rd, tmp_path / "out", allow_incomplete=True)
    train = load_dataset(str(out), cache_dir=str(tmp_path / "hf"))["train"]
    rows = {r["task_id"]: r for r in train}
    assert rows[f"{0:016x}"]["inputs_that_matter"] == ["x"] and rows[f"{0:016x}"]["fragile_ulp_ratio"] == 0.02
    assert rows[f"{1:016x}"]["ops_that_matter"] == ["0:nn.Linear", "1:torch.tanh"]
    assert rows[f"{1:016x}"]["fragile_f64_ratio"] == 0.25
    assert rows[f"{2:016x}"]["inputs_that_matter"] is None and rows[f"{2:016x}"]["fragile_ulp_ratio"] is None
    card = (out / "README.md").read_text()
    assert "inputs_that_matter" in card  # the card documents the columns
    # two rows measured (one from each table), the rest kept without the checks: the card says so
    assert f"the shortcut checks measured 2 of the {len(train)} rows published; the others were kept unchecked" in card


def test_publish_set_holds_out_the_validation_split_and_logs_the_setting(tmp_path: Path):
    import pyarrow.parquet as pq

    from tests.pipeline.test_filter_set import opsynth

    rd, _ = _run(tmp_path, share=0.0)
    bad = opsynth("publish", str(rd.path), "--to", str(tmp_path / "x"), "--allow-incomplete",
                  "--set", "publish.validation_share=0.7")
    assert bad.returncode != 0 and "validation_share must be in [0, 0.5)" in bad.stderr + bad.stdout
    assert rd.load_config().publish.validation_share == 0.0  # a refused setting changes nothing
    p = opsynth("publish", str(rd.path), "--to", str(tmp_path / "out"), "--allow-incomplete",
                "--set", "publish.validation_share=0.3")
    assert p.returncode == 0, p.stderr
    assert rd.load_config().publish.validation_share == 0.3
    log = rd.manifest()["publish_settings"]
    assert log[-1]["set"] == {"publish.validation_share": 0.3} and log[-1]["before"] == {"publish.validation_share": 0.0}
    held = list((tmp_path / "out" / "data").glob("validation-*.parquet"))
    assert held and sum(pq.read_metadata(f).num_rows for f in held) > 0


def test_shortcut_call_names_the_call_that_ran_each_rows_checks(tmp_path: Path):
    import calendar

    from pipeline.rundir.schema import SHORTCUTS, conform

    rd, _ = _run(tmp_path, share=0.0)
    at = lambda day: calendar.timegm(time.strptime(f"2026-12-0{day}T00:00:05Z", "%Y-%m-%dT%H:%M:%SZ"))  # noqa: E731
    rd.set_stage_calls("profile", [
        {"seconds": 10, "finished": "2026-12-01T00:00:10Z", "settings": {"profile.shortcut_checks": ["dead"]}},
        {"seconds": 10, "finished": "2026-12-02T00:00:10Z", "settings": {"profile.shortcuts_only": True}},
        {"seconds": 10, "finished": "2026-12-03T00:00:10Z", "settings": {"profile.shortcuts_only": True}}])
    meas = rd.read_rows("measurements")
    for m in meas:
        m["started_at"] = at(1)
    meas[0].update(shortcut_checks="dead,skip,fragile", inputs_that_matter=["x"])  # checked in its own call
    rd.write_shard("measurements", 0, meas, MEASUREMENTS)
    later = [{"task_id": f"{i:016x}", "status": "ok", "shortcut_checks": "dead,skip,fragile",
              "inputs_that_matter": ["x"], "started_at": at(day)} for i, day in ((1, 2), (2, 3))]
    rd.write_shard("shortcuts", 0, conform(later, SHORTCUTS), SHORTCUTS)
    def published(k: int) -> dict[str, dict]:
        import pyarrow.dataset as pds

        out = publish(rd, tmp_path / f"out{k}", allow_incomplete=True)
        return {r["task_id"]: r for r in pds.dataset(str(out / "data")).to_table().to_pylist()}

    rows = published(0)
    assert {rows[f"{i:016x}"]["profile_call"] for i in range(4)} == {"p00"}  # the measurements' call throughout
    assert [rows[f"{i:016x}"]["shortcut_call"] for i in range(4)] == ["p00", "p01", "p02", None]
    # shards from before started_at was recorded: their completion markers date them
    rd.write_shard("shortcuts", 0, conform([{**later[0], "started_at": None}], SHORTCUTS), SHORTCUTS)
    rd.marker_path("shortcuts", 0).write_text(json.dumps({"rows": 1, "time": at(2) + 3}))
    for m in meas:
        m["started_at"] = None
    rd.write_shard("measurements", 0, meas, MEASUREMENTS)
    rd.marker_path("measurements", 0).write_text(json.dumps({"rows": len(meas), "time": at(1) + 4}))
    again = published(1)
    assert again[f"{1:016x}"]["shortcut_call"] == "p01" and again[f"{3:016x}"]["profile_call"] == "p00"


def test_card_says_which_rows_no_recorded_call_dates(tmp_path: Path):
    rd, _ = _run(tmp_path, share=0.0)
    # a call from before calls recorded when they finished: its rows cannot be dated to it
    rd.set_stage_calls("profile", [{"seconds": 10, "measured_now": 40}])
    out = publish(rd, tmp_path / "out", allow_incomplete=True)
    card = (out / "README.md").read_text()
    assert "`profile_call` is null in 37 rows: measured by calls the manifest records without their time (p00; " \
           "all with the run's own settings)" in card
