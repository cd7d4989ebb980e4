"""One contract, every model: what backtests, the simulator and the controller rely on."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from forecasting.base import Forecaster, NotFittedError
from forecasting.registry import MODEL_NAMES, make_forecaster

H = 8
TINY_KALE = {
    "epochs": 2,
    "steps_per_epoch": 4,
    "batch_size": 32,
    "patience": 2,
    "threads": 1,
    "d_model": 16,
}
MODELS = [*MODEL_NAMES, "fallback"]
TRAINED = [
    pytest.param(name, marks=pytest.mark.training) if name in ("kale", "fallback") else name
    for name in MODELS
]
"""MODELS for the tests that fit them: kale (and the fallback wrapper around it) trains its
network, so those cases are in the training lane."""


def daily_series(
    days: float,
    interval_s: float,
    *,
    seed: int = 0,
    seasonal: bool = True,
    start: str = "2026-01-05",
) -> pd.Series:
    """Positive traffic with a daily shape, a weekend dip and multiplicative noise."""
    rng = np.random.default_rng(seed)
    n = round(days * 86400 / interval_s)
    idx = pd.date_range(
        pd.Timestamp(start, tz="UTC"), periods=n, freq=pd.Timedelta(seconds=interval_s)
    )
    hour = np.asarray(idx.hour + idx.minute / 60.0)
    base = 100.0 + 80.0 * np.sin(2 * np.pi * (hour - 9) / 24) if seasonal else np.full(n, 100.0)
    weekend = np.asarray(idx.day_of_week >= 5)
    base = base * np.where(weekend & seasonal, 0.7, 1.0)
    return pd.Series(base * np.exp(rng.normal(0, 0.05, n)), index=idx, name="value")


def build(name: str) -> Forecaster:
    kwargs = {"horizon": H, **TINY_KALE}
    if name == "fallback":
        return make_forecaster("fallback", primary="kale", **kwargs)
    return make_forecaster(name, **kwargs)


@pytest.fixture(scope="module")
def history() -> pd.Series:
    return daily_series(9, 900)


class _Fitted(dict[str, Forecaster]):
    """Each model fitted on the history's first part once, when a test first asks for it."""

    def __init__(self, history: pd.Series) -> None:
        super().__init__()
        self.history = history

    def __missing__(self, name: str) -> Forecaster:
        self[name] = build(name).fit(self.history.iloc[:-96])
        return self[name]


@pytest.fixture(scope="module")
def fitted(history: pd.Series) -> dict[str, Forecaster]:
    return _Fitted(history)


def assert_valid(forecast, after: pd.Series, horizon: int) -> None:
    step = after.index[1] - after.index[0]
    expected = pd.date_range(after.index[-1] + step, periods=horizon, freq=step)
    assert forecast.timestamps.equals(expected)
    for arr in (forecast.mean, forecast.p10, forecast.p50, forecast.p90):
        assert arr.shape == (horizon,)
        assert np.isfinite(arr).all()
        assert (arr >= 0).all()
    assert (forecast.p10 <= forecast.p50).all() and (forecast.p50 <= forecast.p90).all()
    assert (forecast.p90 > forecast.p10).any()


@pytest.mark.parametrize("name", MODELS)
def test_predict_before_fit_raises_not_fitted(name):
    with pytest.raises(NotFittedError, match="fit"):
        build(name).predict(H)


@pytest.mark.parametrize("name", TRAINED)
def test_forecast_continues_the_grid_with_ordered_quantiles(name, fitted, history):
    model = fitted[name]
    fit_part = history.iloc[:-96]
    assert_valid(model.predict(H), fit_part, H)
    assert_valid(model.predict(H, history=history), history, H)
    assert model.is_fitted and model.interval_s == 900
    assert model.fit_summary["fit_seconds"] >= 0


@pytest.mark.parametrize("name", TRAINED)
def test_longer_horizon_than_trained_still_works(name, fitted, history):
    assert_valid(fitted[name].predict(3 * H + 1, history=history), history, 3 * H + 1)


@pytest.mark.parametrize("name", TRAINED)
def test_save_load_round_trip_predicts_the_same(name, fitted, history, tmp_path):
    model = fitted[name]
    path = tmp_path / f"{name}.kale"
    model.save(path)
    loaded = Forecaster.load(path)
    assert type(loaded) is type(model)
    assert loaded.active_model == model.active_model
    for hist in (None, history):
        a, b = model.predict(H, history=hist), loaded.predict(H, history=hist)
        assert a.timestamps.equals(b.timestamps)
        np.testing.assert_allclose(a.mean, b.mean, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(a.p90, b.p90, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", TRAINED)
def test_update_extends_the_context_without_refit(name, history):
    model = build(name).fit(history.iloc[:-96])
    before = model.fit_summary["fit_seconds"]
    model.update(history.iloc[-96:-50])
    model.update(history.iloc[-50:-49])  # a single point works too
    assert model.context.index[-1] == history.index[-50]
    assert_valid(model.predict(H), history.iloc[:-49], H)
    assert model.fit_summary["fit_seconds"] == before


@pytest.mark.parametrize("name", MODELS)
def test_short_history_falls_back_and_says_why(name):
    short = daily_series(1.0, 900)
    primary = "kale" if name == "fallback" else name
    model = make_forecaster("fallback", primary=primary, horizon=H, **TINY_KALE).fit(short)
    summary = model.fit_summary
    assert summary["fallback"] is True
    assert "days" in summary["reason"] and primary in summary["reason"]
    assert summary["model"] == "seasonal_naive"
    assert_valid(model.predict(H), short, H)


@pytest.mark.parametrize("name", TRAINED)
def test_series_without_seasonality_is_handled(name):
    flat = daily_series(6, 900, seasonal=False, seed=3)
    model = build(name).fit(flat)
    assert_valid(model.predict(H), flat, H)
    inner = model.fit_summary.get("inner", model.fit_summary)
    if "seasonality" in inner:
        assert inner["seasonality"]["detected"] == {}


@pytest.mark.parametrize("name", TRAINED)
def test_hourly_interval_works(name):
    hourly = daily_series(24, 3600, seed=4)
    model = build(name).fit(hourly)
    assert_valid(model.predict(H), hourly, H)
    assert model.fit_summary.get("fallback") in (None, False)
