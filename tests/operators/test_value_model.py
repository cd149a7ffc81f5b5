"""operators/value_model.py: each operator family's output range and magnitude from its inputs', and their
propagation through a graph."""

import math

import networkx as nx
import torch

from operators.value_model import input_value, propagate, rule_for, stem


def graph(inputs: dict, ops: list) -> tuple:
    """inputs: {name: (draw, shape)}; ops: [(name, op, params, {arg: source}, out_shape)]."""
    g, values = nx.DiGraph(), {}
    for n, (draw, shape) in inputs.items():
        g.add_node(n, kind="input", draw=draw)
        values[n] = torch.empty(shape, device="meta")
    for n, op, params, args, shape in ops:
        g.add_node(n, kind="op", op=op, params=params)
        for k, src in args.items():
            g.add_edge(src, n, arg=k)
        values[n] = torch.empty(shape, device="meta")
    g.graph["output"] = ops[-1][0]
    return g, values


def test_stems_share_one_rule_across_spellings():
    assert stem("nn.LogSoftmax") == stem("F.log_softmax") == "log_softmax"
    assert stem("nn.ReLU") == stem("torch.relu") == "relu"
    assert rule_for("nn.Tanh") is rule_for("Tensor.tanh")
    assert rule_for("nn.Tanh") is not rule_for("torch.sigmoid")


def test_inputs_by_draw():
    assert input_value("x", "randn").gauss and input_value("x", "randn").s == 1.0
    r = input_value("x", "rand")
    assert (r.lo, r.hi) == (0.0, 1.0) and not r.gauss


def test_bounded_and_step_outputs():
    g, v = graph({"x": ("randn", (4, 8))}, [("s", "torch.sigmoid", {}, {"x": "x"}, (4, 8)),
                                           ("c", "Tensor.gt", {"threshold": 0.5}, {"x": "s"}, (4, 8))])
    vals = propagate(g, v)
    assert (vals["s"].lo, vals["s"].hi) == (0.0, 1.0) and vals["s"].s < 1.0
    assert vals["c"].discrete and (vals["c"].lo, vals["c"].hi) == (0.0, 1.0)


def test_softmax_values_shrink_with_width():
    g, v = graph({"x": ("randn", (4, 4096))}, [("p", "F.softmax", {"dim": 1}, {"x": "x"}, (4, 4096))])
    narrow_g, narrow_v = graph({"x": ("randn", (4, 8))}, [("p", "F.softmax", {"dim": 1}, {"x": "x"}, (4, 8))])
    wide, narrow = propagate(g, v)["p"], propagate(narrow_g, narrow_v)["p"]
    assert math.isclose(wide.center, 1 / 4096) and wide.s < narrow.s


def test_mean_shrinks_spread_and_sum_grows_it():
    g, v = graph({"x": ("randn", (4, 1024))}, [("m", "torch.mean", {"dim": 1}, {"x": "x"}, (4,)),
                                              ("t", "torch.sum", {"dim": 1}, {"x": "x"}, (4,))])
    vals = propagate(g, v)
    assert math.isclose(vals["m"].s, 1 / 32) and math.isclose(vals["t"].s, 32.0)
    assert vals["m"].noisy and not vals["x"].noisy


def test_normalization_output_is_standard_and_prod_of_unit_values_vanishes():
    g, v = graph({"x": ("rand", (4, 64))}, [("n", "nn.LayerNorm", {}, {"x": "x"}, (4, 64)),
                                           ("q", "torch.prod", {"dim": 1}, {"x": "x"}, (4,))])
    vals = propagate(g, v)
    assert vals["n"].gauss and math.isclose(vals["n"].s, 1.0)
    assert vals["q"].center == 2.0 ** -64


def test_spread_is_kept_per_input_through_a_join():
    g, v = graph({"x": ("randn", (4, 8)), "y": ("rand", (4, 8))},
                 [("a", "torch.add", {}, {"x": "x", "y": "y"}, (4, 8)),
                  ("b", "Tensor.__mul__", {"scale": 2.0}, {"x": "a"}, (4, 8))])
    b = propagate(g, v)["b"]
    assert math.isclose(b.spread_of("x"), 2.0) and math.isclose(b.spread_of("y"), 0.58)
    assert b.noisy


