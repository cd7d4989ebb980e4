"""Rolling-origin backtest: one free function that needs only ``fit`` and ``predict``.

Each model is built fresh by its factory and fitted **once**, on all data before the first
origin. The ``folds`` origins are spread evenly over the last ``test_days`` (the last one
leaves exactly ``horizon`` steps), and at each origin the model predicts ``horizon`` steps
from all data up to the origin — no refit, the way a deployed model runs between refits.
Metrics are pooled over all folds; MASE is scaled by the daily seasonal naive's in-sample
MAE on the fit data (see :mod:`forecasting.metrics`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from forecasting import metrics
from forecasting.base import Forecast, Forecaster, validate_series

METRIC_KEYS = (
    "mase",
    "smape",
    "mae",
    "rmse",
    "p90_coverage",
    "pinball",
    "fit_seconds",
    "predict_ms",
)


@dataclass
class Fold:
    origin: pd.Timestamp
    forecast: Forecast
    actual: np.ndarray


@dataclass
class ModelResult:
    name: str
    metrics: dict[str, float]
    folds: list[Fold] = field(default_factory=list)
    fit_summary: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass
class BacktestResult:
    horizon: int
    test_days: float
    fit_end: pd.Timestamp
    origins: list[pd.Timestamp]
    models: dict[str, ModelResult]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"models": {}}
        for name, res in self.models.items():
            entry: dict[str, Any] = dict(res.metrics)
            entry["model_used"] = res.fit_summary.get("model", name)
            if res.error:
                entry["error"] = res.error
            out["models"][name] = entry
        out["horizon"] = self.horizon
        out["folds"] = len(self.origins)
        out["test_days"] = self.test_days
        out["fit_end"] = _iso(self.fit_end)
        out["origins"] = [_iso(o) for o in self.origins]
        return out


def _iso(ts: pd.Timestamp) -> str:
    return ts.isoformat().replace("+00:00", "Z")


def origin_positions(
    n: int, interval_s: float, *, horizon: int, folds: int, test_days: float
) -> np.ndarray:
    """Positions i (history = series[:i]) of the origins, evenly over the last test_days."""
    if horizon < 1 or folds < 1:
        raise ValueError("horizon and folds must be positive")
    test_steps = round(test_days * 86400.0 / interval_s)
    first, last = n - test_steps, n - horizon
    if test_steps < horizon:
        raise ValueError(
            f"test window ({test_steps} steps) is shorter than the horizon ({horizon} steps)"
        )
    if first < 2:
        raise ValueError(
            f"the series ({n} steps) is not longer than the test window ({test_steps} steps)"
        )
    if folds == 1:
        return np.array([first])
    return np.unique(np.linspace(first, last, folds).round().astype(int))


def backtest(
    series: pd.Series,
    factories: dict[str, Callable[[], Forecaster]],
    *,
    horizon: int,
    folds: int = 7,
    test_days: float = 7.0,
    progress: Callable[[Iterable[Any], str], Iterable[Any]] | None = None,
) -> BacktestResult:
    """Fit each model once before the first origin, predict at every origin, score."""
    series, interval = validate_series(series, what="trace")
    values = series.to_numpy()
    positions = origin_positions(
        len(series), interval, horizon=horizon, folds=folds, test_days=test_days
    )
    first = int(positions[0])
    scale_hist = values[:first]
    models: dict[str, ModelResult] = {}
    for name, factory in factories.items():
        try:
            models[name] = _run_one(
                name, factory, series, positions, horizon, scale_hist, interval, progress
            )
        except Exception as exc:
            models[name] = ModelResult(
                name=name,
                metrics=dict.fromkeys(METRIC_KEYS, np.nan),
                error=f"{type(exc).__name__}: {exc}",
            )
    return BacktestResult(
        horizon=horizon,
        test_days=test_days,
        fit_end=series.index[first],
        origins=[series.index[int(i)] for i in positions],
        models=models,
    )


def _run_one(
    name: str,
    factory: Callable[[], Forecaster],
    series: pd.Series,
    positions: np.ndarray,
    horizon: int,
    scale_hist: np.ndarray,
    interval: float,
    progress: Callable[[Iterable[Any], str], Iterable[Any]] | None,
) -> ModelResult:
    model = factory()
    started = time.perf_counter()
    model.fit(series.iloc[: int(positions[0])])
    fit_s = time.perf_counter() - started
    folds: list[Fold] = []
    predict_s: list[float] = []
    iterator: Iterable[Any] = positions
    if progress is not None:
        iterator = progress(positions, name)
    for pos in iterator:
        pos = int(pos)
        t = time.perf_counter()
        fc = model.predict(horizon, history=series.iloc[:pos])
        predict_s.append(time.perf_counter() - t)
        truth = series.iloc[pos : pos + horizon]
        if not fc.timestamps.equals(truth.index):
            raise AssertionError(f"{name}: forecast timestamps do not continue the history")
        folds.append(Fold(origin=series.index[pos], forecast=fc, actual=truth.to_numpy()))
    actual = np.concatenate([f.actual for f in folds])
    point = np.concatenate([f.forecast.mean for f in folds])
    qs = {q: np.concatenate([f.forecast.quantile(q) for f in folds]) for q in (0.1, 0.5, 0.9)}
    result = {
        "mase": metrics.mase(actual, point, scale_hist, interval),
        "smape": metrics.smape(actual, point),
        "mae": metrics.mae(actual, point),
        "rmse": metrics.rmse(actual, point),
        "p90_coverage": metrics.coverage(actual, qs[0.9]),
        "p10_coverage": metrics.coverage(actual, qs[0.1]),
        "pinball": metrics.mean_pinball(actual, qs),
        "fit_seconds": fit_s,
        "predict_ms": 1000.0 * float(np.mean(predict_s)),
    }
    return ModelResult(name=name, metrics=result, folds=folds, fit_summary=model.fit_summary)
