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
from typing import Any, NamedTuple

import numpy as np

from forecasting.seasonality import moving_average, stl_decompose, stl_fast_kwargs


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
    """STL (one period), MSTL (several) or a trend-only split when there is no season.

    A period needs more than two cycles of ``values``; with exactly two (two weeks of
    history, the least that seasonality detection accepts), one step — the same time a
    cycle earlier — is appended for the decomposition and dropped from its result.
    Without it the weekly period was left out, the daily STL's trend (about a day and a
    half long) followed each weekend's dip, and the profile found weekends hardly different
    from weekdays: three-week hourly traces (two weeks fitted) scored up to 3.5x seasonal naive.
    """
    x = np.asarray(values, dtype=float)
    n = len(x)
    exact = [p for p in set(periods) if p >= 2 and n == 2 * p]
    if exact:
        padded = decompose(np.append(x, x[n - max(exact)]), periods)
        return Decomposition(
            trend=padded.trend[:n],
            seasonals={p: c[:n] for p, c in padded.seasonals.items()},
            resid=padded.resid[:n],
        )
    # Strictly more than two cycles: MSTL silently drops a period with p >= n / 2, and a
    # dropped period would leave its column missing below.
    usable = sorted(p for p in set(periods) if p >= 2 and n > 2 * p)
    if not usable:
        trend = moving_average(x, max(3, min(len(x) // 10, 25)))
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


def _phase_stats(
    r: np.ndarray, phase: np.ndarray, period: int, weights: np.ndarray | None = None
) -> tuple[np.ndarray, ...]:
    """Per phase: (effective) count, mean, and the variance of that mean.

    With ``weights`` (recent weeks weigh more, :func:`recency_weights`) the mean is
    weighted and the count is the effective number of observations, (Σw)² / Σw².
    """
    w = np.ones(len(r)) if weights is None else np.asarray(weights, dtype=float)
    sw = np.bincount(phase, weights=w, minlength=period)
    sw2 = np.bincount(phase, weights=w * w, minlength=period)
    mean = np.bincount(phase, weights=w * r, minlength=period) / np.maximum(sw, 1e-300)
    m2 = np.bincount(phase, weights=w * r * r, minlength=period) / np.maximum(sw, 1e-300)
    cnt = sw**2 / np.maximum(sw2, 1e-300)  # equal weights: the plain count
    var = np.maximum(m2 - mean**2, 0.0) * cnt / np.maximum(cnt - 1.0, 1.0)
    return cnt, mean, np.maximum(var, 1e-12) / np.maximum(cnt, 1.0)


def recency_weights(
    steps: np.ndarray, half_life: float | None, center: int | None = None
) -> np.ndarray | None:
    """Weights that halve every ``half_life`` steps away from ``center`` (default: the last
    step), so the weeks nearest the forecast count most. None: all steps weigh the same."""
    if half_life is None or len(steps) == 0:
        return None
    at = float(np.max(steps)) if center is None else float(center)
    return np.exp2(-np.abs(at - np.asarray(steps, dtype=float)) / float(half_life))


POOL_STRICTNESS = 3.0
"""How much more than sampling noise two days may differ before they stop sharing data."""
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
    cnt, mean, var_mean = _phase_stats(r, np.mod(steps, week), week, weights)
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
    errors = [
        float(
            np.mean(
                np.abs(r[~even] - smooth_within_days(mean_even, h, day, day_start % day)[odd_phase])
            )
        )
        for h in candidates
    ]
    return candidates[int(np.argmin(errors))]


DAY_TYPE_MIN_DAYS = 7
"""Days of history needed before days of the week may get their own profiles (every weekday
seen). Six of them must be whole days at the day start tried (a week that starts in the
afternoon holds only six whole days that start at midnight)."""
DAY_TYPE_MAX_DAYS = 21
"""Day types stand in for the weekly season only in histories shorter than this: from two
weeks on the weekly season is usually detected, and a straight trend (see
:func:`day_type_residual`) stops describing longer histories."""
DAY_TYPE_MARGIN = 0.85
"""A grouping of the days must predict left-out days this much better than the mean day,
and than the same grouping moved to the other days of the week (see
:func:`choose_day_types`)."""
DAY_TYPE_SHAPE_MARGIN = 0.9
"""The same test on the days' shapes alone (each day less its own mean level) must pass at
this margin: a weekend changes *when* people come, not only how many. A wandering level
makes neighbouring days alike in level only: on hourly traffic whose daily level wandered
by 8 % a day, 23-57 % of 7-13-day histories passed the level-and-shape test at 0.85 and
none the shape test at 0.9 (shape scores 1.06-1.08 on average, against 0.3-0.86 on real and
generated traffic with weekends)."""


def _day_type_patterns() -> list[tuple[str, tuple[int, ...]]]:
    """Candidate groupings of seven consecutive days (group per day): one day apart from the
    rest, two neighbouring days together apart from the rest, or each of them apart."""
    out = []
    for k in range(7):
        for kind, second in (("one", None), ("two", 1), ("pair", 2)):
            g = [0] * 7
            g[k] = 1
            if second is not None:
                g[(k + 1) % 7] = second
            out.append((f"{kind}{k}", tuple(g)))
    return out


class DayTypes(NamedTuple):
    """Which days of the week share a profile, for histories too short for a weekly season.

    Day ``j`` (0..6) starts at step ``start + j·day`` (mod a week) and belongs to group
    ``groups[j]``; group 0 is the ordinary day. ``start`` is a local midnight as the data
    shows it (the UTC midnight moved by whole hours)."""

    groups: tuple[int, ...]
    start: int
    day: int
    score: float

    @property
    def n_groups(self) -> int:
        return max(self.groups) + 1

    def group_of(self, steps: np.ndarray) -> np.ndarray:
        j = np.mod(np.floor_divide(np.asarray(steps, dtype=np.int64) - self.start, self.day), 7)
        return np.asarray(self.groups)[j]

    def phase(self, steps: np.ndarray) -> np.ndarray:
        """Group · day + time of day: the profile's phase of each step."""
        steps = np.asarray(steps, dtype=np.int64)
        return self.group_of(steps) * self.day + np.mod(steps - self.start, self.day)


def day_type_residual(
    x: np.ndarray, steps: np.ndarray, day_types: DayTypes, rounds: int = 3
) -> np.ndarray:
    """``x`` less a straight line fitted together with the day-type profile.

    The daily STL's trend is about a day and a half long, so it follows each weekend's dip:
    taken out, it leaves the weekend looking like the working days, and the dip returns in
    the level, where nothing foresees it. With one to three weeks a straight line is a fair
    trend, and fitting it together with the profile keeps the weekend's level in the
    profile (a plain line through a history that ends on a weekend would tilt down)."""
    x = np.asarray(x, dtype=float)
    t = np.asarray(steps, dtype=float)
    phase = day_types.phase(steps)
    n_ph = day_types.n_groups * day_types.day
    season = np.zeros(len(x))
    for _ in range(rounds):
        slope, icept = np.polyfit(t, x - season, 1)
        r = x - (icept + slope * t)
        season = _phase_stats(r, phase, n_ph)[1][phase]
    return r


def _loo_day_errors(shapes: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Absolute errors (days × bins) of predicting each day by the mean of the other days of
    its group (of all other days when it is alone in its group). (Medians instead of means
    were tried: they predict working days well from the others even when weekends are among
    them, and real weekends no longer stood out: the electricity trace's shape score rose
    from 0.5-0.6 to 0.9-0.96.) Incidents are taken out before: see :func:`choose_day_types`."""
    total = shapes.sum(axis=0)
    err = np.empty_like(shapes)
    for g in np.unique(groups):
        sel = groups == g
        cnt = int(sel.sum())
        if cnt >= 2:
            pred = (shapes[sel].sum(axis=0)[None, :] - shapes[sel]) / (cnt - 1)
        else:
            pred = (total[None, :] - shapes[sel]) / (len(shapes) - 1)
        err[sel] = np.abs(shapes[sel] - pred)
    return err


DAY_TYPE_ERROR_CAP = 4.0
"""Errors count up to this many times the median error of the mean day, so that one odd
stretch does not decide the grouping."""


def _grouping_scores(
    shapes: np.ndarray, weekday: np.ndarray, patterns: list[tuple[str, tuple[int, ...]]]
) -> dict[str, float]:
    """Capped mean left-out error of the mean day ("daily") and of each grouping."""
    daily = _loo_day_errors(shapes, np.zeros(len(shapes), dtype=int))
    cap = DAY_TYPE_ERROR_CAP * float(np.median(daily))
    out = {"daily": float(np.minimum(daily, cap).mean())}
    for name, groups in patterns:
        err = _loo_day_errors(shapes, np.asarray(groups)[weekday])
        out[name] = float(np.minimum(err, cap).mean())
    return out


def choose_day_types(
    values: np.ndarray,
    day: int,
    *,
    day_start: int = 0,
    hour: int = 0,
    mask: np.ndarray | None = None,
    margin: float = DAY_TYPE_MARGIN,
) -> tuple[DayTypes | None, dict[str, Any]]:
    """Days of the week that need their own profile, in one to three weeks of history.

    Below two weeks no weekly season can be detected (two cycles are needed), so the profile
    was one mean day and weekends were forecast like working days: with 7-11 days of
    hourly history kale lost to seasonal naive on most real and generated traces. A week
    holds each weekday once, which is too little for a weekly profile but enough to tell
    whether some days differ. Each whole day's values (hourly means, less the mean of the
    seven days around it, so that a trend or a wandering level does not count: a straight
    line fitted through one week that ends on a weekend tilts, and made Monday and Tuesday
    look apart) are predicted by the mean of the other days of its group. A grouping (one
    day apart, two neighbouring days together, or each apart; days starting at midnight
    moved by -12..+11 hours, since the data's clock may not be its users') wins if its
    error is below ``margin`` times both the mean day's and the median of the same grouping
    moved to the other six days of the week, and on the days' shapes alone (each less its
    own level) below :data:`DAY_TYPE_SHAPE_MARGIN` times the mean day's. The last two tests
    are what a real weekend passes and chance does not: with a wandering level, any two
    neighbouring days look alike. ``values`` should have its incidents replaced already
    (:func:`robust_trend` with the daily period): a day with a 3-hour outage spoils the mean
    that predicts every other day, and a grouping that puts it apart looked like a day type.
    Returns (the day types or None, a report with the scores).
    """
    x = np.asarray(values, dtype=float)
    n = len(x)
    steps = np.arange(n)
    usable = np.ones(n, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    report: dict[str, Any] = {"score": None}
    span = (int(steps[usable].max()) + 1) if usable.any() else 0
    if not day or span < DAY_TYPE_MIN_DAYS * day or span >= DAY_TYPE_MAX_DAYS * day:
        report["skipped"] = f"needs {DAY_TYPE_MIN_DAYS} to {DAY_TYPE_MAX_DAYS} days"
        return None, report
    bin_ = hour if hour and day % hour == 0 and day // hour >= 12 else 1
    bins = day // bin_
    full = np.full(span, np.nan)
    full[steps[usable]] = x[usable]
    patterns = _day_type_patterns()
    scores: dict[tuple[str, int], float] = {}
    shape_scores: dict[tuple[str, int], float] = {}
    for off in range(-(bins // 2), bins - bins // 2):
        first = (day_start + off * bin_) % day
        n_days = (span - first) // day
        if n_days < DAY_TYPE_MIN_DAYS - 1:
            continue
        shapes = full[first : first + n_days * day].reshape(n_days, bins, bin_).mean(axis=2)
        whole = ~np.isnan(shapes).any(axis=1)
        shapes, index = shapes[whole], np.arange(n_days)[whole]
        if len(shapes) < DAY_TYPE_MIN_DAYS - 1:
            continue
        level = shapes.mean(axis=1)
        k = len(shapes)
        width = min(7, k)
        lo = np.clip(np.arange(k) - 3, 0, k - width)
        local = np.array([level[a : a + width].mean() for a in lo])
        shapes = shapes - local[:, None]
        weekday = np.mod(index, 7)
        flat = shapes - level[:, None]
        for name, err in _grouping_scores(shapes, weekday, patterns).items():
            scores[(name, off)] = err
        for name, err in _grouping_scores(flat, weekday, patterns).items():
            shape_scores[(name, off)] = err
    best: tuple[float, str, int, tuple[int, ...]] | None = None
    lookup = dict(patterns)
    for (name, off), err in scores.items():
        if name == "daily":
            continue
        peers = float(np.median([scores[(name[:-1] + str(j), off)] for j in range(7)]))
        rel = max(err / max(scores[("daily", off)], 1e-12), err / max(peers, 1e-12))
        if best is None or rel < best[0]:
            best = (rel, name, off, lookup[name])
    if best is None:
        report["skipped"] = "no day start leaves six whole days"
        return None, report
    rel, name, off, groups = best
    shape_rel = shape_scores[(name, off)] / max(shape_scores[("daily", off)], 1e-12)
    report.update(
        score=rel,
        shape_score=shape_rel,
        pattern=name,
        shift_hours=off * bin_ / max(hour, 1) if hour else None,
    )
    if rel > margin or shape_rel > DAY_TYPE_SHAPE_MARGIN:
        return None, report
    start = (day_start + off * bin_) % day
    return DayTypes(groups=groups, start=start, day=day, score=rel), report


OUTLIER_SIGMAS = 4.0
"""Steps (and whole days) further than this many robust standard deviations from the same
time on the other weeks are outliers."""
OUTLIER_BINS_PER_DAY = 24
"""The robust spread is measured per hour of the day: night noise is larger in log space."""
OUTLIER_MIN_SPREAD = 0.01
"""Spreads (log) below 1 % count as 1 %: an incident moves traffic by more than a few percent,
and in very smooth series the trend's own wiggles would otherwise be called outliers."""


def _day_type_table(
    r: np.ndarray, steps: np.ndarray, day_types: DayTypes, weights: np.ndarray | None
) -> np.ndarray:
    """A week's table (by step mod 7·day) of per-group mean days; a time of day a group has
    no data for takes the mean of all days."""
    day = day_types.day
    n_ph = day_types.n_groups * day
    cnt, mean, _ = _phase_stats(r, day_types.phase(steps), n_ph, weights)
    _, mean_day, _ = _phase_stats(r, np.mod(steps - day_types.start, day), day, weights)
    mean = np.where(cnt > 0, mean, np.tile(mean_day, day_types.n_groups))
    return mean[day_types.phase(np.arange(7 * day))]


def _profile_table(
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
        table = _day_type_table(r, steps, day_types, w)
        info["kind"] = "day types (too short for a weekly season)"
        day_start = day_types.start
    elif day and week and week == 7 * day:
        table, eff = pooled_weekly_profile(r, steps, day, weights=w)
        info.update(
            kind="weekly, days pooled by similarity",
            mean_days_pooled=float(np.mean(eff) / max((np.ptp(steps) + 1) / week, 1.0)),
        )
    elif day:
        _, table, _ = _phase_stats(r, np.mod(steps, day), day, w)
        info["kind"] = "daily"
    else:
        _, table, _ = _phase_stats(r, np.mod(steps, week), week, w)
        info["kind"] = "weekly"
    if day:
        half = choose_smoothing(r, steps, day, day_start)
        table = smooth_within_days(table, half, day, day_start % day)
        info["smoothing_half_width"] = half
    return table, info


def phase_medians(r: np.ndarray, phase: np.ndarray, period: int) -> tuple[np.ndarray, np.ndarray]:
    """Per step: the median of its phase, and the median of the *other* steps of its phase
    (its own value when it is alone)."""
    order = np.lexsort((r, phase))
    s = r[order]
    ph = phase[order]
    cnt = np.bincount(phase, minlength=period)
    start = np.concatenate([[0], np.cumsum(cnt)[:-1]])[ph]
    n = cnt[ph]
    k = np.arange(len(s)) - start  # rank within the phase, 0-based

    def at(j: np.ndarray) -> np.ndarray:
        return s[start + np.clip(j, 0, n - 1)]

    m = (n - 1) // 2  # odd n: the median's rank; even n: the lower one
    median = 0.5 * (at(m) + at(n // 2))
    loo_odd = np.where(
        k < m,
        0.5 * (at(m) + at(m + 1)),
        np.where(k == m, 0.5 * (at(m - 1) + at(m + 1)), 0.5 * (at(m - 1) + at(m))),
    )
    loo_even = np.where(k <= m, at(m + 1), at(m))
    loo = np.where(n == 1, s, np.where(n % 2 == 1, loo_odd, loo_even))
    out_median, out_loo = np.empty_like(s), np.empty_like(s)
    out_median[order], out_loo[order] = median, loo
    return out_median, out_loo


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
    weeks / on the other weeks. A holiday at 40 % is off by 0.5-0.9 (log) in the day but
    only by 0.1-0.3 at night, where the offset of the log damps it: step by step only half
    of it stands out, and the rest would still pull that weekday's night profile down by 7 %
    every week after. A day is odd when its median ``dev`` is more than ``sigmas`` robust
    standard deviations of the days' median ``loo_dev`` away from the typical day (the plain
    median sits on one of three weeks, so its day levels would understate the spread).
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

    An outage, an incident's spike or a holiday in three or four weeks of history would
    otherwise move that time of the week's profile by a third or a quarter of its size,
    and every following week would inherit it (three 1-minute traces with a holiday, a
    3-hour outage and a 2-hour spike: the next week's MAE was 53-66 % higher before kale
    took incidents out).

    The reference is the median of the same phase over the weeks (days), not the mean: with
    three or four weeks, a mean that holds the outage is pulled so far that the ordinary
    weeks look like outliers too. A step is an outlier when it is more than ``sigmas``
    robust standard deviations (per hour of the day, :func:`hourly_spread`) from that
    median. The spread is measured on the deviations from the *other* weeks' median: a plain
    median sits on one of three weeks and would shrink it by half. With a weekly profile,
    whole days whose level is off are left out too (:func:`odd_days`: holidays). Ordinary
    busy and quiet days stay in: their spread sets the scale. A phase never loses more than
    half its observations; beyond that (two incidents on the same weekday of four weeks),
    there is no "ordinary" to tell apart from. With ``day_types`` the reference is the same
    time on the other days of the step's type (a weekend is not an outlier of the mean day).
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


def profile_period(periods: dict[str, int | None]) -> int:
    """The period of the profile table for the detected periods (1 when there is none)."""
    day, week = periods.get("daily"), periods.get("weekly")
    return (week if week and (not day or week == 7 * day) else day) or 1


def _inlier_profile(
    r: np.ndarray,
    steps: np.ndarray,
    day: int | None,
    week: int | None,
    day_start: int,
    half_life: float | None = None,
    center: int | None = None,
    day_types: DayTypes | None = None,
) -> tuple[np.ndarray, np.ndarray, dict[str, object]]:
    """The profile table of ``r`` without the steps :func:`profile_inliers` calls outliers.
    Returns (table, inlier mask, info)."""
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
    table, info = _profile_table(
        r[keep], steps[keep], day, week, day_start, half_life, center, day_types
    )
    info["outlier_steps_left_out"] = int(np.size(keep) - np.count_nonzero(keep))
    return table, keep, info


CLOCK_SHARES = (0.25, 0.5, 0.75, 1.0)
"""Shares of the traffic whose clock may have moved: all of it (one time zone), or part
(users in several time zones, whose daylight-saving dates differ)."""
CLOCK_MIN_GAIN = 0.5
"""A clock change is accepted when moving the days before it explains at least this share of
how the days after it differ from the same weekdays before it. Measured on the days' shapes
(log, less the trend) of 21-day fit windows: 0.60-0.91 on 28 generated traces whose traffic
moved by an hour (all of it, or 30, 50 or 70 %; 1 min to 1 h); at most 0.25 on 40 traces
without a move (generated with and without incidents, the real NASA trace, Poisson counts,
a daily-only wave, a wandering level)."""
CLOCK_MIN_DAYS = 2
"""Whole days needed after a clock change to find it (before it: a week when the traffic has
a weekly pattern, so that every weekday after it has its own day before it)."""
CLOCK_MAX_CHANGES = 2
"""Clock changes looked for, one after the other, each on the series with the ones found
before it undone."""
CLOCK_MIN_AGREEMENT = 0.8
"""Share of the days after the change that must agree with it one by one: each is closer to
its weekday before the change once that is moved than as it was. A real change convinces
every day; days that only alternate between two shapes do not."""


def moved_share(z: np.ndarray, moved: np.ndarray, share: float) -> np.ndarray:
    """``log((1 - share) * exp(z) + share * exp(moved))``: traffic adds up, so a share of it
    on another clock mixes in linearly (``z`` is log traffic)."""
    if share >= 1.0:
        return np.asarray(moved, dtype=float)
    return np.logaddexp(np.log1p(-share) + z, np.log(share) + moved)


@dataclass(frozen=True)
class ClockChange:
    """At step ``at`` the clock of ``share`` of the traffic moved by ``shift`` steps.

    ``shift`` > 0: that traffic now comes ``shift`` steps later in UTC (its users' clocks went
    back an hour, as at the end of summer time).
    """

    at: int
    shift: int
    share: float
    gain: float

    def apply(self, z: np.ndarray, day: int, week: int | None = None) -> np.ndarray:
        """``z`` (log traffic) with the steps before ``at`` put on the current clock.

        A step before the change becomes ``(1 - share) * y[t] + share * y[t - shift]``
        (:func:`moved_share`; ``exp(z)`` is the traffic plus the model's offset, which the mix
        keeps). Where ``t - shift`` falls outside the days
        before the change (the first hour of the history, the last before the change), the
        same time a ``week`` later or earlier stands in (the same weekday), else a ``day``.
        """
        z = np.asarray(z, dtype=float)
        out = z.copy()
        t = np.arange(min(self.at, len(z)))
        want = t - self.shift
        src = want.copy()
        for period in ([week] if week else []) + [day]:
            bad = (src < 0) | (src >= self.at)
            src = np.where(bad & (want < 0), want + period, src)
            src = np.where(bad & (want >= self.at), want - period, src)
        src = np.clip(src, 0, max(self.at - 1, 0))
        out[t] = moved_share(z[t], z[src], self.share)
        return out


def _shape_rows(rows: np.ndarray, share: float, shift: int) -> np.ndarray:
    """Each day's shape (log, less its mean) with ``share`` of its traffic moved ``shift``
    steps later."""
    if share > 0:
        rows = moved_share(rows, np.roll(rows, shift, axis=1), share)
    return rows - rows.mean(axis=1, keepdims=True)


def _same_weekday_errors(
    before: np.ndarray, after: np.ndarray, group: np.ndarray, first_split: int
) -> np.ndarray:
    """For each split k, the squared distance of every day from k on to the mean of the
    days of its weekday (``group``) before k, with the days before taken from ``before``
    and those after from ``after``; ``inf`` where a split has no such pairs. Running sums
    per weekday make each split cost O(day)."""
    days = len(after)
    hot = (group[:, None] == np.arange(group.max() + 1)[None, :]).astype(float)  # days x G
    zero = np.zeros((1, *hot.shape[1:]))
    count_b = np.concatenate([zero, np.cumsum(hot, axis=0)])  # days before k
    sum_b = np.concatenate(
        [
            np.zeros((1, hot.shape[1], before.shape[1])),
            np.cumsum(hot[:, :, None] * before[:, None, :], axis=0),
        ]
    )
    rev = slice(None, None, -1)
    count_a = np.concatenate([np.cumsum(hot[rev], axis=0)[rev], zero])  # days from k on
    sum_a = np.concatenate(
        [
            np.cumsum((hot[:, :, None] * after[:, None, :])[rev], axis=0)[rev],
            np.zeros_like(sum_b[:1]),
        ]
    )
    sq_a = np.concatenate(
        [np.cumsum((hot * np.sum(after * after, axis=1)[:, None])[rev], axis=0)[rev], zero]
    )
    out = np.full(days + 1, np.inf)
    for k in range(first_split, days - CLOCK_MIN_DAYS + 1):
        if np.any((count_a[k] > 0) & (count_b[k] == 0)):
            continue
        seen = count_b[k] > 0
        ref = sum_b[k][seen] / count_b[k][seen][:, None]
        out[k] = float(
            np.sum(sq_a[k][seen])
            - 2 * np.sum(sum_a[k][seen] * ref)
            + np.sum(count_a[k][seen] * np.sum(ref * ref, axis=1))
        )
    return out


def find_clock_change(
    r: np.ndarray, day: int, hour: int, day_start: int = 0, *, weekly: bool = False
) -> ClockChange | None:
    """A one-hour move of the traffic's clock at a midnight, if the history shows one.

    Traffic follows its users' local clock; a trace stored in UTC sees that clock move by an
    hour at a daylight-saving change, for all of the traffic (one time zone) or part of it
    (users in several, whose changes fall on different dates). A profile averaged over the
    weeks before and after then puts every morning ramp and evening peak partly in the
    wrong hour until the old weeks leave the history (an hourly trace with the change a week
    before the test week: MASE 1.1, twice seasonal naive's; with half of the traffic moved
    and only whole-traffic moves modelled, 0.72 against seasonal naive's 0.61).

    Each whole day from ``day_start`` (a midnight) is compared with the mean of the days of
    its weekday (``weekly``; else all days) before a split, with and without ``share`` of
    the earlier days' traffic moved by ±``hour`` steps (``r``: the log series less its
    trend; only the days' shapes count, not their levels). The split, share and direction
    that explain the largest part of the difference are kept when that part is at least
    :data:`CLOCK_MIN_GAIN` and the days after the split agree one by one
    (:data:`CLOCK_MIN_AGREEMENT`). Comparing the days after with the days before, not each
    day with all others, matters for partial moves: mixing an hour-shifted copy into a day
    smooths it, which alone makes days look more alike.
    """
    if hour < 1 or day < 2 * hour:
        return None
    first = int(day_start) % day
    days = (len(r) - first) // day
    first_split = 7 if weekly else CLOCK_MIN_DAYS
    if days < first_split + CLOCK_MIN_DAYS:
        return None
    raw = np.asarray(r[first : first + days * day], dtype=float).reshape(days, day)
    rows = _shape_rows(raw, 0.0, 0)
    group = np.arange(days) % 7 if weekly else np.zeros(days, dtype=int)
    unmoved = _same_weekday_errors(rows, rows, group, first_split)
    # The split, share and direction that remove the most error win (a ratio would favour
    # splits that leave out the days that disagree); the ratio then decides.
    best: tuple[float, int, int, float] = (0.0, 0, 0, 0.0)
    for shift in (-hour, hour):
        for share in CLOCK_SHARES:
            moved = _same_weekday_errors(_shape_rows(raw, share, shift), rows, group, first_split)
            with np.errstate(invalid="ignore"):
                removed = np.where(np.isfinite(unmoved), unmoved - moved, 0.0)
            k = int(np.argmax(removed))
            if removed[k] > best[0]:
                best = (float(removed[k]), k, shift, share)
    removed, split, shift, share = best
    if split == 0 or unmoved[split] <= 0:
        return None
    gain = removed / float(unmoved[split])
    if gain < CLOCK_MIN_GAIN:
        return None
    before = _shape_rows(raw[:split], share, shift)
    closer = []
    for j in range(split, days):
        same = group[:split] == group[j]
        closer.append(
            np.sum((rows[j] - before[same].mean(axis=0)) ** 2)
            < np.sum((rows[j] - rows[:split][same].mean(axis=0)) ** 2)
        )
    if np.mean(closer) < CLOCK_MIN_AGREEMENT:
        return None
    return ClockChange(at=first + split * day, shift=shift, share=share, gain=gain)


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

    MSTL's trend is a smoother over about two weeks, so one holiday or a three-hour outage
    bends it by a tenth (log) for two weeks and tilts its ends: a holiday, an outage and a
    spike in three weeks of minute data moved the last Sunday's profile by up to 0.19 (log)
    although the profile left those steps out. So the steps the profile calls outliers are
    replaced, as R's ``tsclean`` does: the seasonally adjusted series (profile estimated
    without them) is interpolated across them, and the series is decomposed again. A bent
    trend also inflates the spread the outliers are judged by (a holiday at 40 % hid behind
    it until the outage was replaced), so this repeats until the outliers stay the same, at
    most :data:`TREND_ROUNDS` times.

    With ``hour`` (steps per hour) and a daily season, clock changes are looked for first
    (:func:`find_clock_change`, at most :data:`CLOCK_MAX_CHANGES`: users in America and in
    Europe change a few weeks apart) and the days before each are put on the current clock
    (:meth:`ClockChange.apply`), or the ramps of the old weeks would be called outliers and
    the profile would blur the clocks. Returns (trend, the series on the current clock
    with the outliers replaced, mask of the steps replaced, the clock changes in the order
    found); without outliers or without a season the first trend stands. With
    ``day_types`` (:func:`choose_day_types`) each step is judged against the same time on
    the days of its type.
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
        table, keep, _ = _inlier_profile(
            x - trend, steps, day, week, day_start, day_types=day_types
        )
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

    ``periods`` holds the detected "daily"/"weekly" periods. Weekly: day-type pooling
    (:func:`pooled_weekly_profile`); daily only: the mean day; neither: no profile. Only the
    steps where ``mask`` is true are used (held-out steps stay unseen), less the ones
    :func:`profile_inliers` calls outliers, so an outage or a holiday does not repeat every
    week. After a clock change, ``values`` must already be on the current clock
    (:meth:`ClockChange.apply`). With ``half_life`` (steps), weeks weigh less the further
    they are from ``center`` (default: the last step used; :func:`choose_half_life`).
    With ``day_types`` and a daily period only, the table spans a week of per-type days,
    estimated against a straight trend (:func:`day_type_residual`), not ``trend``.
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
    table, _, info = _inlier_profile(r, steps, day, week, day_start, half_life, center, day_types)
    return SeasonalProfile(table - float(np.mean(table)), 0), info


PROFILE_HALF_LIVES_DAYS: tuple[float | None, ...] = (None, 14.0, 7.0, 3.5, 2.5, 1.75)
"""Candidate recencies of the profile: every week alike (None), or weights that halve every
two weeks, week, half week, 2.5 or 1.75 days back in time. The two shortest came from the
electricity trace, whose score kept falling past 3.5 days (0.62x equal weights at 3.5, 0.585x
at 2.5, 0.59x at 1.75, 0.61x at 1; its 84-origin MAE fell 8-10 % from 3.5 to 2.5 days). On
51 generated, structure and NASA traces they changed no choice (only growth_30m passes
the margin, and keeps 3.5 days)."""
PROFILE_HALF_LIFE_MARGIN = 0.9
"""A recency-weighted profile must score this much better than the equal-weight one: on
traffic whose shape does not drift, weighting only throws data away. With 0.97, the real
NASA trace at 30 minutes took a 3.5-day half-life (score 0.94x equal weights): its MASE did
not move (0.341 -> 0.342 over 84 origins) and its band widened (p90 coverage 0.906 -> 0.954).
The drifting electricity trace scored 0.62x."""
PROFILE_HALF_LIFE_DAYS_SCORED = 7
"""How many of the last whole days score the candidates."""


def choose_half_life(
    values: np.ndarray,
    trend: np.ndarray,
    periods: dict[str, int],
    *,
    mask: np.ndarray | None = None,
    day_start: int = 0,
    candidates: tuple[float | None, ...] = PROFILE_HALF_LIVES_DAYS,
    days: int = PROFILE_HALF_LIFE_DAYS_SCORED,
    day_types: DayTypes | None = None,
) -> tuple[float | None, dict[str, float]]:
    """How fast the seasonal profile forgets old weeks (a half-life in steps, or None).

    Some traffic keeps its daily and weekly shape for months; some drifts (electricity
    demand over a summer follows the sunset, a service's users change their habits). An
    equal-weight average over every week then describes none of them well, and repeating
    last week (seasonal naive) beats it: on a real half-hourly electricity trace kale's
    backbone scored 1.39x seasonal naive's error with equal weights and 0.92-0.99x with
    weights halving every 3.5-7 days. Each of the last ``days`` whole days of the usable
    history (``mask``) is forecast by the profile of the steps before it, under each
    candidate; its error is measured after taking out the day's own median (the level
    model handles the level), and the candidate with the lowest mean absolute error wins,
    if it beats equal weights by 10 % (:data:`PROFILE_HALF_LIFE_MARGIN`). A scored day needs two
    periods of the profile before it. Returns (half-life in steps or None, the score per
    candidate keyed by its half-life in days, "none" for equal weights).
    """
    day = periods.get("daily")
    period = profile_period(periods)
    if day_types is not None and not periods.get("weekly"):
        # Day types live in histories under three weeks, whose days would not have the two
        # weeks before them that a scored day needs.
        return None, {}
    x = np.asarray(values, dtype=float) - np.asarray(trend, dtype=float)
    n = len(x)
    steps = np.arange(n)
    usable = np.ones(n, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    if not day or period <= 1 or not usable.any():
        return None, {}
    end = int(steps[usable].max()) + 1
    last_start = end - (end - day_start) % day - day  # the last whole day's first step
    starts = [a for a in range(last_start, -1, -day)[:days] if a >= 2 * period]
    if len(starts) < 2:
        return None, {}
    zero = np.zeros(n)
    scores: dict[float | None, float] = {}
    for hl in candidates:
        total = 0.0
        for a in starts:
            before = usable & (steps < a)
            profile, _ = estimate_profile(
                x,
                zero,
                periods,
                mask=before,
                day_start=day_start,
                half_life=None if hl is None else hl * day,
            )
            err = x[a : a + day] - profile.at(steps[a : a + day])
            total += float(np.mean(np.abs(err - np.median(err))))
        scores[hl] = total / len(starts)
    best = min(candidates, key=lambda c: (scores[c], -(c or np.inf)))
    if (
        best is not None
        and None in scores
        and scores[best] > PROFILE_HALF_LIFE_MARGIN * scores[None]
    ):
        best = None
    report = {("none" if c is None else f"{c:g}"): s for c, s in scores.items()}
    return (None if best is None else best * day), report
