"""The load a plan is judged under, for the window the SLO allows rather than the minute.

The SLO bounds the age of the oldest sample, so a minute's spike needs no capacity of its
own when the backlog it leaves drains within ``maxDelay``: what a size must serve is the
cumulative arrivals over the SLO's window, and on noisy traffic that is far below the
per-minute peak. The fluid queue the plans are judged on already rides spikes on the
backlog; what must not size for the minute is the *band* the queue is fed with.

A forecast's upper quantile is a per-step quantile. Fed step after step into the queue, it
charges every minute its own bad luck at once — but the minute-to-minute noise of the
arrivals averages out over a window, and only the error of the forecast's level does not.
So the band (upper − median) is split, from the history the planner sees, into a noise part
(the arrivals' own scatter around their rolling mean over the SLO window, at the band's
quantile) and a level part (the rest); over a window of ``w`` steps the noise part shrinks
by √w, the level part stays whole. The planning load is the median plus that window band.

A forecast is also wrong about *when*: a rise predicted at step k may come a few steps
earlier, a fall later. That error is charged as a band widened in time: the median's
rolling mean is raised to its largest value within ± the timing error, so the queue meets a
rise early and a fall late. With no band at all (a perfect forecast) neither widening
applies: it charges the forecast's errors, and a forecast without any has none to charge.
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist

import numpy as np


def rolling_mean(x: np.ndarray, w: int) -> np.ndarray:
    """Centred mean over ``w`` steps (fewer at the ends: only the steps that exist)."""
    n = len(x)
    if w <= 1 or n == 0:
        return np.asarray(x, dtype=float).copy()
    lo, hi, count = _window_of(n, w)
    cum = np.empty(n + 1)
    cum[0] = 0.0
    np.cumsum(x, out=cum[1:])
    out: np.ndarray = (cum[hi] - cum[lo]) / count
    return out


@lru_cache(maxsize=64)
def _window_of(n: int, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each step's centred window starts and ends, and its length (read-only; the
    same for every decision of a job)."""
    idx = np.arange(n)
    lo = np.maximum(idx - w // 2, 0)
    hi = np.minimum(idx - w // 2 + w, n)
    count = (hi - lo).astype(float)
    for a in (lo, hi, count):
        a.setflags(write=False)
    return lo, hi, count


def noise_share(past: np.ndarray, w: int, lookback: int) -> float:
    """The arrivals' relative scatter around their own rolling mean over ``w`` steps, in the
    last ``lookback`` steps of history (root mean square of rate / mean − 1 where the mean
    is positive; 0 without enough history). It is what averages out over the SLO's window."""
    tail = np.asarray(past[-lookback:], dtype=float)
    if len(tail) < 2 * w or w <= 1:
        return 0.0
    smooth = rolling_mean(tail, w)
    ok = smooth > 0
    kept = int(np.count_nonzero(ok))
    if kept < w:
        return 0.0
    rel = tail / smooth - 1.0 if kept == len(tail) else tail[ok] / smooth[ok] - 1.0
    return math.sqrt(float(np.dot(rel, rel)) / kept)


def z_of(quantile: float) -> float:
    """The standard normal's quantile (the band's width in standard deviations)."""
    q = min(max(quantile, 0.5 + 1e-6), 1.0 - 1e-6)
    return NormalDist().inv_cdf(q)


def window_load(
    median: np.ndarray,
    upper: np.ndarray,
    *,
    noise: float,
    z: float,
    window: int,
    timing_steps: int,
) -> np.ndarray:
    """The rates a plan is judged under (see the module docstring).

    ``noise``: :func:`noise_share` of the history; ``z``: the band's width in standard
    deviations (:func:`z_of` of its quantile); ``window``: the SLO's window in steps;
    ``timing_steps``: the forecast's timing error, in steps. Never above ``upper`` by more
    than the timing widening, never below the median.
    """
    m = np.maximum(np.asarray(median, dtype=float), 0.0)
    band = np.maximum(np.asarray(upper, dtype=float) - m, 0.0)
    noisy = np.minimum((z * noise) * m, band)  # the band's noise part (at most all of it)
    level2 = band * band - noisy * noisy
    out: np.ndarray = m + np.sqrt(np.maximum(level2, 0.0) + noisy * noisy / max(window, 1))
    if timing_steps > 0 and len(m) > 1 and band.any():
        smooth = rolling_mean(m, window)
        # The largest of the steps within ± timing_steps: a rise early, a fall late.
        k = min(timing_steps, len(m) - 1)
        padded = np.concatenate((np.full(k, -np.inf), smooth, np.full(k, -np.inf)))
        env = np.lib.stride_tricks.sliding_window_view(padded, 2 * k + 1).max(axis=1)
        out += np.where(band > 0, env - smooth, 0.0)
    return out
