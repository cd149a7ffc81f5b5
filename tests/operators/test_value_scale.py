"""operators/value_scale.py: each rule flags the draw whose operator cannot matter, and lets the same operator
with parameters that matter through."""

import networkx as nx
import torch

from operators.value_scale import cannot_matter, normalizes_normal


def _chain(op: str, params: dict, shape: tuple, then: str | None = None) -> tuple:
    g = nx.DiGraph()
    g.add_node("x", kind="input")
    g.add_node("a", kind="op", op=op, params=params)
    g.add_edge("x", "a")
    values = {"x": torch.empty(shape, device="meta"), "a": torch.empty(shape, device="meta")}
    if then:
        g.add_node("b", kind="op", op=then, params={})
        g.add_edge("a", "b")
        values["b"] = torch.empty(shape[:1], device="meta")
    return g, values


def test_renorm_over_wide_slices_cannot_matter_narrow_ones_can():
    assert "renorm p=1" in cannot_matter(*_chain("torch.renorm", {"p": 1, "dim": 0}, (8, 16384)))
    assert cannot_matter(*_chain("torch.renorm", {"p": 1, "dim": 1}, (8, 16384))) == ""  # slices of 8 values
    assert cannot_matter(*_chain("torch.renorm", {"p": 2, "dim": 0}, (8, 64))) == ""  # ~1/8 each


def test_prod_over_many_unit_values_underflows():
    assert "prod over 32" in cannot_matter(*_chain("torch.prod", {"dim": 1}, (16, 32, 8)))
    assert cannot_matter(*_chain("torch.prod", {"dim": 2}, (16, 32, 4))) == ""


def test_wide_softmin_feeding_a_distance_cannot_matter():
    assert "feeds a distance" in cannot_matter(*_chain("F.softmin", {"dim": 1}, (16, 64), "F.pairwise_distance"))
    assert cannot_matter(*_chain("F.softmin", {"dim": 1}, (16, 64), "torch.relu")) == ""
    assert cannot_matter(*_chain("F.softmin", {"dim": 1}, (16, 8), "F.pairwise_distance")) == ""


def test_sampler_with_the_rule_makes_no_task_it_flags():
    import dataclasses
    import json

    from networkx.readwrite import json_graph

    from operators.graph import execute
    from operators.sample import sample_tasks
    from pipeline.rundir.config import load_preset

    cfg = dataclasses.replace(load_preset("h200").sample, value_scale_rule=True, prescreen="off",
                              categories=("reduction",))
    rows = sample_tasks(cfg, 3, range(12), set())
    assert rows
    for r in rows:
        g = json_graph.node_link_graph(json.loads(r["graph"]), edges="edges")
        _, values = execute(g, g.graph["constants"], None)
        assert cannot_matter(g, values) == "", r["name"]


# ---- rules from the value model (operators/value_model.py)

def _g(inputs: dict, ops: list) -> tuple:
    from tests.operators.test_value_model import graph

    return graph(inputs, ops)


def test_a_mean_over_many_values_is_a_fixed_output_over_few_it_is_not():
    wide = _g({"x": ("randn", (32, 2**24))}, [("m", "torch.mean", {"dim": 1}, {"x": "x"}, (32,))])
    few = _g({"x": ("randn", (32, 16))}, [("m", "torch.mean", {"dim": 1}, {"x": "x"}, (32,))])
    assert "fixed output" in cannot_matter(*wide)
    assert cannot_matter(*few) == ""


def test_an_input_swamped_inside_a_sum_is_dead():
    g = _g({"x": ("randn", (64, 64)), "y": ("randn", (64, 64, 2**24))},
           [("t", "torch.mean", {"dim": 2}, {"x": "y"}, (64, 64)),
            ("a", "torch.add", {}, {"x": "x", "y": "t"}, (64, 64))])
    assert "input y" in cannot_matter(*g)
    ok = _g({"x": ("randn", (64, 64)), "y": ("randn", (64, 64))}, [("a", "torch.add", {}, {"x": "x", "y": "y"}, (64, 64))])
    assert cannot_matter(*ok) == ""


def test_a_norm_of_normal_values_over_large_groups_is_the_identity():
    big = _g({"x": ("randn", (16, 8, 64, 64, 64))}, [("n", "nn.BatchNorm3d", {}, {"x": "x"}, (16, 8, 64, 64, 64))])
    assert "identity" in cannot_matter(*big)
    on_rand = _g({"x": ("rand", (16, 8, 64, 64, 64))}, [("n", "nn.BatchNorm3d", {}, {"x": "x"}, (16, 8, 64, 64, 64))])
    assert cannot_matter(*on_rand) == ""
    small = _g({"x": ("randn", (16, 8, 4, 4))}, [("n", "nn.InstanceNorm2d", {}, {"x": "x"}, (16, 8, 4, 4))])
    assert cannot_matter(*small) == ""


