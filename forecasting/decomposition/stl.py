"""STL/MSTL: the one place that splits a series into trend, seasonals and residual.

Models decompose the fit history once, with the fast ``*_jump`` settings from
:mod:`forecasting.seasonality` (the defaults take minutes on 28 days of minutes), and keep
what they need as a lookup table (:mod:`.profile`), so predicting never reruns STL.
"""

from __future__ import annotations

from dataclasses import dataclass

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

    MSTL needs more than two cycles of a period. With exactly two (two weeks, the least that
    seasonality detection accepts) one step, the same time a cycle earlier, is appended for
    the decomposition and dropped from the result, so the weekly period is not silently
    lost (docs/decisions/0001-decompose-exactly-two-cycles.md).
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
