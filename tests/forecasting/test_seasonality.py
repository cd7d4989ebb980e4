"""Seasonality detection: periods from the clock, kept only when the data repeats them."""

from __future__ import annotations

import numpy as np
import pytest

from forecasting.seasonality import (
    autocorrelation,
    clip_spikes,
    detect_seasonality,
    detrended,
)


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


def test_rare_huge_spikes_do_not_hide_a_daily_pattern():
    # Bursts 100x the usual level on 1 % of the hours (news events in a tweet-volume trace)
    # hold most of the variance; the ordinary days still repeat and must be found.
    rng = np.random.default_rng(3)
    t = np.arange(24 * 28)
    y = 50 + 30 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 5, len(t))
    spikes = rng.choice(len(t), size=len(t) // 100, replace=False)
    y[spikes] += 5000 * rng.uniform(0.5, 1.5, len(spikes))
    assert autocorrelation(detrended(y, 24), 24) < 0.2  # what the raw series shows
    assert detect_seasonality(y, 3600.0).detected.get("daily") == 24


def test_clipping_spikes_leaves_ordinary_peaked_traffic_alone():
    # A 30x peak/trough day is not a spike: nothing may be clipped.
    t = np.arange(24 * 14)
    y = 10 + 290 * (0.5 + 0.5 * np.sin(2 * np.pi * t / 24)) ** 3
    np.testing.assert_array_equal(clip_spikes(y), y)
    assert clip_spikes(np.full(10, 3.0)).tolist() == [3.0] * 10  # no spread: unchanged