def test_lrn_at_its_default_alpha_cannot_matter_on_unit_values_but_can_on_large_ones():
    unit = _g({"x": ("randn", (8, 16, 32, 32))}, [("l", "nn.LocalResponseNorm", {"size": 2}, {"x": "x"}, (8, 16, 32, 32))])
    assert "alpha=0.0001" in cannot_matter(*unit)
    big = _g({"x": ("randn", (8, 16, 32, 32))}, [("l", "nn.LocalResponseNorm", {"size": 2, "alpha": 1.0}, {"x": "x"},
                                                  (8, 16, 32, 32))])
    assert cannot_matter(*big) == ""


def test_log_softmax_into_a_softmax_along_the_same_dim_is_skippable():
    same = _g({"x": ("randn", (8, 32))}, [("a", "nn.LogSoftmax", {"dim": 1}, {"x": "x"}, (8, 32)),
                                         ("b", "F.softmax", {"dim": -1}, {"x": "a"}, (8, 32))])
    assert "does not see shifts" in cannot_matter(*same)
    other = _g({"x": ("randn", (8, 32))}, [("a", "nn.LogSoftmax", {"dim": 0}, {"x": "x"}, (8, 32)),
                                          ("b", "F.softmax", {"dim": 1}, {"x": "a"}, (8, 32))])
    assert cannot_matter(*other) == ""


def test_a_sign_keeping_op_read_only_for_its_sign_is_skippable():
    g = _g({"x": ("randn", (8, 32))}, [("a", "torch.tanh", {}, {"x": "x"}, (8, 32)),
                                      ("b", "torch.sign", {}, {"x": "a"}, (8, 32))])
    assert "read only for it" in cannot_matter(*g)
    read = _g({"x": ("randn", (8, 32))}, [("a", "torch.tanh", {}, {"x": "x"}, (8, 32)),
                                         ("b", "torch.exp", {}, {"x": "a"}, (8, 32))])
    assert cannot_matter(*read) == ""


def test_a_step_on_continuous_values_over_many_elements_is_fragile_on_few_or_on_levels_it_is_not():
    shape = (64, 1024, 64)
    many = _g({"x": ("randn", shape)}, [("c", "torch.cumsum", {"dim": 1}, {"x": "x"}, shape),
                                       ("s", "Tensor.gt", {"threshold": 0.0}, {"x": "c"}, shape)])
    assert "a rounding flips some" in cannot_matter(*many)
    few = _g({"x": ("randn", (4, 16, 8))}, [("c", "torch.cumsum", {"dim": 1}, {"x": "x"}, (4, 16, 8)),
                                           ("s", "Tensor.gt", {"threshold": 0.0}, {"x": "c"}, (4, 16, 8))])
    assert cannot_matter(*few) == ""
    levels = _g({"x": ("sign", shape)}, [("s", "Tensor.gt", {"threshold": 0.0}, {"x": "x"}, shape)])
    assert cannot_matter(*levels) == ""


def test_a_step_with_every_value_on_one_side_is_constant():
    g = _g({"x": ("randn", (8, 32))}, [("a", "F.log_softmax", {"dim": 1}, {"x": "x"}, (8, 32)),
                                      ("b", "torch.where", {"threshold": 0.5}, {"x": "a", "y": "x"}, (8, 32))])
    assert "one side only" in cannot_matter(*g)


def test_ceil_of_unit_values_is_one_level_reciprocal_of_them_not_finite_atanh_too_steep():
    ceil = _g({"x": ("rand", (8, 32))}, [("c", "torch.ceil", {}, {"x": "x"}, (8, 32))])
    assert "one level" in cannot_matter(*ceil)
    assert "one level" not in cannot_matter(*_g({"x": ("randn", (8, 32))}, [("c", "torch.ceil", {}, {"x": "x"}, (8, 32))]))
    inv = _g({"x": ("rand", (8, 32))}, [("r", "torch.reciprocal", {}, {"x": "x"}, (8, 32))])
    assert "not finite" in cannot_matter(*inv)
    inv1 = _g({"x": ("rand1", (8, 32))}, [("r", "torch.reciprocal", {}, {"x": "x"}, (8, 32))])
    assert cannot_matter(*inv1) == ""
    steep = _g({"x": ("rand", (8, 32))}, [("a", "torch.atanh", {}, {"x": "x"}, (8, 32))])
    assert "steep" in cannot_matter(*steep)


def test_a_sigmoid_of_widely_spread_values_is_saturated():
    wide = _g({"x": ("randn", (8, 4096))}, [("t", "torch.sum", {"dim": 1, "keepdim": True}, {"x": "x"}, (8, 1)),
                                           ("e", "torch.exp", {}, {"x": "x"}, (8, 4096)),
                                           ("s", "torch.sigmoid", {}, {"x": "t"}, (8, 1))])
    assert "saturated" in cannot_matter(*wide)
    unit = _g({"x": ("randn", (8, 4096))}, [("s", "torch.sigmoid", {}, {"x": "x"}, (8, 4096))])
    assert cannot_matter(*unit) == ""


