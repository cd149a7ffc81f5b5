"""The whole-output checks of measures.tensor_checks go over outputs a chunk at a time (their temporaries must fit
a task's memory reservation); these tests hold them to the one-pass formulas, NaN and inf included."""

import math

import pytest
import torch

from measures import tensor_checks as tc


def _one_pass_max_diff(a, b):
    d = (a - b).abs()
    d = torch.where((a == b) | (torch.isnan(a) & torch.isnan(b)), torch.zeros_like(d), d)
    return float(d.max()) if d.numel() else 0.0


def _one_pass_ratio(fixed, ref, tol):
    if not fixed.numel():
        return 0.0
    r = (fixed - ref).abs() / (tol + tol * ref.abs())
    same = (fixed == ref) | (torch.isnan(fixed) & torch.isnan(ref))
    r = torch.where(same, torch.zeros_like(r), torch.nan_to_num(r, nan=math.inf, posinf=math.inf))
    return float(r.max())


def _one_pass_agreement(out, ref):
    err = (out - ref).abs()
    abs_err = float(err.max()) if err.numel() else 0.0
    rel_err = float((err / ref.abs().clamp_min(1e-8)).max()) if err.numel() else 0.0
    return (abs_err, rel_err, bool(torch.allclose(out, ref, atol=1e-4, rtol=1e-4)),
            bool(torch.allclose(out, ref, atol=1e-2, rtol=1e-2)))


def _same(x, y):
    return (math.isnan(x) and math.isnan(y)) or x == y


def _pairs(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, generator=g)
    b = a + 1e-3 * torch.randn(n, generator=g)
    yield a, b
    yield a, a.clone()
    if n:
        for where in (0, n // 2, n - 1):  # a NaN or an inf in the first, a middle or the last chunk
            for bad in (math.nan, math.inf):
                a2, b2 = a.clone(), b.clone()
                b2[where] = bad
                yield a2, b2
                a3, b3 = a2.clone(), b2.clone()
                a3[where] = bad  # the same NaN or inf in both: equal
                yield a3, b3


@pytest.mark.parametrize("n", [0, 1, 6, 7, 50, 1000])
def test_chunked_checks_equal_the_one_pass_formulas(monkeypatch, n):
    monkeypatch.setattr(tc, "CHUNK", 7)  # several chunks, and a short last one
    for seed in range(3):
        for a, b in _pairs(n, seed):
            assert _same(tc.max_diff(a, b), _one_pass_max_diff(a, b))
            assert _same(tc.tolerance_ratio(a, b, 1e-2), _one_pass_ratio(a, b, 1e-2))
            got, want = tc.agreement(a, b), _one_pass_agreement(a, b)
            assert all(_same(x, y) for x, y in zip(got[:2], want[:2], strict=True)) and got[2:] == want[2:]


def test_a_nan_in_one_chunk_is_not_lost_to_a_larger_value_in_another(monkeypatch):
    monkeypatch.setattr(tc, "CHUNK", 2)
    a = torch.tensor([0.0, 0.0, 0.0, 0.0])
    b = torch.tensor([math.nan, 0.0, 5.0, 0.0])
    assert math.isnan(tc.max_diff(a, b)) and math.isnan(tc.agreement(b, a)[0])


@pytest.mark.parametrize("values,verdict", [
    ([1.0, 2.0, math.inf, 3.0], "nonfinite"), ([0.0] * 9, "zero"), ([1e-6, -1e-6] * 4, "tiny"),
    ([2.5] * 9, "constant"), ([1.0] * 200 + [2.0], "saturated"), ([0.5, 1.0, 2.0, 3.0, 4.0], ""),
])
def test_degenerate_verdicts_do_not_change_with_chunking(monkeypatch, values, verdict):
    flat = torch.tensor(values)
    assert tc.degenerate(flat) == verdict
    monkeypatch.setattr(tc, "CHUNK", 3)
    assert tc.degenerate(flat) == verdict


@pytest.mark.parametrize("share", [0.5, 0.98, 0.99, 0.9905, 0.995, 1.0])
@pytest.mark.parametrize("where", ["low", "middle", "high"])
def test_saturated_is_the_most_common_values_share_over_99_percent(share, where):
    """The median's share decides it as the most common value's share (counted by torch.unique) does."""
    n = 2000
    g = torch.Generator().manual_seed(int(share * 1e4))
    rest = torch.rand(n, generator=g) + 1.0  # distinct values in [1, 2)
    common = {"low": 0.5, "middle": 1.5, "high": 3.0}[where]
    k = int(round(share * n))
    flat = torch.cat([torch.full((k,), common), rest[: n - k]])[torch.randperm(n, generator=g)]
    counts = torch.unique(flat, return_counts=True)[1]
    want = float(counts.max()) / n > 0.99 and float(flat.max()) != float(flat.min())
    assert (tc.degenerate(flat) == "saturated") == want


@pytest.mark.parametrize("check", [
    lambda a, b: tc.max_diff(a, b), lambda a, b: tc.tolerance_ratio(a, b, 1e-2), lambda a, b: tc.agreement(a, b),
], ids=["max_diff", "tolerance_ratio", "agreement"])
def test_a_whole_output_check_needs_a_few_chunks_of_memory_not_a_few_outputs(monkeypatch, check):
    from operators.peak import LiveBytes

    monkeypatch.setattr(tc, "CHUNK", 1 << 12)
    a = torch.randn(1 << 18)  # 1 MiB of float32: 64 chunks
    b = a + 1e-3
    with LiveBytes() as live:
        check(a, b)
    assert 0 < live.peak <= 8 * tc.CHUNK * a.element_size()  # one pass over the whole held 3-4 MiB at once


def test_degenerate_needs_a_few_chunks_beside_its_bounded_saturation_sample(monkeypatch):
    from operators.peak import LiveBytes

    monkeypatch.setattr(tc, "CHUNK", 1 << 12)
    flat = torch.randn(1 << 24)  # 64 MiB; the saturation check looks at an even sample of 1M elements
    with LiveBytes() as live:
        assert tc.degenerate(flat) == ""
    assert 0 < live.peak <= 8 * tc.CHUNK * 4 + 4 * 1_000_000 * 8  # one pass: |flat| alone is 64 MiB


def _one_pass_checksum(flat):
    w = torch.arange(flat.numel(), dtype=torch.int64) % tc.CHECKSUM_PERIOD + 1
    return float((flat.double().nan_to_num(0.0, 0.0, 0.0) * w).sum())


def test_the_checksum_is_the_one_pass_sum_in_chunks_and_sees_positions(monkeypatch):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(50, generator=g)
    a[3], a[17] = math.nan, math.inf
    whole = tc.checksum(a)
    monkeypatch.setattr(tc, "CHUNK", 7)  # several chunks, the weights go on across their edges
    assert tc.checksum(a) == pytest.approx(whole, rel=1e-12) and whole == pytest.approx(_one_pass_checksum(a))
    assert tc.checksum(a.clone()) == tc.checksum(a)
    swapped = a.clone()
    swapped[[0, 1]] = a[[1, 0]]  # the same values, two in other places: an argsort ordering ties otherwise
    assert tc.checksum(swapped) != tc.checksum(a)
    nudged = a.clone()
    nudged[40] = torch.nextafter(a[40], torch.tensor(math.inf))  # one element one ulp away
    assert tc.checksum(nudged) != tc.checksum(a)
    assert tc.checksum(torch.empty(0)) == 0.0
