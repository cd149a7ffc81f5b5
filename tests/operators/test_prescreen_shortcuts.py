"""The CPU pre-screen runs the shortcut checks at the screened shapes: off by default, recorded with `record`,
the screen's reason with `drop` (a planted dead input), and a task where every input matters keeps."""

import dataclasses
import json

import pytest
import torch

from operators.prescreen import PROPORTIONAL, prescreen
from pipeline.rundir.config import load_preset

CODE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, y):
        return torch.tanh(x) * 2.0 + {k} * y

def get_inputs():
    return [torch.randn(128, 64), torch.randn(128, 64)]

def get_init_inputs():
    return []
'''


def _cfg(mode: str):
    cfg = load_preset("demo")
    return dataclasses.replace(cfg, sample=dataclasses.replace(cfg.sample, prescreen_shortcuts=mode))


def test_planted_dead_input_is_dropped_by_name_only_in_drop_mode():
    task = {"task_id": "t", "code": CODE.format(k="1e-6")}
    assert prescreen(task, _cfg("off")).measurements.get("dead_inputs") is None
    rec = prescreen(task, _cfg("record"))
    assert rec.reason == "" and rec.measurements["dead_inputs"] == ["y"]
    assert rec.record(task, False)["dead_inputs"] == ["y"]
    assert prescreen(task, _cfg("drop")).reason.startswith("dead input: y (")


def test_every_input_matters_keeps():
    res = prescreen({"task_id": "t", "code": CODE.format(k="1.0")}, _cfg("drop"))
    assert res.status == "ok" and res.reason == "" and res.measurements["dead_inputs"] == []
    assert res.measurements["fragile"] == "" and res.measurements["skippable_ops"] == []


INPLACE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, y):
        {body}
        return torch.tanh(x) + y

def get_inputs():
    return [torch.randn(128, 64), torch.randn(128, 64)]

def get_init_inputs():
    return []
'''


def test_a_forward_that_changes_its_inputs_in_place_is_judged_on_the_values_drawn():
    """The screen keeps each draw and hands out copies, and the fragility check draws again after a forward of its
    own: a forward that scales its input in place is judged on the drawn values every run (a kept draw it changed
    would be scaled again, and a moved draw would not match its reference)."""
    res = prescreen({"task_id": "t", "code": INPLACE.format(body="x.mul_(3.0)")}, _cfg("drop"))
    assert res.status == "ok" and res.reason == "", res.reason
    assert res.measurements["fragile"] == "" and res.measurements["dead_inputs"] == [], res.measurements


BIG = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return (torch.tanh(x) > 0.5).float()

batch_size = 65536
features = 1024

def get_inputs():
    return [torch.randn(batch_size, features)]

def get_init_inputs():
    return []
