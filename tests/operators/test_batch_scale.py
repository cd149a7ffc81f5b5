"""Batch scaling gives exactly what a fresh meta run gives: for every operator on its list, and end to end."""

import random
import warnings

import pytest

import operators.graph as graph_mod
from operators import batch_scale
from operators.catalog import REGISTRY
from operators.cost import CostMode
from operators.flops import LOG_COUNTS
from operators.graph import OpFailed, execute
from operators.sample import sample_tasks, single_op_graph
from pipeline.rundir.config import load_preset


def _run(g, consts):
    mode = CostMode()
    _, values = execute(g, consts, mode)
    layouts = {n: (tuple(v.shape), v.stride(), v.storage_offset(), v.dtype) for n, v in values.items()}
    return layouts, [(r.name, r.flops, r.act_bytes, r.fixed_bytes, r.out_bytes, r.view, r.family_flops) for r in mode.records]


@pytest.fixture
def fresh(monkeypatch):
    """Empty memos, and a count of the nodes batch scaling answered."""
    monkeypatch.setattr(graph_mod, "_MEMO", {})
    monkeypatch.setattr(batch_scale, "_MEMO", {})
    derived = []
    real = batch_scale.derive

    def spy(bkey, batch):
        out = real(bkey, batch)
        derived.append(out is not None)
        return out

    monkeypatch.setattr(batch_scale, "derive", spy)
    return derived


def _graphs(name):
    spec = REGISTRY[name]
    out = []
    for rank in spec.ranks:
        for seed in range(2):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    out.append(single_op_graph(spec, random.Random(seed), rank))
                except OpFailed:
                    continue
    return out


@pytest.mark.parametrize("name", sorted(batch_scale.BATCH_LINEAR))
def test_every_listed_operator_scales_like_its_meta_run(name, fresh, monkeypatch):
    graphs = _graphs(name)
    if not graphs:
        pytest.skip(f"{name}: no single-op graph builds")
    for g in graphs:
        consts = dict(g.graph["constants"])
        for b in (2, 3, 7, 1000):
            at = {**consts, "batch_size": b}
            graph_mod._MEMO.clear()
            batch_scale._MEMO.clear()
            try:
                with monkeypatch.context() as m:
                    m.setattr(batch_scale, "BATCH_LINEAR", frozenset())
                    truth = _run(g, at)
            except Exception:  # noqa: BLE001 - the graph does not run at this batch: nothing to scale
                continue
            graph_mod._MEMO.clear()
            _run(g, {**consts, "batch_size": 5})  # a real run at batch 5 teaches batch scaling
            graph_mod._MEMO.clear()
            assert _run(g, at) == truth, (name, g.graph["constants"], b)
    if any(r[0] in LOG_COUNTS for r in truth[1]):  # a FLOP count with a log of a dim's size: never derived
        assert not any(fresh), name
        return
    assert any(fresh), f"{name}: batch scaling never answered (the test would prove nothing)"


def test_guards_keep_batch_one_literals_and_unlisted_operators_on_meta(fresh):
    g = single_op_graph(REGISTRY["torch.tanh"], random.Random(0), 3)  # built (and run) at batch 4
    consts = dict(g.graph["constants"])
    _run(g, {**consts, "batch_size": 6})
    assert fresh == [True]
    graph_mod._MEMO.clear()
    _run(g, {**consts, "batch_size": 1})
    assert fresh == [True], "batch 1 must run on meta"
    node = next(n for n, d in g.nodes(data=True) if d["kind"] == "op")
    g.nodes[node]["call"] = g.nodes[node]["call"].replace(")", ") + 0 * 9", 1)  # the batch as a literal
    graph_mod._MEMO.clear()
    _run(g, {**consts, "batch_size": 9})
    assert fresh == [True], "a node that writes the batch as a literal must run on meta"
    assert "nn.Linear" not in batch_scale.BATCH_LINEAR  # its trace reads a transposed (unscaled) weight view


def test_sampled_rows_are_identical_with_and_without_batch_scaling(monkeypatch):
    cfg = load_preset("h200").sample
    monkeypatch.setattr(graph_mod, "_MEMO", {})
    monkeypatch.setattr(batch_scale, "_MEMO", {})
    with_scaling = sample_tasks(cfg, 5, range(40), set())
    graph_mod._MEMO.clear()
    batch_scale._MEMO.clear()
    monkeypatch.setattr(batch_scale, "BATCH_LINEAR", frozenset())
    assert sample_tasks(cfg, 5, range(40), set()) == with_scaling
