"""The kernel warm-up: shares that cover the catalog's pointwise operators once, modules that run."""

import pytest

from filters.static_check import check_task_source
from operators.catalog import sampleable
from pipeline.kernel_warmup import CATEGORIES, run_codes, warmup_codes


def _op(code: str) -> str:
    return code.split('"""')[1]  # the rendered module's docstring names its operator


def test_the_shares_of_a_gpu_cover_every_pointwise_operator_once():
    shares = [warmup_codes(k, 5) for k in range(5)]
    names = [_op(c) for share in shares for c in share]
    pointwise = {s.name for s in sampleable() if s.category in CATEGORIES}
    assert len(names) == len(set(names))  # no operator warmed twice
    assert set(names) == pointwise
    assert max(map(len, shares)) - min(map(len, shares)) <= 1  # balanced: no worker warms far longer


def test_warmup_modules_pass_the_static_check_and_run():
    codes = warmup_codes(2, 8)
    assert codes and all(check_task_source(c) is None for c in codes)
    got = run_codes(codes, "cpu")
    assert (got["ran"], got["failed"]) == (len(codes), 0)


def test_a_failing_module_is_counted_not_raised():
    good = warmup_codes(0, 40)[0]
    got = run_codes([good, good.replace("return", "raise RuntimeError('x'); return", 1)], "cpu")
    assert (got["ran"], got["failed"]) == (1, 1)


@pytest.mark.parametrize("share, of", [(4, 4), (-1, 3)])
def test_a_share_out_of_range_is_refused(share, of):
    with pytest.raises(ValueError, match="share must be in"):
        warmup_codes(share, of)
