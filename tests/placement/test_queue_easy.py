"""EASY backfilling's reservation and backfill test on hand-computed pools."""

from __future__ import annotations

import math

import numpy as np
import pytest

from placement.queue.easy import Reservation, after_backfill, may_backfill, reserve


def res(
    need: float, free: float, ends: list[float], sizes: list[float], now: float = 0
) -> Reservation:
    return reserve(
        need=need,
        free_now=free,
        now_s=now,
        running_end_s=np.array(ends, dtype=float),
        running_size=np.array(sizes, dtype=float),
    )


def test_the_reservation_is_the_first_estimated_end_that_frees_enough() -> None:
    # Sorted by estimated end: 10 (1 unit), 20 (2), 30 (4); free 2 → 3 at 10, 5 at 20.
    assert res(5, 2, [30, 10, 20], [4, 1, 2]) == Reservation(start_s=20, extra=0)
    assert res(4, 2, [30, 10, 20], [4, 1, 2]) == Reservation(start_s=20, extra=1)


def test_jobs_ending_together_all_count_toward_the_extra_units() -> None:
    assert res(2, 0, [10, 10], [2, 3]) == Reservation(start_s=10, extra=3)


def test_a_head_that_fits_now_is_reserved_now() -> None:
    assert res(2, 3, [50], [8], now=7) == Reservation(start_s=7, extra=1)


def test_an_estimated_end_already_past_counts_as_now() -> None:
    # The running job overran its estimate (ends "at 5" but it is 12 now).
    assert res(4, 1, [5, 40], [3, 9], now=12) == Reservation(start_s=12, extra=0)


def test_a_head_larger_than_the_machine_is_never_reserved() -> None:
    assert res(100, 1, [5], [3]).start_s == math.inf


SHADOW = Reservation(start_s=100, extra=2)


@pytest.mark.parametrize(
    ("size", "estimate", "flavour", "expected"),
    [
        (1, 50, "classic", True),  # ends at 60, before the shadow time
        (1, 50, "rlscheduler", True),  # ditto, strictly before
        (3, 90, "classic", True),  # ends exactly at the shadow time: does not delay the head
        (3, 90, "rlscheduler", False),  # ... but RLScheduler wants strictly before
        (2, 500, "classic", True),  # runs past the shadow time inside the 2 extra units
        (2, 500, "rlscheduler", False),  # RLScheduler never uses the extra units
        (3, 500, "classic", False),  # runs past and needs more than the extra units
        (5, 10, "classic", False),  # short, but does not fit now (4 free)
        (5, 10, "rlscheduler", False),  # ditto
    ],
)
def test_may_backfill(size: float, estimate: float, flavour: str, expected: bool) -> None:
    got = may_backfill(
        size=size, estimate_s=estimate, now_s=10, free_now=4, reservation=SHADOW, flavour=flavour
    )
    assert got is expected


def test_a_job_using_the_extra_units_leaves_fewer_for_the_next() -> None:
    assert after_backfill(SHADOW, size=2, ends_s=500) == Reservation(start_s=100, extra=0)
    assert after_backfill(SHADOW, size=2, ends_s=90) == SHADOW  # gone before the head starts


def test_an_unknown_flavour_is_refused() -> None:
    with pytest.raises(ValueError, match="flavour"):
        may_backfill(size=1, estimate_s=1, now_s=0, free_now=1, reservation=SHADOW, flavour="x")
