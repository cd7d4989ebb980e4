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
        filled = _filled(x, table, replaced)
        trend = decompose(filled, plist).trend
    return RobustTrend(trend, filled, replaced, tuple(clocks))


def _filled(x: np.ndarray, table: np.ndarray, replaced: np.ndarray) -> np.ndarray:
    """``x`` with the ``replaced`` steps filled: the seasonally adjusted series (``table``
    by step mod its length) interpolated across them (not filled with the trend, which the
    outliers bent)."""
    steps = np.arange(len(x))
    season = table[np.mod(steps, len(table))]
    keep = ~replaced
    adjusted = np.interp(steps, steps[keep], (x - season)[keep])
    return np.where(replaced, adjusted + season, x)


COARSE_STEPS_PER_DAY = 96
"""An extended trend is decomposed on buckets of at least a day / this (15 minutes of
minute data): the fast STL settings evaluate the trend only every fifth of a period anyway,
and the decomposition's cost grows with the steps."""


def extend_robust_trend(
    values: np.ndarray,
    previous: RobustTrend,
    periods: dict[str, int],
    day_start: int = 0,
    *,
    day_types: DayTypes | None = None,
) -> RobustTrend:
    """:func:`robust_trend` of a history whose first steps it already holds (``previous``:
    their trend, cleaned values and outliers), at a fraction of its cost.

    ``values`` are those cleaned steps followed by the new, raw ones. The old steps keep
    their cleaned values and outlier marks, and their trend but for the last day's (which was
    one-sided): there, and over the new steps, the trend is the decomposition's trend of the
    history averaged over buckets (:func:`coarse_trend`), blended into the previous trend
    across that day. The new steps' outliers are judged against the whole history as
    :func:`robust_trend` judges them, replaced the same way, and the trend taken again, at
    most :data:`TREND_ROUNDS` times. Clock changes are not looked for: a new one shows as a
    changed daily shape, which asks for a full fit (:func:`forecasting.refit.decide_refit`).
    """
    x = np.asarray(values, dtype=float).copy()
    kept = len(previous.trend)
    day, week = periods.get("daily"), periods.get("weekly")
    if not day and not week:
        return RobustTrend(decompose(x, []).trend, x, np.zeros(len(x), dtype=bool), ())
    window = day or week or 1
    raw = x[kept:].copy()
    replaced = np.concatenate([previous.replaced, np.zeros(len(x) - kept, dtype=bool)])
    steps = np.arange(len(x))
    trend = _joined(previous.trend, coarse_trend(x, periods), window)
    for _ in range(TREND_ROUNDS):
        table, keep, _ = inlier_profile(x - trend, steps, day, week, day_start, day_types=day_types)
        if np.array_equal(~keep[kept:], replaced[kept:]):
            break
        replaced[kept:] = ~keep[kept:]
        x[kept:] = raw
        x[kept:] = _filled(x, table, replaced)[kept:]
        trend = _joined(previous.trend, coarse_trend(x, periods), window)
    return RobustTrend(trend, x, replaced, previous.clocks)


def coarse_trend(x: np.ndarray, periods: dict[str, int]) -> np.ndarray:
    """The decomposition's trend of ``x`` taken on bucket means (buckets of ``k`` steps, ``k``
    the largest divisor of every period that leaves :data:`COARSE_STEPS_PER_DAY` buckets a
    day) and interpolated back to the steps."""
    plist = sorted(periods.values())
    k = coarse_bucket(periods)
    if k == 1:
        return decompose(x, plist).trend
    n = len(x)
    whole = n // k * k
    means = x[:whole].reshape(-1, k).mean(axis=1)
    if whole < n:
        means = np.append(means, x[whole:].mean())
    centres = np.arange(len(means)) * k + (k - 1) / 2.0
    if whole < n:
        centres[-1] = (whole + n - 1) / 2.0
    coarse = decompose(means, [p // k for p in plist]).trend
    return np.interp(np.arange(n), centres, coarse)


def coarse_bucket(periods: dict[str, int]) -> int:
    """Steps per bucket of :func:`coarse_trend` (1: it decomposes the steps themselves)."""
    plist = sorted(periods.values())
    if not plist:
        return 1
    day = periods.get("daily") or plist[0]
    k = max(1, day // COARSE_STEPS_PER_DAY)
    while k > 1 and any(p % k for p in plist):
        k -= 1
    return k


def _joined(old: np.ndarray, new: np.ndarray, window: int) -> np.ndarray:
    """``old`` (the trend of the first steps) continued by ``new``, blended in across the
    last ``window`` old steps."""
    n, kept = len(new), len(old)
    start = max(0, kept - window)
    trend = np.empty(n)
    trend[:start] = old[:start]
    w = np.linspace(0.0, 1.0, kept - start + 2)[1:-1]
    trend[start:kept] = (1.0 - w) * old[start:] + w * new[start:kept]
    trend[kept:] = new[kept:]
    return trend
