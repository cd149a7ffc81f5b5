"""profile.shortcuts_only over a measured run: the shortcut checks alone go to shortcuts/ beside the stored
measurements (which stay as they were), and the filter joins them: a planted dead input is dropped by name."""

import dataclasses

from measures.shortcuts import ulp_finding
from pipeline.rundir.config import load_preset
from pipeline.rundir.schema import TASKS, conform
from pipeline.rundir.store import RunDir
from pipeline.stages import filter as filter_stage
from pipeline.stages import profile

DEAD_Y = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, y):
        return torch.tanh(x) * 2.0 + 1e-6 * y

def get_inputs():
    return [torch.randn(256, 64), torch.randn(256, 64)]

def get_init_inputs():
    return []
'''
BOTH = DEAD_Y.replace("1e-6 * y", "y")


def _measured(path, tasks, seed=None):
    """A demo run of `tasks` ({task_id: code}) measured by the profile stage without the new checks (one worker,
    no compile): the run a shortcuts-only call adds to. Returns the run and its config."""
    cfg = load_preset("demo")
    run = dataclasses.replace(cfg.run, workers=1, **({} if seed is None else {"seed": seed}))
    cfg = dataclasses.replace(cfg, run=run, profile=dataclasses.replace(cfg.profile, compile=False))
    rd = RunDir(path)
    rd.init(cfg)
    rows = [{"task_id": t, "name": t.title(), "code": code} for t, code in tasks.items()]
    rd.write_shard("tasks", 0, conform(rows, TASKS), TASKS)
    profile.run(rd, cfg, "local")
    return rd, cfg


def test_shortcuts_only_writes_beside_measurements_and_the_filter_names_the_input(tmp_path):
    rd, cfg = _measured(tmp_path / "run", {"dead": DEAD_Y, "both": BOTH})  # the stored measurements
    before = rd.shard_path("measurements", 0).read_bytes()
    assert {m["task_id"]: m["shortcut_checks"] for m in rd.read_rows("measurements")} == {"dead": None, "both": None}

    cfg2 = dataclasses.replace(cfg, profile=dataclasses.replace(
        cfg.profile, shortcuts_only=True, shortcut_checks=("dead", "skip", "fragile")),
        filter=dataclasses.replace(cfg.filter, require_compile=False))  # compile is off in this tiny run
    profile.run(rd, cfg2, "local")
    assert rd.shard_path("measurements", 0).read_bytes() == before  # not rewritten, not copied
    rows = {r["task_id"]: r for r in rd.read_rows("shortcuts")}
    assert rows["dead"]["dead_inputs"] == ["y"] and rows["both"]["dead_inputs"] == []
    assert rows["both"]["inputs_that_matter"] == ["x", "y"] and rows["both"]["gpu_busy_shortcut_s"] > 0
    # each kind timed on its own, all three within the checks' total, and the kinds that ran named together
    both = rows["both"]
    kinds = [both["gpu_busy_dead_s"], both["gpu_busy_skip_s"], both["gpu_busy_fragile_s"]]
    assert all(k > 0 for k in kinds) and sum(kinds) <= both["gpu_busy_shortcut_s"]
    assert both["shortcut_checks"] == "dead,skip,fragile"
    assert both["started_at"] is not None  # when the checks ran: the published row's shortcut_call
    # the call's own seconds for the task (where a re-check's throughput goes), apart from the stored measurement's
    assert both["call_gpu_busy_s"] >= both["gpu_busy_shortcut_s"] and both["call_wall_s"] >= both["call_gpu_busy_s"]
    stored = {m["task_id"]: m for m in rd.read_rows("measurements")}
    joined = {m["task_id"]: m for m in rd.measurement_rows()}
    assert joined["both"]["wall_s"] == stored["both"]["wall_s"] and "call_wall_s" not in joined["both"]

    filter_stage.run(rd, cfg2)
    verdicts = {v["task_id"]: v for v in rd.read_rows("verdicts") if v["stage"] == "filter"}
    assert not verdicts["dead"]["keep"] and verdicts["dead"]["reason"].startswith("dead input: y (")
    assert verdicts["both"]["keep"], verdicts["both"]["reason"]


def test_screen_margin_takes_far_parts_from_the_prescreen_and_measures_the_rest(tmp_path):
    import json

    from pipeline.rundir.schema import PRESCREEN

    cfg = load_preset("demo")
    cfg = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, workers=1), profile=dataclasses.replace(
        cfg.profile, compile=False, shortcut_checks=("dead", "skip"), shortcut_screen_margin=10.0))
    rd = RunDir(tmp_path / "run")
    rd.init(cfg)
    tasks = [{"task_id": "dead", "name": "Dead", "code": DEAD_Y}, {"task_id": "both", "name": "Both", "code": BOTH}]
    rd.write_shard("tasks", 0, conform(tasks, TASKS), TASKS)
    # the screen put x far from tolerance in both; y too in "both", and every operator of "both"; "dead" has
    # no screen row, so it is measured in full
    screens = [{"task_id": "both", "status": "ok", "resampled": False,
                "input_ratios": json.dumps({"x": 40.0, "y": 30.0}),
                "op_ratios": json.dumps({"0:torch.tanh": 50.0, "1:Tensor.mul": 50.0, "2:Tensor.add": 20.0})}]
    rd.write_shard("prescreen", 0, conform(screens, PRESCREEN), PRESCREEN)
    profile.run(rd, cfg, "local")
    rows = {r["task_id"]: r for r in rd.read_rows("measurements")}
    assert sorted(rows["both"]["shortcut_screened"]) == ["0:torch.tanh", "1:Tensor.mul", "2:Tensor.add", "x", "y"]
    assert json.loads(rows["both"]["input_ratios"]) == {"x": 40.0, "y": 30.0}
    assert rows["dead"]["shortcut_screened"] is None and rows["dead"]["dead_inputs"] == ["y"]


def test_checks_that_failed_drop_the_task_instead_of_keeping_it_unchecked(tmp_path):
    from filters.shortcut_checks import no_shortcuts
    from pipeline.rundir.schema import MEASUREMENTS, SHORTCUTS

    cfg = load_preset("demo")
    rd = RunDir(tmp_path / "run")
    rd.init(cfg)
    ids = ("failed", "passed", "skipped")
    rd.write_shard("measurements", 0, conform([{"task_id": t, "status": "ok"} for t in ids], MEASUREMENTS),
                   MEASUREMENTS)
    rd.write_shard("shortcuts", 0, conform([
        {"task_id": "failed", "status": "oom", "error": "OutOfMemoryError: CUDA out of memory"},
        {"task_id": "passed", "status": "ok", "shortcut_checks": "dead,skip,fragile", "dead_inputs": []},
        {"task_id": "skipped", "status": "skipped", "error": "not profiled: dropped by filter (x)"}], SHORTCUTS),
        SHORTCUTS)
    rows = {m["task_id"]: m for m in rd.measurement_rows()}
    why = no_shortcuts(rows["failed"], cfg.filter)
    assert why is not None and why.startswith("shortcut checks failed") and "oom: OutOfMemoryError" in why
    assert no_shortcuts(rows["passed"], cfg.filter) is None
    assert "shortcut_error" not in rows["skipped"] and no_shortcuts(rows["skipped"], cfg.filter) is None
    off = dataclasses.replace(cfg.filter, reject_shortcuts=False)  # the filter's switch covers this reason too
    assert no_shortcuts(rows["failed"], off) is None


def test_a_tasks_checks_stop_at_the_first_kind_that_finds_one_unless_told_otherwise(tmp_path):
    rd, cfg = _measured(tmp_path / "run", {"dead": DEAD_Y})
    kinds = ("dead", "skip", "fragile")
    for stop, ran in ((True, "dead"), (False, "dead,skip,fragile")):
        cfg2 = dataclasses.replace(cfg, profile=dataclasses.replace(
            cfg.profile, shortcuts_only=True, shortcut_checks=kinds, shortcut_stop_first=stop))
        if rd.done_shards("shortcuts"):
            import shutil

            shutil.rmtree(rd.path / "shortcuts")
        profile.run(rd, cfg2, "local")
        row = rd.read_rows("shortcuts")[0]
        assert row["dead_inputs"] == ["y"] and row["shortcut_checks"] == ran, row
        # the kinds after the finding cost nothing when stopped, and are measured when not
        assert (row["gpu_busy_fragile_s"] is None) == stop and (row["gpu_busy_skip_s"] is None) == stop


# le(x, w) over inputs on a grid of eighths: w between grid points under most weight seeds, on one (0.5) under the
# seed that ends in 2, where one ulp up flips every element equal to it
THRESHOLD = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(0.5 if torch.initial_seed() % 1000 == 2 else 0.5625))

    def forward(self, x):
        return torch.le(x, self.w).float()

def get_inputs():
    return [torch.randint(0, 8, (4096,)).float() / 8]

def get_init_inputs():
    return []
'''


