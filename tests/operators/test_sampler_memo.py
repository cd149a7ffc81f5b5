"""The node memo replays exactly what torch said on meta, and re-runs refuse operands that only broadcast."""

import random
import warnings

import pytest

import operators.graph as graph_mod
from operators import batch_scale
from operators.catalog import REGISTRY
from operators.cost import CostMode
from operators.graph import MetaError, execute
from operators.render import as_graph
from operators.sample import sample_tasks, single_op_graph
from pipeline.rundir.config import load_preset

DEMO = load_preset("demo").sample


def _run(g, consts):
    mode = CostMode()
    out, values = execute(g, consts, mode)
    layouts = {n: (tuple(v.shape), v.stride(), v.dtype) for n, v in values.items()}
    return layouts, [(r.name, r.flops, r.act_bytes, r.fixed_bytes, r.out_bytes, r.view, r.family_flops) for r in mode.records]


def test_memo_replays_the_layouts_and_records_of_a_fresh_meta_run(monkeypatch):
    rows = sample_tasks(DEMO, 21, range(6), set())
    for r in rows:
        g = as_graph(r["graph"])
        consts = dict(g.graph["constants"])
        consts["batch_size"] = max(1, consts["batch_size"] - 1)
        monkeypatch.setattr(graph_mod, "_MEMO", {})
        monkeypatch.setattr(batch_scale, "BATCH_LINEAR", frozenset())  # every node runs (test_batch_scale.py)
        fresh = _run(g, consts)
        assert len(graph_mod._MEMO) == r["num_ops"]  # every op was run once and memoized
        replayed = _run(g, consts)  # now every op replays from the memo
        assert replayed == fresh, r["name"]


def test_a_failure_on_meta_is_memoized_and_raised_again(monkeypatch):
    monkeypatch.setattr(graph_mod, "_MEMO", {})
    g = single_op_graph(REGISTRY["torch.mm"], random.Random(1), 2)
    consts = dict(g.graph["constants"])
    node = g.nodes["mm"]
    attr, expr = node["tensors"][0]
    node["tensors"] = [[attr, expr.replace("in_features", "in_features + 1")]]  # the weight no longer fits x
    for _ in range(2):
        with pytest.raises(MetaError):
            execute(g, consts)
    assert any(layout is None for layout, _ in graph_mod._MEMO.values())


def test_a_loss_target_that_would_broadcast_is_refused():
    g = single_op_graph(REGISTRY["F.l1_loss"], random.Random(3), 4)
    consts = dict(g.graph["constants"])
    execute(g, consts)  # target of x's shape: runs
    target = g.nodes["y"]
    target["shape_expr"] = [*target["shape_expr"][:-1], "1"]  # torch would broadcast it (with a warning)
    with pytest.raises(MetaError, match="operand y"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own broadcasting warning, before the check refuses it
        execute(g, consts)


def test_sampled_loss_targets_have_the_input_shape():
    rows = sample_tasks(DEMO, 5, range(80), set())
    checked = 0
    for r in rows:
        g = as_graph(r["graph"])
        for _, d in g.nodes(data=True):
            if d["kind"] == "op" and REGISTRY[d["op"]].category == "loss":
                for key in graph_mod._same_operands(d["op"]):
                    assert g.nodes[d["args"][key]]["shape"] == g.nodes[d["args"]["x"]]["shape"], r["name"]
                    checked += 1
    assert checked
