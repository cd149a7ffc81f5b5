"""Within-dataset duplicates: exact and structural (first by task_id kept), near (same operators doing the same
thing, star clusters around the task nearest the runtime window's log-middle)."""

import json

import pytest

from detectors.contamination import minhash_jaccard, minhashes
from detectors.dedupe import canonical_graph_key, dedupe, detemplated_tokens, jaccard, shingles
from filters.base import reason_kind

BASE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.tanh(x)
        y = torch.sigmoid(y) * 2.0
        y = torch.cumsum(y, dim=1)
        return torch.softmax(y, dim=-1)

def get_inputs():
    return [torch.rand(16, 32)]

def get_init_inputs():
    return []
'''
SPACED = BASE.replace("y = torch.tanh(x)", "y = torch.tanh( x )  # comment")
OTHER = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv1d(c, c, 3)

    def forward(self, a, b):
        return self.conv(a).amax(dim=2) - b.mean(dim=2)

def get_inputs():
    return [torch.rand(2, 4, 9), torch.rand(2, 4, 9)]

def get_init_inputs():
    return [4]
'''


def task(calls: list[tuple[str, str, dict[str, str]]], sizes: dict[str, int], draw: str = "rand",
         inputs: tuple[str, ...] = ("x",), doc: str = "") -> tuple[str, str]:
    """(code, graph JSON) in the template's layout: `calls` are (var, op, {arg: source var})."""
    names = ", ".join(sizes)
    lines = ["import torch", "import torch.nn as nn", "import torch.nn.functional as F", "", "",
             "class Model(nn.Module):", f'    """{doc or " -> ".join(op for _, op, _ in calls)}"""', "",
             "    def __init__(self):", "        super().__init__()", "", f"    def forward(self, {', '.join(inputs)}):"]
    for var, op, args in calls:
        lines.append(f"        {var} = {op}({', '.join(args.values())})")
    lines += [f"        return {calls[-1][0]}", "", ""] + [f"{k} = {v}" for k, v in sizes.items()] + ["", ""]
    lines += ["def get_inputs():"] + [f"    {i} = torch.{draw}({names})" for i in inputs]
    lines += [f"    return [{', '.join(inputs)}]", "", "", "def get_init_inputs():", "    return []", ""]
    nodes = [{"kind": "input", "id": i, "shape": list(sizes.values())} for i in inputs]
    nodes += [{"kind": "op", "op": op, "id": var, "params": {"sizes": list(sizes.values())}} for var, op, _ in calls]
    edges = [{"arg": a, "source": s, "target": var} for var, _, args in calls for a, s in args.items()]
    return "\n".join(lines), json.dumps({"graph": {"constants": sizes}, "nodes": nodes, "edges": edges})


def run(tasks: dict[str, tuple[str, str | None, list[str], float | None]], **kw) -> dict[str, dict]:
    """tasks: id -> (code, graph, ops, eager_ms)."""
    ids = list(tasks)
    rows = dedupe(ids, [tasks[t][0] for t in ids], kw.pop("graph_hashes", None), graphs=[tasks[t][1] for t in ids],
                  ops=[tasks[t][2] for t in ids], eager_ms=[tasks[t][3] for t in ids], **kw)
    return {r["task_id"]: r for r in rows}


def test_exact_duplicates_keep_the_first_task_id():
    rows = run({"b": (BASE, None, None, None), "a": (SPACED, None, None, None), "c": (OTHER, None, None, None)})
    assert rows["a"]["keep"] and not rows["b"]["keep"]
    assert rows["b"]["reason"] == "exact duplicate of a"
    assert rows["a"]["exact_cluster"] == rows["b"]["exact_cluster"] == "a"
    assert rows["c"]["keep"] and rows["c"]["exact_cluster"] is None


def test_structural_duplicates_by_graph_hash():
    rows = run({"x": (BASE, None, None, None), "y": (OTHER, None, None, None),
                "z": (OTHER.replace("amax", "amin"), None, None, None)}, graph_hashes=["g1", "g2", "g2"])
    assert rows["x"]["keep"] and rows["y"]["keep"] and not rows["z"]["keep"]
    assert rows["z"]["reason"] == "structural duplicate of y" and rows["z"]["structural_cluster"] == "y"
    assert rows["x"]["structural_cluster"] is None


