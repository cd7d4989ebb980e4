"""Which steps of a history are incidents (outages, spikes, holidays), not traffic.

Three or four weeks give each time of the week three or four values, so one outage or
holiday left in would move that time's profile by a third of its size, every week after.
The test is against the *median* of the same phase on the other weeks, never the mean (a
mean that holds the outage makes the ordinary weeks look odd too)
(docs/decisions/0002-incidents-replaced-before-learning.md).
"""

from __future__ import annotations

import numpy as np

from forecasting.decomposition.daytypes import DayTypes
from forecasting.decomposition.phases import phase_medians

OUTLIER_SIGMAS = 4.0
"""Steps (and whole days) further than this many robust standard deviations from the same
time on the other weeks are outliers."""
OUTLIER_BINS_PER_DAY = 24
"""The robust spread is measured per hour of the day: night noise is larger in log space."""
OUTLIER_MIN_SPREAD = 0.01
"""Spreads (log) below 1 % count as 1 %: in very smooth series the trend's own wiggles would
otherwise be called outliers, and an incident moves traffic by more than that."""


def hour_bins(steps: np.ndarray, day: int | None, day_start: int = 0) -> np.ndarray:
    """Which hour of the day (:data:`OUTLIER_BINS_PER_DAY` bins from midnight, the step
    ``day_start``) each step falls in; all 0 without a daily period."""
    steps = np.asarray(steps, dtype=np.int64)
    if not day:
        return np.zeros(len(steps), dtype=np.int64)
    return np.mod(steps - day_start, day) * OUTLIER_BINS_PER_DAY // day


def hourly_spread(dev: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """A robust standard deviation (1.4826 · median) of the absolute deviations ``dev`` per
    hour bin, never below :data:`OUTLIER_MIN_SPREAD`: noise is larger at night in log space."""
    out = np.full(int(bins.max(initial=0)) + 1, OUTLIER_MIN_SPREAD)
    for b in np.unique(bins):
        out[b] = max(1.4826 * float(np.median(dev[bins == b])), OUTLIER_MIN_SPREAD)
    return out


def odd_days(
    dev: np.ndarray,
    loo_dev: np.ndarray,
    steps: np.ndarray,
    day: int,
    day_start: int = 0,
    sigmas: float = OUTLIER_SIGMAS,
) -> np.ndarray:
    """Which steps belong to a calendar day whose whole level is off (a boolean mask).

    ``dev``/``loo_dev``: each step's deviation from the median of the same time on all
    weeks / on the other weeks. A holiday stands out by day but hardly at night, where the
    log's offset damps it, so step by step only part of it would be left out; judging the
    whole day catches the rest. A day is odd when its median ``dev`` is more than ``sigmas``
    robust standard deviations of the days' median ``loo_dev`` from the typical day (the
    plain median sits on one of three weeks and would understate the spread).
    """
    day_no = np.floor_divide(np.asarray(steps) - day_start, day)
    _, which = np.unique(day_no, return_inverse=True)
    days = range(which.max() + 1)
    level = np.array([np.median(dev[which == i]) for i in days])
    loo_level = np.array([np.median(loo_dev[which == i]) for i in days])
    spread = max(
        1.4826 * float(np.median(np.abs(loo_level - np.median(loo_level)))), OUTLIER_MIN_SPREAD
    )
    return (np.abs(level - np.median(level)) > sigmas * spread)[which]


def profile_inliers(
    r: np.ndarray,
    steps: np.ndarray,
    period: int,
    day: int | None,
    *,
    day_start: int = 0,
    sigmas: float = OUTLIER_SIGMAS,
    day_types: DayTypes | None = None,
) -> np.ndarray:
    """Which steps look like ordinary traffic (a boolean mask), for a profile of ``period``.

    A step is an outlier when it is more than ``sigmas`` robust standard deviations (per
    hour of the day, :func:`hourly_spread`) from the median of its phase. The spread is
    measured on the deviations from the *other* weeks' median (a plain median sits on one
    of three weeks and would halve it). With a weekly profile, whole days whose level is off
    are left out too (:func:`odd_days`: holidays). Ordinary busy and quiet days stay in:
    their spread sets the scale. A phase never loses more than half its observations (two
    incidents on one weekday of four weeks leave no "ordinary" to tell apart). With
    ``day_types`` the reference is the same time on the other days of the step's type, so a
    weekend is not an outlier of the mean day.
    """
    weekly = bool(day) and (period == 7 * (day or 0) or day_types is not None)
    if day_types is not None:
        period = day_types.n_groups * day_types.day
        phase = day_types.phase(steps)
    else:
        phase = np.mod(steps, period)
    median, others = phase_medians(r, phase, period)
    bins = hour_bins(steps, day, day_start)
    limit = sigmas * hourly_spread(np.abs(r - others), bins)[bins]
    keep = np.abs(r - median) <= limit
    if day and weekly:
        # Without the weekly reference, weekends would look like odd days.
        keep &= ~odd_days(r - median, r - others, steps, day, day_start, sigmas)
    total = np.bincount(phase, minlength=period)
    kept = np.bincount(phase[keep], minlength=period)
    too_few = 2 * kept < total
    keep |= too_few[phase]
    return keep
