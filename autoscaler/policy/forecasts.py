"""Where a forecast-driven policy gets its forecasts: one small interface, several sources.

The planner only needs, at step t, the predicted rates of steps t … t+n−1 with a central and
an upper/lower band. Sources differ in where that comes from: a live forecaster (controller),
forecasts precomputed for every origin from the past only (simulator, so a 28-day run does
not call a transformer 40,000 times), or the true future (the oracle).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class ForecastWindow:
    """Predicted arrival rates (samples/s) for the steps starting at the decision step."""

    mean: np.ndarray
    low: np.ndarray
    """Lower quantile (p10)."""
    high: np.ndarray
    """Upper quantile the planner sizes for (p90 by default)."""
    source: str = "forecast"

    def __post_init__(self) -> None:
        if not (len(self.mean) == len(self.low) == len(self.high)):
            raise ValueError("mean, low and high must have the same length")

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
        return ForecastWindow(future, future, future, source="oracle")


class CallbackSource:
    """Adapts any ``f(step, past, horizon) -> (mean, low, high)`` (e.g. a live forecaster)."""

    def __init__(self, fn: Callable[[int, np.ndarray, int], tuple[np.ndarray, ...] | None],
                 name: str = "forecast") -> None:
        self.fn = fn
        self.name = name

    def window(self, step: int, past: np.ndarray, horizon: int) -> ForecastWindow | None:
        out = self.fn(step, past, horizon)
        if out is None:
            return None
        mean, low, high = (np.asarray(a, dtype=float)[:horizon] for a in out)
        return ForecastWindow(mean, low, high, source=self.name)


class PrecomputedSource:
    """Forecasts computed ahead for every origin (each from the data before its origin).

    ``mean/low/high`` have shape (n_steps, horizon): row t is the forecast made at step t.
    """

    def __init__(self, mean: np.ndarray, low: np.ndarray, high: np.ndarray,
                 first_step: int = 0, name: str = "forecast") -> None:
        self.mean, self.low, self.high = mean, low, high
        self.first_step = first_step
        self.name = name

    def window(self, step: int, past: np.ndarray, horizon: int) -> ForecastWindow | None:
        row = step - self.first_step
        if row < 0 or row >= len(self.mean):
            return None
        return ForecastWindow(self.mean[row, :horizon], self.low[row, :horizon],
                              self.high[row, :horizon], source=self.name)