def test_distinct_tasks_all_kept():
    rows = run({"p": (BASE, None, None, None), "q": (OTHER, None, None, None)})
    assert all(r["keep"] and r["reason"] == "" and r["near_cluster"] is None for r in rows.values())


def test_canonical_graph_ignores_sizes_and_literals_but_not_ops_or_wiring():
    def key(calls, sizes, **kw):
        return canonical_graph_key(task(calls, sizes, **kw)[1])

    sub = [("s", "torch.sub", {"x": "x", "y": "y"})]
    base = key(sub, {"batch_size": 8, "features": 64}, inputs=("x", "y"))
    assert base == key(sub, {"batch_size": 3, "c": 5, "h": 7}, inputs=("x", "y"), draw="randn")
    # two inputs swapped is the same graph (inputs are not told apart); which argument an op result feeds is not
    assert base == key([("s", "torch.sub", {"x": "y", "y": "x"})], {"batch_size": 8}, inputs=("x", "y"))
    res = key([("r", "torch.relu", {"x": "x"}), ("s", "torch.sub", {"x": "x", "y": "r"})], {"batch_size": 8})
    assert res != key([("r", "torch.relu", {"x": "x"}), ("s", "torch.sub", {"x": "r", "y": "x"})], {"batch_size": 8})
    assert base != key([("s", "torch.add", {"x": "x", "y": "y"})], {"batch_size": 8}, inputs=("x", "y"))
    assert canonical_graph_key(None) is None and canonical_graph_key("not json") is None


def test_same_single_op_at_other_sizes_keeps_the_one_nearest_the_log_middle():
    tanh = [("t", "torch.tanh", {"x": "x"})]
    tasks = {f"t{i}": (*task(tanh, {"batch_size": 2 ** i, "features": 4096}), ["torch.tanh"], ms)
             for i, ms in enumerate((1.5, 12.0, 7.0, 60.0))}
    rows = run(tasks, window=(1.0, 100.0))  # log-middle 10 ms: 12 ms is nearest
    assert [t for t, r in rows.items() if r["keep"]] == ["t1"]
    for t in ("t0", "t2", "t3"):
        assert rows[t]["reason"] == "near duplicate of t1: same graph up to sizes"
        assert rows[t]["near_cluster"] == "t1" and rows[t]["near_evidence"] == "same graph up to sizes"
    assert rows["t1"]["near_cluster"] == "t1" and rows["t1"]["representative_reason"].startswith("eager 12 ms")
    assert "among 4" in rows["t1"]["representative_reason"]
    # another window moves the representative: its log-middle is 2.45 ms, nearest is 1.5 ms
    assert [t for t, r in run(tasks, window=(1.0, 6.0)).items() if r["keep"]] == ["t0"]


def test_predicted_runtime_stands_in_and_ties_go_to_the_first_task_id():
    relu = [("r", "torch.relu", {"x": "x"})]
    a, b, c = (task(relu, {"batch_size": n}) for n in (4, 8, 16))
    rows = {r["task_id"]: r for r in dedupe(["c", "a", "b"], [c[0], a[0], b[0]], graphs=[c[1], a[1], b[1]],
                                            ops=[["torch.relu"]] * 3, eager_ms=[None, 40.0, None],
                                            predicted_ms=[10.0, 2.0, 10.0])}
    assert rows["b"]["keep"] and not rows["a"]["keep"] and not rows["c"]["keep"]  # b and c tie at 10 ms
    assert rows["b"]["representative_reason"].startswith("predicted 10 ms")


def test_template_only_similarity_never_drops():
    tanh, _ = task([("y", "torch.tanh", {"x": "x"})], {"batch_size": 16, "features": 32})
    sig, _ = task([("y", "torch.sigmoid", {"x": "x"})], {"batch_size": 16, "features": 32})
    # the former rule (MinHash over the rendered code at 0.7) calls these near duplicates
    assert minhash_jaccard(*[minhashes([c], normalize_ids=False) for c in (tanh, sig)])[0, 0] >= 0.7
    rows = run({"a": (tanh, None, ["torch.tanh"], 5.0), "b": (sig, None, ["torch.sigmoid"], 5.0)}, code_jaccard=0.1)
    assert rows["a"]["keep"] and rows["b"]["keep"] and rows["b"]["near_cluster"] is None


def test_detemplating_leaves_only_what_the_task_does():
    code, _ = task([("y", "torch.tanh", {"x": "x"})], {"batch_size": 16, "features": 32}, doc="a docstring")
    toks = detemplated_tokens(code)
    assert " ".join(toks) == "y = torch . tanh ( x ) ; x = torch . rand ( batch_size , features ) ;"