'''


def test_ulp_steps_is_the_element_ratio_capped():
    from operators.prescreen import ULP_STEPS_MAX, ulp_steps

    assert ulp_steps([1000, 1000], [10, 10]) == 100
    assert ulp_steps([10**9], [10]) == ULP_STEPS_MAX
    assert ulp_steps([10], [10]) == 1 and ulp_steps([10], []) == 1


def test_a_scaled_screen_moves_its_inputs_by_the_element_ratio_only_when_asked():
    task = {"task_id": "t", "code": BIG}
    cfg = _cfg("record")
    one = prescreen(task, cfg)
    # unscaled, the screen moves its inputs as the real-size check does (profile.shortcut_ulp_steps)
    assert one.scaled and one.measurements["prescreen_ulp_steps"] == cfg.profile.shortcut_ulp_steps
    scaled = prescreen(task, dataclasses.replace(cfg, sample=dataclasses.replace(cfg.sample, prescreen_ulp_scale=True)))
    assert scaled.scaled and scaled.measurements["prescreen_ulp_steps"] > cfg.profile.shortcut_ulp_steps
    assert scaled.record(task, False)["prescreen_ulp_steps"] == scaled.measurements["prescreen_ulp_steps"]


SMOOTH = BIG.replace("(torch.tanh(x) > 0.5).float()", "torch.sin(500.0 * x)")


def _scaled(mode: str):
    cfg = _cfg("drop")
    return dataclasses.replace(cfg, sample=dataclasses.replace(cfg.sample, prescreen_ulp_scale=True),
                               profile=dataclasses.replace(cfg.profile, shortcut_mode=mode))


def test_a_scaled_flag_stands_for_a_step_and_gives_way_to_the_real_move_on_a_smooth_output():
    cfg = _scaled("exhaustive")
    # sin(500 x): 16 ulps move it well within tolerance, the scaled move (hundreds of times more) far past it, in
    # proportion: a smooth output, not a step the scaled move met
    smooth = prescreen({"task_id": "s", "code": SMOOTH}, cfg)
    m = smooth.measurements
    assert m["prescreen_ulp_steps"] > cfg.profile.shortcut_ulp_steps and m["prescreen_real_move_ratio"] < 1
    assert m["fragile"] == "" and m["fragile_ulp_steps"] == cfg.profile.shortcut_ulp_steps and smooth.reason == ""
    assert 1 / PROPORTIONAL <= m["prescreen_move_proportion"] <= PROPORTIONAL
    assert smooth.record({"task_id": "s"}, False)["prescreen_real_move_ratio"] == m["prescreen_real_move_ratio"]
    step = prescreen({"task_id": "t", "code": BIG}, cfg)  # a comparison after tanh: the scaled flag stands
    sm = step.measurements
    assert sm["fragile"] and sm["fragile_ulp_steps"] == sm["prescreen_ulp_steps"] and step.reason.startswith("fragile:")


def test_the_cheap_screen_moves_draw_0_once_and_keeps_the_same_verdicts():
    cfg = _scaled("cheap")
    smooth = prescreen({"task_id": "s", "code": SMOOTH, "ops": ["torch.sin"]}, cfg)
    m = smooth.measurements
    # one scaled move on draw 0 (the element ratio times profile.shortcut_move_scale, capped), answered in proportion:
    # the real move's verdict stands, and the exhaustive draws never run
    assert m["fragile"] == "" and m["fragile_weights"] == "scaled" and smooth.reason == ""
    assert m["fragile_ulp_steps"] == cfg.profile.shortcut_ulp_steps and m["fragile_ulp_ratio"] < 1
    step = prescreen({"task_id": "t", "code": BIG, "ops": ["torch.tanh", "Tensor.gt"]}, cfg)
    assert step.measurements["fragile"].endswith("-ulp input move") and step.reason.startswith("fragile:")
    # a step operator the one move passes runs the exhaustive draws: a threshold no value of draw 0 sits near
    rare = BIG.replace("(torch.tanh(x) > 0.5).float()", "torch.tanh(x) + (x > 6.0).float()")
    passed = prescreen({"task_id": "r", "code": rare, "ops": ["torch.tanh", "Tensor.gt"]}, cfg).measurements
    assert passed["fragile_weights"] in ("fresh", "one")
    plain = prescreen({"task_id": "r", "code": rare, "ops": ["torch.tanh"]}, cfg).measurements
    assert plain["fragile_weights"] == "scaled"


ONE_INPUT = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 2.0

def get_inputs():
    return [torch.randn(128, 64)]

def get_init_inputs():
    return []
'''


