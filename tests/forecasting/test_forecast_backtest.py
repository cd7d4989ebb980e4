"""Backtest fold placement, fit-once semantics and the result's JSON shape."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pandas as pd
import pytest

from forecasting.backtest import METRIC_KEYS, backtest, origin_positions
from forecasting.base import Forecaster
from forecasting.naive import SeasonalNaive


def hourly(days: int) -> pd.Series:
    idx = pd.date_range("2026-01-05", periods=days * 24, freq="1h", tz="UTC")
    hour = np.asarray(idx.hour, dtype=float)
    return pd.Series(50 + 40 * np.sin(2 * np.pi * hour / 24), index=idx)


def test_origins_spread_evenly_over_the_test_window():
    # 10 days hourly, test 2 days = 48 steps, horizon 6: first origin 192, last 234.
    pos = origin_positions(240, 3600, horizon=6, folds=4, test_days=2)
    assert pos.tolist() == [192, 206, 220, 234]
    assert origin_positions(240, 3600, horizon=6, folds=1, test_days=2).tolist() == [192]


@pytest.mark.parametrize(
    ("n", "horizon", "test_days", "message"),
    [
        (240, 60, 2, "shorter than the horizon"),  # 48 test steps < 60
        (40, 6, 2, "not longer than the test window"),  # the test window eats the series
    ],
)
def test_impossible_fold_layouts_are_errors(n, horizon, test_days, message):
    with pytest.raises(ValueError, match=message):
        origin_positions(n, 3600, horizon=horizon, folds=3, test_days=test_days)


class CountingNaive(SeasonalNaive):
    """Records every fit and every history it is asked to predict from."""

    fits: ClassVar[list[int]] = []
    histories: ClassVar[list[pd.Timestamp]] = []

    def _fit(self, series):
        CountingNaive.fits.append(len(series))
        super()._fit(series)

    def _predict(self, context, horizon):
        CountingNaive.histories.append(context.index[-1])
        return super()._predict(context, horizon)


def test_each_model_is_fitted_once_and_predicts_from_data_up_to_each_origin():
    series = hourly(10)
    CountingNaive.fits, CountingNaive.histories = [], []
    result = backtest(series, {"naive": CountingNaive}, horizon=6, folds=4, test_days=2)
    assert CountingNaive.fits == [192]
    assert [series.index.get_loc(t) + 1 for t in CountingNaive.histories] == [192, 206, 220, 234]
    res = result.models["naive"]
    assert [f.origin for f in res.folds] == [series.index[i] for i in (192, 206, 220, 234)]
    assert all(len(f.actual) == 6 for f in res.folds)
    assert result.fit_end == series.index[192]


def test_result_json_has_every_metric_per_model():
    result = backtest(hourly(10), {"naive": SeasonalNaive}, horizon=6, folds=3, test_days=2)
    out = result.to_dict()
    assert set(METRIC_KEYS) <= set(out["models"]["naive"])
    # A perfectly periodic series: the daily seasonal naive is exact.
    assert out["models"]["naive"]["mase"] == pytest.approx(0.0, abs=1e-9)
    assert out["models"]["naive"]["p90_coverage"] == 1.0
    assert out["folds"] == 3 and len(out["origins"]) == 3


class Broken(Forecaster):
    name = "broken"

    def _fit(self, series):
        raise RuntimeError("boom")

    def _predict(self, context, horizon):  # pragma: no cover - never fitted
        raise AssertionError


def test_a_failing_model_is_reported_not_raised():
    result = backtest(
        hourly(10), {"bad": Broken, "naive": SeasonalNaive}, horizon=6, folds=2, test_days=2
    )
    assert "boom" in result.models["bad"].error
    assert np.isnan(result.models["bad"].metrics["mase"])
    assert result.models["naive"].error is None
