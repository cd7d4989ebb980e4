"""Seasonal naive: the value at the same time last week, last day, or the last value.

The rule is chosen at fit time from the seasonality report: the weekly season when it is
detected (which needs two weeks of history), else the daily one when detected — or when the
history is between one and two days long, too short to test but long enough to copy a day,
since traffic is daily unless shown otherwise — else the last value. Quantiles come from the
same rule's in-sample errors (:mod:`forecasting.intervals`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from forecasting.base import Forecaster, Payload
from forecasting.intervals import HorizonErrors, actual_paths, offset_for, replay_origins
from forecasting.seasonality import candidate_periods, detect_seasonality
from forecasting.series import QUANTILES


def seasonal_naive_path(values: np.ndarray, period: int, horizon: int) -> np.ndarray:
    """y[n + h - k*period] with the smallest k ≥ 1 that lands in the past (period 1: last value)."""
    n = len(values)
    h = np.arange(1, horizon + 1)
    back = period * np.ceil(h / period).astype(int)
    idx = n - 1 + h - back
    return values[np.clip(idx, 0, n - 1)]


def choose_period(values: np.ndarray, interval_s: float) -> tuple[int, str, dict[str, Any]]:
    """(period in steps, rule name, seasonality report dict)."""
    report = detect_seasonality(values, interval_s)
    cands = candidate_periods(interval_s)
    if "weekly" in report.detected:
        return report.detected["weekly"], "weekly", report.to_dict()
    if "daily" in report.detected:
        return report.detected["daily"], "daily", report.to_dict()
    day = cands.get("daily")
    if day and day <= len(values) < 2 * day:
        return day, "daily (too short to test)", report.to_dict()
    return 1, "last value", report.to_dict()


class SeasonalNaive(Forecaster):
    """Same time last week/day; quantiles from the rule's own in-sample relative errors."""

    name = "seasonal_naive"

    def __init__(self, *, period: int | None = None, **kw: Any) -> None:
        super().__init__(period=period, **kw)
        self.period = 1
        self.errors: HorizonErrors | None = None

    @property
    def min_history(self) -> pd.Timedelta:
        return pd.Timedelta(0)

    def _fit(self, series: pd.Series) -> None:
        values = series.to_numpy()
        report: dict[str, Any]
        if self.params.get("period"):
            self.period, rule, report = int(self.params["period"]), "given", {}
        else:
            self.period, rule, report = choose_period(values, float(self.interval_s or 60))
        self.fit_summary.update(rule=rule, period_steps=self.period, seasonality=report)
        n = len(values)
        if self.period >= n:
            self.period, self.fit_summary["rule"] = 1, "last value (period longer than history)"
        offset = offset_for(values)
        if self.period > 1:
            # Within one period every step's error is y[t] - y[t - period]: pool them all.
            prev = values[: -self.period]
            rel = (values[self.period :] - prev) / (prev + offset)
            row = np.quantile(rel, QUANTILES)
            self.errors = HorizonErrors(
                levels=QUANTILES, table=np.tile(row, (self.period, 1)), offset=offset
            )
            return
        horizon = max(1, min(192, n // 2))
        origins = replay_origins(n, horizon, start=1)
        preds = np.stack([seasonal_naive_path(values[:o], 1, horizon) for o in origins])
        self.errors = HorizonErrors.fit(preds, actual_paths(values, origins, horizon), offset)

    def _predict(
        self, context: pd.Series, horizon: int
    ) -> tuple[np.ndarray, dict[float, np.ndarray]]:
        values = context.to_numpy()
        period = self.period if len(values) >= self.period else 1
        point = seasonal_naive_path(values, period, horizon)
        assert self.errors is not None
        quantiles = self.errors.apply(point)
        if period != self.period:  # the rule's errors do not apply to the last-value fallback
            spread = np.sqrt(np.arange(1, horizon + 1)) * (np.std(np.diff(values)) + 1e-9)
            quantiles = {0.1: point - 1.28 * spread, 0.5: point, 0.9: point + 1.28 * spread}
        return point, quantiles

    def _dump(self) -> Payload:
        p = Payload(meta={"period": self.period})
        assert self.errors is not None
        self.errors.dump("err_", p)
        return p

    def _restore(self, payload: Payload) -> None:
        self.period = int(payload.meta["period"])
        self.errors = HorizonErrors.restore("err_", payload)
