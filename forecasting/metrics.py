"""Forecast accuracy metrics, as the backtest reports them.

MASE divides the forecast's MAE by the in-sample MAE of the daily seasonal naive on the
history before the forecast origin (lag one step when the history is under two days, or the
interval does not divide a day), so a value below 1 beats "same time yesterday" as measured
on the training data. sMAPE is in percent (0–200) with 0/0 counted as 0.
"""

from __future__ import annotations

import numpy as np

from forecasting.seasonality import candidate_periods


def _pair(actual: np.ndarray, forecast: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(actual, dtype=float).reshape(-1)
    f = np.asarray(forecast, dtype=float).reshape(-1)
    if a.shape != f.shape:
        raise ValueError(f"actual has {a.size} values, forecast {f.size}")
    return a, f


def mae(actual: np.ndarray, forecast: np.ndarray) -> float:
    a, f = _pair(actual, forecast)
    return float(np.mean(np.abs(a - f)))


def rmse(actual: np.ndarray, forecast: np.ndarray) -> float:
    a, f = _pair(actual, forecast)
    return float(np.sqrt(np.mean((a - f) ** 2)))


def smape(actual: np.ndarray, forecast: np.ndarray) -> float:
    a, f = _pair(actual, forecast)
    denom = np.abs(a) + np.abs(f)
    ratio = np.divide(2.0 * np.abs(a - f), denom, out=np.zeros_like(denom), where=denom > 0)
    return float(100.0 * np.mean(ratio))


def mase_scale(history: np.ndarray, interval_s: float) -> float:
    """In-sample MAE of the daily seasonal naive (lag 1 when under two days of history)."""
    h = np.asarray(history, dtype=float)
    lag = candidate_periods(interval_s).get("daily", 1)
    if len(h) < 2 * lag:
        lag = 1
    if len(h) <= lag:
        raise ValueError("history too short for a MASE scale")
    return float(np.mean(np.abs(h[lag:] - h[:-lag])))


ROUND_OFF = 1e-9
"""Errors below this share of the history's mean level (plus one) count as zero when the
MASE scale is zero: a model that works in log space misses a constant trace by ~1e-13."""


def mase(actual: np.ndarray, forecast: np.ndarray, history: np.ndarray, interval_s: float) -> float:
    """MAE over :func:`mase_scale`. A history that repeats exactly (constant, all zeros) has
    scale 0: then an error at round-off level is 0, any other is infinite."""
    scale = mase_scale(history, interval_s)
    err = mae(actual, forecast)
    if scale > 0:
        return float(err / scale)
    tol = ROUND_OFF * (1.0 + float(np.mean(np.abs(np.asarray(history, dtype=float)))))
    return float("inf") if err > tol else 0.0


def coverage(actual: np.ndarray, upper: np.ndarray) -> float:
    """Share of actual values at or below the upper quantile."""
    a, u = _pair(actual, upper)
    return float(np.mean(a <= u))


def pinball(actual: np.ndarray, quantile_forecast: np.ndarray, level: float) -> float:
    """Mean pinball (quantile) loss at one level."""
    a, q = _pair(actual, quantile_forecast)
    diff = a - q
    return float(np.mean(np.maximum(level * diff, (level - 1.0) * diff)))


def mean_pinball(
    actual: np.ndarray,
    quantiles: dict[float, np.ndarray],
    levels: tuple[float, ...] = (0.1, 0.5, 0.9),
) -> float:
    """Pinball loss averaged over ``levels`` (p10, p50, p90 by default)."""
    return float(np.mean([pinball(actual, quantiles[q], q) for q in levels]))
