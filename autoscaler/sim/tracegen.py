"""Synthetic arrival-rate traces that look like user traffic.

The shape follows what the source document (docs/design.md) observed in production:
weekdays bottom out before dawn and peak in the evening; weekends rise from early morning and
stay high; a slow trend; short bursts (campaigns, incidents); correlated and white noise.
``peak_trough`` sets the ratio of the mean daily profile's highest to lowest point (the same
statistic ``kale trace info`` reports), so a generated trace can be matched to the 5x–30x
range that document reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from autoscaler.sim.traces import daily_profile

DAY_S = 86400.0
DAY_LEVEL_SD = 0.05  # log-scale spread of one day's level
BURST_AMP = (0.15, 0.5)  # relative jump, uniform
BURST_TAU_MIN = (10.0, 45.0)  # decay time in minutes, uniform


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


@dataclass(frozen=True)
class Burst:
    """One burst: starts at ``at_days``, jumps by ``amp`` (relative), decays with ``tau_days``."""

    at_days: float
    amp: float
    tau_days: float


def burst_factor(t_days: np.ndarray, bursts: Sequence[Burst]) -> np.ndarray:
    """1 + the sum of the bursts that have started by each time (fast rise, exponential decay)."""
    total = np.zeros_like(np.asarray(t_days, dtype=float))
    for b in bursts:
        dt = t_days - b.at_days
        total += np.where(dt >= 0, b.amp * np.exp(-np.clip(dt, 0, None) / b.tau_days), 0.0)
    return 1.0 + total


@dataclass(frozen=True)
class TraceComponents:
    """Everything :func:`generate_trace` draws, kept apart.

    ``values = clip(base · level · bursts · exp(ar + white) − offset, 0)``. Keeping the parts
    lets a reference forecaster condition on exactly what has happened by some step and
    simulate the rest (``experiments/forecast_oracle.py``: what a perfect model of this
    generator would score), and lets tests check each part.
    """

    index: pd.DatetimeIndex
    t_days: np.ndarray  # time of each step in days since the start
    base: np.ndarray  # daily/weekend shape × slow trend × 17-day wave (no randomness)
    day_level: np.ndarray  # one log-normal draw per day, placed at day midpoints
    bursts: tuple[Burst, ...]
    phi: float  # AR(1) coefficient of the correlated noise
    sd_innovation: float  # its innovation standard deviation
    sd_white: float  # the white noise's standard deviation (log scale)
    ar: np.ndarray
    white: np.ndarray
    offset: float  # subtracted so the mean daily profile has the asked peak/trough
    day_level_sd: float = DAY_LEVEL_SD
    bursts_per_day: float = 0.0

    @property
    def day_midpoints(self) -> np.ndarray:
        """Where each ``day_level`` sits on the ``t_days`` axis (level interpolates between)."""
        return np.arange(len(self.day_level)) - 0.5

    def level(self, t_days: np.ndarray | None = None) -> np.ndarray:
        """Day-to-day level at ``t_days`` (default: every step), linear between midpoints."""
        t = self.t_days if t_days is None else t_days
        return np.interp(t, self.day_midpoints, self.day_level)

    def raw(self) -> np.ndarray:
        """The trace before the peak/trough offset and clipping."""
        return (
            self.base
            * self.level()
            * burst_factor(self.t_days, self.bursts)
            * np.exp(self.ar + self.white)
        )

    def series(self) -> pd.Series:
        return pd.Series(
            np.clip(self.raw() - self.offset, 0.0, None), index=self.index, name="value"
        )


def generate_trace(**kwargs: Any) -> pd.Series:
    """A realistic synthetic trace (samples/s on a regular UTC grid).

    Takes the keyword arguments of :func:`trace_components` (one signature, one set of
    defaults) and returns its values.
    """
    return trace_components(**kwargs).series()


def trace_components(
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
) -> TraceComponents:
    """The generated trace's parts (:func:`generate_trace` returns their ``series()``).

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
    day_level = np.exp(rng.normal(0.0, DAY_LEVEL_SD, n_days))
    # Bursts: fast rise, exponential decay.
    bursts = tuple(
        Burst(
            at_days=rng.uniform(0, days),
            amp=rng.uniform(*BURST_AMP),
            tau_days=rng.uniform(*BURST_TAU_MIN) / 1440.0,
        )
        for _ in range(rng.poisson(bursts_per_day * days))
    )
    # Correlated (AR(1), ~30 min memory) and white multiplicative noise.
    phi = float(np.exp(-interval_s / 1800.0))
    sd_innovation = noise * float(np.sqrt(max(1 - phi**2, 1e-12)))
    eps = rng.normal(0.0, sd_innovation, n)
    ar = np.empty(n)
    acc = 0.0
    for i in range(n):
        acc = phi * acc + eps[i]
        ar[i] = acc
    sd_white = noise * min(1.0, float(np.sqrt(60.0 / interval_s)))
    white = rng.normal(0.0, sd_white, n)
    parts = TraceComponents(
        index=index,
        t_days=t_days,
        base=base,
        day_level=day_level,
        bursts=bursts,
        phi=phi,
        sd_innovation=sd_innovation,
        sd_white=sd_white,
        ar=ar,
        white=white,
        offset=0.0,
        bursts_per_day=bursts_per_day,
    )
    offset = _peak_trough_offset(pd.Series(parts.raw(), index=index), peak_trough)
    return replace(parts, offset=offset)


def _peak_trough_offset(series: pd.Series, ratio: float) -> float:
    """The constant to subtract so the mean daily profile's max/min equals ``ratio``.

    Day-to-day variation, weekend shapes, trend and noise all lift the averaged trough, so
    the raw ratio comes out below the shape's. Subtracting a constant c < trough restores it
    exactly: (max - c) / (min - c) = ratio. 0 when there is nothing to restore.
    """
    if ratio <= 1 or series.index[-1] - series.index[0] < pd.Timedelta(days=1):
        return 0.0
    prof = daily_profile(series)
    lo, hi = float(prof.min()), float(prof.max())
    if lo <= 0 or hi / lo >= ratio:
        return 0.0
    return (ratio * lo - hi) / (ratio - 1.0)
