"""Day types: weekends told apart in histories too short for a weekly season.

Under two weeks no weekly season can be detected (two cycles are needed), so the profile
would be one mean day and a weekend would be forecast like a working day. A week holds each
weekday once: too little for a weekly profile, enough to see that some days differ. This
module chooses which days of the week get their own mean day, on left-out days
(docs/decisions/0006-day-types-in-short-histories.md).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from forecasting.decomposition.phases import phase_stats

DAY_TYPE_MIN_DAYS = 7
"""Every weekday seen once; six of them must be whole days at the day start tried."""
DAY_TYPE_MAX_DAYS = 21
"""From three weeks on the weekly season takes over and a straight trend
(:func:`day_type_residual`) no longer describes the history."""
DAY_TYPE_MARGIN = 0.85
"""A grouping must predict left-out days this much better than the mean day and than the
same grouping moved to other weekdays (docs/decisions/0006-day-types-in-short-histories.md)."""
DAY_TYPE_SHAPE_MARGIN = 0.9
"""The same test on the days' shapes alone: a weekend changes *when* people come, and a
wandering level makes neighbouring days alike in level only
(docs/decisions/0006-day-types-in-short-histories.md)."""
DAY_TYPE_ERROR_CAP = 4.0
"""Errors count up to this many median errors of the mean day, so that one odd stretch does
not decide the grouping."""


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

    def shifted(self, steps: int) -> DayTypes:
        """The same day types for a history that starts ``steps`` later (its step 0 is this
        one's step ``steps``)."""
        whole, start = divmod(self.start - steps, self.day)
        groups = tuple(int(g) for g in np.roll(np.asarray(self.groups), whole))
        return self._replace(groups=groups, start=start)

    def phase(self, steps: np.ndarray) -> np.ndarray:
        """Group · day + time of day: the profile's phase of each step."""
        steps = np.asarray(steps, dtype=np.int64)
        return self.group_of(steps) * self.day + np.mod(steps - self.start, self.day)


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


def day_type_residual(
    x: np.ndarray, steps: np.ndarray, day_types: DayTypes, rounds: int = 3
) -> np.ndarray:
    """``x`` less a straight line fitted together with the day-type profile.

    The daily STL's trend (about a day and a half long) follows each weekend's dip, which
    would then return in the level, where nothing foresees it. With one to three weeks a
    straight line is a fair trend; fitting it together with the profile keeps the weekend's
    level in the profile (a plain line through a history ending on a weekend would tilt)."""
    x = np.asarray(x, dtype=float)
    t = np.asarray(steps, dtype=float)
    phase = day_types.phase(steps)
    n_ph = day_types.n_groups * day_types.day
    season = np.zeros(len(x))
    for _ in range(rounds):
        slope, icept = np.polyfit(t, x - season, 1)
        r = x - (icept + slope * t)
        season = phase_stats(r, phase, n_ph)[1][phase]
    return r


def day_type_table(
    r: np.ndarray, steps: np.ndarray, day_types: DayTypes, weights: np.ndarray | None
) -> np.ndarray:
    """A week's table (by step mod 7·day) of per-group mean days; a time of day a group has
    no data for takes the mean of all days."""
    day = day_types.day
    n_ph = day_types.n_groups * day
    cnt, mean, _ = phase_stats(r, day_types.phase(steps), n_ph, weights)
    _, mean_day, _ = phase_stats(r, np.mod(steps - day_types.start, day), day, weights)
    mean = np.where(cnt > 0, mean, np.tile(mean_day, day_types.n_groups))
    return mean[day_types.phase(np.arange(7 * day))]


def _loo_day_errors(shapes: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Absolute errors (days × bins) of predicting each day by the mean of the other days of
    its group (of all other days when it is alone in its group). Means, not medians: a
    median predicts working days well even with weekends among them, and real weekends
    stopped standing out (docs/decisions/0006-day-types-in-short-histories.md)."""
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

    Each whole day (hourly means, less the mean of the seven days around it, so that a trend
    or a wandering level does not count) is predicted by the mean of the other days of its
    group. Candidates: one day apart, two neighbouring days together, or each of them apart,
    with days starting at midnight moved by -12..+11 hours (the data's clock may not be its
    users'). A grouping wins if its error is below ``margin`` times both the mean day's and
    the median of the same grouping moved to the other weekdays, and on the days' shapes
    alone below :data:`DAY_TYPE_SHAPE_MARGIN`: the last two tests are what a real weekend
    passes and chance does not. ``values`` should have its incidents replaced already
    (:func:`~forecasting.decomposition.trend.robust_trend`): a day with an outage spoils the
    mean that predicts every other day. Returns (the day types or None, a report).
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
