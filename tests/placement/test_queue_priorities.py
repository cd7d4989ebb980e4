"""Every queue priority on hand-computed queues (lower key starts first)."""

from __future__ import annotations

import numpy as np
import pytest

from placement.errors import PlacementInputError
from placement.queue.base import QueueView, head, order
from placement.queue.priorities import QUEUE_POLICIES, parse_queue_policies, queue_policy


def view(submit: list[float], estimate: list[float], size: list[int], now: float) -> QueueView:
    return QueueView(
        submit_s=np.array(submit, dtype=float),
        estimate_s=np.array(estimate, dtype=float),
        size=np.array(size),
        now_s=now,
    )


def ranked(name: str, v: QueueView) -> list[int]:
    return order(QUEUE_POLICIES[name], v).tolist()


def test_fcfs_orders_by_submit_time() -> None:
    assert ranked("fcfs", view([5, 1, 3], [1, 1, 1], [1, 1, 1], now=10)) == [1, 2, 0]


def test_sjf_orders_by_estimate_then_submit_time() -> None:
    # Jobs 1 and 2 tie on the estimate (50 s); job 2 was submitted first.
    assert ranked("sjf", view([0, 2, 1], [100, 50, 50], [1, 1, 1], now=10)) == [2, 1, 0]


def test_wfp3_favours_big_jobs_that_waited_long_for_their_length() -> None:
    # w/r = 10, 1, 2 → (w/r)^3·n = 1000·1, 1·8, 8·2 = 1000, 8, 16.
    assert ranked("wfp3", view([0, 0, 0], [10, 100, 50], [1, 8, 2], now=100)) == [0, 2, 1]


def test_wfp3_uses_the_real_wait_not_the_published_bug() -> None:
    # At now=100 job 0 (submitted at 90) has waited 10 s of a 10 s estimate (ratio 1) and job 1
    # (submitted at 0) 100 s of 1000 (ratio 0.1): job 0 first. With RLScheduler's bug, w was
    # -(s+1): job 1's -1 would give (−0.001)³ vs job 0's (−9.1)³ and reverse the order.
    assert ranked("wfp3", view([90, 0], [10, 1000], [1, 1], now=100)) == [0, 1]


def test_unicep_divides_the_wait_by_log2_size_times_estimate() -> None:
    # 100/(1·100) = 1; 100/(2·25) = 2; the one-processor job (log2 1 = 0) goes first.
    assert ranked("unicep", view([0, 0, 60], [100, 25, 10], [2, 4, 1], now=100)) == [2, 1, 0]


def test_f1_can_put_a_later_small_short_job_before_an_earlier_huge_one() -> None:
    # f1 = log10(r)·n + 870·log10(s): job 0 = 4·256 + 870·1 = 1894, job 1 = 1·1 + 870·2 = 1741.
    assert ranked("f1", view([10, 100], [10_000, 10], [256, 1], now=200)) == [1, 0]
    # With a smaller first job the submit term wins: 4·64 + 870 = 1126 < 1741.
    assert ranked("f1", view([10, 100], [10_000, 10], [64, 1], now=200)) == [0, 1]


def test_f1_uses_a_tenth_for_a_zero_submit_time_or_estimate() -> None:
    keys = QUEUE_POLICIES["f1"].keys(view([0, 10], [0, 10], [2, 1], now=20))[0]
    np.testing.assert_allclose(keys, [-1 * 2 + 870 * -1, 1 + 870])


@pytest.mark.parametrize("name", sorted(QUEUE_POLICIES))
def test_ties_keep_the_queue_order(name: str) -> None:
    # Identical jobs: every policy must leave them in the order the queue holds them.
    assert ranked(name, view([3, 3, 3], [7, 7, 7], [2, 2, 2], now=9)) == [0, 1, 2]


def test_head_is_the_first_of_the_order_and_an_empty_queue_has_none() -> None:
    assert head(QUEUE_POLICIES["sjf"], view([0, 1], [9, 3], [1, 1], now=5)) == 1
    with pytest.raises(ValueError, match="empty"):
        head(QUEUE_POLICIES["sjf"], view([], [], [], now=5))


def test_names_parse_in_order_once_each() -> None:
    assert [p.name for p in parse_queue_policies("sjf, FCFS,sjf,f1")] == ["sjf", "fcfs", "f1"]
    assert queue_policy("UNICEP").name == "unicep"


@pytest.mark.parametrize(
    ("names", "message"),
    [
        ("fifo", "unknown queue policy 'fifo'"),  # a name that is not one of ours
        ("fcfs,lifo", "unknown queue policy 'lifo'"),  # one bad name among good ones
        (",,", "no queue policy named"),  # nothing at all
        ("", "no queue policy named"),  # the empty string
    ],
)
def test_bad_names_are_user_errors_listing_the_known_ones(names: str, message: str) -> None:
    with pytest.raises(PlacementInputError, match=message):
        parse_queue_policies(names)
