"""Reasons group into kinds for the report, the filter summary and the published rejections."""

from filters.base import reason_kind


def test_reason_kind_groups_measured_quantities():
    a = reason_kind("early_reject: peak memory 8.63 GiB > 8 GiB")
    b = reason_kind("early_reject: peak memory 10.73 GiB > 8 GiB")
    assert a == b == "early_reject: peak memory N GiB > N GiB"
    assert reason_kind("timeout: timed out after 90s") == "timeout: timed out after N s"
    # names with digits are not quantities
    name = "contaminated: level1/97_ScaledDotProductAttention"
    assert reason_kind(name) == name
    assert reason_kind("near-duplicate of 0123456789abcdef (jaccard 0.91)") == "near-duplicate of another task"
