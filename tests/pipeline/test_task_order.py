"""The hand-out order of a profile call: a shard's tasks longest expected first, learnt from the call's own results,
decided when the shard's first task is handed out, never across shards but the last few of a call that measures
every shard."""

from pipeline.stages.profile import Budget, _by_shard
from pipeline.task_order import ExpectedWall


def _t(name, *ops):
    return {"task_id": name, "ops": list(ops)}


def test_a_task_is_expected_to_take_as_long_as_its_slowest_operator():
    e = ExpectedWall()
    assert e.expected(["torch.sort"]) is None
    e.observe(["torch.sort", "torch.add"], 20.0)
    e.observe(["torch.add"], 2.0)
    e.observe(["torch.mul", "torch.add"], 4.0)
    e.observe(["torch.mul"], None)  # no wall time: teaches nothing
    e.observe([], 9.0)  # no operators either
    assert e.expected(["torch.sort", "torch.mul"]) == 20.0
    assert e.expected(["torch.add"]) == (20.0 + 2.0 + 4.0) / 3
    assert e.expected(["torch.never_seen"]) == e.expected([]) == (20.0 + 2.0 + 4.0) / 3  # the mean of all tasks


def test_the_order_is_longest_first_and_keeps_ties_in_the_shards_order():
    e = ExpectedWall()
    rows = [_t("a", "torch.add"), _t("b", "torch.sort"), _t("c", "torch.add"), _t("d", "torch.mul")]
    assert e.order(rows) == rows  # nothing measured yet: the shard's own order
    e.observe(["torch.sort"], 30.0)
    e.observe(["torch.add"], 1.0)
    e.observe(["torch.mul"], 5.0)
    assert [t["task_id"] for t in e.order(rows)] == ["b", "d", "a", "c"]


def test_each_shard_is_ordered_when_its_first_task_is_handed_out_and_shards_never_mix():
    e = ExpectedWall()
    shards = [[_t("a", "torch.add"), _t("b", "torch.sort")], [_t("c", "torch.add"), _t("d", "torch.sort")]]
    it = _by_shard(shards, Budget(), [False], order=e.order)
    assert [next(it)["task_id"], next(it)["task_id"]] == ["a", "b"]  # no result yet when shard 0 started
    e.observe(["torch.sort"], 12.0)
    e.observe(["torch.add"], 1.0)
    assert [t["task_id"] for t in it] == ["d", "c"]  # shard 1, learnt from shard 0's results


def test_a_call_that_measures_every_shard_orders_its_last_shards_as_one():
    e = ExpectedWall()
    e.observe(["torch.sort"], 25.0)
    e.observe(["torch.add"], 1.0)
    shards = [[_t("a", "torch.add"), _t("b", "torch.sort")], [_t("c", "torch.add")], [],
              [_t("d", "torch.add"), _t("e", "torch.sort")]]
    handed = [t["task_id"] for t in _by_shard(shards, Budget(), [False], order=e.order, merge_last=2)]
    assert handed == ["b", "a", "e", "c", "d"]  # the last two non-empty shards as one: e's sort before c
    bounded = [t["task_id"] for t in _by_shard(shards, Budget(max_seconds=1e9), [False], order=e.order, merge_last=2)]
    assert bounded == ["b", "a", "c", "e", "d"]  # a call that may stop at a shard start keeps every shard apart
    assert [t["task_id"] for t in _by_shard(shards, Budget(limit=99), [False], order=e.order, merge_last=2)] == bounded
