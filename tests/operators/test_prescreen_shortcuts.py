"""The CPU pre-screen runs the shortcut checks at the screened shapes: off by default, recorded with `record`,
the screen's reason with `drop` (a planted dead input), and a task where every input matters keeps."""

import dataclasses

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