def test_heaviside_on_continuous_values_never_reads_y_on_steps_it_does():
    cont = _g({"x": ("randn", (8, 32)), "y": ("randn", (8, 32))},
              [("h", "torch.heaviside", {}, {"x": "x", "y": "y"}, (8, 32))])
    assert "reads its y nowhere" in cannot_matter(*cont)
    steps = _g({"x": ("randn", (8, 32)), "y": ("randn", (8, 32))},
               [("r", "torch.round", {}, {"x": "x"}, (8, 32)), ("h", "torch.heaviside", {}, {"x": "r", "y": "y"}, (8, 32))])
    assert "reads its y" not in cannot_matter(*steps)


def test_fmod_by_a_larger_divisor_never_reads_it():
    g = _g({"x": ("rand", (8, 32)), "y": ("rand1", (8, 32))}, [("f", "torch.fmod", {}, {"x": "x", "y": "y"}, (8, 32))])
    assert "x as it is" in cannot_matter(*g)
    wide = _g({"x": ("randn", (8, 32)), "y": ("rand1", (8, 32))}, [("f", "torch.fmod", {}, {"x": "x", "y": "y"}, (8, 32))])
    assert cannot_matter(*wide) == ""


def test_smooth_rectifier_on_large_values_is_about_the_identity():
    g = _g({"x": ("randn", (8, 2**20))}, [("m", "torch.amax", {"dim": 1, "keepdim": True}, {"x": "x"}, (8, 1)),
                                         ("s", "torch.sum", {"dim": 1}, {"x": "x"}, (8,))])
    # the max of 2**20 normal values sits ~5.3 stds up; a sum of them ~1000 wide: neither is flagged by itself
    assert "identity" not in cannot_matter(*g)
    big = _g({"x": ("rand", (8, 4096))}, [("t", "torch.sum", {"dim": 1}, {"x": "x"}, (8,)),
                                         ("u", "F.silu", {}, {"x": "t"}, (8,))])
    assert "about the identity" in cannot_matter(*big)


def test_the_sampler_gives_a_first_norm_values_it_changes():
    import dataclasses
    import json

    from operators.sample import sample_tasks
    from pipeline.rundir.config import load_preset

    cfg = dataclasses.replace(load_preset("h200").sample, value_scale_rule=True, prescreen="off",
                              categories=("normalization", "activation"), min_ops=1, max_ops=2)
    rows = sample_tasks(cfg, 5, range(12), set())
    firsts = []
    for r in rows:
        g = json.loads(r["graph"])
        inputs = [n for n in g["nodes"] if n["kind"] == "input"]
        op = next(n["op"] for n in g["nodes"] if n["kind"] == "op" and n["args"]["x"] == inputs[0]["id"])
        if normalizes_normal(op):
            firsts.append(inputs[0]["draw"])
    assert firsts and all(d == "rand" for d in firsts)


def test_the_sampler_gives_a_first_pole_at_zero_values_away_from_zero():
    import dataclasses
    import json

    from operators.sample import sample_tasks
    from operators.value_scale import pole_at_zero
    from pipeline.rundir.config import load_preset

    cfg = dataclasses.replace(load_preset("h200").sample, value_scale_rule=True, prescreen="off",
                              categories=("elementwise",), min_ops=1, max_ops=1)
    rows = sample_tasks(cfg, 9, range(30), set())
    draws = [next(n["draw"] for n in json.loads(r["graph"])["nodes"] if n["kind"] == "input")
             for r in rows if pole_at_zero(r["ops"][0])]
    assert draws and all(d == "rand1" for d in draws)


def test_a_step_averaged_over_many_values_downstream_is_not_fragile():
    shape = (64, 1024, 64)
    out = _g({"x": ("randn", shape)}, [("s", "Tensor.gt", {"threshold": 0.5}, {"x": "x"}, shape),
                                      ("e", "torch.exp", {}, {"x": "s"}, shape)])
    assert "a rounding flips some" in cannot_matter(*out)
    averaged = _g({"x": ("randn", shape)}, [("s", "Tensor.gt", {"threshold": 0.5}, {"x": "x"}, shape),
                                           ("m", "torch.mean", {"dim": 1}, {"x": "s"}, (64, 64))])
    assert "a rounding flips some" not in cannot_matter(*averaged)


def test_a_step_at_zero_on_relu_values_is_stable():
    shape = (64, 1024, 64)
    g = _g({"x": ("randn", shape), "y": ("randn", shape)},
           [("r", "torch.relu", {}, {"x": "x"}, shape), ("h", "torch.heaviside", {}, {"x": "r", "y": "y"}, shape)])
    assert cannot_matter(*g) == ""


