"""The sampler end to end on small draws: determinism, dedupe, schema, true labels, sizing, variants."""

import json
from dataclasses import replace

import networkx as nx
import pyarrow as pa
import pytest

from filters.static_check import check_task_source
from operators.catalog import REGISTRY
from operators.describe import describe_graph
from operators.labels import check_labels
from operators.render import as_graph, render
from operators.sample import sample_tasks
from operators.spec import OpSpec
from operators.trace import trace_code
from pinning.labels import pin_spec
from pipeline.errors import OpsynthError
from pipeline.rundir.config import ConfigError, from_dict, load_preset
from pipeline.rundir.schema import TASKS

DEMO = load_preset("demo").sample
H200 = load_preset("h200").sample


@pytest.fixture(scope="module")
def demo_rows():
    return sample_tasks(DEMO, 11, range(60), set())


def test_same_seed_and_index_give_the_same_task(demo_rows):
    again = sample_tasks(DEMO, 11, range(4, 8), set())
    assert [r["task_id"] for r in again] == [r["task_id"] for r in demo_rows[4:8]]
    assert [r["code"] for r in again] == [r["code"] for r in demo_rows[4:8]]
    other = sample_tasks(DEMO, 12, range(4, 8), set())
    assert {r["task_id"] for r in other}.isdisjoint(r["task_id"] for r in demo_rows)


def test_a_seen_task_is_resampled_and_seen_grows(demo_rows):
    seen = {demo_rows[0]["task_id"]}
    rows = sample_tasks(DEMO, 11, range(0, 2), seen)
    assert rows[0]["task_id"] != demo_rows[0]["task_id"]
    assert rows[1]["task_id"] == demo_rows[1]["task_id"]
    assert seen == {demo_rows[0]["task_id"], rows[0]["task_id"], rows[1]["task_id"]}


def test_rows_fill_every_tasks_column(demo_rows):
    table = pa.Table.from_pylist(demo_rows, schema=TASKS)
    assert table.num_rows == len(demo_rows)
    for name in TASKS.names:
        if name == "source_row":  # the row's position in an imported file: audited datasets only
            assert table.column(name).null_count == len(demo_rows)
            continue
        assert table.column(name).null_count == 0, name
    assert len({r["task_id"] for r in demo_rows}) == len(demo_rows)


def test_code_is_kernelbench_format_and_labels_match_its_trace(demo_rows):
    for r in demo_rows:
        assert check_task_source(r["code"]) is None, r["name"]
        traced = trace_code(r["code"])
        assert traced == r["aten_ops"], r["name"]
        assert check_labels(r["ops"], traced) == [], r["name"]
        assert r["data_source"] == f"torch#{r['num_ops']}" and len(r["ops"]) == r["num_ops"]
        assert set(r["categories"]) == {REGISTRY[o].category for o in r["ops"]}
        assert "torch.rand" in r["code"] and "def get_init_inputs" in r["code"]


def test_graph_column_rerenders_the_code_and_every_op_reaches_the_output(demo_rows):
    for r in demo_rows:
        g = as_graph(r["graph"])
        assert render(g) == r["code"]
        out = g.graph["output"]
        ops = [n for n, d in g.nodes(data=True) if d["kind"] == "op"]
        assert len(ops) == r["num_ops"]
        assert all(n == out or out in nx.descendants(g, n) for n in g.nodes)
        assert r["is_dag"] == (len([n for n in g if g.nodes[n]["kind"] == "input"]) > 1
                               or any(g.out_degree(n) > 1 or g.in_degree(n) > 1 for n in g))


def test_shape_variants_run_at_other_sizes(demo_rows):
    for r in demo_rows[:20]:
        variants = json.loads(r["shape_variants"])
        consts = as_graph(r["graph"]).graph["constants"]
        assert len(variants) == 2 and variants[0] != variants[1]
        for v in variants:
            assert any(consts[k] != val for k, val in v.items())
            code = render(r["graph"], v)
            assert all(f"\n{k} = {val}\n" in code for k, val in v.items())
            assert trace_code(code)  # runs (on meta) with the other sizes


