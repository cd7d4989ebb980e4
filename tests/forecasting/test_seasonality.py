"""Seasonality detection: periods from the clock, kept only when the data repeats them."""

from __future__ import annotations

import numpy as np
import pytest

from forecasting.seasonality import autocorrelation, detect_seasonality, detrended


def _random_walk(days: int = 28, seed: int = 43) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = days * 24
    return np.cumsum(rng.normal(0, 0.03, n)) + rng.normal(0, 0.05, n)


def test_detrended_removes_a_trend_but_keeps_the_season():
    t = np.arange(24 * 14)
    season = np.sin(2 * np.pi * t / 24)
    r = detrended(0.01 * t + season, 24)
    inner = slice(12, -12)  # full windows: the moving average of one cycle is the trend
    # (an even window sits half a step early: 0.005 here)
    np.testing.assert_allclose(r[inner], season[inner], atol=0.006)
    assert len(r) == len(t) and np.isfinite(r).all()


def test_a_random_walk_has_no_daily_season():
    z = _random_walk()
    # Undetrended, the walk is correlated with itself at a day's lag (the reason for
    # detrending): the check would otherwise call it seasonal.
    assert autocorrelation(z, 24) > 0.5
    report = detect_seasonality(z, 3600.0)
    assert report.detected == {}
    assert report.acf["daily"] < 0.2


@pytest.mark.parametrize("trend", [0.0, 0.002])
def test_a_daily_pattern_is_detected_with_or_without_a_trend(trend):
    rng = np.random.default_rng(1)
    t = np.arange(24 * 21)
    z = np.sin(2 * np.pi * t / 24) + trend * t + rng.normal(0, 0.2, len(t))
    report = detect_seasonality(z, 3600.0)
    assert "daily" in report.detected
    assert report.acf["daily"] > 0.5
