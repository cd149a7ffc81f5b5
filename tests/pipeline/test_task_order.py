"""The hand-out order of a profile call: a shard's tasks longest expected first, learnt from the call's own results,
decided when the shard's first task is handed out, never across shards but the last few of a call that measures
every shard."""

from pipeline.gpu.task_order import ExpectedWall
from pipeline.stages.profile import Budget, _by_shard


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
    apart = [t["task_id"] for t in _by_shard(shards, Budget(), [False], order=e.order, merge_last=1)]
    assert apart == ["b", "a", "c", "e", "d"]
    # a limit that bounds nothing, or a time limit whose pace is not known yet (one start of each shard so far
    # takes no time on this clock), changes nothing
    assert [t["task_id"] for t in _by_shard(shards, Budget(limit=99), [False], order=e.order, merge_last=2)] == handed
    assert [t["task_id"] for t in _by_shard(shards, Budget(max_seconds=1e9, clock=lambda: 0.0), [False],
                                            order=e.order, merge_last=2)] == apart


def _shards(n: int, size: int = 2) -> list[list[dict]]:
    # in each shard a short task first, then a long one
    return [[_t(f"{k}short", "torch.add"), _t(f"{k}long", "torch.sort")] + [_t(f"{k}x{j}", "torch.add")
                                                                            for j in range(size - 2)]
            for k in range(n)]


def _learnt() -> ExpectedWall:
    e = ExpectedWall()
    e.observe(["torch.sort"], 25.0)
    e.observe(["torch.add"], 1.0)
    return e


def test_a_task_limit_orders_the_last_shards_it_lets_start_as_one():
    stop = [False]
    handed = [t["task_id"] for t in _by_shard(_shards(6), Budget(limit=8), stop, order=_learnt().order, merge_last=3)]
    # 8 tasks: shards 0-3 start; the last three of them as one, their long tasks first
    assert handed == ["0long", "0short", "1long", "2long", "3long", "1short", "2short", "3short"]
    assert stop[0]  # shards 4 and 5 are left for the next call


def test_a_time_limit_orders_the_shards_that_start_in_the_time_left_as_one():
    clock = [0.0]

    def tick():  # each task handed out takes 5 s of the call: a shard of 2 starts every 10 s
        clock[0] += 5.0

    stop = [False]
    budget = Budget(max_seconds=60.0, clock=lambda: clock[0])
    handed = []
    for t in _by_shard(_shards(10), budget, stop, order=_learnt().order, merge_last=3):
        handed.append(t["task_id"])
        tick()
    # shards start at 0, 10, 20, 30; at 30 s the pace says 3 more start before 60 s (30, 40, 50): those go as one
    assert handed[:8] == ["0long", "0short", "1long", "1short", "2long", "2short", "3long", "4long"]
    assert handed[8:] == ["5long", "3short", "4short", "5short"]
    assert stop[0] and clock[0] == 60.0  # no shard starts at 60 s


def test_a_wrong_pace_only_merges_less_or_starts_another_shard_at_the_next_check():
    clock = [0.0]
    stop = [False]
    budget = Budget(max_seconds=60.0, clock=lambda: clock[0])
    handed = []
    for n, t in enumerate(_by_shard(_shards(10), budget, stop, order=_learnt().order, merge_last=3)):
        handed.append(t["task_id"])
        clock[0] += 5.0 if n < 6 else 1.0  # the pace quickens once the merged shards are out: time is left
    assert handed[:6] == ["0long", "0short", "1long", "1short", "2long", "2short"]
    assert set(handed[6:12]) == {"3long", "3short", "4long", "4short", "5long", "5short"}
    assert "6long" in handed  # the budget is checked again after the group: time was left, so shards went on
    assert clock[0] <= 60.0 + 5.0 * 2 * 3