def test_composition_follows_the_config(demo_rows):
    share_deep = sum(r["num_ops"] >= 3 for r in demo_rows) / len(demo_rows)
    share_dag = sum(r["is_dag"] for r in demo_rows) / len(demo_rows)
    assert 0.3 <= share_deep <= 0.75  # demo weights put 50% on 3-4 ops
    assert 0.15 <= share_dag <= 0.6   # demo dag_share 0.3 (binary ops with a second input add some)
    assert max(r["num_ops"] for r in demo_rows) <= DEMO.max_ops
    assert len({c for r in demo_rows for c in r["categories"]}) >= 10


def test_only_allowed_categories_are_drawn():
    cfg = replace(DEMO, categories=("activation", "reduction"))
    rows = sample_tasks(cfg, 3, range(10), set())
    assert {c for r in rows for c in r["categories"]} <= {"activation", "reduction"}


def test_h200_sizes_land_in_the_window_under_the_memory_cap():
    rows = sample_tasks(H200, 5, range(12), set())
    for r in rows:
        assert H200.target_min_ms <= r["predicted_ms"] <= H200.target_max_ms
        assert r["predicted_peak_bytes"] <= H200.max_peak_memory_gb * H200.peak_headroom * 2**30
        assert r["bytes_moved"] > 0
    consts = [as_graph(r["graph"]).graph["constants"]["batch_size"] for r in rows]
    assert max(consts) > 8  # sized up from the base batch, not left at it


def test_check_labels_catches_a_wrong_label_and_an_unlabelled_kernel():
    assert check_labels(["nn.Conv2d", "torch.relu"], ["aten.convolution", "aten.relu"]) == []
    problems = check_labels(["nn.Conv2d", "torch.tanh"], ["aten.convolution", "aten.relu"])
    assert any("torch.tanh" in p for p in problems) and any("aten.relu" in p for p in problems)
    assert check_labels(["nn.Bogus"], []) and check_labels([], ["aten.view"]) == []


def test_describe_graph_names_every_operator_and_constant(demo_rows):
    r = max(demo_rows, key=lambda r: r["num_ops"])
    text = describe_graph(r)
    g = as_graph(r["graph"])
    assert all(op in text for op in r["ops"])
    assert all(f"{k} = {v}" in text for k, v in g.graph["constants"].items())


def test_an_operator_that_cannot_run_on_meta_is_named():
    broken = OpSpec("torch.not_an_op", "elementwise", "torch.not_an_op({x})")
    with pytest.raises(OpsynthError, match="torch.not_an_op"):
        pin_spec(broken, samples=1)


@pytest.mark.parametrize("sample, fragment", [
    ({"category_weights": {"convolutions": 1.0}}, "convolutions"),
    ({"category_weights": {c: 0.0 for c in ("activation", "loss")}, "categories": ["activation", "loss"]},
     "no category"),
    ({"categories": ["loss"], "min_ops": 2}, "end a graph"),
    ({"min_ops": 3, "max_ops": 9}, "max_ops"),
])
def test_impossible_sample_configs_fail_at_load(sample, fragment):
    with pytest.raises(ConfigError, match=fragment):
        from_dict({"sample": sample}, "test.toml")


def test_a_join_takes_the_widest_domain_of_what_it_joins():
    """Softmax values (unit) hstacked with a randn input are not unit: nn.BCELoss must not be offered them (its
    range assert fires on the GPU, where under MPS it restarts every worker)."""
    import random as _random

    from operators.catalog import sampleable
    from operators.graph import GraphBuilder
    from operators.spec import accepts

    specs = {s.name: s for s in sampleable()}
    b = GraphBuilder(_random.Random(0))
    x = b.add_input(("batch_size", "features"), [4, 8], "randn")
    unit = b.try_op(specs["Tensor.softmax"], x)
    assert b.domain[unit] == "unit"
    y = b.add_input(("batch_size", "features"), [4, 8], "randn")
    joined = b.try_op(specs["torch.hstack"], unit, join_with=y)
    assert b.domain[joined] == "any"
    assert not accepts(specs["nn.BCELoss"], 2, b.domain[joined])
    same = b.try_op(specs["torch.hstack"], unit, join_with=b.try_op(specs["torch.sigmoid"], x))
    assert b.domain[same] == "unit"  # unit with unit stays unit
