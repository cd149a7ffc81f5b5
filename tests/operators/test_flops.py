"""FLOPs of every operator family: per-family counts on meta, every computing catalog operator counts some, and
the counts stay out of sizing (the sampled sizes do not move)."""

import random

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from operators.catalog import sampleable
from operators.cost import CostMode, OpCost, predict_ms
from operators.graph import execute, records_cost
from operators.sample import single_op_graph


def _m(*shape):
    return torch.empty(*shape, device="meta")


def _flops(fn) -> int:
    mode = CostMode()
    with mode, torch.no_grad():
        fn()
    return records_cost(mode.records)[0]


N = 4 * 8 * 16
COUNTS = {
    "relu": (lambda: torch.relu(_m(4, 8, 16)), N),
    "add": (lambda: _m(4, 8, 16) + _m(16), N),
    "addcmul": (lambda: torch.addcmul(_m(4, 8, 16), _m(4, 8, 16), _m(4, 8, 16)), 2 * N),
    "hardswish": (lambda: F.hardswish(_m(4, 8, 16)), N),
    "sum": (lambda: _m(4, 8, 16).sum(dim=1), N),
    "mean_all": (lambda: _m(4, 8, 16).mean(), N),
    "amax": (lambda: _m(4, 8, 16).amax(dim=-1), N),
    "var": (lambda: _m(4, 8, 16).var(dim=-1), 4 * N),
    "vector_norm": (lambda: torch.linalg.vector_norm(_m(4, 8, 16), dim=-1), 2 * N),
    "logsumexp": (lambda: torch.logsumexp(_m(4, 8, 16), dim=-1), 4 * N),
    "softmax": (lambda: F.softmax(_m(4, 8, 16), dim=-1), 5 * N),
    "log_softmax": (lambda: F.log_softmax(_m(4, 8, 16), dim=1), 5 * N),
    "layer_norm": (lambda: F.layer_norm(_m(4, 8, 16), (16,)), 6 * N),
    "layer_norm_affine": (lambda: F.layer_norm(_m(4, 8, 16), (16,), _m(16), _m(16)), 8 * N),
    "group_norm": (lambda: F.group_norm(_m(4, 8, 4, 4), 2), 6 * N),
    "batch_norm": (lambda: F.batch_norm(_m(4, 8, 4, 4), None, None, _m(8), _m(8), training=True), 8 * N),
    "cumsum": (lambda: torch.cumsum(_m(4, 8, 16), dim=1), N),
    "logcumsumexp": (lambda: torch.logcumsumexp(_m(4, 8, 16), dim=1), 3 * N),
    "max_pool2d": (lambda: F.max_pool2d(_m(4, 8, 4, 4), 2), 4 * (4 * 8 * 2 * 2)),
    "avg_pool3d": (lambda: F.avg_pool3d(_m(1, 2, 4, 4, 4), 2), 8 * (2 * 2 * 2 * 2)),
    "adaptive_avg": (lambda: F.adaptive_avg_pool2d(_m(4, 8, 4, 4), (2, 2)), N),
    "bilinear_up": (lambda: F.interpolate(_m(4, 8, 4, 4), scale_factor=2.0, mode="bilinear"), 7 * 4 * N),
    "nearest_up": (lambda: F.interpolate(_m(4, 8, 4, 4), scale_factor=2.0, mode="nearest"), 0),
    "mse": (lambda: F.mse_loss(_m(4, 8, 16), _m(4, 8, 16), reduction="none"), 3 * N),
    "mv": (lambda: torch.mv(_m(8, 16), _m(16)), 2 * 8 * 16),
    "bilinear_layer": (lambda: F.bilinear(_m(4, 8), _m(4, 16), _m(5, 8, 16)), 2 * 4 * 5 * 8 * 16),
    "sort": (lambda: torch.sort(_m(4, 8, 16), dim=-1), N * 4),
    "flip": (lambda: torch.flip(_m(4, 8, 16), dims=(1,)), 0),
    "cat": (lambda: torch.cat([_m(4, 8, 16), _m(4, 8, 16)]), 0),
    "where": (lambda: torch.where(_m(4, 8, 16).bool(), _m(4, 8, 16), _m(4, 8, 16)), 0),
    "mm_unchanged": (lambda: _m(8, 16) @ _m(16, 32), 2 * 8 * 16 * 32),
}


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_each_family_counts_as_documented(name):
    fn, expect = COUNTS[name]
    assert _flops(fn) == expect


# categories whose operators only move data may count no FLOPs; every other operator alone must count some
MOVES = {"shape", "indexing"}
# (unfold copies windows; Upsample draws nearest among its modes)
ALLOWED_ZERO = {"nn.UpsamplingNearest2d", "nn.Upsample", "F.embedding", "nn.Embedding", "F.one_hot", "nn.Unfold", "F.unfold"}


def _alone(spec):
    for attempt in range(40):
        rng = random.Random(f"flops:{spec.name}:{attempt}")
        try:
            return single_op_graph(spec, rng, spec.ranks[attempt % len(spec.ranks)])
        except Exception:  # noqa: BLE001 - some draws do not fit the input; the sampler resamples too
            continue
    return None


def test_every_computing_catalog_operator_counts_flops():
    zero = []
    for spec in sampleable():
        if spec.category in MOVES or spec.name in ALLOWED_ZERO:
            continue
        g = _alone(spec)
        if g is None:
            continue
        mode = CostMode()
        execute(g, g.graph["constants"], mode)
        if records_cost(mode.records)[0] <= 0:
            zero.append(spec.name)
    assert not zero, f"operators counting no FLOPs: {zero}"


def test_family_flops_do_not_enter_sizing():
    """Sizing prices `flops` (FlopCounterMode) only: adding the other families changed no sampled size."""
    base = [OpCost("aten.relu", 0, 8_000_000, 0, 4_000_000, False)]
    counted = [OpCost("aten.relu", 0, 8_000_000, 0, 4_000_000, False, 10**12)]
    assert predict_ms(counted, 10.0, 0.05, 20.0) == predict_ms(base, 10.0, 0.05, 20.0)
    assert records_cost(counted)[0] == 10**12
