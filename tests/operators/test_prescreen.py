"""The CPU pre-screen flags what the filter would drop as fakeable, keeps a normal task, scales big tasks without
shrinking what they reduce over, leaves the caller's torch state alone, and makes the sampler resample
deterministically."""

import json
from dataclasses import replace

import pytest
import torch

from operators.prescreen import RECORDS_KEY, Budget, Screen, prescreen
from operators.sample import Stats, sample_tasks
from pipeline.rundir.config import load_preset

CFG = load_preset("h200")

TEMPLATE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
class Model(nn.Module):
    def __init__(self):
        super().__init__()
{init}
    def forward(self, x):
        return {expr}
batch_size = {batch}
in_channels = 3
length = {length}
def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]
def get_init_inputs():
    return []
'''


def task(expr, batch=8, length=1024, init="        pass"):
    return {"task_id": "t", "code": TEMPLATE.format(expr=expr, batch=batch, length=length, init=init)}


def test_sigmoid_of_a_large_shift_is_fakeable():
    r = prescreen(task("torch.sigmoid(x + 12.0)"), CFG)
    assert r.status == "ok" and not r.scaled
    assert r.reason.startswith("fakeable by a fixed output")
    assert r.measurements["input_sensitivity_ratio"] < 1


def test_mean_over_a_huge_dim_is_flagged_at_a_scaled_batch_that_keeps_the_dim():
    # 64 x 3 x 2**19 values per draw is seconds on one core: the batch shrinks, the reduced length does not
    r = prescreen(task("(x + 1.0).mean(dim=-1)", batch=64, length=2**19), CFG)
    assert r.status == "ok" and r.scaled
    assert r.constants["length"] == 2**19 and r.constants["batch_size"] < 64
    assert r.reason.startswith("fakeable by a fixed output")


def test_softmax_over_a_huge_dim_then_mean_is_flagged():
    r = prescreen(task("torch.softmax(x, dim=-1).mean(dim=1)", batch=4, length=2**16), CFG)
    assert r.status == "ok" and r.reason  # outputs ~1.5e-5: the filter calls them tiny or constant


def test_conv_relu_passes():
    r = prescreen(task("F.relu(self.conv(x))", init="        self.conv = nn.Conv1d(3, 16, 3)"), CFG)
    assert r.status == "ok" and r.reason == "" and not r.scaled
    assert r.measurements["input_sensitivity_ratio"] > 10 and r.measurements["degenerate"] == ""


def test_over_budget_without_a_smaller_size_gives_no_verdict():
    # a softmax over 2**22 values at batch 1 cannot shrink (its fan-in) and does not fit 1 ms
    no_retry = replace(CFG, sample=replace(CFG.sample, prescreen_retry_ms=0.0))
    r = prescreen(task("torch.softmax(x, dim=-1)", batch=1, length=2**22), no_retry, Budget(ms=1.0, mb=256))
    assert r.status == "over budget" and r.reason == ""


def test_callers_threads_and_rng_are_left_alone():
    torch.manual_seed(123)
    state = torch.get_rng_state()
    threads = torch.get_num_threads()
    prescreen(task("torch.tanh(x)"), CFG)
    assert torch.get_num_threads() == threads
    assert torch.equal(torch.get_rng_state(), state)


def test_a_task_that_fails_on_the_cpu_is_not_a_verdict():
    r = prescreen(task("x.view(7, -1)"), CFG)
    assert r.status.startswith("error") and r.reason == ""


@pytest.fixture(scope="module")
def screened():
    """h200 draws with the pre-screen resampling, twice; seed 3's first indices include flagged draws."""
    runs = []
    for _ in range(2):
        stats = Stats()
        rows = sample_tasks(CFG.sample, 3, range(10), set(), stats, Screen(CFG))
        runs.append((rows, stats))
    return runs


def test_sampler_resamples_flagged_draws_deterministically(screened):
    (rows, stats), (again, stats2) = screened
    strip = [{k: v for k, v in r.items() if k != RECORDS_KEY} for r in rows]
    assert strip == [{k: v for k, v in r.items() if k != RECORDS_KEY} for r in again]
    records = [rec for r in rows for rec in r[RECORDS_KEY]]
    resampled = [rec for rec in records if rec["resampled"]]
    assert resampled, "pick a seed whose first draws include a flagged one"
    assert {k: v for k, v in stats.rejected.items() if k.startswith("prescreen")} == {
        k: v for k, v in stats2.rejected.items() if k.startswith("prescreen")}
    assert sum(v for k, v in stats.rejected.items() if k.startswith("prescreen")) == len(resampled)
    kept = {r["task_id"] for r in rows}
    assert all(rec["task_id"] not in kept and rec["reason"] for rec in resampled)
    # each kept row carries exactly one record of itself, unflagged, after the draws it replaced
    for r in rows:
        assert [rec["task_id"] for rec in r[RECORDS_KEY] if not rec["resampled"]] == [r["task_id"]]
        assert r[RECORDS_KEY][-1]["reason"] == ""
    assert [(rec["reason"], rec["shapes"]) for rec in records] == [
        (rec["reason"], rec["shapes"]) for r in again for rec in r[RECORDS_KEY]]


def test_record_mode_keeps_flagged_draws():
    rows = sample_tasks(CFG.sample, 3, range(10), set(), None, Screen(CFG, "record"))
    records = [rec for r in rows for rec in r[RECORDS_KEY]]
    assert len(records) == len(rows) and not any(rec["resampled"] for rec in records)
    assert any(rec["reason"] for rec in records)
    assert all(json.loads(rec["shapes"]) for rec in records if rec["status"] == "ok")


def test_prescreen_setting_is_validated():
    from pipeline.rundir.config import ConfigError, validate

    with pytest.raises(ConfigError, match="sample.prescreen"):
        validate(replace(CFG, sample=replace(CFG.sample, prescreen="on")), "test")


RAND_TEMPLATE = TEMPLATE.replace("torch.randn(batch_size, in_channels, length)",
                                 "torch.rand(batch_size, in_channels, length)")


def test_scaled_rand_inputs_get_the_real_sizes_exact_zeros():
    # 4096 x 3 x 2**16 values of torch.rand hold ~48 exact zeros (multiples of 2**-24): rsqrt makes them inf on
    # the GPU; the scaled screen draws far fewer values, so it must plant them to see the nonfinite output
    code = RAND_TEMPLATE.format(expr="torch.rsqrt(x)", batch=4096, length=2**16, init="        pass")
    r = prescreen({"task_id": "t", "code": code}, CFG)
    assert r.status == "ok" and r.scaled and r.constants["batch_size"] < 4096
    assert r.reason == "degenerate output (nonfinite)"
    # at its real shapes a small task keeps its own draws: no zeros are planted
    small = RAND_TEMPLATE.format(expr="torch.rsqrt(x)", batch=2, length=1024, init="        pass")
    r = prescreen({"task_id": "t", "code": small}, CFG)
    assert r.status == "ok" and not r.scaled and r.reason == ""


def test_plant_zeros_touches_only_unit_interval_inputs():
    from operators.prescreen import _plant_zeros

    unit, normal = torch.rand(1000) * 0.5 + 0.25, torch.randn(1000)
    before = normal.clone()
    _plant_zeros([unit, normal], [3, 3], seed=0)
    assert 1 <= int((unit == 0).sum()) <= 3 and torch.equal(normal, before)


def test_a_screen_of_few_outputs_gives_no_insensitive_or_degenerate_verdict():
    from operators.prescreen import OUT_KEEP

    # one sign per row: the budget leaves a row or two, whose signs agree over three draws by luck (the real
    # 4096 rows never do); only a fakeable ratio measured on differing draws, extrapolated, could decide
    # the budget is pinned: a smaller one leaves fewer rows, whose signs CPU draws of consecutive seeds repeat
    cfg = replace(CFG, sample=replace(CFG.sample, prescreen_ms=1000.0))
    r = prescreen(task("x.sum(dim=(1, 2)).sign()", batch=2**12, length=2**18), cfg)
    assert r.status == "ok" and r.scaled and r.constants["length"] == 2**18
    assert r.measurements["output_numel"] < OUT_KEEP and "few_outputs" in r.measurements
    assert r.reason == ""


def test_fakeable_ratio_of_fewer_outputs_is_extrapolated_up():
    from operators.prescreen import _extrapolate

    assert _extrapolate(1000, 1000) == pytest.approx(1.0)
    assert 1.0 < _extrapolate(1024, 10**8) < _extrapolate(16, 10**8)


def test_float64_check_flags_a_comparison_of_a_normalised_value_only_when_on():
    # the fractional part of a scaled softmax is float32 rounding noise: fp32 and fp64 disagree on its booleans
    expr = "(torch.frac(torch.softmax(x, dim=-1) * 1e9) > 0.5).float()"
    off = prescreen(task(expr, batch=4, length=4096), CFG)
    assert off.status == "ok" and not off.reason.startswith("numerically fragile")
    on_cfg = replace(CFG, sample=replace(CFG.sample, prescreen_fp64=True))
    on = prescreen(task(expr, batch=4, length=4096), on_cfg)
    assert on.reason.startswith("numerically fragile: float32 and float64 disagree")
    assert on.measurements["fp64_ratio"] > 1
    assert prescreen(task("F.relu(x) * 2.0"), on_cfg).reason == ""


def test_nonfinite_outputs_are_flagged_as_the_filter_does():
    r = prescreen(task("torch.log(x)"), CFG)  # randn: log of negatives is NaN
    assert r.status == "ok" and r.reason == "degenerate output (nonfinite)"


def test_few_outputs_equal_in_every_draw_are_input_insensitive():
    from operators.prescreen import EQUAL_KEEP, OUT_KEEP

    # a sum of 3 * 2**14 values of [0, 1) is never <= 0: the clamp makes every row 2.0 whatever the input; the
    # budget leaves a dozen of the 65,536 rows, all equal in all three draws, which is no longer luck
    expr = "torch.clamp_max(torch.where(x.sum(dim=(1, 2)) > 0, x.sum(dim=(1, 2)), -x.sum(dim=(1, 2))), 2.0)"
    t = task(expr, batch=2**16, length=2**14)
    t["code"] = t["code"].replace("torch.randn(", "torch.rand(")
    r = prescreen(t, CFG)
    n = r.measurements["output_numel"]
    assert r.scaled and n < OUT_KEEP and n * (CFG.profile.input_draws - 1) >= EQUAL_KEEP
    assert r.reason.startswith("input-insensitive")


def test_a_draw_over_budget_is_screened_again_within_the_retry_budget_only():
    # a softmax over 2**22 values at batch 1 keeps its fan-in, so no size fits 1 ms; within 4 s it runs
    huge = task("torch.softmax(x, dim=-1)", batch=1, length=2**22)
    tight = Budget(ms=1.0, mb=256)
    off = replace(CFG, sample=replace(CFG.sample, prescreen_retry_ms=0.0))
    assert prescreen(huge, off, tight).status == "over budget"
    retried = replace(CFG, sample=replace(CFG.sample, prescreen_retry_ms=4000.0))
    r = prescreen(huge, retried, tight)
    assert r.status == "ok" and r.constants["length"] == 2**22
    # a draw that fits the first budget is screened there: the retry budget does not grow its sizes
    small = task("torch.sigmoid(x + 12.0)", batch=64, length=2**16)
    assert prescreen(small, retried).constants == prescreen(small, off).constants


def test_the_retry_budget_is_validated():
    from pipeline.rundir.config import ConfigError, validate

    with pytest.raises(ConfigError, match="prescreen_retry_ms"):
        validate(replace(CFG, sample=replace(CFG.sample, prescreen_retry_ms=-1.0)), "test")
