"""Every sampleable catalog operator, category by category: renders alone at tiny sizes, passes the static
gate, executes for real on CPU, and its real trace agrees with its label."""

import random
import warnings

import pytest
import torch

from filters.static_check import check_task_source
from operators.catalog import CATEGORIES, REGISTRY, catalog_summary, sampleable
from operators.labels import check_labels, pins
from operators.render import render
from operators.sample import single_op_graph
from operators.trace import load_module, trace_code


def test_catalog_is_wide_and_distinct():
    summary = catalog_summary()
    assert summary["sampleable"] >= 300
    assert len(REGISTRY) == summary["total"] == sum(len(v) for v in summary["by_category"].values())
    assert len(CATEGORIES) >= 12 and all(summary["by_category"][c] for c in CATEGORIES)
    assert {"nn.Conv2d", "nn.ConvTranspose3d", "F.gelu", "torch.tanh", "Tensor.cumsum"} <= set(REGISTRY)


def test_stochastic_operators_are_listed_but_never_sampleable():
    stochastic = {s.name for s in REGISTRY.values() if s.stochastic}
    assert {"nn.Dropout", "F.dropout", "nn.RReLU", "F.gumbel_softmax"} <= stochastic
    assert not stochastic & {s.name for s in sampleable()}


def test_every_sampleable_operator_is_pinned():
    assert {s.name for s in sampleable()} <= set(pins())


def _run_alone(spec, seed: int):
    for attempt in range(40):
        rng = random.Random(f"test:{spec.name}:{seed}:{attempt}")
        try:
            return single_op_graph(spec, rng, spec.ranks[attempt % len(spec.ranks)])
        except Exception:  # noqa: BLE001 - some draws do not fit the input; the sampler resamples too
            continue
    raise AssertionError(f"{spec.name} never built")


@pytest.mark.parametrize("category", CATEGORIES)
def test_category_operators_execute_on_cpu_and_traces_match_labels(category):
    torch.manual_seed(0)
    failures = []
    for spec in sampleable((category,)):
        g = _run_alone(spec, 0)
        code = render(g)
        problem = check_task_source(code)
        if problem:
            failures.append(f"{spec.name}: static check: {problem}")
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                cpu_ops = trace_code(code, device="cpu")
                ns = load_module(code)
                out = ns["Model"](*ns["get_init_inputs"]())(*ns["get_inputs"]())
            except Exception as e:  # noqa: BLE001
                failures.append(f"{spec.name}: fails on cpu: {type(e).__name__}: {e}")
                continue
        if not isinstance(out, torch.Tensor) or list(out.shape) != g.nodes[g.graph["output"]]["shape"]:
            failures.append(f"{spec.name}: cpu output shape differs from the meta shape")
        bad = check_labels([spec.name], cpu_ops)
        if bad:
            failures.append(f"{spec.name}: {bad}")
    assert not failures, "\n".join(failures)


def _resolve(name: str):
    import torch.nn as nn
    import torch.nn.functional as F  # noqa: N812

    root, _, rest = name.partition(".")
    obj = {"torch": torch, "nn": nn, "F": F, "Tensor": torch.Tensor}[root]
    for part in rest.split("."):
        obj = getattr(obj, part)
    return obj


def test_every_name_is_a_real_torch_api():
    missing = []
    for name in REGISTRY:
        try:
            _resolve(name)
        except AttributeError:
            missing.append(name)
    assert not missing


def test_stochastic_deny_list_covers_torchs_nondeterministic_and_random_ops():
    # the names PyTorch itself documents as random; a catalog entry spelled like them must be flagged
    random_like = ("dropout", "rrelu", "bernoulli", "gumbel", "fractional_max_pool", "alpha_dropout", "rand")
    for spec in REGISTRY.values():
        if any(k in spec.short for k in random_like):
            assert spec.stochastic, spec.name