def chain_codes() -> tuple[str, str, str]:
    """Same ops in all three; B differs from A in one call argument, C from B in another."""
    calls = [("a", "torch.add", {"x": "x", "y": "y"}), ("m", "torch.mul", {"x": "a", "y": "y"}),
             ("s", "torch.sub", {"x": "m", "y": "x"}), ("d", "torch.div", {"x": "s", "y": "a"})]
    a, _ = task(calls, {"batch_size": 64, "features": 256}, inputs=("x", "y"))
    b = a.replace("torch.mul(a, y)", "torch.mul(a, x)")
    c = b.replace("torch.div(s, a)", "torch.div(s, m)")
    return a, b, c


def test_no_chaining_through_a_third_task():
    a, b, c = chain_codes()
    sh = [shingles(detemplated_tokens(x)) for x in (a, b, c)]
    ab, bc, ac = jaccard(sh[0], sh[1]), jaccard(sh[1], sh[2]), jaccard(sh[0], sh[2])
    thr = (ac + min(ab, bc)) / 2
    assert ac < thr <= min(ab, bc)  # A~B and B~C, but A and C differ
    ops = ["torch.add", "torch.mul", "torch.sub", "torch.div"]
    rows = run({"A": (a, None, ops, 10.0), "B": (b, None, ops, 20.0), "C": (c, None, ops, 50.0)}, code_jaccard=thr)
    assert rows["A"]["keep"] and rows["A"]["near_cluster"] == "A"
    assert not rows["B"]["keep"] and rows["B"]["reason"] == f"near duplicate of A: same ops (de-templated code jaccard {ab:.3f})"
    assert rows["C"]["keep"] and rows["C"]["near_cluster"] is None  # matches only B, which is dropped
    # with B nearest the middle, both match the representative directly and both go
    rows = run({"A": (a, None, ops, 20.0), "B": (b, None, ops, 10.0), "C": (c, None, ops, 50.0)}, code_jaccard=thr)
    assert [t for t, r in rows.items() if r["keep"]] == ["B"]
    assert rows["C"]["reason"].startswith("near duplicate of B: same ops") and rows["C"]["near_code_jaccard"] == pytest.approx(bc)


def test_same_ops_need_the_threshold_and_the_same_multiset():
    a, b, _ = chain_codes()
    ops = ["torch.add", "torch.mul", "torch.sub", "torch.div"]
    j = jaccard(*(shingles(detemplated_tokens(x)) for x in (a, b)))
    assert all(r["keep"] for r in run({"A": (a, None, ops, 10.0), "B": (b, None, ops, 20.0)},
                                      code_jaccard=j + 0.01).values())
    assert not run({"A": (a, None, ops, 10.0), "B": (b, None, ops, 20.0)}, code_jaccard=j)["B"]["keep"]
    # identical code but other operator lists is no evidence
    assert all(r["keep"] for r in run({"A": (a, None, ops, 10.0), "B": (b, None, ops[:3], 20.0)},
                                      code_jaccard=j).values())


def test_near_reasons_group_into_two_kinds():
    assert reason_kind("near duplicate of 0123456789abcdef: same graph up to sizes") == \
        "near duplicate of another task: same graph up to sizes"
    assert reason_kind("near duplicate of 0123456789abcdef: same ops (de-templated code jaccard 0.953)") == \
        "near duplicate of another task: same ops"


def test_representative_does_not_flip_with_timing_noise():
    """Two re-runs time the same tasks ~1% apart: members within 10% of the nearest are ties (first task_id)."""
    relu = [("r", "torch.relu", {"x": "x"})]
    tasks = [task(relu, {"batch_size": n}) for n in (4, 8, 16)]

    def kept(eager_ms):
        rows = dedupe(["q", "p", "z"], [t[0] for t in tasks], graphs=[t[1] for t in tasks], ops=[["torch.relu"]] * 3,
                      eager_ms=eager_ms, window=(1.0, 100.0))
        return [r["task_id"] for r in rows if r["keep"]]

    assert kept([2.60, 2.66, 50.0]) == kept([2.66, 2.60, 50.0]) == ["p"]  # q nearer in one run, p in the other
    assert kept([9.0, 2.66, 50.0]) == ["q"]  # a real difference still decides
