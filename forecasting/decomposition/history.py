"""A fit history decomposed once, in the order the steps depend on each other.

Clock changes and incidents come out first (:func:`~.trend.robust_trend`), because both
would otherwise be learned as seasonal shape; day types are chosen on the cleaned series and
the outliers judged again against them; then the profile's recency is chosen and the profile
estimated. Everything that is chosen is chosen before the held-out tail (``held``), so the
tail stays out of sample for the model that validates on it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from forecasting.decomposition.clock import ClockChange
from forecasting.decomposition.daytypes import DayTypes, choose_day_types
from forecasting.decomposition.profile import SeasonalProfile, estimate_profile
from forecasting.decomposition.selection import choose_half_life
from forecasting.decomposition.trend import (
    RobustTrend,
    coarse_bucket,
    extend_robust_trend,
    robust_trend,
)


@dataclass(frozen=True)
class CleanHistory:
    """What :func:`clean_history` found; ``z`` is what the models learn from."""

    z: np.ndarray
    """The log series on the current clock with its outliers replaced."""
    trend: np.ndarray
    outliers: np.ndarray
    """Mask of the steps replaced."""
    clocks: tuple[ClockChange, ...]
    day_types: DayTypes | None
    day_type_report: dict[str, Any] | None
    """None when the day types were not looked for (a weekly season, or turned off)."""
    half_life: float | None
    """Steps; None: every week of the profile weighs the same."""
    half_life_scores: dict[str, float]
    profile: SeasonalProfile
    """Estimated on the steps before the held-out tail only."""
    profile_info: dict[str, object]


def clean_history(
    z_raw: np.ndarray,
    periods: dict[str, int],
    *,
    day_start: int,
    hour: int,
    held: np.ndarray,
    use_day_types: bool = True,
) -> CleanHistory:
    """Decompose the log series ``z_raw`` with the detected ``periods`` (see the module).

    ``day_start`` is the step of a UTC midnight, ``hour`` the steps per hour (0 when the
    interval does not divide an hour: no clock changes are looked for).
    """
    trend, z, outliers, changes = robust_trend(z_raw, periods, day_start=day_start, hour=hour)
    day_types, day_type_report = None, None
    if use_day_types and periods.get("daily") and not periods.get("weekly"):
        day_types, day_type_report = choose_day_types_before_tail(
            z, periods["daily"], day_start, hour, held
        )
        if day_types is not None:
            trend, z, outliers, changes = robust_trend(
                z_raw, periods, day_start=day_start, hour=hour, day_types=day_types
            )
    half_life, half_life_scores = choose_half_life(
        z, trend, periods, mask=~held, day_start=day_start, day_types=day_types
    )
    profile, profile_info = estimate_profile(
        z,
        trend,
        periods,
        mask=~held,
        day_start=day_start,
        half_life=half_life,
        day_types=day_types,
    )
    return CleanHistory(
        z=z,
        trend=trend,
        outliers=outliers,
        clocks=changes,
        day_types=day_types,
        day_type_report=day_type_report,
        half_life=half_life,
        half_life_scores=half_life_scores,
        profile=profile,
        profile_info=profile_info,
    )


def extend_history(
    previous: CleanHistory,
    z_raw: np.ndarray,
    periods: dict[str, int],
    *,
    shift: int,
    day_start: int,
    held: np.ndarray,
    hour: int = 0,
) -> CleanHistory:
    """:func:`clean_history` of a history that continues ``previous``'s: it starts ``shift``
    steps later and its steps past ``previous``'s end are new (``z_raw``: the whole log
    series, on the same offset; ``hour``: steps per hour, as for :func:`clean_history`).

    What was chosen stays chosen (day types, recency); the profile is estimated again before
    the held-out tail. The cleaned series depends on the interval:

    * where the extended trend would decompose the steps themselves
      (:func:`~.trend.coarse_bucket` is 1: under two :data:`~.trend.COARSE_STEPS_PER_DAY`
      steps a day, 10 minutes and coarser), the whole history is cleaned again
      (:func:`~.trend.robust_trend`, with the kept day types): extending would cost about
      as much, and every step's trend, outlier marks and clock are then judged on the
      history the profile is estimated from, as a full fit judges them, instead of on a
      history a day or more out of date (whose judgements a chain of refits would carry
      on to every later refit);
    * finer, the old steps keep their cleaned values and clock changes, and the trend is
      extended over the new steps (:func:`~.trend.extend_robust_trend`), which costs a
      fraction of cleaning the whole history.
    """
    n = len(z_raw)
    kept = len(previous.z) - shift
    old = slice(shift, shift + kept)
    day_types = None if previous.day_types is None else previous.day_types.shifted(shift)
    if periods and coarse_bucket(periods) == 1:
        extended = robust_trend(z_raw, periods, day_start=day_start, hour=hour, day_types=day_types)
    else:
        clocks = tuple(replace(c, at=c.at - shift) for c in previous.clocks if c.at - shift > 0)
        extended = extend_robust_trend(
            np.concatenate([previous.z[old], z_raw[kept:]]),
            RobustTrend(previous.trend[old], previous.z[old], previous.outliers[old], clocks),
            periods,
            day_start,
            day_types=day_types,
        )
    profile, profile_info = estimate_profile(
        extended.filled,
        extended.trend,
        periods,
        mask=~held,
        day_start=day_start,
        half_life=previous.half_life,
        day_types=day_types,
    )
    assert len(extended.filled) == n
    return CleanHistory(
        z=extended.filled,
        trend=extended.trend,
        outliers=extended.replaced,
        clocks=extended.clocks,
        day_types=day_types,
        day_type_report=previous.day_type_report,
        half_life=previous.half_life,
        half_life_scores=previous.half_life_scores,
        profile=profile,
        profile_info=profile_info,
    )


def whole_history_profile(
    clean: CleanHistory, periods: dict[str, int], day_start: int
) -> tuple[SeasonalProfile, dict[str, object]]:
    """The profile re-estimated on the whole history (the tail included), for forecasting,
    with the recency and day types chosen before the tail."""
    return estimate_profile(
        clean.z,
        clean.trend,
        periods,
        day_start=day_start,
        half_life=clean.half_life,
        day_types=clean.day_types,
    )


def choose_day_types_before_tail(
    z: np.ndarray, day: int, day_start: int, hour: int, held: np.ndarray
) -> tuple[DayTypes | None, dict[str, Any]]:
    """Day types chosen before the held-out tail, or on the whole history when fewer than
    seven days precede the tail.

    A week of minute data leaves six days before its tail, too few to tell a weekend
    (docs/decisions/0006-day-types-in-short-histories.md). The choice is itself made on
    left-out days and the profile is still estimated before the tail, so only *which* days
    are told apart, not the tail's values, reaches the forecast.
    """
    day_types, rep = choose_day_types(z, day, day_start=day_start, hour=hour, mask=~held)
    rep["chosen_on"] = "before the held-out tail"
    if day_types is None and "skipped" in rep and held.any():
        whole, rep_whole = choose_day_types(z, day, day_start=day_start, hour=hour)
        if "skipped" not in rep_whole:
            day_types, rep = whole, rep_whole
            rep["chosen_on"] = "whole history (under 7 days before the held-out tail)"
    return day_types, rep


def epoch_seconds(t0: pd.Timestamp, interval_s: float, steps: np.ndarray) -> np.ndarray:
    """Seconds since 1970 (UTC) of ``steps`` counted from ``t0``."""
    epoch = pd.Timestamp("1970-01-01", tz="UTC")
    return (t0 - epoch).total_seconds() + steps.astype(float) * interval_s


def iso_step(t0: pd.Timestamp, interval_s: float, step: int) -> str:
    """The timestamp of step ``step`` (counted from ``t0``), ISO 8601 with a Z."""
    ts = t0 + pd.Timedelta(seconds=step * interval_s)
    return str(ts.isoformat()).replace("+00:00", "Z")


def describe_day_types(
    clean: CleanHistory, t0: pd.Timestamp, interval_s: float
) -> dict[str, Any] | None:
    """The day types for a fit summary: which calendar days (UTC) form each group and when
    their days start; None when they were not looked for."""
    report, day_types = clean.day_type_report, clean.day_types
    if report is None:
        return None
    out: dict[str, Any] = {
        "used": day_types is not None,
        "score": report.get("score"),
        "shape_score": report.get("shape_score"),
    }
    for key in ("skipped", "chosen_on"):
        if key in report:
            out[key] = report[key]
    if day_types is None:
        return out
    # Each day is named by the calendar day its middle falls on (a day that starts at
    # 23:00 UTC on Friday is Saturday's).
    starts = day_types.start + day_types.day * np.arange(7)
    middles = epoch_seconds(t0, interval_s, starts + day_types.day // 2)
    names = [pd.Timestamp(s, unit="s", tz="UTC").day_name()[:3] for s in middles]
    first = pd.Timestamp(epoch_seconds(t0, interval_s, starts[:1])[0], unit="s", tz="UTC")
    out.update(
        groups={name: int(g) for name, g in zip(names, day_types.groups, strict=True)},
        days_start_at=first.strftime("%H:%M UTC"),
    )
    return out


def describe_clocks(
    clean: CleanHistory, t0: pd.Timestamp, interval_s: float
) -> list[dict[str, Any]]:
    """The clock changes found, in time order, for a fit summary."""
    return [
        {
            "at": iso_step(t0, interval_s, c.at),
            "shift_minutes": c.shift * interval_s / 60.0,
            "share": c.share,
            "gain": c.gain,
        }
        for c in sorted(clean.clocks, key=lambda c: c.at)
    ]


def summarise(clean: CleanHistory, t0: pd.Timestamp, interval_s: float) -> dict[str, Any]:
    """What the decomposition found, for a fit summary (``t0``: the first step's time)."""
    clocks = describe_clocks(clean, t0, interval_s)
    hl = clean.half_life
    return {
        "outliers_replaced": int(np.count_nonzero(clean.outliers)),
        # None: every week of the profile weighs the same.
        "profile_half_life_days": None if hl is None else hl * interval_s / 86400,
        "profile_half_life_scores": clean.half_life_scores,
        # Every change found, in time order; clock_change is the latest (or None).
        "clock_changes": clocks,
        "clock_change": clocks[-1] if clocks else None,
        "day_types": describe_day_types(clean, t0, interval_s),
    }
