"""The sampler's speed paths give exactly what the plain paths give: learned-tensor builds under
CostMode, cached module tensor lists, solve_batch's pre-extracted kernels, and GC state around sampling."""

import gc

import torch
import torch.nn as nn

from operators.cost import CostMode, kernels, peak_bytes, predict_ms, roofline_ms
from operators.graph import BASE_NS, build_module, module_tensors
from operators.render import as_graph
from operators.sample import sample_tasks
from operators.sizing import solve_batch
from pipeline.rundir.config import load_preset

DEMO = load_preset("demo").sample


def _layout(t):
    return type(t), tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.device.type, t.requires_grad


def test_learned_tensors_built_under_cost_mode_equal_plain_meta_builds():
    rows = sample_tasks(DEMO, 5, range(40), set())
    exprs = {(e, tuple(sorted(as_graph(r["graph"]).graph["constants"].items())))
             for r in rows for _, d in as_graph(r["graph"]).nodes(data=True) if d["kind"] == "op"
             for _, e in d["tensors"]}
    exprs |= {(f"nn.Parameter(torch.randn({s}) * 0.1)", ()) for s in ("7, 1, 1", "5,", "3, 1", "2, 1, 1, 1")}
    assert len(exprs) > 10
    for expr, consts in exprs:
        ns = {**BASE_NS, **dict(consts)}
        fast = build_module(expr, ns, tensor=True)
        with torch.device("meta"):
            plain = eval(expr, ns)  # noqa: S307 - the catalog's own expressions
        assert _layout(fast) == _layout(plain), expr


def test_module_tensors_are_parameters_then_buffers_and_lazy_modules_are_listed_afresh():
    with torch.device("meta"):
        mods = [nn.Conv2d(3, 4, 3), nn.BatchNorm2d(5), nn.MultiheadAttention(8, 2), nn.LazyLinear(3)]
    for m in mods:
        expect = [*m.parameters(), *m.buffers()]
        assert [id(t) for t in module_tensors(m)] == [id(t) for t in expect]
        assert [id(t) for t in module_tensors(m)] == [id(t) for t in expect]  # the cached answer too
    lazy = mods[-1]
    with torch.device("meta"):
        lazy(torch.empty(2, 6))  # materializes its weight: a new Parameter
    assert [id(t) for t in module_tensors(lazy)] == [id(t) for t in (*lazy.parameters(), *lazy.buffers())]


def test_solve_batch_gives_the_brute_force_batch_of_predict_ms_and_peak_bytes():
    rows = sample_tasks(DEMO, 9, range(3), set())
    from operators.graph import execute

    for r in rows:
        g = as_graph(r["graph"])
        mode = CostMode()
        execute(g, g.graph["constants"], mode)
        recs, b0 = mode.records, g.graph["constants"]["batch_size"]
        assert roofline_ms(kernels(recs), 3000.0, 50.0, 4.0, 1.5) == predict_ms(recs, 3000.0, 50.0, 4.0, 1.5)
        for target, cap in ((0.05, 2**40), (1.0, 2**40), (5.0, 2**26)):
            got = solve_batch(recs, b0, target, cap, 1000, 500, 3000.0, 50.0, 4.0)
            ok = [b for b in range(1, 4097) if predict_ms(recs, 3000.0, 50.0, 4.0, b / b0) <= target
                  and peak_bytes(recs, 1000, 500, b / b0) <= cap]
            if not ok:
                assert got == 1
            elif max(ok) < 4096:
                assert got == max(ok)
            else:
                assert got >= 4096


def test_sampling_restores_the_callers_gc_state():
    assert gc.isenabled()
    sample_tasks(DEMO, 1, range(2), set())
    assert gc.isenabled()
    gc.disable()
    try:
        sample_tasks(DEMO, 1, range(2, 4), set())
        assert not gc.isenabled()
    finally:
        gc.enable()
