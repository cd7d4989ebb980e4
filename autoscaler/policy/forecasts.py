"""Where a forecast-driven policy gets its forecasts: one small interface, several sources.

The planner only needs, at step t, the predicted rates of steps t … t+n−1 with a central and
an upper/lower band. Sources differ in where that comes from: a fitted forecaster (the one
forecast feed of :mod:`autoscaler.policy.feed`, which the simulator and the controller
share), forecasts precomputed for every origin (tests), or the true future (the oracle).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from common.frozen import quick_init


@quick_init
@dataclass(frozen=True)
class ForecastWindow:
    """Predicted arrival rates (samples/s) for the steps starting at the decision step."""

    mean: np.ndarray
    low: np.ndarray
    """Lower quantile (p10)."""
    high: np.ndarray
    """Upper quantile the planner keeps the SLO under (``spec.forecast.quantile``, p90)."""
    source: str = "forecast"
    median: np.ndarray | None = None
    """p50, what the planner expects to pay for (None: the mean stands in)."""
    key: str | None = None
    """Names the forecast this window was sliced from (None: unknown). Two windows with the
    same key slice one forecast, so a plan made on one still stands on the other."""
    interim: bool = False
    """Made by the stand-in model that serves until a job's first fit is done: on a young
    history it knows little more than the rates just seen."""

    def __post_init__(self) -> None:
        if not (len(self.mean) == len(self.low) == len(self.high)):
            raise ValueError("mean, low and high must have the same length")
        if self.median is not None and len(self.median) != len(self.mean):
            raise ValueError("median must have the same length as mean")

    def head(self, n: int) -> ForecastWindow:
        """The first ``n`` steps, everything else (source, key, interim) kept."""
        median = None if self.median is None else np.asarray(self.median, dtype=float)[:n]
        return replace(
            self,
            mean=np.asarray(self.mean, dtype=float)[:n],
            low=np.asarray(self.low, dtype=float)[:n],
            high=np.asarray(self.high, dtype=float)[:n],
            median=median,
        )

    def bands(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.mean, self.low, self.high

    @property
    def central(self) -> np.ndarray:
        """The median, or the mean when the source has no median."""
        return self.mean if self.median is None else self.median

    def __len__(self) -> int:
        return len(self.mean)


class ForecastSource(Protocol):
    """Gives the forecast for a decision step from data before that step only."""

    def window(self, step: int, past: np.ndarray, horizon: int) -> ForecastWindow | None:
        """Forecast for steps ``step … step+horizon−1``; None when none is available."""
        ...


class TrueFuture:
    """The oracle's source: the actual rates, as if the forecast were perfect."""

    def __init__(self, rates: np.ndarray) -> None:
        self.rates = np.asarray(rates, dtype=float)

    def window(self, step: int, past: np.ndarray, horizon: int) -> ForecastWindow | None:
        future = self.rates[step : step + horizon]
        if len(future) < horizon:  # past the end of the trace: hold the last value
            last = future[-1] if len(future) else (past[-1] if len(past) else 0.0)
            future = np.concatenate([future, np.full(horizon - len(future), last)])
        return ForecastWindow(future, future, future, source="oracle", median=future)


class PrecomputedSource:
    """Forecasts computed ahead for every origin (each from the data before its origin).

    ``mean/low/high`` have shape (n_steps, horizon): row t is the forecast made at step t.
    """

    def __init__(
        self,
        mean: np.ndarray,
        low: np.ndarray,
        high: np.ndarray,
        first_step: int = 0,
        name: str = "forecast",
    ) -> None:
        self.mean, self.low, self.high = mean, low, high
        self.first_step = first_step
        self.name = name

    def window(self, step: int, past: np.ndarray, horizon: int) -> ForecastWindow | None:
        row = step - self.first_step
        if row < 0 or row >= len(self.mean):
            return None
        return ForecastWindow(
            self.mean[row, :horizon],
            self.low[row, :horizon],
            self.high[row, :horizon],
            source=self.name,
        )
