"""measures.shortcuts: planted shortcuts are found, tasks where everything matters are not flagged."""

import json

import pytest
import torch
from torch import nn

from measures.shortcuts import FRAGILE_F64, FRAGILE_ULP, OperatorCalls, measure, skippable_ops

TOL = 1e-2


def _draw(*shapes, device="cpu"):
    def draw(k):
        g = torch.Generator().manual_seed(1000 + k)
        return tuple(torch.randn(*s, generator=g).to(device) for s in shapes)
    return draw


def _measure(model, draw, **kw):
    with torch.no_grad():
        ref0 = model(*draw(0)).reshape(-1).float()
        return measure(model, draw, ref0, TOL, stop_first=False, **kw)


class RenormRsub(nn.Module):
    """renorm over many features makes x's part ~1e-4: y alone decides the output (a planted dead input)."""

    def forward(self, x, y):
        return torch.rsub(torch.renorm(x, p=1, dim=0, maxnorm=1), y)


class SmallJoin(nn.Module):
    def forward(self, x, y):
        return torch.tanh(x) + 1e-5 * y


class AllMatter(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(32)

    def forward(self, x, y):
        return torch.relu(self.bn(x)) * y


class RoundTrip(nn.Module):
    """Whether exp(log(x)) returns x exactly: decided by the last bit, so any honest rounding change flips it."""

    def forward(self, x):
        x = x.abs() + 0.5
        return (torch.exp(torch.log(x)) == x).float()


def test_planted_dead_input_is_found_by_name():
    m = _measure(RenormRsub(), _draw((8, 4096), (8, 4096)), kinds=("dead",))
    assert m["dead_inputs"] == ["x"]
    assert m["inputs_that_matter"] == ["y"]
    assert m["min_input_redraw_ratio"] < 1


def test_small_operand_of_a_join_makes_its_operator_skippable():
    m = _measure(SmallJoin(), _draw((64, 32), (64, 32)), kinds=("dead", "skip"))
    assert m["dead_inputs"] == ["y"]
    assert any(op.endswith(("mul", "__mul__", "__rmul__", "add", "__add__")) for op in m["skippable_ops"])
    assert "0:torch.tanh" in m["ops_that_matter"]


def test_every_input_and_operator_matters_nothing_flagged():
    torch.manual_seed(0)
    m = _measure(AllMatter(), _draw((64, 32), (64, 32)))
    assert m["dead_inputs"] == [] and m["skippable_ops"] == [] and m["fragile"] == ""
    assert m["inputs_that_matter"] == ["x", "y"]
    assert m["ops_that_matter"] == ["0:nn.BatchNorm1d", "1:torch.relu", "2:Tensor.mul"]
    assert m["shortcut_checks"] == "dead,skip,fragile"


def test_calls_inside_a_module_are_not_operators_of_the_task():
    model = AllMatter()
    with torch.no_grad(), OperatorCalls(model) as rec:
        model(*_draw((64, 32), (64, 32))(0))
    assert rec.calls == ["0:nn.BatchNorm1d", "1:torch.relu", "2:Tensor.mul"]  # no running-stat add_


def test_operator_with_constant_output_is_skippable_by_its_mean():
    class ConstPath(nn.Module):
        def forward(self, x):
            return torch.sigmoid(x * 0 + 3.0) * x

    draw = _draw((64, 32))
    with torch.no_grad():
        ref0 = ConstPath()(*draw(0)).reshape(-1)
        s = skippable_ops(ConstPath(), draw, ref0, TOL, stop_first=False)
    # x*0 is all zeros on every draw: replacing it by its mean changes no bit (no finding); sigmoid's constant
    # output, replaced by its mean on another draw, is the same constant: no bit changes either
    assert s["skippable_ops"] == []
    assert "3:Tensor.mul" in s["ops_that_matter"]


def test_fragile_output_is_flagged_for_both_changes():
    m = _measure(RoundTrip(), _draw((64, 64)), kinds=("fragile",))
    assert m["fragile"] in (FRAGILE_ULP, FRAGILE_F64)
    assert m["fragile_ulp_ratio"] >= 1 and m["fragile_f64_ratio"] >= 1


def test_stop_first_stops_at_the_first_dead_input():
    class TwoDead(nn.Module):
        def forward(self, x, y, z):
            return z + 1e-6 * (x + y)

    draw = _draw((32, 8), (32, 8), (32, 8))
    with torch.no_grad():
        ref0 = TwoDead()(*draw(0)).reshape(-1)
        m = measure(TwoDead(), draw, ref0, TOL, kinds=("dead",), stop_first=True)
    assert m["dead_inputs"] == ["x"] and m["inputs_that_matter"] == []


def test_a_draw_that_computes_does_not_shift_the_operators():
    """The pre-screen's draw plants zeros with torch calls of its own: they are not operators of the task, so
    skipping the task's fmax still changes the output (it did not when the draw's calls were numbered)."""
    class SignSort(nn.Module):
        def forward(self, x, y):
            return torch.sort(torch.copysign(torch.sigmoid(x), torch.fmax(x, y)), dim=1).values

    plain = _draw((16, 64), (16, 64))

    def draw(k):
        xs = plain(k)
        for t in xs:
            float(t.min()), float(t.max())  # torch calls with tensor arguments, made while drawing
        return xs

    with torch.no_grad():
        ref0 = SignSort()(*draw(0)).reshape(-1)
        s = skippable_ops(SignSort(), draw, ref0, TOL, stop_first=False)
    assert s["ops_seen"] == ["0:torch.sigmoid", "1:torch.fmax", "2:torch.copysign"]
    assert s["skippable_ops"] == []


def test_a_forward_that_cannot_run_in_float64_is_not_called_fragile():
    class Float32Constant(nn.Module):
        def forward(self, x):
            return x @ torch.ones(x.shape[-1], 4, dtype=torch.float32)

    m = _measure(Float32Constant(), _draw((8, 16)), kinds=("fragile",))
    assert m["fragile"] == "" and m["fragile_f64_ratio"] is None
    assert m["fragile_f64_error"].startswith("RuntimeError: ") and "\n" not in m["fragile_f64_error"]


@pytest.mark.parametrize("error", [torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
                                   RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate")])
def test_a_float64_forward_out_of_memory_is_raised_not_read_as_no_reference(error):
    # a want of memory says nothing of the task: the harness retries it with a larger reservation
    class OutOfMemoryInFloat64(nn.Module):
        def forward(self, x):
            if x.dtype == torch.float64:
                raise error
            return x * 2

    with pytest.raises(type(error)):
        _measure(OutOfMemoryInFloat64(), _draw((8, 16)), kinds=("fragile",))


@pytest.mark.gpu
def test_planted_shortcuts_found_on_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    draw = _draw((8, 4096), (8, 4096), device="cuda")
    m = _measure(RenormRsub().cuda(), draw)
    assert m["dead_inputs"] == ["x"]
    assert _measure(AllMatter().cuda(), _draw((64, 32), (64, 32), device="cuda"))["dead_inputs"] == []


def test_a_move_of_many_ulps_reaches_a_step_one_ulp_does_not():
    """x * 3 sits 50 ulps below the step at 1.5: one ulp up leaves every element where it was, 100 ulps flip them."""
    from measures.shortcuts import fragility

    class Step(nn.Module):
        def forward(self, x):
            return (x * 3.0 > 1.5).float()

    below = torch.tensor(1.5 - 50 * 2.0**-23, dtype=torch.float64) / 3

    def draw(k):
        return (torch.full((64,), float(below), dtype=torch.float32),)

    with torch.no_grad():
        assert fragility(Step(), draw, TOL, draws=1, checks=(FRAGILE_ULP,))["fragile"] == ""
        far = fragility(Step(), draw, TOL, draws=1, checks=(FRAGILE_ULP,), ulp_steps=100)
        # the finding and the row name the move made, so a drop reason says how far the inputs went
        assert (far["fragile"], far["fragile_ulp_steps"]) == ("100-ulp input move", 100)


def test_ratio_maps_hold_every_part_measured_with_its_verdict():
    import json

    m = _measure(SmallJoin(), _draw((64, 32), (64, 32)), kinds=("dead", "skip"))
    inputs, ops = json.loads(m["input_ratios"]), json.loads(m["op_ratios"])
    assert sorted(inputs) == ["x", "y"] and inputs["y"] < 1 <= inputs["x"]
    assert [k for k, r in inputs.items() if r < 1] == m["dead_inputs"]
    assert set(ops) == set(m["skippable_ops"]) | set(m["ops_that_matter"])
    assert [k for k, r in ops.items() if r < 1] == m["skippable_ops"]
    assert min(ops.values()) == m["min_op_ratio"]


class Counting(nn.Module):
    """tanh(x) * y + z, counting its forwards."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x, y, z):
        self.calls += 1
        return torch.tanh(x) * y + z


def test_parts_the_screen_found_far_spend_no_forward_and_are_listed():
    from measures.shortcuts import screened_far

    draw = _draw((32, 16), (32, 16), (32, 16))
    full = Counting()
    m0 = _measure(full, draw, kinds=("dead", "skip"))
    far = json.dumps({"x": 50.0, "y": 0.5, "z": 3.0})  # z under the margin 10: measured again
    ops = json.dumps({k: 80.0 for k in json.loads(m0["op_ratios"])})
    gated = Counting()
    m = _measure(gated, draw, kinds=("dead", "skip"), given_inputs=screened_far(far, 10),
                 given_ops=screened_far(ops, 10))
    assert sorted(m["shortcut_screened"]) == sorted(["x", *json.loads(ops)])
    assert json.loads(m["input_ratios"])["x"] == 50.0 and json.loads(m["input_ratios"])["z"] > 1
    assert json.loads(m["input_ratios"])["y"] == json.loads(m0["input_ratios"])["y"]  # y measured: not far
    assert gated.calls < full.calls  # forwards were saved: x and every operator
    # a screen that numbered other calls (another branch) is not trusted: every call is measured
    other = Counting()
    m2 = _measure(other, draw, kinds=("skip",), given_ops={"7:torch.erf": 80.0, "0:torch.tanh": 80.0})
    assert m2["shortcut_screened"] == [] and m2["op_ratios"] == m0["op_ratios"]


def test_screened_far_keeps_only_parts_at_or_over_the_margin():
    from measures.shortcuts import screened_far

    assert screened_far(json.dumps({"a": 0.5, "b": 10.0, "c": 11.0}), 10) == {"b": 10.0, "c": 11.0}
    assert screened_far(json.dumps({"a": 50.0}), 0) == {} and screened_far(None, 10) == {}


def test_an_input_measured_anyway_is_not_listed_as_from_the_screen():
    # one tensor input: its ratio is the caller's known draw-to-draw ratio, measured, whatever the screen said
    m = _measure(RoundTrip(), _draw((16, 16)), kinds=("dead",), known_ratio=3.0, given_inputs={"x": 50.0})
    assert json.loads(m["input_ratios"]) == {"x": 3.0} and m["shortcut_screened"] == []


class Threshold(nn.Module):
    """le(x, w): fragile only when the weight w lies among the input's values (the release's softmax -> le)."""

    def __init__(self, w: float):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(w))

    def forward(self, x):
        return torch.le(x, self.w).float()


def test_fresh_weights_per_draw_find_a_threshold_one_weight_draw_hides():
    """Under draw 0's weight the threshold sits past every input value (nothing flips); draw 2's own weight sits
    exactly on 17 input values, and the one-ulp move takes some of them up, past it. Only the check that builds
    each draw's model sees it."""
    from measures.shortcuts import fragility

    def draw(k):
        x = torch.linspace(0.0, 1.0, 257)
        return (torch.cat([x, x[100].repeat(16)]),)

    on_a_value = float(draw(0)[0][100])
    with torch.no_grad():
        fixed = fragility(Threshold(5.0), draw, TOL, draws=5, stop_first=False, checks=(FRAGILE_ULP,))
        fresh = fragility(Threshold(5.0), draw, TOL, draws=5, stop_first=False, checks=(FRAGILE_ULP,),
                          model_for=lambda k: Threshold(on_a_value if k == 2 else 5.0))
    assert fixed["fragile"] == "" and fixed["fragile_ulp_ratio"] == 0.0 and fixed["fragile_weights"] == "one"
    assert fresh["fragile"] == FRAGILE_ULP and fresh["fragile_ulp_ratio"] >= 1 and fresh["fragile_weights"] == "fresh"


def test_draw_zero_keeps_the_callers_model_and_its_outputs():
    """model_for is asked for draws 1.. only: draw 0 is the caller's model, whose output (subs[0]) is reused."""
    from measures.shortcuts import fragility

    asked = []

    def model_for(k):
        asked.append(k)
        return Threshold(5.0)

    def draw(k):
        return (torch.linspace(0.0, 1.0, 33),)

    with torch.no_grad():
        fragility(Threshold(5.0), draw, TOL, draws=3, stop_first=False, model_for=model_for)
    assert asked == [1, 2]


def test_the_float64_reference_runs_on_the_first_f64_draws_only():
    """(x + 1e8) - 1e8 loses x in float32 and keeps it in float64: a draw with x nonzero is fragile. With that draw
    third, f64_draws=2 never compares it and every draw does."""
    from measures.shortcuts import FRAGILE_F64, fragility

    class Cancel(nn.Module):
        def forward(self, x):
            return (x + 1e8) - 1e8

    def draw(k):
        return (torch.full((64,), 3.0 if k == 2 else 0.0),)

    with torch.no_grad():
        assert fragility(Cancel(), draw, TOL, draws=5, checks=(FRAGILE_F64,))["fragile"] == FRAGILE_F64
        assert fragility(Cancel(), draw, TOL, draws=5, checks=(FRAGILE_F64,), f64_draws=2)["fragile"] == ""
        assert fragility(Cancel(), draw, TOL, draws=5, checks=(FRAGILE_F64,), f64_draws=3)["fragile"] == FRAGILE_F64


def test_a_long_sum_into_a_sign_is_not_fragile_under_moves_of_both_signs():
    """Row sums of 16,384 values sit 0.005 below zero. An exact sum keeps every sign, so no honest rounding flips
    them; moving all 16,384 values up by 16 ulps would add about 0.013 to each sum and flip them all, moving each
    up or down at random adds about 1e-4."""
    from measures.shortcuts import FRAGILE_ULP, fragility

    class SignOfSum(nn.Module):
        def forward(self, x):
            return x.sum(dim=1).sign()

    def draw(k):
        g = torch.Generator().manual_seed(k)
        x = torch.randn(64, 2**14, generator=g).double()
        x[:, -1] -= x.sum(dim=1) + 0.005
        return (x.float(),)

    x = draw(0)[0]
    assert torch.equal(x.double().sum(dim=1).sign(), -torch.ones(64, dtype=torch.float64))  # the exact signs
    with torch.no_grad():
        assert fragility(SignOfSum(), draw, TOL, draws=2, checks=(FRAGILE_ULP,), ulp_steps=16)["fragile"] == ""


def test_inputs_of_one_shape_move_in_their_own_directions():
    """Rounding differences of two inputs are independent: the move draws each input's directions from one stream,
    not the same pattern for every input of a shape (which would cancel in x - y)."""
    from measures.shortcuts import _ulp_move

    x = torch.ones(4096)
    a, b = _ulp_move((x, x.clone()), steps=1)
    up_a, up_b = a > x, b > x
    assert 0.4 < up_a.float().mean() < 0.6 and not torch.equal(up_a, up_b)
    assert torch.equal(_ulp_move((x, x.clone()))[1], b)  # the same directions on every call


class Counted(nn.Module):
    """tanh(x) + 1e-5 * y, counting its forwards."""

    def __init__(self):
        super().__init__()
        self.forwards = 0

    def forward(self, x, y):
        self.forwards += 1
        return torch.tanh(x) + 1e-5 * y


def test_a_callers_recording_of_draw_1_spares_the_recording_forward():
    model, draw = Counted(), _draw((64, 32), (64, 32))
    with torch.no_grad():
        ref0 = model(*draw(0)).reshape(-1)
        own = skippable_ops(model, draw, ref0, TOL, stop_first=False)
        spent = model.forwards
        with OperatorCalls(model, record_means=True) as rec:
            model(*draw(1))
        model.forwards = 0
        given = skippable_ops(model, draw, ref0, TOL, stop_first=False, recorded=rec)
    assert given == own and own["skippable_ops"]
    assert model.forwards == spent - 2  # the reference's forward and the recording forward


class BatchConstantView(nn.Module):
    """Takes only the whole batch: reshapes to the batch it was built for."""

    def forward(self, x):
        return torch.tanh(x).view(10, -1).sum(1)


@pytest.mark.parametrize("model, shapes, expected", [
    (nn.Sequential(nn.Linear(16, 8), nn.Tanh()), [(10, 16)], 4),  # each row alone: sliced
    (nn.Sequential(nn.Linear(16, 8), nn.BatchNorm1d(8)), [(10, 16)], 1),  # training statistics mix the rows
    (BatchConstantView(), [(10, 16)], 1),  # the first slice cannot run
    (SmallJoin(), [(10, 16), (3, 16)], 1),  # the inputs lead with different sizes
    (nn.Tanh(), [(3, 16)], 1),  # fewer rows than slices
])
def test_batch_chunks_slices_only_a_batch_whose_rows_are_computed_apart(model, shapes, expected):
    from measures.shortcuts import batch_chunks

    x = _draw(*shapes)(0) if len(shapes) > 1 else _draw(shapes[0])(0)
    with torch.no_grad():
        out = model(*x).reshape(-1) if len(shapes) == 1 else None
        if out is None:
            out = torch.zeros(1)
        assert batch_chunks(model, x, out, TOL, 4) == expected


@pytest.mark.parametrize("stride", [1, 3, 7, 64])
def test_a_float64_forward_in_slices_gives_the_whole_batchs_sample(stride):
    from measures.shortcuts import _cast_model, _float64_sample

    model = nn.Sequential(nn.Linear(16, 9), nn.GELU())
    x = _draw((10, 16))(0)  # 10 rows in slices of 3: the last slice is shorter
    with torch.no_grad():
        saved = _cast_model(model, None)
        whole = _float64_sample(model, x, stride, 1)
        sliced = _float64_sample(model, x, stride, 4)
        _cast_model(model, saved)
    assert sliced.dtype == torch.float64 and sliced.shape == whole.shape
    torch.testing.assert_close(sliced, whole, rtol=1e-12, atol=1e-12)


def test_the_fragility_checks_float64_ratio_is_the_same_in_slices():
    class Cancels(nn.Module):  # float32 cancellation: the float64 check has something to measure
        def forward(self, x):
            return (x + 1e6) - 1e6

    draw = _draw((64, 32))
    with torch.no_grad():
        ref0 = Cancels()(*draw(0)).reshape(-1)
        whole = measure(Cancels(), draw, ref0, TOL, kinds=("fragile",), draws=1, stop_first=False)
        sliced = measure(Cancels(), draw, ref0, TOL, kinds=("fragile",), draws=1, stop_first=False, f64_chunks=4)
    assert whole["fragile"] and whole["fragile_f64_ratio"] > 1
    assert sliced["fragile"] == whole["fragile"] and sliced["fragile_f64_ratio"] == pytest.approx(whole["fragile_f64_ratio"])
