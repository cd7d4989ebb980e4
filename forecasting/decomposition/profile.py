"""The seasonal profile: a table by phase that models extend into the future.

The decomposition's seasonal is kept as a lookup table indexed by the step's phase, so any
timestamp (in the past, in a later history passed to ``predict``, or in the forecast
horizon) gets its seasonal value by a lookup, and predicting stays in milliseconds.

:func:`estimate_profile` is the entry point: the detrended series averaged per phase, with
outliers left out (:mod:`.outliers`), alike days of the week pooled (weekly season), or
one mean day per day type (:mod:`.daytypes`, short histories), optionally weighting
recent weeks more (:mod:`.selection`), and smoothed along the day.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from forecasting.decomposition.daytypes import DayTypes, day_type_residual, day_type_table
from forecasting.decomposition.outliers import profile_inliers
from forecasting.decomposition.phases import circular_mean, phase_stats, recency_weights
from forecasting.decomposition.stl import Decomposition


@dataclass
class SeasonalProfile:
    """The seasonal pattern by phase: ``at(step)`` for any integer step (past or future).

    ``table[j]`` is the seasonal value of steps ``anchor + j + k * len(table)``. An empty
    table means "no season" (``at`` returns zeros).
    """

    table: np.ndarray
    anchor: int = 0

    @classmethod
    def from_decomposition(
        cls, dec: Decomposition, end_step: int, cycles: int = 1
    ) -> SeasonalProfile:
        """Keep each component's last ``cycles`` cycles (averaged) ending at ``end_step``."""
        if not dec.seasonals:
            return cls(table=np.zeros(0), anchor=end_step)
        length = int(np.lcm.reduce([int(p) for p in dec.seasonals]))
        anchor = end_step - length
        steps = anchor + np.arange(length)
        table = np.zeros(length)
        for p, comp in dec.seasonals.items():
            n_cyc = max(1, min(cycles, len(comp) // p))
            last = comp[len(comp) - n_cyc * p :].reshape(n_cyc, p).mean(axis=0)
            # last[i] belongs to step end_step - p + i.
            table += last[(steps - (end_step - p)) % p]
        return cls(table=table, anchor=anchor)

    @property
    def period(self) -> int:
        return len(self.table)

    def at(self, steps: np.ndarray) -> np.ndarray:
        steps = np.asarray(steps, dtype=np.int64)
        if self.period == 0:
            return np.zeros(steps.shape)
        return self.table[(steps - self.anchor) % self.period]


def profile_period(periods: Mapping[str, int | None]) -> int:
    """The period of the profile table for the detected periods (1 when there is none)."""
    day, week = periods.get("daily"), periods.get("weekly")
    return (week if week and (not day or week == 7 * day) else day) or 1


def smooth_within_days(table: np.ndarray, half: int, day: int, day_start: int) -> np.ndarray:
    """Moving average over ±half steps that never crosses midnight.

    Day-of-week patterns switch at midnight (a Sunday night is followed by a Monday
    morning), so the smoothing stays inside each calendar day, with the window shrinking at
    its edges. ``day_start`` is the table position of a midnight.
    """
    if half <= 0 or len(table) == 0:
        return table
    rolled = np.roll(table, -day_start).reshape(-1, day)
    c = np.concatenate([np.zeros((len(rolled), 1)), np.cumsum(rolled, axis=1)], axis=1)
    idx = np.arange(day)
    lo = np.clip(idx - half, 0, day)
    hi = np.clip(idx + half + 1, 0, day)
    out = (c[:, hi] - c[:, lo]) / (hi - lo)
    return np.roll(out.reshape(-1), day_start)


def choose_smoothing(r: np.ndarray, steps: np.ndarray, day: int, day_start: int = 0) -> int:
    """Half-width (steps) of the smoothing along the day, chosen on held-out days.

    Noisy minute data wants several minutes of smoothing, smooth or coarse data none, so the
    width is not fixed: the daily profile of even-numbered days, smoothed by each candidate
    width (at most an hour), predicts the odd-numbered days and the lowest error wins.
    """
    candidates = [h for h in (0, 1, 2, 4, 8, 16, 32) if 2 * h + 1 <= max(1, day // 24)]
    if len(candidates) == 1:
        return 0
    day_no = np.floor_divide(steps, day)
    even = day_no % 2 == 0
    if even.sum() < day or (~even).sum() < day:
        return 0
    _, mean_even, _ = phase_stats(r[even], np.mod(steps[even], day), day)
    odd_phase = np.mod(steps[~even], day)
    errors = [
        float(
            np.mean(
                np.abs(r[~even] - smooth_within_days(mean_even, h, day, day_start % day)[odd_phase])
            )
        )
        for h in candidates
    ]
    return candidates[int(np.argmin(errors))]


POOL_STRICTNESS = 3.0
"""How much more than sampling noise two days may differ before they stop sharing data
(10 was tried and lost: docs/decisions/0004-weekly-profile-pools-alike-days.md)."""
POOL_MIN_WINDOW = 3
"""Half-width (steps) of the comparison window at least (hourly data: ±3 h is only ±3)."""


def pooled_weekly_profile(
    r: np.ndarray,
    steps: np.ndarray,
    day: int,
    *,
    strictness: float | None = None,
    weights: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """A week of seasonal values where days that look alike share their data.

    Three or four weeks give each time of the week only three or four values. Most traffic
    repeats one day shape on several days (the working days; Saturday and Sunday), so each
    step is a weighted mean over the same time on all seven days, with a weight that falls
    once the other day differs around that time (±3 hours) by more than sampling noise
    explains: days pool where they agree and stay apart where they do not, without being
    told which days are weekends (docs/decisions/0004-weekly-profile-pools-alike-days.md).
    Returns the table (length 7·day, by step mod 7·day) and each step's effective number of
    days.
    """
    week = 7 * day
    strictness = POOL_STRICTNESS if strictness is None else strictness
    cnt, mean, var_mean = phase_stats(r, np.mod(steps, week), week, weights)
    win = max(POOL_MIN_WINDOW, day // 8)
    num = cnt * mean
    den = cnt.copy()
    for j in range(1, 7):
        other, other_var, other_cnt = (np.roll(a, -j * day) for a in (mean, var_mean, cnt))
        dist = circular_mean((mean - other) ** 2, win)
        expect = circular_mean(var_mean + other_var, win)
        weight = np.exp(-np.maximum(0.0, dist - expect) / (strictness * expect))
        num += weight * other_cnt * other
        den += weight * other_cnt
    return num / np.maximum(den, 1e-12), den


def profile_table(
    r: np.ndarray,
    steps: np.ndarray,
    day: int | None,
    week: int | None,
    day_start: int,
    half_life: float | None = None,
    center: int | None = None,
    day_types: DayTypes | None = None,
) -> tuple[np.ndarray, dict[str, object]]:
    """The (unnormalised) profile table (by step mod its period) and what was done."""
    info: dict[str, object] = {}
    w = recency_weights(steps, half_life, center)
    if day and day_types is not None and not week:
        table = day_type_table(r, steps, day_types, w)
        info["kind"] = "day types (too short for a weekly season)"
        day_start = day_types.start
    elif day and week and week == 7 * day:
        table, eff = pooled_weekly_profile(r, steps, day, weights=w)
        info.update(
            kind="weekly, days pooled by similarity",
            mean_days_pooled=float(np.mean(eff) / max((np.ptp(steps) + 1) / week, 1.0)),
        )
    elif day:
        _, table, _ = phase_stats(r, np.mod(steps, day), day, w)
        info["kind"] = "daily"
    else:
        assert week, "a profile needs a daily or a weekly period"  # estimate_profile checks
        _, table, _ = phase_stats(r, np.mod(steps, week), week, w)
        info["kind"] = "weekly"
    if day:
        half = choose_smoothing(r, steps, day, day_start)
        table = smooth_within_days(table, half, day, day_start % day)
        info["smoothing_half_width"] = half
    return table, info


def inlier_profile(
    r: np.ndarray,
    steps: np.ndarray,
    day: int | None,
    week: int | None,
    day_start: int,
    half_life: float | None = None,
    center: int | None = None,
    day_types: DayTypes | None = None,
) -> tuple[np.ndarray, np.ndarray, dict[str, object]]:
    """The profile table of ``r`` without the steps :func:`profile_inliers` calls outliers,
    so that an outage or a holiday does not repeat every week. Returns (table, inlier mask,
    info)."""
    if week:
        day_types = None
    keep = profile_inliers(
        r,
        steps,
        profile_period({"daily": day, "weekly": week}),
        day,
        day_start=day_start,
        day_types=day_types,
    )
    table, info = profile_table(
        r[keep], steps[keep], day, week, day_start, half_life, center, day_types
    )
    info["outlier_steps_left_out"] = int(np.size(keep) - np.count_nonzero(keep))
    return table, keep, info


def estimate_profile(
    values: np.ndarray,
    trend: np.ndarray,
    periods: dict[str, int],
    mask: np.ndarray | None = None,
    day_start: int = 0,
    half_life: float | None = None,
    center: int | None = None,
    day_types: DayTypes | None = None,
) -> tuple[SeasonalProfile, dict[str, object]]:
    """The seasonal profile of ``values - trend`` over steps 0..n-1 (anchor 0).

    ``periods`` holds the detected "daily"/"weekly" periods. Weekly: alike days pooled
    (:func:`pooled_weekly_profile`); daily only: the mean day; neither: no profile. Only the
    steps where ``mask`` is true are used (a held-out tail stays unseen), less the outliers.
    After a clock change ``values`` must already be on the current clock
    (:meth:`~forecasting.decomposition.clock.ClockChange.apply`). With ``half_life``
    (steps), weeks weigh less the further they are from ``center`` (default: the last step
    used). With ``day_types`` and a daily period only, the table spans a week of per-type
    days, estimated against a straight trend (:func:`day_type_residual`), not ``trend``:
    the daily STL's trend follows each weekend's dip and would hide it.
    """
    x = np.asarray(values, dtype=float)
    r = x - np.asarray(trend, dtype=float)
    steps = np.arange(len(x))
    if mask is not None:
        x, r, steps = x[mask], r[mask], steps[mask]
    day, week = periods.get("daily"), periods.get("weekly")
    if not day and not week:
        return SeasonalProfile(np.zeros(0), 0), {"kind": "none", "smoothing_half_width": 0}
    if day and not week and day_types is not None:
        r = day_type_residual(x, steps, day_types)
    else:
        day_types = None
    table, _, info = inlier_profile(r, steps, day, week, day_start, half_life, center, day_types)
    return SeasonalProfile(table - float(np.mean(table)), 0), info