def test_a_comparison_with_a_threshold_past_every_value_is_constant():
    g = nx.DiGraph()
    g.add_node("x", kind="input", draw="rand")
    g.add_node("a", kind="op", op="F.log_softmax", params={"dim": -1})
    g.add_node("b", kind="op", op="Tensor.gt", params={"threshold": 0.0})
    g.add_edges_from([("x", "a"), ("a", "b")])
    g.graph["output"] = "b"
    values = {n: torch.empty((64, 4096), device="meta") for n in "xab"}
    assert "one side only" in cannot_matter(g, values)  # log_softmax <= 0: never > 0
    g.nodes["b"]["params"] = {"threshold": -8.0}  # ~ln(1/4096): inside the values' bulk
    assert "one side only" not in cannot_matter(g, values)


def test_the_max_of_many_values_of_a_bounded_function_is_a_fixed_output():
    g = nx.DiGraph()
    g.add_node("x", kind="input", draw="rand")
    g.add_node("a", kind="op", op="torch.cosh", params={})
    g.add_node("b", kind="op", op="torch.aminmax", params={"dim": 1})
    g.add_edges_from([("x", "a"), ("a", "b")])
    g.graph["output"] = "b"
    values = {"x": torch.empty((64, 4096), device="meta"), "a": torch.empty((64, 4096), device="meta"),
              "b": torch.empty((64,), device="meta")}
    assert "a fixed output fakes it" in cannot_matter(g, values)  # every max sits at cosh(1)
    values = {**values, "x": torch.empty((64, 4), device="meta"), "a": torch.empty((64, 4), device="meta")}
    assert cannot_matter(g, values) == ""  # the max of 4 values moves


# ---- causes of the h200 sample's screen flags that the rules above left through

BIG = (64, 1024, 64)


def test_a_comparison_with_a_learned_tensor_is_a_step_at_about_zero():
    g = _g({"x": ("randn", BIG)}, [("c", "torch.greater_equal", {}, {"x": "x"}, BIG)])  # y is a learned parameter
    assert "a rounding flips some" in cannot_matter(*g)
    few = _g({"x": ("randn", (4, 16, 8))}, [("c", "torch.greater_equal", {}, {"x": "x"}, (4, 16, 8))])
    assert cannot_matter(*few) == ""


def test_binning_and_hardshrink_step_inside_the_bulk():
    for op, params in (("torch.searchsorted", {"bins": 16}), ("nn.Hardshrink", {"lambd": 0.25})):
        assert "a rounding flips some" in cannot_matter(*_g({"x": ("randn", BIG)}, [("s", op, params, {"x": "x"}, BIG)]))
    far = _g({"x": ("rand", BIG)}, [("m", "torch.mul", {"value": 0.01}, {"x": "x"}, BIG),
                                   ("s", "nn.Hardshrink", {"lambd": 0.5}, {"x": "m"}, BIG)])
    assert "a rounding flips some" not in cannot_matter(*far)  # every value under lambd: no value near the jump


def test_a_two_operand_product_does_not_damp_a_step_a_learned_weight_does():
    wide = (64, 8, 2**18)
    g = _g({"x": ("randn", wide), "y": ("randn", wide)},
           [("s", "Tensor.gt", {"threshold": 0.5}, {"x": "x"}, wide),
            ("v", "torch.linalg.vecdot", {}, {"x": "s", "y": "y"}, (64, 8))])
    assert "a rounding flips some" in cannot_matter(*g)
    learned = _g({"x": ("randn", wide)}, [("s", "Tensor.gt", {"threshold": 0.5}, {"x": "x"}, wide),
                                          ("v", "nn.Linear", {"out_features": 8}, {"x": "s"}, (64, 8, 8))])
    assert "a rounding flips some" not in cannot_matter(*learned)


def test_a_hard_limit_with_every_value_past_one_bound_is_a_constant():
    wide = (64, 16384)
    past = _g({"x": ("randn", wide)}, [("l", "F.log_softmax", {"dim": 1}, {"x": "x"}, wide),
                                      ("h", "nn.Hardsigmoid", {}, {"x": "l"}, wide)])
    assert "past its bound -3" in cannot_matter(*past)  # log_softmax over 16384 values: ~-10
    inside = _g({"x": ("randn", (64, 8))}, [("l", "F.log_softmax", {"dim": 1}, {"x": "x"}, (64, 8)),
                                           ("h", "nn.Hardsigmoid", {}, {"x": "l"}, (64, 8))])
    assert "past its bound" not in cannot_matter(*inside)  # over 8 values: ~-2.6, inside [-3, 3]
    tight = _g({"x": ("randn", wide)}, [("l", "F.log_softmax", {"dim": 1}, {"x": "x"}, wide),
                                       ("h", "F.hardtanh", {"min_val": -20.0, "max_val": 2.0}, {"x": "l"}, wide)])
    assert "past its bound" not in cannot_matter(*tight)


