"""A job's live forecaster, refitted on schedule and its forecasts reused within a tick.

Why this module exists: the planner asks for "the rates of the next H steps from the
decision step on" (a :class:`ForecastWindow`); a forecaster answers "H steps after the end of
this history". This cache bridges the two — refit every ``spec.forecast.refit``, predict at
most once per ``reforecast_s``, line the forecast up with the decision step when the history
ends early — and turns any failure into "no forecast" (the planner then sizes for the recent
peak) with the reason kept for the job's status.

Fits can run in the background (:class:`FitPool`): a transformer fit takes seconds to a
minute, and a loop that waited for it would stop deciding for every job meanwhile. The old
model keeps serving until the new one is ready; before the first fit is done an *interim*
model (seasonal naive: it needs no training) serves, so a new job is never planned blind.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np

from autoscaler.controller.metering import ArrivalHistory
from autoscaler.controller.workers import DaemonPool
from autoscaler.policy.forecasts import ForecastWindow

log = logging.getLogger(__name__)


class FitPool(DaemonPool):
    """A few daemon threads that run forecaster fits, shared by every job of a controller.

    Daemon threads (see :class:`DaemonPool`): a fit cannot be interrupted, and a controller
    that is stopping must not wait a minute for a model nobody will use.
    """

    def __init__(self, threads: int = 1) -> None:
        super().__init__(threads, name="kale-fit")


class ForecastCache:
    """Fits ``make()`` on the arrival history and serves planner windows.

    ``pool``: fit in the background there (None: fit inside :meth:`window`, as the
    simulator and the tests do). ``interim``: the model that serves until the first
    background fit is done (None: no forecast until then).
    """

    def __init__(
        self,
        make: Callable[[], Any],
        *,
        name: str,
        interval_s: float,
        horizon_steps: int,
        refit_s: float,
        quantile: float = 0.9,
        reforecast_s: float | None = None,
        min_points: int = 2,
        pool: FitPool | None = None,
        interim: Callable[[], Any] | None = None,
    ) -> None:
        self.make = make
        self.name = name
        self.interval_s = interval_s
        self.horizon_steps = horizon_steps
        self.refit_s = refit_s
        self.quantile = quantile
        self.reforecast_s = reforecast_s
        self.min_points = min_points
        self.model: Any = None
        self.fitted_at: float | None = None
        self.fitted_len = 0
        """Intervals of history the model was last fitted on."""
        self.failures = 0
        """Fits and predictions that raised (the loop counts them as errors)."""
        self.failed_at: float | None = None
        self.reason: str | None = "not fitted yet"
        self._cached: tuple[int, float, np.ndarray, np.ndarray, np.ndarray] | None = None
        self.last_window: ForecastWindow | None = None
        self.pool = pool
        self.interim = interim
        self._interim_name = "interim"
        self.interim_active = False
        """The model serving now is the interim one (the first real fit is not done yet)."""
        self._pending: Future[Any] | None = None
        self._pending_at = 0.0
        self._pending_len = 0

    def _fit(self, now: float, history: ArrivalHistory) -> bool:
        try:
            model = self.make()
            model.fit(history.series())
        except Exception as exc:  # any failure means "plan without a forecast"
            self.model, self.failed_at = None, now
            self._fit_failed(exc)
            return False
        self._install(model, now, len(history))
        return True

    def _fit_failed(self, exc: BaseException) -> None:
        self.failures += 1
        self.reason = f"fit failed: {type(exc).__name__}: {exc}"
        log.warning("forecaster %s: %s", self.name, self.reason)

    def _install(self, model: Any, fitted_at: float, length: int) -> None:
        """Serve ``model`` from now on (fitted on ``length`` intervals up to ``fitted_at``)."""
        self.model, self.fitted_at, self.failed_at = model, fitted_at, None
        self.interim_active = False
        self.fitted_len = length
        summary = getattr(model, "fit_summary", {}) or {}
        summary = summary if isinstance(summary, dict) else {}
        self.reason = summary.get("reason")
        # The model actually in use (a fallback wrapper says which one it chose).
        active = summary.get("model") or getattr(model, "name", None)
        if isinstance(active, str) and active:
            self.name = active
        self._cached = None

    def _collect(self, now: float) -> None:
        """Install a finished background fit (a failed one keeps the model serving now)."""
        fut = self._pending
        if fut is None or not fut.done():
            return
        self._pending = None
        exc = None if fut.cancelled() else fut.exception()
        if fut.cancelled() or exc is not None:
            self.failed_at = now
            self._fit_failed(exc or RuntimeError("cancelled"))
            return
        self._install(fut.result(), self._pending_at, self._pending_len)

    def _fit_in_background(self, now: float, history: ArrivalHistory) -> bool:
        """Start a fit if none runs; serve the interim model until the first one is done.
        Returns whether a model can serve this tick."""
        assert self.pool is not None
        if self._pending is None and not (
            self.failed_at is not None and now - self.failed_at < self.interval_s
        ):
            series = history.series().copy()
            make = self.make

            def fit() -> Any:
                model = make()
                model.fit(series)
                return model

            self._pending, self._pending_at = self.pool.submit(fit), now
            self._pending_len = len(history)
        if self.model is not None:
            return True
        if self.interim is None:
            self.reason = "the first fit is running"
            return False
        try:
            model = self.interim()
            model.fit(history.series())
        except Exception as exc:
            self._fit_failed(exc)
            return False
        self.model, self.interim_active, self._cached = model, True, None
        self._interim_name = str(getattr(model, "name", "interim"))
        self.reason = f"{self._interim_name} serves while the first fit runs"
        return True

    def fitting(self) -> bool:
        """A background fit is running or queued."""
        return self._pending is not None and not self._pending.done()

    def close(self) -> None:
        """Forget a queued fit (a running one finishes; nobody reads it)."""
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None

    def window(self, now: float, history: ArrivalHistory, step: int) -> ForecastWindow | None:
        """Forecast for steps ``step … step + H − 1``; None when there is none."""
        self.last_window = None
        if len(history) < self.min_points:
            self.reason = f"history has {len(history)} intervals, need {self.min_points}"
            return None
        self._collect(now)
        # Refit on schedule, and early while the history is young: each time it has doubled
        # since the last fit (a model fitted on an hour must not stand for a day).
        due = (
            self.model is None
            or self.fitted_at is None
            or now - self.fitted_at >= self.refit_s
            or len(history) >= 2 * self.fitted_len
        )
        if due and self.pool is not None:
            if not self._fit_in_background(now, history):
                return None
        elif due:
            if self.failed_at is not None and now - self.failed_at < self.interval_s:
                return None  # failed this interval already: try again next one
            if not self._fit(now, history):
                return None
        origin = history.end_step  # first step after the history
        cached = self._cached
        reuse = False
        if cached is not None:
            offset = step - cached[0]
            fits = offset >= 0 and offset + self.horizon_steps <= len(cached[2])
            recent = self.reforecast_s is not None and now - cached[1] < self.reforecast_s
            reuse = fits and (cached[0] == origin or recent)
        if not reuse:
            # With reuse allowed, forecast far enough that later ticks can shift into it.
            extra = (
                0 if self.reforecast_s is None else math.ceil(self.reforecast_s / self.interval_s)
            )
            need = self.horizon_steps + max(0, step - origin) + extra
            try:
                fc = self.model.predict(need, history=history.series())
                try:
                    high = np.asarray(fc.quantile(self.quantile), dtype=float)
                except KeyError:
                    high = np.asarray(fc.p90, dtype=float)
                cached = (
                    origin,
                    now,
                    np.asarray(fc.mean, dtype=float),
                    np.asarray(fc.p10, dtype=float),
                    high,
                )
            except Exception as exc:
                self.failures += 1
                self.reason = f"predict failed: {type(exc).__name__}: {exc}"
                log.warning("forecaster %s: %s", self.name, self.reason)
                return None
            self._cached = cached
        assert cached is not None
        origin, _, mean, low, high = cached
        skip = step - origin
        end = skip + self.horizon_steps
        if skip < 0 or end > len(mean):
            return None
        source = f"{self._interim_name} (interim)" if self.interim_active else self.name
        self.last_window = ForecastWindow(
            mean[skip:end], low[skip:end], high[skip:end], source=source
        )
        return self.last_window

    def summary(self) -> dict[str, Any]:
        """What the status shows about the forecast."""
        out: dict[str, Any] = {
            "model": f"{self._interim_name} (interim)" if self.interim_active else self.name
        }
        if self.fitted_at is not None:
            out["fittedAt"] = dt.datetime.fromtimestamp(self.fitted_at, dt.UTC).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            )
        if self.reason:
            out["note"] = self.reason
        if self.fitting():
            out["fitting"] = True
        w = self.last_window
        if w is not None and len(w):
            out.update(
                next=float(w.mean[0]),
                peak=float(np.max(w.high)),
                horizonSeconds=len(w) * self.interval_s,
            )
        return out
