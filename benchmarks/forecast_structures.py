"""Traces with structure the generator's defaults do not make, for ``forecast.py --structures``.

The named and seeded traces of ``forecast.py`` share one generator: weekday/weekend shapes, a
slow trend, bursts, noise. Real traces also come without a season, on a clock that moves by
an hour (daylight saving time in a UTC trace), with a permanent level shift, as small counts
or at other intervals. Each builder here is deterministic (its own seed) and returns samples/s
on a regular UTC grid; none was used to tune kale, they test what it generalises to.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from autoscaler.sim.tracegen import generate_trace

START = "2026-03-02"


def _grid(days: float, interval_s: float) -> pd.DatetimeIndex:
    return pd.date_range(
        START,
        periods=int(days * 86400 / interval_s),
        freq=pd.Timedelta(seconds=interval_s),
        tz="UTC",
    )


def _ar(n: int, phi: float, sd: float, rng: np.random.Generator) -> np.ndarray:
    e = rng.normal(0, sd, n)
    out = np.zeros(n)
    for i in range(1, n):
        out[i] = phi * out[i - 1] + e[i]
    return out


def walk(interval_s: float, step_sd: float, noise_sd: float, seed: int) -> pd.Series:
    """No season: a random walk in log space plus white noise (28 days)."""
    rng = np.random.default_rng(seed)
    idx = _grid(28, interval_s)
    z = np.cumsum(rng.normal(0, step_sd, len(idx))) + rng.normal(0, noise_sd, len(idx))
    return pd.Series(200 * np.exp(z), index=idx)


def flat_ar(seed: int = 50) -> pd.Series:
    """No season: slow AR(1) noise around a flat level, 1 minute, 28 days."""
    rng = np.random.default_rng(seed)
    idx = _grid(28, 60)
    z = _ar(len(idx), 0.995, 0.01, rng) + rng.normal(0, 0.05, len(idx))
    return pd.Series(400 * np.exp(z), index=idx)


def clock_moved(
    interval_s: float,
    day: float,
    seed: int,
    share: float = 1.0,
    second: tuple[float, float] | None = None,
    days: int = 28,
) -> pd.Series:
    """Generated traffic whose clock moves an hour later at midnight of ``day`` (DST) for
    ``share`` of it; ``second``: (day, share) of more traffic that moves later (users in
    America and in Europe change clocks weeks apart)."""
    s = generate_trace(days=days, interval_s=interval_s, seed=seed)
    hour = round(3600 / interval_s)
    old = s.to_numpy()
    late = np.roll(old, hour)
    t = np.arange(len(old)) * interval_s / 86400
    moves = [(day, share)] + ([second] if second else [])
    v = (1 - sum(a for _, a in moves)) * old
    for at, a in moves:
        v = v + a * np.where(t >= at, late, old)
    return pd.Series(v, index=s.index)


def level_shift(seed: int = 42) -> pd.Series:
    """Generated 1-minute traffic that doubles for good at day 17 (four days before the test
    week): a new tenant, not an incident."""
    s = generate_trace(days=28, interval_s=60, seed=seed)
    t = (s.index - s.index[0]).total_seconds() / 86400
    return s * np.where(t >= 17, 2.0, 1.0)


def poisson_counts(seed: int = 41) -> pd.Series:
    """Small counts: Poisson arrivals of at most ~11 a minute (daily wave, weekends half)."""
    rng = np.random.default_rng(seed)
    idx = _grid(28, 60)
    t = np.arange(len(idx)) * 60 / 86400
    weekend = idx.dayofweek.to_numpy() >= 5
    lam = 6 * (1 + 0.85 * np.sin(2 * np.pi * (t - 0.3))) * np.where(weekend, 0.5, 1.0)
    return pd.Series(rng.poisson(lam) / 60.0, index=idx)


def daily_only(seed: int = 48) -> pd.Series:
    """A daily wave times slow AR(1) noise, the same every day of the week (1 min)."""
    rng = np.random.default_rng(seed)
    idx = _grid(28, 60)
    t = np.arange(len(idx)) * 60 / 86400
    return pd.Series(
        300 * np.exp(1.2 * np.sin(2 * np.pi * (t - 0.3)) + _ar(len(idx), 0.98, 0.02, rng)),
        index=idx,
    )


def wandering_weekly(seed: int = 49) -> pd.Series:
    """Hourly, 56 days: daily wave, quieter weekends, a level that wanders, 12 % noise."""
    rng = np.random.default_rng(seed)
    idx = _grid(56, 3600)
    t = np.arange(len(idx)) / 24
    weekend = idx.dayofweek.to_numpy() >= 5
    z = (
        0.6 * np.sin(2 * np.pi * (t - 0.4))
        - 0.3 * weekend
        + np.cumsum(rng.normal(0, 0.01, len(idx)))
        + rng.normal(0, 0.12, len(idx))
    )
    return pd.Series(5000 * np.exp(z), index=idx)


STRUCTURES: dict[str, tuple[str, Callable[[], pd.Series]]] = {
    "walk_1h": ("no season: random walk, 1 h, 28 d", lambda: walk(3600, 0.03, 0.05, 43)),
    "walk_1m": ("no season: random walk, 1 min, 28 d", lambda: walk(60, 0.004, 0.03, 51)),
    "flat_ar_1m": ("no season: AR(1) around a flat level, 1 min, 28 d", flat_ar),
    "dst_1m": ("generated, 1 min, clock 1 h later from day 14", lambda: clock_moved(60, 14, 52)),
    "dst_1h": ("generated, 1 h, clock 1 h later from day 14", lambda: clock_moved(3600, 14, 45)),
    "dst_late_1h": (
        "generated, 1 h, clock 1 h later from day 18",
        lambda: clock_moved(3600, 18, 53),
    ),
    "half_dst_1h": (
        "generated, 1 h, clock of half the traffic 1 h later from day 14",
        lambda: clock_moved(3600, 14, 65, share=0.5),
    ),
    "half_dst_1m": (
        "generated, 1 min, clock of half the traffic 1 h later from day 14",
        lambda: clock_moved(60, 14, 66, share=0.5),
    ),
    "two_dst_1h": (
        "generated, 1 h, clock of 40 % 1 h later from day 8, of 40 % more from day 15",
        lambda: clock_moved(3600, 8, 67, share=0.4, second=(15, 0.4)),
    ),
    "level_shift_1m": ("generated, 1 min, traffic x2 from day 17", level_shift),
    "poisson_1m": ("Poisson counts, <= 11/min, weekends half, 1 min", poisson_counts),
    "growth_30m": (
        "generated, 30 min, 42 d, traffic x3 over the trace",
        lambda: generate_trace(days=42, interval_s=1800, seed=44, trend=2.0),
    ),
    "gen_5m": ("generated, 5 min, 28 d", lambda: generate_trace(days=28, interval_s=300, seed=46)),
    "gen_15m": (
        "generated, 15 min, 28 d",
        lambda: generate_trace(days=28, interval_s=900, seed=47),
    ),
    "daily_only_1m": ("daily wave x AR(1) noise, no weekly pattern, 1 min", daily_only),
    "wandering_1h": ("daily + weekend pattern, wandering level, 1 h, 56 d", wandering_weekly),
}