def test_log_softmax_is_blind_to_its_inputs_center():
    from operators.value_model import propagate

    centers = [propagate(*_g({"x": (draw, (64, 8))}, [("l", "F.log_softmax", {"dim": 1}, {"x": "x"}, (64, 8))]))["l"].center
               for draw in ("rand", "rand1")]  # the same spread about 0.5 and 1.5
    assert abs(centers[0] - centers[1]) < 1e-9 and centers[0] < -2.0  # ~-ln 8


def test_edges_of_a_domain_at_the_exact_zeros_or_ones_of_rand():
    assert "not finite" in cannot_matter(*_g({"x": ("rand", (8, 32))}, [("e", "torch.special.entr", {}, {"x": "x"}, (8, 32))]))
    assert cannot_matter(*_g({"x": ("rand1", (8, 32))}, [("e", "torch.special.entr", {}, {"x": "x"}, (8, 32))])) == ""
    assert "not finite" in cannot_matter(*_g({"x": ("rand", (8, 32))}, [("e", "torch.sqrt", {}, {"x": "x"}, (8, 32))]))
    relu = _g({"x": ("randn", (8, 32))}, [("r", "torch.relu", {}, {"x": "x"}, (8, 32)),
                                         ("e", "torch.sqrt", {}, {"x": "r"}, (8, 32))])
    assert "not finite" not in cannot_matter(*relu)  # relu's zeros come from values a rounding does not take below 0
    assert "infinitely steep" in cannot_matter(*_g({"x": ("rand", (8, 32))}, [("a", "torch.acos", {}, {"x": "x"}, (8, 32))]))
    kl = _g({"x": ("randn", (8, 32)), "y": ("rand", (8, 32))}, [("k", "F.kl_div", {}, {"x": "x", "y": "y"}, ())])
    assert "target has exact zeros" in cannot_matter(*kl)
    kl1 = _g({"x": ("randn", (8, 32)), "y": ("rand1", (8, 32))}, [("k", "F.kl_div", {}, {"x": "x", "y": "y"}, ())])
    assert "target" not in cannot_matter(*kl1)


def test_fmod_of_values_reaching_the_divisor_wraps():
    g = _g({"x": ("randn", BIG), "y": ("rand1", BIG)}, [("f", "torch.fmod", {}, {"x": "x", "y": "y"}, BIG)])
    assert "wraps" in cannot_matter(*g)
    small = _g({"x": ("rand", BIG), "y": ("rand1", BIG)}, [("m", "torch.mul", {"value": 0.5}, {"x": "x"}, BIG),
                                                          ("f", "torch.fmod", {}, {"x": "m", "y": "y"}, BIG)])
    assert "wraps" not in cannot_matter(*small)


def test_nonzero_tests_of_continuous_values_and_variance_of_one_value_are_constant():
    g = _g({"x": ("randn", (8, 32))}, [("a", "torch.any", {"dim": 1}, {"x": "x"}, (8,))])
    assert "never exactly 0" in cannot_matter(*g)
    steps = _g({"x": ("randn", (8, 32))}, [("s", "Tensor.gt", {"threshold": 0.0}, {"x": "x"}, (8, 32)),
                                          ("a", "torch.any", {"dim": 1}, {"x": "s"}, (8,))])
    assert "never exactly 0" not in cannot_matter(*steps)
    one = _g({"x": ("randn", (8, 1, 32))}, [("v", "torch.var_mean", {"dim": 1}, {"x": "x"}, (8, 32))])
    assert "nan" in cannot_matter(*one)
    two = _g({"x": ("randn", (8, 2, 32))}, [("v", "torch.var_mean", {"dim": 1}, {"x": "x"}, (8, 32))])
    assert "nan" not in cannot_matter(*two)


def test_rounding_of_values_that_all_round_to_one_level_reads_nothing():
    g = _g({"x": ("randn", (8, 4096)), "y": ("randn", (8, 4096))},
           [("s", "F.softmax", {"dim": 1}, {"x": "x"}, (8, 4096)), ("e", "torch.eq", {}, {"x": "s", "y": "y"}, (8, 4096))])
    assert "one level" in cannot_matter(*g)
    wide = _g({"x": ("randn", (8, 4096)), "y": ("randn", (8, 4096))}, [("e", "torch.eq", {}, {"x": "x", "y": "y"}, (8, 4096))])
    assert "one level" not in cannot_matter(*wide)


def test_exp_overflow_and_a_one_hot_output():
    big = _g({"x": ("randn", (8, 32))}, [("m", "torch.mul", {"value": 100.0}, {"x": "x"}, (8, 32)),
                                        ("e", "torch.exp", {}, {"x": "m"}, (8, 32))])
    assert "overflows" in cannot_matter(*big)
    assert "overflows" not in cannot_matter(*_g({"x": ("randn", (8, 32))}, [("e", "torch.exp", {}, {"x": "x"}, (8, 32))]))
    oh = _g({"x": ("randint", (8, 32))}, [("o", "F.one_hot", {"num_embeddings": 128}, {"x": "x"}, (8, 32, 128))])
    assert "saturated" in cannot_matter(*oh)
    few = _g({"x": ("randint", (8, 32))}, [("o", "F.one_hot", {"num_embeddings": 16}, {"x": "x"}, (8, 32, 16))])
    assert "saturated" not in cannot_matter(*few)


