"""How fast the seasonal profile forgets old weeks, chosen on the history's last days.

Some traffic keeps its daily and weekly shape for months; some drifts (electricity demand
over a summer follows the sunset, a service's users change their habits). An equal-weight
average over every week then describes none of them, and last week (seasonal naive) beats
it. So the profile may weight recent weeks more, when the history shows that this predicts
better (docs/decisions/0005-profile-recency-half-life.md).
"""

from __future__ import annotations

import numpy as np

from forecasting.decomposition.daytypes import DayTypes
from forecasting.decomposition.profile import estimate_profile, profile_period

PROFILE_HALF_LIVES_DAYS: tuple[float | None, ...] = (None, 14.0, 7.0, 3.5, 2.5, 1.75)
"""Candidates: every week alike (None) or weights halving every 14 … 1.75 days; the two
shortest came from a drifting real trace (docs/decisions/0005-profile-recency-half-life.md)."""
PROFILE_HALF_LIFE_MARGIN = 0.9
"""A recency-weighted profile must score this much better than equal weights: where the
shape does not drift, weighting only throws data away
(docs/decisions/0005-profile-recency-half-life.md)."""
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

    Each of the last ``days`` whole days of the usable history (``mask``) is forecast by the
    profile of the steps before it, under each candidate; its error is measured after taking
    out the day's own median (the level model handles the level), and the candidate with the
    lowest mean absolute error wins if it beats equal weights by
    :data:`PROFILE_HALF_LIFE_MARGIN`. A scored day needs two profile periods before it.
    Returns (half-life in steps or None, the score per candidate keyed by its half-life in
    days, "none" for equal weights).
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
