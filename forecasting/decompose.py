"""STL/MSTL decomposition and the seasonal profile that models extend into the future.

Models decompose the fit history once (STL for one period, MSTL for daily + weekly, with the
fast ``*_jump`` settings from :mod:`forecasting.seasonality`) and keep the last cycle of each
seasonal component as a :class:`SeasonalProfile`: a table indexed by the step's phase. Any
timestamp — in the past, in a later history passed to ``predict``, or in the forecast
horizon — then gets its seasonal value by a lookup, so predicting never reruns STL on weeks
of data (that is what keeps ``predict`` in milliseconds).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from forecasting.seasonality import stl_decompose, stl_fast_kwargs


@dataclass
class Decomposition:
    """trend + sum(seasonals) + resid == values."""

    trend: np.ndarray
    seasonals: dict[int, np.ndarray]
    resid: np.ndarray

    @property
    def seasonal(self) -> np.ndarray:
        total = np.zeros_like(self.trend)
        for comp in self.seasonals.values():
            total = total + comp
        return total


def decompose(values: np.ndarray, periods: list[int]) -> Decomposition:
    """STL (one period), MSTL (several) or a trend-only split when there is no season."""
    x = np.asarray(values, dtype=float)
    # Strictly more than two cycles: MSTL silently drops a period with p >= n / 2, and a
    # dropped period would leave its column missing below.
    usable = sorted(p for p in set(periods) if p >= 2 and len(x) > 2 * p)
    if not usable:
        trend = _moving_average(x, max(3, min(len(x) // 10, 25)))
        return Decomposition(trend=trend, seasonals={}, resid=x - trend)
    if len(usable) == 1:
        p = usable[0]
        trend, seasonal, resid = stl_decompose(x, p)
        return Decomposition(trend=trend, seasonals={p: seasonal}, resid=resid)
    from statsmodels.tsa.seasonal import MSTL

    # One set of STL kwargs serves every period in MSTL: the shortest period's jumps are
    # safe (finer) for the longer ones too.
    res = MSTL(x, periods=usable, stl_kwargs=stl_fast_kwargs(usable[0])).fit()
    seas = np.asarray(res.seasonal).reshape(len(x), -1)
    return Decomposition(
        trend=np.asarray(res.trend),
        seasonals={p: seas[:, i] for i, p in enumerate(usable)},
        resid=np.asarray(res.resid),
    )


def _moving_average(x: np.ndarray, window: int) -> np.ndarray:
    """Centred moving average with shrinking windows at the ends."""
    window = max(1, min(window, len(x)))
    c = np.concatenate([[0.0], np.cumsum(x)])
    half = window // 2
    lo = np.clip(np.arange(len(x)) - half, 0, len(x))
    hi = np.clip(np.arange(len(x)) + window - half, 0, len(x))
    return (c[hi] - c[lo]) / (hi - lo)


@dataclass
class SeasonalProfile:
    """The seasonal pattern by phase: ``at(step)`` for any integer step (past or future).

    ``table[j]`` is the seasonal value of steps ``anchor + j + k * len(table)``. An empty
    table means "no season" (``at`` returns zeros).
    """

    table: np.ndarray
    anchor: int = 0

    @classmethod
    def from_decomposition(cls, dec: Decomposition, end_step: int,
                           cycles: int = 1) -> SeasonalProfile:
        """Keep each component's last ``cycles`` cycles (averaged) ending at ``end_step``."""
        if not dec.seasonals:
            return cls(table=np.zeros(0), anchor=end_step)
        length = int(np.lcm.reduce([int(p) for p in dec.seasonals]))
        anchor = end_step - length
        steps = anchor + np.arange(length)
        table = np.zeros(length)
        for p, comp in dec.seasonals.items():
            n_cyc = max(1, min(cycles, len(comp) // p))
            last = comp[len(comp) - n_cyc * p:].reshape(n_cyc, p).mean(axis=0)
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


# --------------------------------------------------------------------------- day-type pooling


def circular_mean(x: np.ndarray, half: int) -> np.ndarray:
    """Moving average over ±half steps on a circle (a profile wraps around)."""
    if half <= 0 or len(x) == 0:
        return x
    half = min(half, len(x) // 2)
    padded = np.concatenate([x[-half:], x, x[:half]])
    c = np.concatenate([[0.0], np.cumsum(padded)])
    width = 2 * half + 1
    return (c[width:] - c[:-width]) / width


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


def _phase_stats(r: np.ndarray, phase: np.ndarray, period: int) -> tuple[np.ndarray, ...]:
    """Per phase: count, mean, and the variance of that mean."""
    cnt = np.bincount(phase, minlength=period).astype(float)
    s1 = np.bincount(phase, weights=r, minlength=period)
    s2 = np.bincount(phase, weights=r * r, minlength=period)
    mean = s1 / np.maximum(cnt, 1.0)
    var = np.maximum(s2 / np.maximum(cnt, 1.0) - mean**2, 0.0) * cnt / np.maximum(cnt - 1.0, 1.0)
    return cnt, mean, np.maximum(var, 1e-12) / np.maximum(cnt, 1.0)


POOL_STRICTNESS = 3.0
"""How much more than sampling noise two days may differ before they stop sharing data."""
POOL_MIN_WINDOW = 3
"""Half-width (steps) of the comparison window at least (hourly data: ±3 h is only ±3)."""


def pooled_weekly_profile(r: np.ndarray, steps: np.ndarray, day: int, *,
                          strictness: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A week of seasonal values where days that look alike share their data.

    The weekly seasonal of three or four weeks is an average of three or four values per
    step — noisier than the daily one, which averages every day. Most traffic repeats the
    same day shape on several days of the week (the working days; Saturday and Sunday), so
    each step's value is a weighted mean over the same time on all seven days of the week,
    with a weight that falls once the other day differs, around that time of day (±3 hours),
    by more than sampling noise explains. Days pool where they agree and stay apart where
    they do not (a weekend morning never borrows from a Monday morning). Returns the table
    (length 7·day, indexed by step mod 7·day) and each step's effective number of days.
    """
    week = 7 * day
    strictness = POOL_STRICTNESS if strictness is None else strictness
    cnt, mean, var_mean = _phase_stats(r, np.mod(steps, week), week)
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


def choose_smoothing(r: np.ndarray, steps: np.ndarray, day: int, day_start: int = 0) -> int:
    """Half-width (steps) of the smoothing along the day, chosen on held-out days.

    The daily profile of even-numbered days, smoothed by each candidate width, predicts the
    odd-numbered days; the width with the lowest absolute error wins. Noisy minute data wants
    several minutes of smoothing, smooth or coarse data none. Widths stay within an hour.
    """
    candidates = [h for h in (0, 1, 2, 4, 8, 16, 32) if 2 * h + 1 <= max(1, day // 24)]
    if len(candidates) == 1:
        return 0
    day_no = np.floor_divide(steps, day)
    even = day_no % 2 == 0
    if even.sum() < day or (~even).sum() < day:
        return 0
    _, mean_even, _ = _phase_stats(r[even], np.mod(steps[even], day), day)
    odd_phase = np.mod(steps[~even], day)
    errors = [float(np.mean(np.abs(
        r[~even] - smooth_within_days(mean_even, h, day, day_start % day)[odd_phase])))
        for h in candidates]
    return candidates[int(np.argmin(errors))]


def estimate_profile(values: np.ndarray, trend: np.ndarray, periods: dict[str, int],
                     mask: np.ndarray | None = None, day_start: int = 0,
                     ) -> tuple[SeasonalProfile, dict[str, object]]:
    """The seasonal profile of ``values - trend`` over steps 0..n-1 (anchor 0).

    ``periods`` holds the detected "daily"/"weekly" periods. Weekly: day-type pooling
    (:func:`pooled_weekly_profile`); daily only: the mean day; neither: no profile. Only the
    steps where ``mask`` is true are used (held-out steps stay unseen).
    """
    x = np.asarray(values, dtype=float)
    r = x - np.asarray(trend, dtype=float)
    steps = np.arange(len(x))
    if mask is not None:
        r, steps = r[mask], steps[mask]
    day, week = periods.get("daily"), periods.get("weekly")
    info: dict[str, object] = {"kind": "none", "smoothing_half_width": 0}
    if day and week and week == 7 * day:
        table, eff = pooled_weekly_profile(r, steps, day)
        info.update(kind="weekly, days pooled by similarity",
                    mean_days_pooled=float(np.mean(eff) / max(len(x) / week, 1.0)))
    elif day:
        _, table, _ = _phase_stats(r, np.mod(steps, day), day)
        info["kind"] = "daily"
    elif week:
        _, table, _ = _phase_stats(r, np.mod(steps, week), week)
        info["kind"] = "weekly"
    else:
        return SeasonalProfile(np.zeros(0), 0), info
    if day:
        half = choose_smoothing(r, steps, day, day_start)
        table = smooth_within_days(table, half, day, day_start % day)
        info["smoothing_half_width"] = half
    return SeasonalProfile(table - float(np.mean(table)), 0), info