def test_a_comparison_with_a_learned_tensor_past_every_value_is_constant():
    wide = (64, 128)
    g = _g({"x": ("rand", wide)}, [("l", "F.log_softmax", {"dim": -1}, {"x": "x"}, wide),
                                  ("c", "torch.greater", {}, {"x": "l"}, wide)])
    assert "with a learned tensor" in cannot_matter(*g)  # ~-4.9: below every threshold ~N(0, 0.1)
    near = _g({"x": ("randn", wide)}, [("c", "torch.greater", {}, {"x": "x"}, wide)])
    assert "with a learned tensor" not in cannot_matter(*near)


def test_a_label_loss_reading_a_sign_target_by_equality():
    g = _g({"x": ("randn", (64, 32)), "y": ("sign", (64, 32))},
           [("h", "nn.HingeEmbeddingLoss", {}, {"x": "x", "y": "y"}, (64, 32))])
    assert "by equality" in cannot_matter(*g)
    soft = _g({"x": ("randn", (64, 32)), "y": ("sign", (64, 32))},
              [("h", "F.soft_margin_loss", {}, {"x": "x", "y": "y"}, ())])
    assert "by equality" not in cannot_matter(*soft)  # reads its target as a factor


def test_a_bounded_function_far_out_in_its_flat_tail_hardly_moves():
    from operators.value_model import propagate

    def spread(width: int) -> float:  # log_softmax over `width` values of randn: ~-ln(width) - 0.5, std 1
        g, values = _g({"x": ("randn", (64, width))}, [("l", "F.log_softmax", {"dim": 1}, {"x": "x"}, (64, width)),
                                                      ("s", "F.softsign", {}, {"x": "l"}, (64, width))])
        return propagate(g, values)["s"].s

    # softsign's slope is ~1/(1 + 10)**2 about -10 (16384 values), ~0.2 about -1.2 (2 values)
    assert spread(16384) < 0.1 * spread(2)


def test_threshold_jumps_where_its_value_differs_and_two_operand_comparisons_can_be_one_sided():
    jump = _g({"x": ("randn", BIG)}, [("t", "F.threshold", {"threshold": 0.5, "value": 0.0}, {"x": "x"}, BIG)])
    assert "a rounding flips some" in cannot_matter(*jump)
    relu = _g({"x": ("randn", BIG)}, [("t", "F.threshold", {"threshold": 0.0, "value": 0.0}, {"x": "x"}, BIG)])
    assert cannot_matter(*relu) == ""  # relu: continuous
    wide = (8, 16384)
    far = _g({"x": ("randn", wide), "y": ("randn", wide)},  # log_softmax over 16384 values: ~-10 against ~N(0, 1)
             [("l", "F.log_softmax", {"dim": 1}, {"x": "x"}, wide), ("c", "torch.ge", {}, {"x": "l", "y": "y"}, wide)])
    assert "one side only" in cannot_matter(*far)
    near = _g({"x": ("randn", (8, 32)), "y": ("randn", (8, 32))}, [("c", "torch.ge", {}, {"x": "x", "y": "y"}, (8, 32))])
    assert "one side only" not in cannot_matter(*near)
    kl = _g({"x": ("randn", (8, 32)), "y": ("rand", (8, 32))}, [("k", "nn.KLDivLoss", {}, {"x": "x", "y": "y"}, ())])
    assert "target has exact zeros" in cannot_matter(*kl)


def test_the_model_margin_takes_a_mean_of_half_a_million_values_as_fixed_and_of_a_hundred_thousand_not():
    def mean_of(n: int) -> str:  # each mean moves ~1/sqrt(n) between draws; the tolerance is 1e-2
        return cannot_matter(*_g({"x": ("randn", (32, n))}, [("m", "torch.mean", {"dim": 1}, {"x": "x"}, (32,))]))

    assert "fixed output" in mean_of(2**19)  # 5 * 0.0014 < 0.01
    assert mean_of(2**17) == ""  # 5 * 0.0028 > 0.01


