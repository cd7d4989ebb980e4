"""Forecaster fits in the background: the loop keeps deciding while a slow model trains."""

from __future__ import annotations

import threading
from typing import ClassVar

import numpy as np
import pytest

from autoscaler.controller.forecast import FitPool, ForecastCache
from autoscaler.controller.metering import ArrivalHistory

T0 = 1_700_000_000.0


class _Forecast:
    def __init__(self, value: float, horizon: int) -> None:
        self.mean = self.p10 = self.p90 = np.full(horizon, value)

    def quantile(self, q: float) -> np.ndarray:
        return self.p90


class Slow:
    """A model whose fit waits for ``gate``; it forecasts 7 (the interim forecasts 1)."""

    gate = threading.Event()
    fits: ClassVar[list[int]] = []
    fail = False

    name = "slow"

    def fit(self, series):
        Slow.gate.wait(10)
        Slow.fits.append(len(series))
        if Slow.fail:
            raise RuntimeError("boom")
        return self

    def predict(self, horizon, history=None):
        return _Forecast(7.0, horizon)


class Interim:
    name = "seasonal_naive"

    def fit(self, series):
        return self

    def predict(self, horizon, history=None):
        return _Forecast(1.0, horizon)


@pytest.fixture(autouse=True)
def _reset():
    Slow.gate = threading.Event()
    Slow.fits = []
    Slow.fail = False
    yield
    Slow.gate.set()


def _hist(n: int) -> ArrivalHistory:
    return ArrivalHistory(T0, 60.0, np.ones(n))


def _wait(cache: ForecastCache) -> None:
    fut = cache._pending
    assert fut is not None
    fut.result(timeout=10) if not Slow.fail else fut.exception(timeout=10)


def test_the_interim_model_serves_until_the_first_fit_is_done():
    pool = FitPool(1)
    cache = ForecastCache(
        Slow,
        name="slow",
        interval_s=60.0,
        horizon_steps=3,
        refit_s=86400.0,
        pool=pool,
        interim=Interim,
    )
    step = round(T0 / 60) + 50
    w = cache.window(T0 + 3000, _hist(50), step)
    assert w is not None and list(w.mean) == [1.0, 1.0, 1.0]
    assert w.source == "seasonal_naive (interim)"
    assert cache.interim_active and cache.fitting()
    assert "serves while the first fit runs" in cache.summary()["note"]
    assert cache.summary()["fitting"] is True
    # Still running: the interim keeps serving and no second fit is queued.
    w = cache.window(T0 + 3060, _hist(51), step + 1)
    assert w is not None and w.mean[0] == 1.0
    Slow.gate.set()
    _wait(cache)
    w = cache.window(T0 + 3120, _hist(52), step + 2)
    assert w is not None and w.mean[0] == 7.0 and w.source == "slow"
    assert not cache.interim_active and cache.fitted_len == 50 and Slow.fits == [50]
    assert cache.name == "slow"
    pool.close()


def test_a_refit_runs_in_the_background_while_the_old_model_serves():
    pool = FitPool(1)
    cache = ForecastCache(
        Slow,
        name="slow",
        interval_s=60.0,
        horizon_steps=3,
        refit_s=600.0,
        pool=pool,
        interim=Interim,
    )
    Slow.gate.set()
    step = round(T0 / 60) + 50
    cache.window(T0, _hist(50), step)
    _wait(cache)
    assert cache.window(T0 + 60, _hist(51), step + 1).mean[0] == 7.0
    first = cache.model
    Slow.gate.clear()
    # Refit due (600 s later): it starts in the background and the old model still answers.
    w = cache.window(T0 + 700, _hist(61), step + 11)
    assert w is not None and w.mean[0] == 7.0 and cache.model is first and cache.fitting()
    Slow.gate.set()
    _wait(cache)
    cache.window(T0 + 760, _hist(62), step + 12)
    # The refit was due 600 s (10 steps) after the first fit: it sees the history up to then
    # (60 intervals), whenever the loop noticed it — as the simulator's feed does.
    assert cache.model is not first and cache.fitted_at == T0 + 700 and cache.fitted_len == 60
    pool.close()


def test_a_failed_background_fit_keeps_the_interim_and_is_retried_an_interval_later():
    pool = FitPool(1)
    cache = ForecastCache(
        Slow,
        name="slow",
        interval_s=60.0,
        horizon_steps=3,
        refit_s=86400.0,
        pool=pool,
        interim=Interim,
    )
    Slow.fail = True
    Slow.gate.set()
    step = round(T0 / 60) + 50
    cache.window(T0, _hist(50), step)
    _wait(cache)
    w = cache.window(T0 + 10, _hist(50), step)
    assert w is not None and w.mean[0] == 1.0  # interim still serves
    assert cache.failures == 1 and "fit failed: RuntimeError: boom" in cache.reason
    assert not cache.fitting()  # not retried within the interval
    Slow.fail = False
    cache.window(T0 + 80, _hist(51), step + 1)
    assert cache.fitting() or Slow.fits == [50, 51]
    _wait(cache)
    cache.window(T0 + 90, _hist(51), step + 1)
    assert cache.model is not None and not cache.interim_active
    pool.close()


def test_without_an_interim_there_is_no_forecast_until_the_first_fit():
    pool = FitPool(1)
    cache = ForecastCache(
        Slow, name="slow", interval_s=60.0, horizon_steps=3, refit_s=86400.0, pool=pool
    )
    assert cache.window(T0, _hist(50), round(T0 / 60) + 50) is None
    assert cache.reason == "the first fit is running"
    Slow.gate.set()
    pool.close()


def test_a_closed_pool_cancels_queued_fits():
    pool = FitPool(1)
    running = threading.Event()

    def slow() -> int:
        running.set()
        Slow.gate.wait(10)
        return 1

    first = pool.submit(slow)
    assert running.wait(10)
    queued = pool.submit(lambda: 2)
    pool.close()
    assert queued.cancelled()
    Slow.gate.set()
    assert first.result(timeout=10) == 1
    late = pool.submit(lambda: 3)
    with pytest.raises(RuntimeError, match="closed"):
        late.result(timeout=1)


def test_a_background_refit_starts_from_the_serving_model_not_the_interim():
    from forecasting.base import Forecaster

    class Chained(Forecaster):
        """Forecasts its history's mean; remembers which fit each refit started from."""

        name = "chained"

        def _fit(self, series):
            self.level, self.parent = float(series.mean()), None

        def _refit_state(self):
            return self

        def _refit(self, series, state):
            self._fit(series)
            self.parent = state
            return {"mode": "incremental", "reason": "test"}

        def _predict(self, context, horizon):
            v = np.full(horizon, self.level)
            return v, {0.1: 0.5 * v, 0.5: v, 0.9: 1.5 * v}

    pool = FitPool(1)
    cache = ForecastCache(
        Chained,
        name="chained",
        interval_s=60.0,
        horizon_steps=3,
        refit_s=600.0,
        pool=pool,
        interim=Interim,
    )
    step = round(T0 / 60) + 50
    cache.window(T0, _hist(50), step)
    cache._pending.result(timeout=10)
    cache.window(T0 + 60, _hist(51), step + 1)
    first = cache.model
    assert isinstance(first, Chained) and first.parent is None
    assert "refit" not in first.fit_summary  # the interim model is no fit to start from
    cache.window(T0 + 700, _hist(61), step + 11)
    cache._pending.result(timeout=10)
    cache.window(T0 + 760, _hist(62), step + 12)
    second = cache.model
    assert second is not first and second.parent is first
    assert second.fit_summary["refit"]["mode"] == "incremental"
    pool.close()
