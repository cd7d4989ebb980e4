"""Which seasonal periods a series has, derived from its interval and checked on the data.

Periods come from the clock (a day is ``86400 / interval`` steps, a week seven of those), not
from a fixed table, so any interval from 1 minute to 1 hour works. A period is *used* only
when the history covers at least two full cycles and the data shows it (autocorrelation at
that lag and STL seasonal strength both clear a threshold); otherwise models treat the series
as non-seasonal instead of inventing a pattern.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

DAY_S = 86400.0
WEEK_S = 7 * DAY_S

# Thresholds that make a period "detected". Strength follows Hyndman & Athanasopoulos (FPP3,
# section 4.3): F_s = max(0, 1 - Var(R) / Var(S + R)); above ~0.4 a pattern is visible by eye.
ACF_THRESHOLD = 0.2
STRENGTH_THRESHOLD = 0.2
SPIKE_IQRS = 5.0
"""Values further than this many interquartile ranges outside the quartiles are clipped before
detection (see :func:`clip_spikes`)."""


def candidate_periods(interval_s: float) -> dict[str, int]:
    """Daily and weekly periods in steps, where the interval divides them into ≥ 2 steps."""
    out: dict[str, int] = {}
    for name, span in (("daily", DAY_S), ("weekly", WEEK_S)):
        steps = span / interval_s
        if steps >= 2 and abs(steps - round(steps)) < 1e-9:
            out[name] = round(steps)
    return out


def stl_fast_kwargs(period: int) -> dict[str, int]:
    """STL settings that keep long 1-minute series cheap.

    statsmodels' defaults evaluate the LOESS at every point: STL(period=1440) on 28 days of
    minutes takes ~50 s. Jumps of ~period/5 (trend) and ~period/10 (low-pass) interpolate
    between evaluations and change the seasonal by well under 1 % of its amplitude.
    """
    return {
        "seasonal_jump": max(1, period // 50),
        "trend_jump": max(1, period // 5),
        "low_pass_jump": max(1, period // 10),
    }


def stl_decompose(values: np.ndarray, period: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(trend, seasonal, residual) by STL with the fast settings."""
    from statsmodels.tsa.seasonal import STL

    res = STL(
        np.asarray(values, dtype=float), period=period, robust=False, **stl_fast_kwargs(period)
    ).fit()
    return np.asarray(res.trend), np.asarray(res.seasonal), np.asarray(res.resid)


def seasonality_strength(values: np.ndarray, period: int) -> float | None:
    """STL seasonal strength in [0, 1], or None when there are fewer than two cycles."""
    x = np.asarray(values, dtype=float)
    if period < 2 or len(x) < 2 * period:
        return None
    _, seasonal, resid = stl_decompose(x, period)
    denom = float(np.var(seasonal + resid))
    if denom <= 0:
        return 0.0
    return float(max(0.0, 1.0 - np.var(resid) / denom))


def moving_average(x: np.ndarray, window: int) -> np.ndarray:
    """Centred moving average with shrinking windows at the ends."""
    x = np.asarray(x, dtype=float)
    window = max(1, min(window, len(x)))
    c = np.concatenate([[0.0], np.cumsum(x)])
    half = window // 2
    lo = np.clip(np.arange(len(x)) - half, 0, len(x))
    hi = np.clip(np.arange(len(x)) + window - half, 0, len(x))
    return (c[hi] - c[lo]) / (hi - lo)


def detrended(values: np.ndarray, period: int) -> np.ndarray:
    """The series less its centred moving average over ``period`` steps (shorter at the ends).

    The moving average over one full cycle holds the trend and none of that cycle's season,
    so what is left is the season plus the noise.
    """
    x = np.asarray(values, dtype=float)
    if period < 2 or len(x) == 0:
        return x - (x.mean() if len(x) else 0.0)
    return x - moving_average(x, period)


def autocorrelation(values: np.ndarray, lag: int) -> float | None:
    """Sample autocorrelation at one lag (None when the lag does not fit twice)."""
    x = np.asarray(values, dtype=float)
    if lag < 1 or len(x) < 2 * lag:
        return None
    x = x - x.mean()
    denom = float(np.dot(x, x))
    if denom == 0:
        return 0.0
    return float(np.dot(x[:-lag], x[lag:]) / denom)


def clip_spikes(values: np.ndarray, iqrs: float = SPIKE_IQRS) -> np.ndarray:
    """The series with rare extreme values clipped to ``iqrs`` interquartile ranges outside the
    quartiles.

    Autocorrelation and STL strength are variance ratios, so a handful of bursts hundreds of
    times the usual level (tweets about a news event, a retry storm) can hold most of the
    variance and hide a daily pattern that is plain in every ordinary day
    (docs/decisions/0016-seasonality-detected-on-detrended-clipped-series.md). Ordinary
    traffic, however peaked, lies within a few IQRs and is untouched.
    """
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return x
    q1, q3 = np.quantile(x, [0.25, 0.75])
    spread = q3 - q1
    if not np.isfinite(spread) or spread <= 0:
        return x
    return np.clip(x, q1 - iqrs * spread, q3 + iqrs * spread)


@dataclass
class SeasonalityReport:
    """What was found, for fit summaries and ``kale trace info``."""

    interval_s: float
    candidates: dict[str, int]
    detected: dict[str, int] = field(default_factory=dict)
    acf: dict[str, float | None] = field(default_factory=dict)
    strength: dict[str, float | None] = field(default_factory=dict)

    @property
    def periods(self) -> list[int]:
        """Detected periods in steps, shortest first."""
        return sorted(self.detected.values())

    @property
    def seasonal(self) -> bool:
        return bool(self.detected)

    def to_dict(self) -> dict[str, object]:
        return {
            "interval_s": self.interval_s,
            "candidates": self.candidates,
            "detected": self.detected,
            "acf": self.acf,
            "strength": self.strength,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SeasonalityReport:
        """The report :meth:`to_dict` wrote."""
        return cls(
            interval_s=float(d["interval_s"]),
            candidates={k: int(v) for k, v in d["candidates"].items()},
            detected={k: int(v) for k, v in d["detected"].items()},
            acf=dict(d.get("acf", {})),
            strength=dict(d.get("strength", {})),
        )


def detect_seasonality(values: np.ndarray, interval_s: float) -> SeasonalityReport:
    """Check each candidate period against the data (two cycles, detrended ACF, STL strength).

    Both statistics are computed on the series with rare extreme spikes clipped
    (:func:`clip_spikes`), so that bursts do not hide the season.
    """
    x = clip_spikes(np.asarray(values, dtype=float))
    report = SeasonalityReport(interval_s=interval_s, candidates=candidate_periods(interval_s))
    for name, period in report.candidates.items():
        acf = autocorrelation(detrended(x, period), period)
        strength = seasonality_strength(x, period) if acf is not None else None
        report.acf[name] = acf
        report.strength[name] = strength
        if (
            acf is not None
            and strength is not None
            and acf >= ACF_THRESHOLD
            and (strength >= STRENGTH_THRESHOLD)
        ):
            report.detected[name] = period
    return report