def test_the_fragility_check_builds_each_draws_model_with_its_own_weights(tmp_path):
    """Draw 0's weights hide the threshold; the verifier's draw 2 builds the model with a weight that sits on the
    inputs' values. The exhaustive checks find the task fragile only with profile.shortcut_fresh_weights (default)."""
    found = {}
    for fresh in (True, False):
        rd, cfg = _measured(tmp_path / f"run{fresh}", {"t": THRESHOLD}, seed=0)
        cfg2 = dataclasses.replace(cfg, profile=dataclasses.replace(
            cfg.profile, shortcuts_only=True, shortcut_checks=("fragile",), shortcut_fresh_weights=fresh,
            shortcut_mode="exhaustive"))
        profile.run(rd, cfg2, "local")
        row = rd.read_rows("shortcuts")[0]
        assert row["shortcut_checks"] == "fragile", row
        found[fresh] = (row["fragile"], row["fragile_weights"])
    assert found == {True: (ulp_finding(cfg.profile.shortcut_ulp_steps), "fresh"), False: ("", "one")}


def test_a_call_with_fresh_weights_checks_again_what_one_model_passed(tmp_path):
    """Rows whose fragility one model passed are measured again (the threshold task is then found fragile); a row
    with a finding stays as it was, and the shard is written again with both."""
    rd, cfg = _measured(tmp_path / "run", {"t": THRESHOLD, "dead": DEAD_Y}, seed=0)
    kinds = ("dead", "skip", "fragile")

    def call(fresh):
        profile.run(rd, dataclasses.replace(cfg, profile=dataclasses.replace(
            cfg.profile, shortcuts_only=True, shortcut_checks=kinds, shortcut_fresh_weights=fresh,
            shortcut_mode="exhaustive")), "local")
        return {r["task_id"]: r for r in rd.read_rows("shortcuts")}

    one = call(False)
    assert one["t"]["fragile"] == "" and one["t"]["fragile_weights"] == "one"
    assert one["dead"]["dead_inputs"] == ["y"]
    assert call(False)["t"]["started_at"] == one["t"]["started_at"]  # the same settings: nothing measured again
    fresh = call(True)
    assert fresh["t"]["fragile"] == ulp_finding(cfg.profile.shortcut_ulp_steps) and fresh["t"]["fragile_weights"] == "fresh"
    assert fresh["dead"] == one["dead"]  # its finding stands: not measured again
    assert call(True)["t"]["started_at"] == fresh["t"]["started_at"]  # and now the shard is done for good


