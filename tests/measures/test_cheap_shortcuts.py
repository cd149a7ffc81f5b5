"""measures/cheap_shortcuts.py: the scaled move's verdict, the fragility check on draw 0, and the skip check's
operators at the reduced batch."""

import torch

from measures.cheap_shortcuts import reduced_op_ratios, scaled_fragility, scaled_verdict
from measures.shortcuts import FRAGILE_F64, skippable_ops, ulp_finding
from measures.tensor_checks import flatten
from operators.trace import load_module


def test_a_scaled_flag_gives_way_only_to_a_response_in_proportion_to_the_move():
    # float64 first; under the scaled move nothing to see; a real move that crosses; in proportion; out of it
    assert scaled_verdict(2.0, 5.0, 0.1, 10, 16) == (FRAGILE_F64, 2.0)
    assert scaled_verdict(0.1, 0.5, None, 10, 16) == ("", 0.05)
    assert scaled_verdict(0.1, 30.0, 1.5, 10, 16) == (ulp_finding(16), 1.5)
    assert scaled_verdict(0.1, 1.1, 0.1, 10, 16) == ("", 0.1)  # 1.1 against 1.0 in proportion: smooth
    assert scaled_verdict(0.1, 5.0, 0.1, 10, 16) == (ulp_finding(160), 5.0)  # a step met: 5x past proportion
    assert scaled_verdict(0.1, 1.0, 0.5, 10, 16) == (ulp_finding(160), 1.0)  # under proportion: a step crossed


STEP = '''import torch
import torch.nn as nn

BELOW = float(torch.tensor(1.5 - GAP * 2.0**-23, dtype=torch.float64) / 3)

class Model(nn.Module):
    def forward(self, x):
        return (x * 3.0 > 1.5).float()

def get_inputs():
    x = torch.randn(4096)
    return [torch.where(torch.rand(4096) < 0.5, torch.full_like(x, BELOW), x)]

def get_init_inputs():
    return []
'''
SMOOTH = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.sin(x * 1000.0)

def get_inputs():
    return [torch.rand(4096) + 1.0]

def get_init_inputs():
    return []
'''


def _model_draw(ns: dict):
    """The task's model (weights seeded 0) and its seeded draws, as the profile worker makes them."""
    torch.manual_seed(0)
    model = ns["Model"](*ns["get_init_inputs"]())

    def draw(k):
        torch.manual_seed(1 + k)
        return tuple(ns["get_inputs"]())

    return model, draw


def _fragility(code: str, steps: int, scale: int) -> dict:
    model, draw = _model_draw(load_module(code, "t"))
    with torch.no_grad():
        ref = flatten(model(*draw(0))).clone()
        return scaled_fragility(model, draw, 1e-2, ref, 1, steps, scale)


def test_the_scaled_move_meets_a_step_the_real_move_misses_and_a_smooth_output_passes():
    near = _fragility(STEP.replace("GAP", "50"), 16, 10)  # half the elements 50 ulps under the step
    assert near["fragile"] == ulp_finding(160) and near["fragile_weights"] == "scaled"
    far = _fragility(STEP.replace("GAP", "500"), 16, 10)  # no move of 160 ulps reaches it
    assert far["fragile"] == "" and far["fragile_scaled_ratio"] < 1
    crossed = _fragility(STEP.replace("GAP", "4"), 16, 10)  # the real move crosses it already
    assert crossed["fragile"] == ulp_finding(16)
    # sin(1000 x) for x in [1, 2): a 160-ulp move shifts the argument by up to ~0.04, past 1e-2, and the real move
    # a tenth of that: a response in proportion to the move, a smooth output
    smooth = _fragility(SMOOTH, 16, 10)
    assert smooth["fragile_scaled_ratio"] >= 1 and smooth["fragile_f64_ratio"] < 1
    assert smooth["fragile"] == "", smooth


BATCHED = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(torch.randn(d))

    def forward(self, x):
        return torch.tanh(x * self.w) + torch.sigmoid(x) * 1e-5

batch_size = 64
d = 32

def get_inputs():
    return [torch.randn(batch_size, d)]

def get_init_inputs():
    return [d]
'''


def test_the_reduced_batch_numbers_the_same_operators_and_finds_the_same_skippable_one():
    ns = load_module(BATCHED, "t")
    with torch.no_grad():
        reduced = reduced_op_ratios(ns, 0, 1e-2, "cpu")
    assert ns["batch_size"] == 64  # the module's constant is put back
    model, draw = _model_draw(ns)
    with torch.no_grad():
        real = skippable_ops(model, draw, flatten(model(*draw(0))).clone(), 1e-2, stop_first=False)["op_ratios"]
    assert set(reduced) == set(real)
    assert {o for o, r in reduced.items() if r < 1} == {o for o, r in real.items() if r < 1} != set()
    no_batch = load_module(BATCHED.replace("batch_size = 64", "batch_size = 1"), "t")
    assert reduced_op_ratios(no_batch, 0, 1e-2, "cpu") is None  # nothing to cut: the real size decides


def test_step_operators_are_read_from_the_catalogs_names_and_unknown_counts_as_a_step():
    from measures.cheap_shortcuts import has_step

    assert not has_step(["torch.tanh", "nn.Linear", "F.softmax"])
    assert has_step(["torch.tanh", "Tensor.gt"]) and has_step('["nn.Threshold"]') and has_step(None)


ROWS = '''import torch
import torch.nn as nn

batch_size = 32

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 16)
        self.norm = NORM

    def forward(self, x):
        return self.norm(torch.tanh(self.lin(x)))

def get_inputs():
    return [torch.randn(batch_size, 64)]

def get_init_inputs():
    return []
'''


def test_cheap_measure_takes_the_float64_ratio_again_in_slices_where_the_rows_are_computed_apart():
    from measures.cheap_shortcuts import cheap_measure
    from measures.tensor_checks import sample_stride

    got = {}
    for name, norm in (("apart", "nn.Identity()"), ("mixed", "nn.BatchNorm1d(16)")):
        ns = load_module(ROWS.replace("NORM", norm), "rows")
        torch.manual_seed(0)
        model = ns["Model"]()

        def draw(k, ns=ns):
            torch.manual_seed(1 + k)
            return tuple(ns["get_inputs"]())

        with torch.no_grad():
            ref0 = flatten(model(*draw(0))).clone()
            stride = sample_stride(ref0.numel())
            got[name] = cheap_measure(model, draw, ref0, ref0[::stride], stride, 1e-2, ns=ns, seed=0, dev="cpu")
    assert got["apart"]["f64_chunks"] == 4 and got["mixed"]["f64_chunks"] == 1
    assert abs(got["apart"]["f64_sliced_ratio"] - got["apart"]["f64_ratio"]) < 1e-9
    assert "f64_sliced_ratio" not in got["mixed"]