def test_softshrink_of_values_inside_its_dead_zone_and_a_max_that_never_keeps_one_operand():
    wide = (64, 1024)
    inside = _g({"x": ("randn", wide)}, [("s", "F.softmax", {"dim": 1}, {"x": "x"}, wide),
                                        ("k", "nn.Softshrink", {"lambd": 0.5}, {"x": "s"}, wide)])
    assert "dead zone" in cannot_matter(*inside)  # softmax over 1024 values: ~1/1024 each
    outside = _g({"x": ("randn", wide)}, [("k", "nn.Softshrink", {"lambd": 0.5}, {"x": "x"}, wide)])
    assert "dead zone" not in cannot_matter(*outside)
    never = _g({"x": ("randn", wide)}, [("s", "F.softmax", {"dim": 1}, {"x": "x"}, wide),
                                       ("l", "F.log_softmax", {"dim": 1}, {"x": "x"}, wide),
                                       ("m", "torch.maximum", {}, {"x": "s", "y": "l"}, wide)])
    assert "never keeps its operand y" in cannot_matter(*never)  # softmax >= 0 >= log_softmax
    both = _g({"x": ("randn", wide), "y": ("randn", wide)}, [("m", "torch.maximum", {}, {"x": "x", "y": "y"}, wide)])
    assert "never keeps" not in cannot_matter(*both)


def test_rounding_of_large_values_meets_many_steps_and_frac_of_values_reaching_one_steps_there():
    few = (64, 8, 64)  # 32768 elements: under FRAGILE_NUMEL for a single threshold
    big = _g({"x": ("randn", few)}, [("m", "torch.mul", {"value": 100.0}, {"x": "x"}, few),
                                    ("t", "torch.trunc", {}, {"x": "m"}, few)])
    assert "a rounding flips some" in cannot_matter(*big)
    unit = _g({"x": ("randn", few)}, [("t", "torch.trunc", {}, {"x": "x"}, few)])
    assert "a rounding flips some" not in cannot_matter(*unit)
    reach = _g({"x": ("rand", BIG)}, [("f", "Tensor.frac", {}, {"x": "x"}, BIG)])
    assert "a rounding flips some" in cannot_matter(*reach)  # values up to 1 - 2**-24: a rounding up wraps to 0
    half = _g({"x": ("rand", BIG)}, [("m", "torch.mul", {"value": 0.5}, {"x": "x"}, BIG),
                                    ("f", "Tensor.frac", {}, {"x": "m"}, BIG)])
    assert "a rounding flips some" not in cannot_matter(*half)


def test_a_comparison_at_the_lower_bound_of_relu_like_values():
    shape = (64, 1024, 64)
    lt = _g({"x": ("randn", shape)}, [("r", "torch.relu", {}, {"x": "x"}, shape),
                                     ("c", "Tensor.lt", {"threshold": 0.0}, {"x": "r"}, shape)])
    assert "a constant" in cannot_matter(*lt)  # relu < 0 never holds
    shrunk = _g({"x": ("randn", shape)}, [("r", "nn.Hardshrink", {"lambd": 0.5}, {"x": "x"}, shape),
                                         ("c", "Tensor.lt", {"threshold": 0.0}, {"x": "r"}, shape)])
    assert "a constant" not in cannot_matter(*shrunk)  # hardshrink keeps values below -0.5


def test_a_spread_over_the_dim_a_layer_norm_fixes_is_a_constant():
    shape = (64, 512)
    fixed = _g({"x": ("randn", shape)}, [("l", "torch.layer_norm", {}, {"x": "x"}, shape),
                                        ("s", "torch.std", {"dim": 1}, {"x": "l"}, (64,))])
    assert "fixes it there" in cannot_matter(*fixed)
    other = _g({"x": ("randn", shape)}, [("l", "torch.layer_norm", {}, {"x": "x"}, shape),
                                        ("s", "torch.std", {"dim": 0}, {"x": "l"}, (512,))])
    assert "fixes it there" not in cannot_matter(*other)


def test_a_spread_over_an_instance_norms_last_dim_is_a_constant_on_three_dims_only():
    fixed = _g({"x": ("rand", (64, 3, 4096))}, [("n", "F.instance_norm", {}, {"x": "x"}, (64, 3, 4096)),
                                               ("v", "torch.var", {"dim": 2}, {"x": "n"}, (64, 3))])
    assert "fixes it there" in cannot_matter(*fixed)
    spatial = _g({"x": ("rand", (64, 3, 64, 64))}, [("n", "F.instance_norm", {}, {"x": "x"}, (64, 3, 64, 64)),
                                                   ("v", "torch.var", {"dim": 3}, {"x": "n"}, (64, 3, 64))])
    assert "fixes it there" not in cannot_matter(*spatial)  # normalized over dims 2 and 3 together


def test_a_softmin_of_bounded_values_over_a_wide_dim_is_a_fixed_output_of_normal_ones_it_is_not():
    shape = (64, 3, 64, 128)
    bounded = _g({"x": ("rand", shape)}, [("s", "nn.Softmin", {"dim": -1}, {"x": "x"}, shape)])
    assert "fixed output" in cannot_matter(*bounded)  # every weight within ~e**0.5 / 128 of 1/128
    normal = _g({"x": ("randn", shape)}, [("s", "nn.Softmin", {"dim": -1}, {"x": "x"}, shape)])
    assert cannot_matter(*normal) == ""  # the lowest of many normal values takes a weight far past the tolerance