# half the elements sit 50 ulps below the step at 1.5 (x * 3 > 1.5), the rest are random: a one-ulp move flips
# none, a move of 100 ulps flips them all
NEAR_STEP = '''import torch
import torch.nn as nn

BELOW = float(torch.tensor(1.5 - 50 * 2.0**-23, dtype=torch.float64) / 3)

class Model(nn.Module):
    def forward(self, x):
        return (x * 3.0 > 1.5).float()

def get_inputs():
    x = torch.randn(4096)
    return [torch.where(torch.rand(4096) < 0.5, torch.full_like(x, BELOW), x)]

def get_init_inputs():
    return []
'''


def test_the_fragility_checks_move_is_profile_shortcut_ulp_steps(tmp_path):
    """A row one ulp passed is measured again by a call with a larger move (which finds the step); a call with
    the smaller move again leaves the finding as it stands."""
    rd, cfg = _measured(tmp_path / "run", {"t": NEAR_STEP})

    def call(steps):
        profile.run(rd, dataclasses.replace(cfg, profile=dataclasses.replace(
            cfg.profile, shortcuts_only=True, shortcut_checks=("fragile",), shortcut_ulp_steps=steps)), "local")
        row = rd.read_rows("shortcuts")[0]
        return row["fragile"], row["fragile_ulp_steps"], row["started_at"]

    one = call(1)
    assert one[:2] == ("", 1)
    far = call(100)
    assert far[:2] == ("100-ulp input move", 100) and far[2] != one[2]
    assert call(1) == far  # a finding stands: not measured again


def test_a_cheap_call_takes_exhaustive_rows_and_an_exhaustive_call_measures_cheap_rows_again(tmp_path):
    """The cheap fragility check runs the exhaustive draws for a task with a step operator (the threshold task's
    `le` is found under draw 2's weights) and not for a smooth one (fragile_weights "scaled"); an exhaustive call
    with fresh weights measures the smooth task's cheap row again, and a cheap call takes exhaustive rows as they
    are."""
    rd, cfg = _measured(tmp_path / "run", {"t": THRESHOLD, "smooth": BOTH}, seed=0)
    tasks = [{**r, "ops": ["torch.le"] if r["task_id"] == "t" else ["torch.tanh"]} for r in rd.read_rows("tasks")]
    rd.write_shard("tasks", 0, conform(tasks, TASKS), TASKS)

    def call(mode):
        profile.run(rd, dataclasses.replace(cfg, profile=dataclasses.replace(
            cfg.profile, shortcuts_only=True, shortcut_checks=("fragile",), shortcut_mode=mode)), "local")
        return {r["task_id"]: r for r in rd.read_rows("shortcuts")}

    cheap = call("cheap")
    assert cheap["t"]["fragile"] == ulp_finding(cfg.profile.shortcut_ulp_steps)
    assert cheap["smooth"]["fragile"] == "" and cheap["smooth"]["fragile_weights"] == "scaled"
    assert call("cheap")["smooth"]["started_at"] == cheap["smooth"]["started_at"]  # its own kind: not again
    full = call("exhaustive")
    assert full["smooth"]["fragile_weights"] == "fresh" and full["smooth"]["started_at"] != cheap["smooth"]["started_at"]
    assert full["t"]["started_at"] == cheap["t"]["started_at"]  # a finding stands
    assert call("cheap")["smooth"]["started_at"] == full["smooth"]["started_at"]