def test_draw_1s_forward_serves_the_dead_input_and_skip_checks(monkeypatch):
    """The screen's own forward of draw 1 is the skip check's recording forward, and for a task with one tensor
    input its ratio is the dead-input check's (redrawing that input alone is drawing 1 again): the same measurements
    in fewer forwards."""
    import measures.shortcuts as shortcuts

    seen = {}
    dead, skip = shortcuts.dead_inputs, shortcuts.skippable_ops

    def dead_spy(*a, **kw):
        seen["known"] = a[5] if len(a) > 5 else kw.get("known_ratio")
        return dead(*a, **kw)

    def skip_spy(*a, **kw):
        seen["recorded"] = a[6] if len(a) > 6 else kw.get("recorded")
        return skip(*a, **kw)

    monkeypatch.setattr(shortcuts, "dead_inputs", dead_spy)
    monkeypatch.setattr(shortcuts, "skippable_ops", skip_spy)
    res = prescreen({"task_id": "t", "code": ONE_INPUT}, _cfg("record"))
    assert seen["known"] is not None and seen["known"] > 1 and seen["recorded"] is not None
    assert res.measurements["dead_inputs"] == [] and json.loads(res.measurements["input_ratios"]) == {"x": seen["known"]}
    assert res.measurements["skippable_ops"] == []
    two = prescreen({"task_id": "t", "code": CODE.format(k="1e-6")}, _cfg("record"))
    assert seen["known"] is None and two.measurements["dead_inputs"] == ["y"]  # two inputs: each redrawn alone


def test_redraw_ratio_only_for_one_varying_tensor_input():
    from operators.prescreen import _redraw_ratio

    a, b = torch.zeros(4), torch.ones(4)
    ref0, full1 = torch.zeros(4), torch.ones(4)
    assert _redraw_ratio({0: ([a], None), 1: ([b], None)}, full1, ref0, 0.01) == pytest.approx(100.0)
    assert _redraw_ratio({0: ([a], None), 1: ([a.clone()], None)}, full1, ref0, 0.01) is None  # a constant input
    assert _redraw_ratio({0: ([a, a], None), 1: ([b, b], None)}, full1, ref0, 0.01) is None  # two inputs
    assert _redraw_ratio({0: ([a, 1], None), 1: ([b, 2], None)}, full1, ref0, 0.01) is None  # another number
    assert _redraw_ratio({0: ([a, 1], None), 1: ([b, 1], None)}, full1, ref0, 0.01) is not None


def test_a_fresh_model_equal_to_the_screens_is_not_built_for_its_draw():
    """A model without weights draws the same function under every seed: the fragility check runs the screen's
    model and reuses its eager outputs; one with weights gets its own model per draw."""
    from operators.prescreen import _fresh_models, _same_state
    from operators.trace import load_module

    ns = load_module(ONE_INPUT, "t")
    model = ns["Model"]()
    assert _fresh_models(ns, 0, model)(1) is None
    weighted = load_module(ONE_INPUT.replace("def forward", "def __init__(self):\n        super().__init__()\n"
                                             "        self.lin = nn.Linear(64, 64)\n\n    def forward"), "w")
    torch.manual_seed(0)
    wm = weighted["Model"]()
    fresh = _fresh_models(weighted, 0, wm)(1)
    assert isinstance(fresh, torch.nn.Module) and not _same_state(fresh, wm)
    torch.manual_seed(0)
    assert _same_state(weighted["Model"](), wm)
    bn = torch.nn.BatchNorm1d(4)
    other = torch.nn.BatchNorm1d(4)
    other.running_mean += 1  # a buffer a forward moved: not the same state
    assert _same_state(bn, torch.nn.BatchNorm1d(4)) and not _same_state(bn, other)


def test_drop_mode_stops_at_the_first_kind_that_finds_one():
    """In drop mode a dead input drops the draw: the skip and fragility checks do not run; record mode runs all."""
    task = {"task_id": "t", "code": CODE.format(k="1e-6")}
    drop = prescreen(task, _cfg("drop")).measurements
    assert drop["dead_inputs"] == ["y"] and drop["shortcut_checks"] == "dead" and "skippable_ops" not in drop
    rec = prescreen(task, _cfg("record")).measurements
    assert rec["dead_inputs"] == ["y"] and "skippable_ops" in rec and rec["shortcut_checks"].startswith("dead,skip")

