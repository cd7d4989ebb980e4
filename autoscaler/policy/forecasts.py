"""Where a forecast-driven policy gets its forecasts: one small interface, several sources.

The planner only needs, at step t, the predicted rates of steps t … t+n−1 with a central and
an upper/lower band. Sources differ in where that comes from: a live forecaster (controller),
forecasts precomputed for every origin from the past only (simulator, so a 28-day run does
not call a transformer 40,000 times), or the true future (the oracle).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

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
    """Adapts any ``f(step, past, horizon) -> (mean, low, high)`` (e.g. a live forecaster).

    ``f`` may also return a :class:`ForecastWindow`; its ``source`` then names the model that
    made it (a live forecaster may serve an interim model while its own is fitted)."""

    def __init__(
        self,
        fn: Callable[[int, np.ndarray, int], tuple[np.ndarray, ...] | ForecastWindow | None],
        name: str = "forecast",
    ) -> None:
        self.fn = fn
        self.name = name

    def window(self, step: int, past: np.ndarray, horizon: int) -> ForecastWindow | None:
        out = self.fn(step, past, horizon)
        if out is None:
            return None
        source = self.name
        if isinstance(out, ForecastWindow):
            source = out.source or self.name
            out = (out.mean, out.low, out.high)
        mean, low, high = (np.asarray(a, dtype=float)[:horizon] for a in out)
        return ForecastWindow(mean, low, high, source=source)


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


class ForecasterSource:
    """Drives a :class:`forecasting.base.Forecaster` from a run's observations.

    The planner calls :meth:`window` every step with the arrivals seen so far. This source
    fits the forecaster on the first call (once enough history exists), refits it on a
    schedule (online learning, default daily, from the data seen so far), and predicts every
    ``predict_every`` steps a little further than the planner's horizon, slicing that forecast
    in between — a transformer forward per step would dominate a month-long simulation.
    Forecasts are shared through ``cache`` so policies on the same job (kale, madu) reuse them.
    """

    def __init__(
        self,
        factory: Callable[[], Any],
        *,
        start: Any,
        interval_s: float,
        predict_every: int = 10,
        refit_every_s: float | None = 86400.0,
        context_days: float = 21.0,
        name: str = "forecast",
        fit_cache: Callable[[Any, Any], Any] | None = None,
    ) -> None:
        import pandas as pd

        self.factory = factory
        self.start = pd.Timestamp(start)
        if self.start.tzinfo is None:
            self.start = self.start.tz_localize("UTC")
        self.interval_s = interval_s
        self.predict_every = max(1, int(predict_every))
        self.refit_every_s = refit_every_s
        self.context_steps = max(2, int(context_days * 86400 / interval_s))
        self.name = name
        self.fit_cache = fit_cache
        self.model: Any = None
        self.fitted_at: int | None = None
        self.failures: list[str] = []
        self._origin: int | None = None
        self._fc: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def _series(self, past: np.ndarray, end: int) -> Any:
        import pandas as pd

        lo = max(0, end - self.context_steps)
        index = pd.date_range(
            self.start + pd.Timedelta(seconds=lo * self.interval_s),
            periods=end - lo,
            freq=pd.Timedelta(seconds=self.interval_s),
        )
        return pd.Series(np.asarray(past[lo:end], dtype=float), index=index)

    def _fit(self, past: np.ndarray, step: int) -> None:
        series = self._series(past, step)
        model = self.factory()
        if self.fit_cache is not None:
            model = self.fit_cache(model, series)
        else:
            model.fit(series)
        self.model, self.fitted_at = model, step

    def window(self, step: int, past: np.ndarray, horizon: int) -> ForecastWindow | None:
        due = (
            self.fitted_at is not None
            and self.refit_every_s is not None
            and (step - self.fitted_at) * self.interval_s >= self.refit_every_s
        )
        if self.model is None or due:
            try:
                self._fit(past, step)
            except Exception as exc:  # no forecast: the planner goes reactive
                self.failures.append(f"step {step}: {type(exc).__name__}: {exc}")
                if self.model is None:
                    return None
            self._origin = None
        # Origins on a fixed grid: every policy sharing this source asks for the same ones.
        origin = step - step % self.predict_every
        if origin != self._origin or self._fc is None:
            need = horizon + self.predict_every
            try:
                fc = self.model.predict(need, history=self._series(past, origin))
            except Exception as exc:  # a failed predict is a missing forecast
                self.failures.append(f"step {step}: {type(exc).__name__}: {exc}")
                return None
            self._origin = origin
            self._fc = (
                np.asarray(fc.mean, dtype=float),
                np.asarray(fc.p10, dtype=float),
                np.asarray(fc.p90, dtype=float),
            )
        k = step - (self._origin or 0)
        mean, low, high = (a[k : k + horizon] for a in self._fc)
        if len(mean) < horizon:
            return None
        return ForecastWindow(mean, low, high, source=self.name)