def test_an_unnamed_elementwise_op_drops_gaussianity_a_reshape_keeps_it():
    g, v = graph({"x": ("randn", (4, 8))}, [("r", "torch.reciprocal", {}, {"x": "x"}, (4, 8)),
                                           ("f", "torch.flatten", {}, {"x": "x"}, (32,))])
    vals = propagate(g, v)
    assert not vals["r"].gauss and vals["f"].gauss


def test_a_bounded_input_bounds_a_monotone_or_even_function_of_it():
    g, values = graph({"x": ("rand", (8, 1024))}, [("sq", "Tensor.square", {}, {"x": "x"}, (8, 1024)),
                                                   ("ch", "torch.cosh", {}, {"x": "sq"}, (8, 1024)),
                                                   ("sg", "torch.sigmoid", {}, {"x": "x"}, (8, 1024))])
    v = propagate(g, values)
    assert (v["sq"].lo, v["sq"].hi) == (0.0, 1.0)
    assert v["ch"].lo == 1.0 and math.isclose(v["ch"].hi, math.cosh(1.0))
    # a saturating function of [0, 1) values: its image, centred at the image of their center
    assert v["sg"].lo == 0.5 and math.isclose(v["sg"].center, 1 / (1 + math.exp(-0.5)))
    # an unbounded input keeps the rule's own range
    g, values = graph({"x": ("randn", (8, 64))}, [("ch", "torch.cosh", {}, {"x": "x"}, (8, 64))])
    assert propagate(g, values)["ch"].hi == math.inf


def test_reciprocal_inverts_a_one_signed_range_and_a_range_across_zero_is_unbounded():
    g, values = graph({"x": ("rand1", (8, 64))}, [("r", "Tensor.reciprocal", {}, {"x": "x"}, (8, 64))])
    r = propagate(g, values)["r"]
    assert (r.lo, r.hi) == (0.5, 1.0) and math.isclose(r.center, 1 / 1.5)
    assert r.s < input_value("x", "rand1").s  # 1/x moves by 1/x**2 of x's move: less on [1, 2)
    g, values = graph({"x": ("randn", (8, 64))}, [("r", "Tensor.reciprocal", {}, {"x": "x"}, (8, 64))])
    assert propagate(g, values)["r"].hi == math.inf


def test_cosine_of_values_sharing_a_mean_hardly_moves_of_zero_mean_values_it_does():
    def cos(draw: str) -> float:
        g, values = graph({"x": (draw, (8, 1024)), "y": (draw, (8, 1024))},
                          [("c", "F.cosine_similarity", {"dim": 1}, {"x": "x", "y": "y"}, (8,))])
        return propagate(g, values)["c"].s

    assert math.isclose(cos("randn"), 1 / math.sqrt(1024))
    assert cos("rand1") < cos("randn") / 20  # [1, 2) values: each vector's varying share is ~0.19


def test_a_distance_and_a_dot_product_of_operands_with_means_sit_far_from_zero():
    from operators.value_model import propagate

    g, values = graph({"x": ("rand1", (8, 4096)), "y": ("rand", (8, 4096))},
                      [("d", "F.pairwise_distance", {}, {"x": "x", "y": "y"}, (8,)),
                       ("v", "torch.linalg.vecdot", {}, {"x": "x", "y": "y"}, (8,))])
    v = propagate(g, values)
    assert 0.9 * 64 < v["d"].center < 1.2 * 64  # ~sqrt(4096 * (1 + 2 * 0.29**2))
    assert v["v"].center > 0.5 * 4096 * 0.75  # ~4096 * 1.5 * 0.5
    g0, values0 = graph({"x": ("randn", (8, 4096)), "y": ("randn", (8, 4096))},
                        [("v", "torch.linalg.vecdot", {}, {"x": "x", "y": "y"}, (8,))])
    assert propagate(g0, values0)["v"].center == 0.0


def test_an_unnamed_monotone_function_carries_center_and_moves_through_its_slope():
    from operators.value_model import propagate

    g, values = graph({"x": ("rand1", (8, 64))}, [("r", "torch.rsqrt", {}, {"x": "x"}, (8, 64))])
    r = propagate(g, values)["r"]
    assert abs(r.center - 1.5 ** -0.5) < 1e-6  # rsqrt of the center, not the center
    assert r.s < 0.5 * 0.29  # rsqrt's slope on [1.2, 1.8] is ~0.3