def test_an_rms_norm_of_positive_values_keeps_their_center():
    shape = (8, 32, 1024, 64)
    summed = _g({"x": ("rand", shape)}, [("r", "F.rms_norm", {}, {"x": "x"}, shape),
                                        ("s", "torch.sum", {"dim": 1}, {"x": "r"}, (8, 1024, 64)),
                                        ("g", "Tensor.sigmoid", {}, {"x": "s"}, (8, 1024, 64))])
    assert "fixed output" in cannot_matter(*summed)  # 32 values of ~0.87 summed: sigmoid at its bound
    centered = _g({"x": ("randn", shape)}, [("r", "F.rms_norm", {}, {"x": "x"}, shape),
                                           ("s", "torch.sum", {"dim": 1}, {"x": "r"}, (8, 1024, 64)),
                                           ("g", "Tensor.sigmoid", {}, {"x": "s"}, (8, 1024, 64))])
    assert cannot_matter(*centered) == ""


def test_the_trapezoid_rule_sums_with_step_one():
    shape = (16, 64, 1024)
    far = _g({"x": ("rand", shape)}, [("t", "torch.trapz", {"dim": 2}, {"x": "x"}, (16, 64)),
                                     ("c", "torch.ge", {}, {"x": "t"}, (16, 64))])
    assert "one side only" in cannot_matter(*far)  # ~511 against a learned ~0 threshold


def test_the_trapezoid_rule_over_one_point_is_zero():
    shape = (16, 1, 4096)
    one = _g({"x": ("rand", shape)}, [("t", "torch.trapz", {"dim": 1}, {"x": "x"}, (16, 4096)),
                                     ("e", "torch.exp", {}, {"x": "t"}, (16, 4096))])
    assert "fixed output" in cannot_matter(*one)


def test_an_index_output_over_many_continuous_values_is_fragile_over_few_or_levels_it_is_not():
    shape = (64, 64, 256)
    many = _g({"x": ("randn", shape)}, [("a", "torch.argmax", {"dim": 2}, {"x": "x"}, (64, 64))])
    assert "a near-tie" in cannot_matter(*many)
    few = _g({"x": ("randn", (4, 8, 256))}, [("a", "torch.argmax", {"dim": 2}, {"x": "x"}, (4, 8))])
    assert cannot_matter(*few) == ""
    single = _g({"x": ("randn", (64, 1, 256))}, [("a", "torch.argmin", {"dim": 1}, {"x": "x"}, (64, 256))])
    assert "always 0" in cannot_matter(*single)
    levels = _g({"x": ("randn", shape)}, [("s", "torch.sign", {}, {"x": "x"}, shape),
                                         ("a", "torch.argsort", {"dim": 2}, {"x": "s"}, shape)])
    assert "a near-tie" not in cannot_matter(*levels)


def test_tanhshrink_of_small_values_is_a_fixed_output_of_unit_ones_it_is_not():
    shape = (64, 16, 4096)
    small = _g({"x": ("rand", shape)}, [("s", "torch.softmax", {"dim": 1}, {"x": "x"}, shape),
                                       ("t", "F.tanhshrink", {}, {"x": "s"}, shape)])
    assert "fixed output" in cannot_matter(*small)  # ~x**3 / 3 of weights ~1/16
    unit = _g({"x": ("randn", shape)}, [("t", "F.tanhshrink", {}, {"x": "x"}, shape)])
    assert cannot_matter(*unit) == ""


def test_the_inverse_normal_cdf_at_the_exact_zeros_of_rand_is_not_finite():
    shape = (64, 512, 512)
    at_zero = _g({"x": ("rand", shape)}, [("n", "torch.special.ndtri", {}, {"x": "x"}, shape)])
    assert "not finite" in cannot_matter(*at_zero)
    inside = _g({"x": ("rand", shape)}, [("h", "Tensor.__add__", {"shift": 0.5}, {"x": "x"}, shape),
                                        ("m", "Tensor.__truediv__", {"divisor": 2.0}, {"x": "h"}, shape),
                                        ("n", "torch.special.ndtri", {}, {"x": "m"}, shape)])
    assert "not finite" not in cannot_matter(*inside)  # values in [0.25, 0.75)


def test_the_diff_of_a_running_max_along_its_dim_is_saturated_across_it_not():
    shape = (64, 8, 4096)
    along = _g({"x": ("rand", shape)}, [("c", "Tensor.cummax", {"dim": 2}, {"x": "x"}, shape),
                                       ("d", "Tensor.diff", {"dim": 2}, {"x": "c"}, (64, 8, 4095))])
    assert "saturated" in cannot_matter(*along)
    across = _g({"x": ("rand", shape)}, [("c", "Tensor.cummax", {"dim": 2}, {"x": "x"}, shape),
                                        ("d", "Tensor.diff", {"dim": 1}, {"x": "c"}, (64, 7, 4096))])
    assert "saturated" not in cannot_matter(*across)
