"""Metrics against numbers worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from forecasting import metrics


def test_mae_rmse_smape_by_hand():
    actual = np.array([10.0, 0.0, 5.0])
    forecast = np.array([8.0, 0.0, 10.0])
    assert metrics.mae(actual, forecast) == pytest.approx((2 + 0 + 5) / 3)
    assert metrics.rmse(actual, forecast) == pytest.approx(np.sqrt((4 + 0 + 25) / 3))
    # 2|a-f|/(|a|+|f|): 4/18, 0/0 counts as 0, 10/15
    assert metrics.smape(actual, forecast) == pytest.approx(100 * (4 / 18 + 0 + 10 / 15) / 3)


def test_mase_uses_the_daily_seasonal_naive_of_the_history():
    # 1-hour steps: the daily lag is 24. History = two days, second day is first + 2.
    day = np.arange(24.0)
    history = np.concatenate([day, day + 2.0])
    assert metrics.mase_scale(history, 3600) == pytest.approx(2.0)
    assert metrics.mase(np.array([5.0, 5.0]), np.array([4.0, 7.0]), history, 3600) == (
        pytest.approx(1.5 / 2.0)
    )


def test_mase_uses_lag_one_when_history_is_under_two_days():
    history = np.array([1.0, 3.0, 2.0, 6.0])  # |diffs| = 2, 1, 4
    assert metrics.mase_scale(history, 3600) == pytest.approx(7 / 3)


@pytest.mark.parametrize("level", [0.0, 7.0])
def test_mase_on_a_history_that_repeats_exactly(level):
    """Scale 0: round-off (a log-space model's 1e-13) is a perfect forecast, a real miss is
    infinitely worse than the seasonal naive."""
    history = np.full(48, level)
    actual = np.full(4, level)
    assert metrics.mase(actual, actual + 2e-13, history, 3600) == 0.0
    assert metrics.mase(actual, actual + 0.01, history, 3600) == float("inf")


def test_coverage_counts_values_at_or_below_the_upper_quantile():
    actual = np.array([1.0, 2.0, 3.0, 4.0])
    assert metrics.coverage(actual, np.array([1.0, 1.0, 5.0, 5.0])) == 0.75


def test_pinball_by_hand():
    actual = np.array([10.0, 10.0])
    q = np.array([8.0, 12.0])
    # level 0.9: under-forecast 2 costs 0.9·2, over-forecast 2 costs 0.1·2
    assert metrics.pinball(actual, q, 0.9) == pytest.approx((1.8 + 0.2) / 2)
    assert metrics.pinball(actual, q, 0.1) == pytest.approx((0.2 + 1.8) / 2)
    quantiles = {0.1: q, 0.5: np.array([10.0, 10.0]), 0.9: q}
    assert metrics.mean_pinball(actual, quantiles) == pytest.approx((1.0 + 0.0 + 1.0) / 3)


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="values"):
        metrics.mae(np.ones(3), np.ones(2))
