"""The pinned GPU calibration: consistent with the catalog and the peak model it was fitted over, and applied by
the cost model, the peak model and the sizing."""

import random
from functools import cache

import pytest
import torch

from operators import calibration as cal
from operators.catalog import REGISTRY
from operators.cost import CostMode, OpCost, predict_ms
from operators.peak import WORKSPACE, activation_peak, workspaces
from operators.sizing import output_cap, solve_batch
from pipeline.rundir.config import load_preset

H200 = load_preset("h200").sample


@cache
def _pinned_aten() -> frozenset[str]:
    from operators.labels import pins

    return frozenset(a for sigs in pins("cpu").values() for sig in sigs for a in sig)


def test_every_calibrated_op_is_a_pinned_aten_op_with_evidence():
    data = cal.calibration()
    keys = [*data["runtime"], *data["peak_workspace"]]
    assert keys, "operators/calibration.json lists nothing"
    unknown = [k for k in keys if k not in _pinned_aten()]
    assert not unknown, f"not an ATen op of any pinned operator: {unknown}"
    for section in ("runtime", "peak_workspace"):
        for name, e in data[section].items():
            assert e["tasks"] and e["catalog_ops"], f"{section} {name} names no task of the run"
            assert all(o in REGISTRY for o in e["catalog_ops"]), f"{section} {name}: unknown catalog op"


def test_calibration_was_fitted_over_the_current_workspace_table():
    # the fitted multiples replace WORKSPACE entries and were fitted over its other entries: a changed table
    # means `python -m pinning.calibrate --run DIR` must run again on the GPU run
    fitted = {k: tuple(v) for k, v in cal.calibration()["fitted_with"]["workspace"].items()}
    assert fitted == WORKSPACE, "WORKSPACE changed since operators/calibration.json was fitted; regenerate it"


def test_runtime_factors_are_conservative_in_number_and_each_far_from_one():
    factors = cal.runtime_factors()
    assert 0 < len(factors) < 40
    assert all(f >= 3.0 or f <= 0.34 for f in factors.values())


def _trace(fn, *shapes) -> list:
    xs = [torch.empty(s, device="meta") for s in shapes]
    mode = CostMode()
    with mode:
        fn(*xs)
    return mode.records


def test_a_calibrated_op_moves_its_predicted_runtime_by_its_factor():
    name = "aten.kthvalue"
    factor = cal.runtime_factors()[name]
    recs = _trace(lambda x: torch.kthvalue(x, 3, dim=-1), (64, 4096))
    assert [r.name for r in recs] == [name]
    launch = 5.0e-3
    before = predict_ms(recs, 4300.0, 60.0, 5.0, calibrated=False) - launch
    after = predict_ms(recs, 4300.0, 60.0, 5.0) - launch
    assert after == pytest.approx(before * factor, rel=1e-9)
    # an op the calibration does not list keeps its roofline
    plain = _trace(torch.exp, (64, 4096))
    assert predict_ms(plain, 4300.0, 60.0, 5.0) == predict_ms(plain, 4300.0, 60.0, 5.0, calibrated=False)


@pytest.mark.parametrize("name", ["torch.cdist", "torch.nanmean", "torch.count_nonzero"])
def test_a_task_whose_op_holds_hidden_memory_is_sized_smaller_than_before(name, monkeypatch):
    spec = REGISTRY[name]
    got = []
    for calibrated in (True, False):
        if not calibrated:  # the sampler before the calibration: no measured workspaces, no runtime factors
            monkeypatch.setattr(cal, "peak_workspaces", lambda: {})
            monkeypatch.setattr("operators.cost.runtime_factors", lambda: {})
        from operators.sample import sized_op_graph

        g, batch = sized_op_graph(spec, random.Random(f"calib:{name}"), spec.ranks[0], H200)
        got.append(batch)
    smaller, before = got
    assert smaller < before, f"{name}: batch {smaller} with the calibration, {before} without"


def test_the_peak_prediction_adds_the_measured_workspace():
    recs = _trace(lambda x, y: torch.cdist(x, y), (8, 512, 64), (8, 512, 64))
    assert "aten._euclidean_dist" in [r.name for r in recs]
    inputs = 2 * 8 * 512 * 64 * 4
    w_in, _ = workspaces()["aten._euclidean_dist"]
    assert w_in > 0
    assert activation_peak(recs, inputs) - activation_peak(recs, inputs, calibrated=False) == pytest.approx(
        w_in * inputs, rel=1e-6)


def test_solve_batch_keeps_the_output_within_the_share_the_worker_ran():
    share = cal.output_share()
    assert share is not None and 0 < share < 1
    # an embedding: int64 indices in, a float output 1024x their bytes: the output is nearly the whole peak
    idx, out0, weight = 4 * 1024 * 8, 4 * 1024 * 256 * 4, 50000 * 256 * 4
    recs = [OpCost("aten.embedding", 0, idx + out0, weight, out0, False)]
    cap = int(H200.max_peak_memory_gb * H200.peak_headroom * 2**30)
    kw = dict(target_ms=50.0, cap_bytes=cap, input_bytes=idx, fixed_bytes=weight, bw=4300.0, tflops=60.0,
              launch_us=5.0)
    free = solve_batch(recs, 4, **kw)
    bounded = solve_batch(recs, 4, **kw, out_bytes=out0)
    assert bounded < free
    assert out0 * bounded / 4 <= output_cap(cap) < out0 * (bounded + 1) / 4
