"""The trend of a history cleaned of clock changes and incidents: what kale learns from.

MSTL's trend is a smoother over about two weeks, so one holiday or outage bends it for two
weeks and tilts its ends; the profile, the level model and the band would all inherit it.
:func:`robust_trend` undoes clock changes (:mod:`.clock`), replaces the outliers
(:mod:`.outliers`) and decomposes again until the outliers stay the same
(docs/decisions/0002-incidents-replaced-before-learning.md).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from forecasting.decomposition.clock import CLOCK_MAX_CHANGES, ClockChange, find_clock_change
from forecasting.decomposition.daytypes import DayTypes
from forecasting.decomposition.profile import inlier_profile
from forecasting.decomposition.stl import decompose

TREND_ROUNDS = 3
"""At most this many re-decompositions with the outliers replaced (each one costs an MSTL)."""


class RobustTrend(NamedTuple):
    """What :func:`robust_trend` found (a tuple, so it unpacks)."""

    trend: np.ndarray
    filled: np.ndarray
    replaced: np.ndarray
    clocks: tuple[ClockChange, ...]


def robust_trend(
    values: np.ndarray,
    periods: dict[str, int],
    day_start: int = 0,
    *,
    hour: int = 0,
    day_types: DayTypes | None = None,
) -> RobustTrend:
    """The decomposition's trend, decomposed again with the outliers replaced.

    The steps the profile calls outliers are replaced as R's ``tsclean`` does: the
    seasonally adjusted series (profile estimated without them) is interpolated across
    them, and the series is decomposed again. A bent trend also inflates the spread the
    outliers are judged by (one incident can hide another), so this repeats until the
    outliers stay the same, at most :data:`TREND_ROUNDS` times.

    With ``hour`` (steps per hour) and a daily season, clock changes are looked for first
    (:func:`~forecasting.decomposition.clock.find_clock_change`) and the days before each
    are put on the current clock; otherwise the old weeks' ramps would be called outliers.
    Returns (trend, the series on the current clock with the outliers replaced, mask of the
    steps replaced, the clock changes in the order found); without a season the first trend
    stands. With ``day_types`` each step is judged against the same time on the days of its
    type.
    """
    x = np.asarray(values, dtype=float)
    plist = sorted(periods.values())
    trend = decompose(x, plist).trend
    day, week = periods.get("daily"), periods.get("weekly")
    replaced = np.zeros(len(x), dtype=bool)
    if not day and not week:
        return RobustTrend(trend, x, replaced, ())
    clocks: list[ClockChange] = []
    while day and hour and len(clocks) < CLOCK_MAX_CHANGES:
        clock = find_clock_change(x - trend, day, hour, day_start, weekly=bool(week))
        if clock is None:
            break
        clocks.append(clock)
        x = clock.apply(x, day, week)
        trend = decompose(x, plist).trend
    filled = x
    steps = np.arange(len(x))
    for _ in range(TREND_ROUNDS):
        table, keep, _ = inlier_profile(x - trend, steps, day, week, day_start, day_types=day_types)
        if np.array_equal(~keep, replaced):
            break
        # Judged afresh each round: steps that only the bent trend made look odd go back.
        replaced = ~keep
        season = table[np.mod(steps, len(table))]
        # The seasonally adjusted series is interpolated across the outliers (not filled
        # with the trend, which the outliers bent).
        adjusted = np.interp(steps, steps[keep], (x - season)[keep])
        filled = np.where(replaced, adjusted + season, x)
        trend = decompose(filled, plist).trend
    return RobustTrend(trend, filled, replaced, tuple(clocks))
