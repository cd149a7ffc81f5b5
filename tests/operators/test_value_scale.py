"""operators/value_scale.py: each rule flags the draw whose operator cannot matter, and lets the same operator
with parameters that matter through."""

import networkx as nx
import torch

from operators.value_scale import cannot_matter


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