def test_the_cheap_check_misses_a_weight_threshold_when_the_task_names_no_step_operator(tmp_path):
    """The blind spot docs/shortcuts.md names: without a step operator among the task's operators the cheap check
    measures draw 0 alone, whose weights hide the threshold."""
    rd, cfg = _measured(tmp_path / "run", {"t": THRESHOLD}, seed=0)
    tasks = [{**r, "ops": ["torch.tanh"]} for r in rd.read_rows("tasks")]
    rd.write_shard("tasks", 0, conform(tasks, TASKS), TASKS)
    profile.run(rd, dataclasses.replace(cfg, profile=dataclasses.replace(
        cfg.profile, shortcuts_only=True, shortcut_checks=("fragile",))), "local")
    row = rd.read_rows("shortcuts")[0]
    assert row["fragile"] == "" and row["fragile_weights"] == "scaled"


# a batched task: the sigmoid term is skippable at every batch, the tanh and the sum matter far past the margin
BATCHED_SKIP = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x) + torch.sigmoid(x) * 1e-5

batch_size = 64

def get_inputs():
    return [torch.randn(batch_size, 32)]

def get_init_inputs():
    return []
'''


def test_the_cheap_skip_check_measures_at_the_real_size_only_what_the_reduced_batch_leaves_in_doubt(tmp_path):
    import json

    rd, cfg = _measured(tmp_path / "run", {"t": BATCHED_SKIP})
    row = {}
    for mode in ("cheap", "exhaustive"):
        if rd.done_shards("shortcuts"):
            import shutil

            shutil.rmtree(rd.path / "shortcuts")
        profile.run(rd, dataclasses.replace(cfg, profile=dataclasses.replace(
            cfg.profile, shortcuts_only=True, shortcut_checks=("skip",), shortcut_stop_first=False,
            shortcut_mode=mode)), "local")
        row[mode] = rd.read_rows("shortcuts")[0]
    cheap, full = row["cheap"], row["exhaustive"]
    assert cheap["skippable_ops"] == full["skippable_ops"] != []  # the same finding either way
    taken = set(cheap["shortcut_screened"])
    assert taken and not taken & set(cheap["skippable_ops"])  # only operators far past the margin are taken
    assert set(json.loads(cheap["op_ratios"])) == set(json.loads(full["op_ratios"]))
    assert full["shortcut_screened"] is None


def test_a_passed_row_without_a_float64_reference_or_its_reason_is_measured_again(tmp_path):
    """A row whose float64 reference is missing with no reason recorded (an out-of-memory once read as a forward
    that cannot run in float64) is measured again; one whose reason is recorded stays as it is."""
    from pipeline.rundir.schema import SHORTCUTS

    rd, cfg = _measured(tmp_path / "run", {"a": BOTH, "b": BOTH}, seed=0)
    cfg2 = dataclasses.replace(cfg, profile=dataclasses.replace(cfg.profile, shortcuts_only=True,
                                                                shortcut_checks=("fragile",)))
    profile.run(rd, cfg2, "local")
    first = {r["task_id"]: r for r in rd.read_rows("shortcuts")}
    assert all(r["fragile"] == "" and r["fragile_f64_ratio"] is not None for r in first.values())
    rows = [{**r, "fragile_f64_ratio": None, "fragile_f64_error": None if r["task_id"] == "a" else "RuntimeError: x"}
            for r in first.values()]
    rd.write_shard("shortcuts", 0, conform(rows, SHORTCUTS), SHORTCUTS)
    profile.run(rd, cfg2, "local")
    again = {r["task_id"]: r for r in rd.read_rows("shortcuts")}
    assert again["a"]["started_at"] != first["a"]["started_at"] and again["a"]["fragile_f64_ratio"] is not None
    assert again["b"]["started_at"] == first["b"]["started_at"] and again["b"]["fragile_f64_error"] == "RuntimeError: x"
