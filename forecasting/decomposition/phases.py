"""Statistics of a series grouped by phase (the step's position in a day or a week).

Every profile, outlier test and day-type score in this package is "the same time on the
other days or weeks": these are the shared, vectorised building blocks (``np.bincount``
over phases, never a Python loop over steps, so that 28 days of minutes stay cheap).
"""

from __future__ import annotations

import numpy as np


def phase_stats(
    r: np.ndarray, phase: np.ndarray, period: int, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


def circular_mean(x: np.ndarray, half: int) -> np.ndarray:
    """Moving average over ±half steps on a circle (a profile wraps around)."""
    if half <= 0 or len(x) == 0:
        return x
    half = min(half, len(x) // 2)
    padded = np.concatenate([x[-half:], x, x[:half]])
    c = np.concatenate([[0.0], np.cumsum(padded)])
    width = 2 * half + 1
    return (c[width:] - c[:-width]) / width


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