def test_an_even_function_is_flat_about_zero_an_odd_one_is_not():
    from operators.value_model import propagate

    def spread(op: str) -> float:
        g, values = graph({"x": ("randn", (8, 4096))}, [("m", "torch.mean", {"dim": 1}, {"x": "x"}, (8,)),
                                                      ("f", op, {}, {"x": "m"}, (8,))])
        return propagate(g, values)["f"].s

    assert spread("torch.cos") < 0.05 * spread("torch.sin")  # means of 4096 values: ~N(0, 1/64)
    assert spread("torch.sinc") < 0.1 * spread("torch.sin")


def test_a_quantile_of_many_values_moves_like_their_mean_their_max_more():
    from operators.value_model import propagate

    def spread(op: str) -> float:
        g, values = graph({"x": ("randn", (8, 65536))}, [("q", op, {"dim": 1}, {"x": "x"}, (8,))])
        return propagate(g, values)["q"].s

    assert 0.5 / 256 < spread("torch.median") < 2 / 256  # ~1.25 / sqrt(65536)
    assert spread("torch.amax") > 10 * spread("torch.median")


def test_functions_of_unit_values_in_their_own_terms():
    shape = (64, 256)

    def out(op: str) -> object:
        g, values = graph({"x": ("rand", shape)}, [("f", op, {}, {"x": "x"}, shape)])
        return propagate(g, values)["f"]
    assert out("nn.ReLU6").center == 0.5 and not out("nn.ReLU6").zeros  # the identity on [0, 1]
    sp = out("F.softplus")
    assert 0.9 < sp.center < 1.0 and sp.s < 0.29  # softplus(0.5) = 0.97, flatter than the identity there
    lp = out("torch.log1p")
    assert abs(lp.center - math.log1p(0.5)) < 1e-9 and 0.1 < lp.s < 0.29
    n = out("nn.LayerNorm")
    assert -1.8 < n.lo < -1.6 and 1.6 < n.hi < 1.8  # a uniform input normalized stays within its scaled bounds


def test_one_hot_cumulative_runs_and_logsumexp():
    g, values = graph({"x": ("randint:num_embeddings", (64, 512))},
                      [("o", "F.one_hot", {"num_embeddings": 128}, {"x": "x"}, (64, 512, 128))])
    assert propagate(g, values)["o"].center == 1 / 128
    shape = (64, 4096)

    def mean_after(op: str | None) -> float:
        ops = [("c", op, {"dim": 1}, {"x": "x"}, shape)] if op else []
        ops.append(("m", "torch.mean", {"dim": 1}, {"x": "c" if op else "x"}, (64,)))
        return propagate(*graph({"x": ("randn", shape)}, ops))["m"].s
    assert mean_after("torch.cummax") > 30 * mean_after(None)  # a run's moves do not average out
    lse = propagate(*graph({"x": ("rand", shape)}, [("l", "torch.logsumexp", {"dim": 1}, {"x": "x"}, (64,))]))["l"]
    assert abs(lse.center - (0.5 + 0.29 ** 2 / 2 + math.log(4096))) < 0.01 and lse.s < 0.01


def test_runs_do_not_average_along_their_dim_but_do_across_it_and_bounded_values_spread_their_squares_less():
    shape = (8, 64, 4096)

    def mean_of_cummax(dim: int) -> float:
        out = (8, 4096) if dim == 1 else (8, 64)
        g = graph({"x": ("randn", shape)}, [("c", "torch.cummax", {"dim": 1}, {"x": "x"}, shape),
                                           ("m", "torch.mean", {"dim": dim}, {"x": "c"}, out)])
        return propagate(*g)["m"].s
    assert mean_of_cummax(1) > 5 * mean_of_cummax(2)  # along the run: one value's move; across it: 4096 runs

    def var_spread(draw: str) -> float:
        v = propagate(*graph({"x": (draw, shape)}, [("v", "torch.var", {"dim": 2}, {"x": "x"}, (8, 64))]))["v"]
        return v.s / v.center
    assert abs(var_spread("rand") / var_spread("randn") - math.sqrt(0.8 / 2.0)) < 1e-9
