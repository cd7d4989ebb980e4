"""Synthetic arrival-rate traces that look like user traffic.

The shape follows what the seed observed in production: weekdays bottom out before dawn and
peak in the evening; weekends rise from early morning and stay high; a slow trend; short
bursts (campaigns, incidents); correlated and white noise. ``peak_trough`` sets the ratio of
the mean daily profile's highest to lowest point (the same statistic ``kale trace info``
reports), so a generated trace can be matched to the 5x–30x range the seed reports.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from autoscaler.traces import daily_profile

DAY_S = 86400.0


def _bump(hour: np.ndarray, centre: float, width: float) -> np.ndarray:
    """A Gaussian bump on the 24-hour circle."""
    d = np.abs(hour - centre)
    d = np.minimum(d, 24.0 - d)
    return np.exp(-0.5 * (d / width) ** 2)


def _weekday(hour: np.ndarray) -> np.ndarray:
    """Morning, afternoon and a dominant evening peak; lowest before dawn."""
    return 0.45 * _bump(hour, 10.0, 1.8) + 0.55 * _bump(hour, 14.0, 2.2) + _bump(hour, 20.5, 2.0)


def _weekend(hour: np.ndarray) -> np.ndarray:
    """Rises from early morning and stays high until late; a milder evening peak."""
    rise = 1.0 / (1.0 + np.exp(-(hour - 8.0) / 1.0))
    fall = 1.0 - 1.0 / (1.0 + np.exp(-(hour - 23.5) / 0.8))
    return 0.75 * rise * fall + 0.35 * _bump(hour, 21.0, 2.0) + 0.25 * _bump(hour, 0.0, 1.5)


_MINUTES = np.linspace(0.0, 24.0, 24 * 60, endpoint=False)
_LO = float(min(_weekday(_MINUTES).min(), _weekend(_MINUTES).min()))
_HI = float(max(_weekday(_MINUTES).max(), _weekend(_MINUTES).max()))


def daily_shape(hour: np.ndarray, weekend: np.ndarray) -> np.ndarray:
    """Relative load in [0, 1] by hour of day; weekend days have their own shape."""
    shape = np.where(weekend, _weekend(hour), _weekday(hour))
    return np.clip((shape - _LO) / (_HI - _LO), 0.0, 1.0)


def generate_trace(
    *,
    days: float = 28,
    interval_s: float = 60,
    peak_trough: float = 20.0,
    seed: int = 1,
    peak: float = 1000.0,
    start: str = "2026-01-05T00:00:00Z",
    noise: float = 0.04,
    bursts_per_day: float = 0.5,
    trend: float = 0.10,
) -> pd.Series:
    """A realistic synthetic trace (samples/s on a regular UTC grid).

    ``peak`` is the nominal evening peak before trend, bursts and noise; ``trend`` is the
    relative growth over the whole trace; ``noise`` the relative noise level.
    """
    if days <= 0 or interval_s <= 0:
        raise ValueError("days and interval must be positive")
    if peak_trough < 1:
        raise ValueError("peak_trough must be ≥ 1")
    rng = np.random.default_rng(seed)
    n = round(days * DAY_S / interval_s)
    if n < 2:
        raise ValueError(
            "the trace would have fewer than 2 steps: raise --days or lower --interval"
        )
    index = pd.date_range(pd.Timestamp(start), periods=n, freq=pd.Timedelta(seconds=interval_s))
    if index.tz is None:
        index = index.tz_localize("UTC")
    # Evaluate the shape at the middle of each step so coarse intervals average sensibly.
    mid = index + pd.Timedelta(seconds=interval_s / 2)
    hour = np.asarray(mid.hour + mid.minute / 60.0 + mid.second / 3600.0, dtype=float)
    weekend = np.asarray(mid.day_of_week >= 5)
    trough = peak / peak_trough
    shape = daily_shape(hour, weekend)
    base = trough + (peak - trough) * shape
    # Slow trend with a gentle multi-week wiggle.
    t_days = np.arange(n) * interval_s / DAY_S
    base *= 1.0 + trend * t_days / max(days, 1e-9) + 0.03 * np.sin(2 * np.pi * t_days / 17.0)
    # Day-to-day level variation (some days are busier), smooth across the day boundary.
    n_days = int(np.ceil(days)) + 2
    day_level = np.exp(rng.normal(0.0, 0.05, n_days))
    base *= np.interp(t_days, np.arange(n_days) - 0.5, day_level)
    # Bursts: fast rise, exponential decay.
    n_bursts = rng.poisson(bursts_per_day * days)
    burst = np.zeros(n)
    for _ in range(n_bursts):
        at = rng.uniform(0, days)
        amp = rng.uniform(0.15, 0.5)
        tau_days = rng.uniform(10, 45) / 1440.0
        dt = t_days - at
        burst += np.where(dt >= 0, amp * np.exp(-np.clip(dt, 0, None) / tau_days), 0.0)
    base *= 1.0 + burst
    # Correlated (AR(1), ~30 min memory) and white multiplicative noise.
    phi = float(np.exp(-interval_s / 1800.0))
    eps = rng.normal(0.0, noise * np.sqrt(max(1 - phi**2, 1e-12)), n)
    ar = np.empty(n)
    acc = 0.0
    for i in range(n):
        acc = phi * acc + eps[i]
        ar[i] = acc
    white = rng.normal(0.0, noise * min(1.0, np.sqrt(60.0 / interval_s)), n)
    series = pd.Series(base * np.exp(ar + white), index=index, name="value")
    return _match_peak_trough(series, peak_trough)


def _match_peak_trough(series: pd.Series, ratio: float) -> pd.Series:
    """Shift the trace down so its mean daily profile's max/min equals ``ratio``.

    Day-to-day variation, weekend shapes, trend and noise all lift the averaged trough, so
    the raw ratio comes out below the shape's. Subtracting a constant c < trough restores it
    exactly: (max - c) / (min - c) = ratio.
    """
    if ratio <= 1 or series.index[-1] - series.index[0] < pd.Timedelta(days=1):
        return series.clip(lower=0.0)
    prof = daily_profile(series)
    lo, hi = float(prof.min()), float(prof.max())
    if lo <= 0 or hi / lo >= ratio:
        return series.clip(lower=0.0)
    c = (ratio * lo - hi) / (ratio - 1.0)
    return (series - c).clip(lower=0.0)
