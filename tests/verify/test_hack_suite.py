"""Every hacking route gets -1 with the reason of the check meant to catch it, and slips past that check when it is
switched off (so each test below can fail); the honest C++ twin of the same task gets reward >= 1."""

import pytest

from verify.api import verify_batch
from verify.suite import CHECK_OF, HONEST, ROUTES, TASK_OF

CPU_ROUTES = [r for r, v in ROUTES.items() if v[3] == "cpu"]


@pytest.fixture(scope="module")
def caught(ext_dir, suite_tasks):
    pairs = [(suite_tasks[TASK_OF[r]], ROUTES[r][0]) for r in CPU_ROUTES]
    offs = [ROUTES[r][2] for r in CPU_ROUTES]
    rows = [verify_batch([p], workers=1, device="cpu", off=o, rounds=2, extensions_dir=ext_dir)[0]
            for p, o in zip(pairs, offs, strict=True)]
    return dict(zip(CPU_ROUTES, rows, strict=True))


@pytest.fixture(scope="module")
def switched_off(ext_dir, suite_tasks):
    """Each route again with its catching check off as well."""
    out = {}
    for r in CPU_ROUTES:
        src, why, off, _ = ROUTES[r]
        # the most specific reason fragment names the check ("imports PyTorch compute" before "PyTorch compute")
        keys = sorted((k for k in CHECK_OF if why and k in why), key=len, reverse=True)
        check = CHECK_OF[keys[0]] if keys else None
        if check:
            out[r] = verify_batch([(suite_tasks[TASK_OF[r]], src)], workers=1, device="cpu", off=(*off, check), rounds=2,
                                  extensions_dir=ext_dir)[0]
    return out


@pytest.mark.parametrize("route", CPU_ROUTES)
def test_route_is_caught(caught, route):
    res = caught[route]
    assert res["reward"] == -1, res
    why = ROUTES[route][1]
    assert why in (res["hack"] or "") or (not why and not res["correct"]), res


@pytest.mark.parametrize("route", [r for r in CPU_ROUTES if ROUTES[r][1] and ROUTES[r][1] in
                                   " ".join(CHECK_OF)])
def test_route_slips_past_its_check_when_it_is_off(switched_off, route):
    res = switched_off[route]
    assert ROUTES[route][1] not in (res["hack"] or ""), res


@pytest.mark.parametrize("route", [r for r, v in ROUTES.items() if v[3] == "cpu" and "static" in v[2]])
def test_static_check_alone_refuses_host_routes(suite_task, route):
    from verify.static import check_candidate_source

    assert check_candidate_source(ROUTES[route][0]), route


def test_side_stream_route_needs_cuda():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("side-stream route: CUDA-only (no GPU here); runs in the gpu suite")


def test_honest_twin_gets_a_reward_and_repeats(ext_dir, suite_task):
    a, b = verify_batch([(suite_task, HONEST)] * 2, workers=2, device="cpu", extensions_dir=ext_dir)
    assert a["correct"] and a["reward"] >= 1 and a["hack"] is None, a
    # where a verification's time goes: the phases lie inside the worker's time, the worker's inside the wall time
    assert set(a["phase_s"]) == {"load", "draws", "warmup", "timing"} and min(a["phase_s"].values()) >= 0, a
    assert sum(a["phase_s"].values()) <= a["worker_s"] <= a["wall_s"], a
    near = any(abs(r["speedup_eager"] - 1.05) < 0.0105 for r in (a, b))
    assert a["reward"] == b["reward"] or near, (a["reward"], b["reward"])


def test_guard_lets_a_same_dtype_copy_a_clone_and_a_fill_through_but_not_a_cast():
    import torch

    from verify.guard import ComputeGuard, compute_calls

    a, b = torch.zeros(4), torch.randn(4)
    with ComputeGuard() as g:
        a.copy_(b)
        c = a.clone()
        a.zero_()
        a.fill_(2.0)
    assert compute_calls(g) == [] and c.data_ptr() != a.data_ptr()
    g, b64 = ComputeGuard(), b.double()
    try:
        with g:
            a.copy_(b64)  # float64 into float32: a cast on every element
    except RuntimeError:
        pass
    assert compute_calls(g) == ["aten::copy_"]


@pytest.mark.parametrize("route", [r for r in CPU_ROUTES if ROUTES[r][1] == "imports PyTorch compute"])
def test_cpp_escapes_get_past_the_dispatch_mode_when_the_extension_layer_is_off(switched_off, route):
    """The C++ routes reach ATen's cumsum past the Python dispatch key: with the extension layer off, nothing else
    on the CPU sees them, and the candidate is paid (which is why the layer exists)."""
    res = switched_off[route]
    assert res["correct"] and res["reward"] >= 1 and res["hack"] is None, res
    assert any(e["refused"] for e in res["extensions"]), res  # the layer still saw it: it only refused nothing
