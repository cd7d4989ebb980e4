"""Model-specific behaviour behind the contract: ETS recursion, profiles, kale, fallback."""

from __future__ import annotations

import logging
import subprocess
import sys
import warnings

import numpy as np
import pandas as pd
import pytest

from forecasting.base import Forecast, Forecaster, InvalidSeriesError
from forecasting.decomposition import (
    choose_half_life,
    decompose,
    estimate_profile,
    robust_trend,
)
from forecasting.decomposition.outliers import profile_inliers
from forecasting.decomposition.phases import phase_medians, recency_weights
from forecasting.decomposition.profile import pooled_weekly_profile, smooth_within_days
from forecasting.ets import fit_holt_winters
from forecasting.fallback import FallbackForecaster
from forecasting.naive import SeasonalNaive, seasonal_naive_path
from forecasting.registry import make_forecaster


def series(values, interval_s=3600.0, start="2026-01-05"):
    idx = pd.date_range(
        pd.Timestamp(start, tz="UTC"), periods=len(values), freq=pd.Timedelta(seconds=interval_s)
    )
    return pd.Series(np.asarray(values, dtype=float), index=idx)


def test_holt_winters_recursion_matches_statsmodels():
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    rng = np.random.default_rng(0)
    t = np.arange(24 * 12)
    y = 100 + 0.05 * t + 30 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 3, len(t))
    state = fit_holt_winters(y, 24)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = ExponentialSmoothing(
            y,
            trend="add",
            damped_trend=True,
            seasonal="add",
            seasonal_periods=24,
            initialization_method="heuristic",
        ).fit()
    end = state.copy()
    end.advance(y)
    ours, theirs = end.forecast(30), ref.forecast(30)
    # statsmodels forecasts the step one full period ahead (h = 24) with the seasonal state
    # from before the last update; every other step must agree exactly.
    same = np.arange(30) != 23
    np.testing.assert_allclose(ours[same], theirs[same], rtol=1e-6, atol=1e-6)
    assert abs(ours[23] - theirs[23]) < 0.01 * abs(theirs[23])


def test_seasonal_naive_path_copies_the_last_cycle():
    values = np.arange(10.0)
    assert seasonal_naive_path(values, 4, 6).tolist() == [6, 7, 8, 9, 6, 7]
    assert seasonal_naive_path(values, 1, 3).tolist() == [9, 9, 9]


def test_seasonal_naive_picks_weekly_daily_or_last_value():
    rng = np.random.default_rng(1)
    hours = np.arange(24 * 21)
    weekly = 100 + 50 * np.sin(2 * np.pi * hours / 24) + 40 * (hours % 168 >= 120)
    model = SeasonalNaive().fit(series(weekly + rng.normal(0, 1, len(hours))))
    assert model.fit_summary["rule"] == "weekly" and model.period == 168
    daily = SeasonalNaive().fit(series(weekly[: 24 * 5]))
    assert daily.fit_summary["rule"] == "daily"
    flat = SeasonalNaive().fit(series(100 + rng.normal(0, 1, 24 * 5)))
    assert flat.fit_summary["rule"] == "last value"


def test_stl_ets_does_not_repeat_a_burst_a_day_later():
    # One burst 100x the level in the last day: the season must not carry it forward.
    rng = np.random.default_rng(2)
    hours = np.arange(24 * 14)
    y = 100 + 50 * np.sin(2 * np.pi * hours / 24) + rng.normal(0, 2, len(hours))
    y[-10] += 10_000
    model = make_forecaster("stl_ets").fit(series(y))
    assert 24 in model.fit_summary["periods"]
    fc = model.predict(24)
    expected = 100 + 50 * np.sin(2 * np.pi * (hours[-1] + 1 + np.arange(24)) / 24)
    # The damped level still feels the burst a little; a copied burst would be ~10 000.
    assert np.abs(np.asarray(fc.mean) - expected).max() < 300


def test_weekly_profile_pools_alike_days_and_keeps_different_ones_apart():
    rng = np.random.default_rng(2)
    day = 24
    steps = np.arange(day * 7 * 3)
    hour = steps % day
    weekend = (steps // day) % 7 >= 5
    truth = np.where(weekend, np.cos(2 * np.pi * hour / day), np.sin(2 * np.pi * hour / day))
    r = truth + rng.normal(0, 0.3, len(steps))
    table, effective = pooled_weekly_profile(r, steps, day)
    weekday_rows = table.reshape(7, day)[:5]
    # weekdays borrow from each other (more than their own 3 weeks) ...
    assert effective.reshape(7, day)[:5].mean() > 6
    # ... and end up closer to the truth than their own 3-week means
    own = np.array([r[(steps // day) % 7 == k].reshape(-1, day).mean(axis=0) for k in range(5)])
    err_pooled = np.abs(weekday_rows - np.sin(2 * np.pi * np.arange(day) / day)).mean()
    err_own = np.abs(own - np.sin(2 * np.pi * np.arange(day) / day)).mean()
    assert err_pooled < err_own
    # the weekend keeps its own shape
    sunday = table.reshape(7, day)[6]
    assert np.corrcoef(sunday, np.cos(2 * np.pi * np.arange(day) / day))[0, 1] > 0.9


def _weekly_truth(weeks: int, day: int = 48) -> tuple[np.ndarray, np.ndarray, int]:
    steps = np.arange(day * 7 * weeks)
    hour = steps % day
    weekend = (steps // day) % 7 >= 5
    truth = np.where(weekend, 0.5 * np.cos(2 * np.pi * hour / day), np.sin(2 * np.pi * hour / day))
    return steps, truth, day


def _drifting(weeks: int, drift: float, seed: int, day: int = 48) -> np.ndarray:
    """A weekly shape whose evening peak moves ``drift`` steps later every week (a sunset),
    plus noise."""
    rng = np.random.default_rng(seed)
    steps, truth, day = _weekly_truth(weeks, day)
    peak = 36 + drift * steps / (7 * day)
    return truth + np.exp(-0.5 * ((steps % day - peak) / 3) ** 2) + rng.normal(0, 0.05, len(steps))


def test_recency_weights_halve_every_half_life_from_the_centre():
    steps = np.arange(10)
    assert recency_weights(steps, None) is None
    np.testing.assert_allclose(recency_weights(steps, 3.0)[[9, 6, 3]], [1.0, 0.5, 0.25])
    np.testing.assert_allclose(
        recency_weights(steps, 2.0, center=4)[[4, 2, 6, 0]], [1.0, 0.5, 0.5, 0.25]
    )


def test_profile_forgets_old_weeks_only_when_the_shape_drifts():
    day = 48
    periods = {"daily": day, "weekly": 7 * day}
    zero = np.zeros(7 * day * 8)
    drifting = _drifting(8, drift=1.5, seed=4)
    hl, scores = choose_half_life(drifting, zero, periods)
    assert hl is not None and hl <= 7 * day
    assert min(scores.values()) < 0.9 * scores["none"]
    # The profile with the chosen half-life describes the next week better than the
    # equal-weight one (the peak has moved on by then).
    nxt = _drifting(9, drift=1.5, seed=4)[-7 * day :]
    week = np.arange(8 * 7 * day, 9 * 7 * day)
    err = {}
    for name, h in (("equal", None), ("recent", hl)):
        profile, _ = estimate_profile(drifting, zero, periods, half_life=h)
        e = nxt - profile.at(week)
        err[name] = np.abs(e - e.mean()).mean()
    assert err["recent"] < 0.8 * err["equal"]
    # A shape that stays put keeps every week: weighting would only add noise.
    steady = _drifting(8, drift=0.0, seed=5)
    assert choose_half_life(steady, zero, periods)[0] is None
    # Too little history to score (two weeks before a scored day): equal weights, no scores.
    assert choose_half_life(drifting[: 7 * day * 2], zero[: 7 * day * 2], periods) == (None, {})


def test_profile_leaves_out_an_outage_and_a_holiday():
    rng = np.random.default_rng(3)
    steps, truth, day = _weekly_truth(4)
    noise = rng.normal(0, 0.05, len(steps))
    clean = truth + noise
    hit = clean.copy()
    tuesday = day * 8  # the second week's Tuesday
    hit[tuesday + 20 : tuesday + 30] -= 3.0  # an outage: log of a near-zero rate
    hit[day * 16 : day * 17] -= 0.9  # a holiday at 40 % all day (a Wednesday)
    periods = {"daily": day, "weekly": 7 * day}
    zero = np.zeros(len(steps))
    prof_clean, info_clean = estimate_profile(clean, zero, periods)
    prof_hit, info_hit = estimate_profile(hit, zero, periods)
    week = np.arange(7 * day)
    # without the outliers the profile is the one the clean history gives ...
    assert np.abs(prof_hit.at(week) - prof_clean.at(week)).max() < 0.05
    assert info_hit["outlier_steps_left_out"] >= 10 + day
    # ... and ordinary noise is not called an outlier
    assert info_clean["outlier_steps_left_out"] < 0.01 * len(steps)


def test_a_holiday_is_left_out_whole_even_where_it_barely_shows():
    rng = np.random.default_rng(8)
    steps, truth, day = _weekly_truth(4)
    day_level = np.repeat(rng.normal(0, 0.05, 28), day)  # ordinary busy and quiet days
    clean = truth + day_level + rng.normal(0, 0.03, len(steps))
    hit = clean.copy()
    hour = np.arange(day) * 24 / day
    # a holiday on day 10: -0.9 (log) by day, only -0.15 at night (the log's offset damps it)
    hit[day * 10 : day * 11] -= np.where((hour >= 7) & (hour < 22), 0.9, 0.15)
    keep = profile_inliers(hit, steps, 7 * day, day)
    assert not keep[day * 10 : day * 11].any()
    assert keep[: day * 10].all() and keep[day * 11 :].mean() > 0.995
    assert profile_inliers(clean, steps, 7 * day, day).mean() > 0.995  # no day is odd


def test_profile_inliers_keep_at_least_half_of_each_phase():
    steps, truth, day = _weekly_truth(4)
    noisy = truth + np.random.default_rng(4).normal(0, 0.05, len(steps))
    phase = steps % (7 * day)
    monday = (steps // day) % 7 == 0
    one_off = noisy.copy()
    one_off[day * 7 : day * 8] += 5.0  # one Monday of four is far off: it is left out
    keep = profile_inliers(one_off, steps, 7 * day, day)
    assert not keep[day * 7 : day * 8].any()
    assert keep[monday].sum() == 3 * day
    assert keep[~monday].mean() > 0.99
    two_off = one_off.copy()
    two_off[day * 14 : day * 15] += 5.0  # two of four: no "ordinary" Monday to tell from
    keep = profile_inliers(two_off, steps, 7 * day, day)
    counts = np.bincount(phase[keep], minlength=7 * day)
    assert keep[monday].all() and counts.min() == 4


def test_profile_inliers_see_a_broken_day_in_an_exactly_repeating_series():
    steps, truth, day = _weekly_truth(3)
    hit = truth.copy()
    hit[day * 9 : day * 10] -= 1.0  # no noise at all: the median deviation is zero
    keep = profile_inliers(hit, steps, 7 * day, day)
    assert not keep[day * 9 : day * 10].any() and keep.sum() == len(steps) - day


def test_phase_medians_match_the_definition():
    rng = np.random.default_rng(0)
    r = rng.normal(size=300)
    phase = rng.integers(0, 11, size=300)
    phase[0] = 11  # a phase seen once: its median and "the others' median" are its value
    median, others = phase_medians(r, phase, 12)
    np.testing.assert_allclose(median, [np.median(r[phase == p]) for p in phase])
    rest = [(phase == phase[i]) & (np.arange(300) != i) for i in range(300)]
    np.testing.assert_allclose(
        others, [np.median(r[o]) if o.any() else r[i] for i, o in enumerate(rest)]
    )


def test_robust_trend_is_not_bent_by_a_holiday_and_an_outage():
    rng = np.random.default_rng(5)
    steps, truth, day = _weekly_truth(4)
    clean = truth + 0.3 * steps / len(steps) + rng.normal(0, 0.05, len(steps))
    hit = clean.copy()
    hit[day * 8 + 20 : day * 8 + 26] -= 3.0  # an outage on a Tuesday
    hit[day * 16 : day * 17] -= 0.9  # a holiday on a Wednesday
    periods = {"daily": day, "weekly": 7 * day}
    reference = decompose(clean, [day, 7 * day]).trend
    plain = decompose(hit, [day, 7 * day]).trend
    robust, filled, replaced, _ = robust_trend(hit, periods)
    assert replaced.sum() == day + 6
    assert replaced[day * 16 : day * 17].all() and replaced[day * 8 + 20 : day * 8 + 26].all()
    # the replacements are trend + profile: next to the clean series, not the incident
    assert np.abs(filled - clean)[replaced].max() < 0.3
    # MSTL's own trend dips by a tenth (log) for a week or two; the robust one barely moves
    assert np.abs(plain - reference).max() > 0.1
    assert np.abs(robust - reference).max() < 0.03
    _, _, untouched, _ = robust_trend(clean, periods)
    assert untouched.sum() <= 2


def test_smoothing_never_crosses_midnight():
    table = np.concatenate([np.full(10, 5.0), np.full(10, -5.0)])  # two "days" of 10 steps
    out = smooth_within_days(table, 3, 10, 0)
    assert out[9] == 5.0 and out[10] == -5.0


def test_profile_of_a_flat_series_is_empty():
    profile, info = estimate_profile(np.ones(100), np.ones(100), {})
    assert profile.period == 0 and info["kind"] == "none"
    assert profile.at(np.arange(5)).tolist() == [0.0] * 5


@pytest.mark.parametrize(
    ("values", "index", "message"),
    [
        ([1.0, -1.0, 2.0], None, "≥ 0"),  # a negative rate
        ([1.0, np.nan, 2.0], None, "finite"),  # a gap left as NaN
        (
            [1.0, 2.0, 3.0],
            ["2026-01-01 00:00", "2026-01-01 00:01", "2026-01-01 00:03"],
            "regular grid",
        ),  # a missing step
        ([1.0], None, "at least 2"),  # one point
    ],
)
def test_invalid_histories_are_rejected(values, index, message):
    s = series(values) if index is None else pd.Series(values, index=pd.DatetimeIndex(index))
    with pytest.raises(InvalidSeriesError, match=message):
        SeasonalNaive().fit(s)


def test_forecast_build_sorts_and_clips_quantiles():
    ts = pd.date_range("2026-01-01", periods=2, freq="1h", tz="UTC")
    f = Forecast.build(
        ts,
        np.array([1.0, -2.0]),
        {0.1: np.array([3.0, -1.0]), 0.5: np.array([1.0, 0.0]), 0.9: np.array([2.0, 1.0])},
    )
    assert f.p10.tolist() == [1.0, 0.0] and f.p50.tolist() == [2.0, 0.0]
    assert f.p90.tolist() == [3.0, 1.0] and f.mean.tolist() == [1.0, 0.0]


class Exploding(SeasonalNaive):
    name = "seasonal_naive"

    def _fit(self, series):
        raise RuntimeError("out of memory")


def test_fallback_uses_the_secondary_when_the_primary_fails_and_logs_why(caplog):
    s = series(100 + 10 * np.sin(np.arange(24 * 4) * 2 * np.pi / 24))
    model = FallbackForecaster(primary=Exploding(), secondary="seasonal_naive")
    with caplog.at_level(logging.WARNING, logger="forecasting.fallback"):
        model.fit(s)
    assert model.fit_summary["fallback"] is True
    assert "failed to fit: RuntimeError: out of memory" in model.fit_summary["reason"]
    assert "out of memory" in caplog.text
    assert model.predict(5).horizon == 5


def test_baselines_do_not_import_torch():
    code = (
        "import sys\n"
        "from forecasting.registry import make_forecaster\n"
        "import forecasting.backtest, forecasting.fallback\n"
        "for name in ('seasonal_naive', 'ets', 'stl_ets', 'dlinear'):\n"
        "    make_forecaster(name)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


TINY = {
    "horizon": 6,
    "epochs": 2,
    "steps_per_epoch": 3,
    "batch_size": 16,
    "threads": 1,
    "d_model": 16,
}


def traffic(days: int, interval_s: float, seed: int) -> pd.Series:
    rng = np.random.default_rng(seed)
    n = int(days * 86400 / interval_s)
    t = np.arange(n) * interval_s / 86400
    return series(
        200 + 150 * np.sin(2 * np.pi * t) * rng.lognormal(0, 0.02, n), interval_s=interval_s
    )


@pytest.mark.training
def test_kale_is_deterministic_with_a_seed():
    s = traffic(6, 900, seed=5)
    a = make_forecaster("kale", seed=3, **TINY).fit(s).predict(6)
    b = make_forecaster("kale", seed=3, **TINY).fit(s).predict(6)
    np.testing.assert_array_equal(a.p50, b.p50)
    np.testing.assert_array_equal(a.p90, b.p90)


@pytest.mark.training
def test_kale_with_several_networks_averages_them_and_saves_them_all(tmp_path):
    s = traffic(6, 900, seed=5)
    one = make_forecaster("kale", seed=3, members=1, **TINY).fit(s)
    three = make_forecaster("kale", seed=3, members=3, **TINY).fit(s)
    summary = three.fit_summary
    assert summary["networks"] == 3 and len(summary["member_runs"]) == 3
    # The first member is the single network (same seed, same batches drawn first) ...
    assert summary["member_runs"][0]["val_pinball"] == one.fit_summary["val_pinball"]
    # ... and the others were trained from other seeds, so the mean differs from it.
    assert len({r["val_pinball"] for r in summary["member_runs"]}) > 1
    forecast = three.predict(6)
    assert not np.array_equal(forecast.p50, one.predict(6).p50)
    assert np.all(forecast.p10 <= forecast.p50) and np.all(forecast.p50 <= forecast.p90)
    three.save(tmp_path / "m")
    again = type(three).load(tmp_path / "m").predict(6)
    np.testing.assert_array_equal(again.p50, forecast.p50)
    np.testing.assert_array_equal(again.p90, forecast.p90)


@pytest.mark.training
def test_kale_trains_one_network_when_the_first_learns_nothing():
    # lr=0: no epoch can beat the starting point (no correction) on the held-out tail.
    model = make_forecaster("kale", members=3, **{**TINY, "lr": 0.0}).fit(traffic(6, 900, 5))
    assert model.fit_summary["networks"] == 1 and model.fit_summary["best_epoch"] == 0
    assert model.net_config.get("members", 1) == 1
    assert model.predict(6).p50.shape == (6,)


@pytest.mark.training
def test_kale_reports_what_it_did():
    model = make_forecaster("kale", **TINY).fit(traffic(6, 900, seed=6))
    s = model.fit_summary
    assert s["model"] == "kale" and s["device"] == "cpu"
    assert s["seasonality"]["detected"] == {"daily": 96}
    assert s["profile"]["kind"] == "daily"
    assert 0.0 <= s["median_correction_kept"] <= 1.0
    assert s["conformal_k_lo"] > 0 and s["conformal_k_hi"] > 0
    parts = s["val_mae_by_kept_share_and_part"]
    assert set(parts) == set(s["val_mae_by_kept_share"]) and len(parts[0.0]) == 3
    kept = parts[s["median_correction_kept"]]
    assert all(m <= m0 for m, m0 in zip(kept, parts[0.0], strict=True))
    assert model.supports_gpu and model.supports_probabilistic


@pytest.mark.training
def test_kale_profile_follows_a_drifting_weekly_shape():
    # Eight weeks of half-hourly traffic whose evening peak moves later every week.
    values = np.exp(2.0 + 0.5 * _drifting(8, drift=1.5, seed=8))
    model = make_forecaster("kale", **TINY).fit(series(values, interval_s=1800.0))
    s = model.fit_summary
    assert s["profile_half_life_days"] is not None and s["profile_half_life_days"] <= 7
    assert min(s["profile_half_life_scores"].values()) < s["profile_half_life_scores"]["none"]
    steady = make_forecaster("kale", **TINY).fit(traffic(6, 900, seed=6)).fit_summary
    assert steady["profile_half_life_days"] is None


@pytest.mark.training
def test_kale_does_not_repeat_an_outage_the_next_days():
    clean = traffic(9, 900, seed=7).iloc[: 8 * 96 + 40]  # ends at 10:00 on day 8
    hit = clean.copy()
    outage = slice(5 * 96 + 40, 5 * 96 + 52)  # 10:00-13:00 on day 5, at 2 %
    hit.iloc[outage] *= 0.02
    forecasts = {}
    for name, history in (("clean", clean), ("hit", hit)):
        model = make_forecaster("kale", **TINY).fit(history)
        forecasts[name] = model.predict(6).p50
    s = model.fit_summary
    assert 12 <= s["outliers_replaced"] <= 24
    # without leaving the outage out, the forecast of 10:00-11:30 came out 9-17 % low
    np.testing.assert_allclose(forecasts["hit"], forecasts["clean"], rtol=0.05)


def test_recent_band_factor_widens_after_misses_and_never_narrows():
    from forecasting.calibration import RECENT_BAND_MAX, recent_band_factor

    calm = recent_band_factor(np.full(100, 0.3))
    assert calm["band_widening"] == 1.0 and calm["recent_error_p80"] == pytest.approx(0.3)
    # 80th percentile of the scores: the fitted band covers 80 % of calibration errors
    missed = recent_band_factor(np.r_[np.full(70, 0.5), np.full(30, 2.0)])
    assert missed["band_widening"] == pytest.approx(2.0)
    assert recent_band_factor(np.full(100, 50.0))["band_widening"] == RECENT_BAND_MAX
    few = recent_band_factor(np.full(5, 9.0))  # too few to judge
    assert few["band_widening"] == 1.0 and few["recent_errors_scored"] == 5


@pytest.mark.training
def test_kale_widens_its_band_when_the_last_days_ran_off_the_forecast():
    history = traffic(8, 900, seed=11)
    model = make_forecaster("kale", **TINY).fit(history.iloc[: 6 * 96])
    steady = model.predict(6, history=history)
    assert model.last_predict["band_widening"] < 1.3
    assert model.last_predict["recent_errors_scored"] > 100
    shifted = history.copy()
    shifted.iloc[-36:] *= 1.8  # the last nine hours ran 80 % above the forecast
    wide = model.predict(6, history=shifted)
    factor = model.last_predict["band_widening"]
    assert factor > 1.5
    model.params["recent_band_days"] = 0.0  # the same forecast without the widening
    plain = model.predict(6, history=shifted)
    assert model.last_predict["band_widening"] == 1.0
    np.testing.assert_allclose(wide.p50, plain.p50)
    z = np.log(wide.p90 + model.offset) - np.log(wide.p50 + model.offset)
    z0 = np.log(plain.p90 + model.offset) - np.log(plain.p50 + model.offset)
    np.testing.assert_allclose(z, factor * z0, rtol=1e-6)
    assert np.all(steady.p10 <= steady.p50) and np.all(wide.p10 < plain.p10)


def test_kept_share_must_help_in_every_stretch_of_the_tail():
    from forecasting.calibration import choose_kept_share

    base = np.ones((9, 4))
    # Share 1 halves the error in the first two thirds but is worse in the last: best on
    # average (mean 0.67 < 1), yet not kept. Share 0.5 helps a little everywhere: kept.
    full = np.concatenate([np.full((6, 4), 0.5), np.full((3, 4), 1.01)])
    half = np.full((9, 4), 0.9)
    share, maes, parts = choose_kept_share({0.0: base, 0.5: half, 1.0: full})
    assert maes[1.0] < maes[0.5] < maes[0.0]
    assert share == 0.5 and parts[1.0] == [0.5, 0.5, 1.01]
    # When it helps everywhere, the lowest overall error wins; ties keep less.
    share, _, _ = choose_kept_share({0.0: base, 0.5: half, 1.0: np.full((9, 4), 0.5)})
    assert share == 1.0
    share, _, _ = choose_kept_share({0.0: base, 0.5: half, 1.0: half})
    assert share == 0.5
    # Nothing helps everywhere: the backbone alone.
    worse = np.concatenate([np.full((3, 4), 1.2), np.full((6, 4), 0.1)])
    assert choose_kept_share({0.0: base, 1.0: worse})[0] == 0.0
    with pytest.raises(ValueError, match="share 0"):
        choose_kept_share({1.0: base})


@pytest.mark.training
def test_kale_on_cuda_without_a_gpu_falls_back_to_cpu_with_a_warning():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    model = make_forecaster("kale", device="cuda", **TINY)
    with pytest.warns(RuntimeWarning, match="CUDA is not available"):
        model.fit(traffic(6, 900, seed=7))
    assert model.fit_summary["device"] == "cpu"


@pytest.mark.training
def test_kale_refit_schedule():
    s = traffic(8, 900, seed=8)
    model = make_forecaster("kale", refit_every=86400, **TINY).fit(s.iloc[:-100])
    model.update(s.iloc[-100:-10])
    assert not model.refit_due
    model.update(s.iloc[-10:])
    assert model.refit_due
    model.refit()
    assert not model.refit_due and model.fit_summary["history_steps"] == len(s)


def test_loading_something_else_is_a_clear_error(tmp_path):
    from forecasting.base import ForecastError

    bad = tmp_path / "x.kale"
    bad.write_text("not a zip")
    with pytest.raises(ForecastError, match="not a saved forecaster"):
        Forecaster.load(bad)


def test_decompose_keeps_only_periods_with_at_least_two_cycles():
    """MSTL drops a period with p >= n / 2 on its own, which would leave its column
    missing: fewer than two cycles leave the period out up front. Exactly two cycles (two
    weeks: the least seasonality detection accepts) keep it, and the trend stays smooth
    instead of following the weekly wave."""
    from forecasting.decomposition import decompose

    hours = np.arange(24 * 14)
    weekly = np.where((hours // 24) % 7 >= 5, -2.0, 0.8)  # weekends low
    x = 10 + 3 * np.sin(2 * np.pi * hours / 24) + weekly
    dec = decompose(x[:-1], [24, 168])
    assert set(dec.seasonals) == {24}
    for cut in (x, np.concatenate([x, x[:1]])):
        dec = decompose(cut, [24, 168])
        assert set(dec.seasonals) == {24, 168}
        assert all(len(c) == len(cut) for c in (dec.trend, dec.resid, *dec.seasonals.values()))
        np.testing.assert_allclose(dec.trend + dec.seasonal + dec.resid, cut, atol=1e-9)
        # The weekend dip (2.8) is in the weekly seasonal, not in the trend.
        assert np.ptp(dec.trend) < 0.5
        assert np.ptp(dec.seasonals[168]) > 2.0


@pytest.mark.training
def test_kale_without_enough_windows_for_the_network_forecasts_with_the_backbone(tmp_path):
    """A week of hourly data is too little for the network at 60 steps ahead (its training
    and held-out windows), not for the decomposition and the level model: kale forecasts
    with those, says so, keeps its band ordered and saves and loads without a network."""
    rng = np.random.default_rng(3)
    hours = np.arange(24 * 7)
    x = 100 * np.exp(0.5 * np.sin(2 * np.pi * hours / 24)) * rng.lognormal(0, 0.05, len(hours))
    s = series(x)
    # A short training schedule: the refit below only has to show that a network is trained.
    model = make_forecaster("kale", horizon=60, epochs=2, steps_per_epoch=3, members=1).fit(s)
    summary = model.fit_summary
    assert summary["network"] is None and "too few for the network" in summary["network_skipped"]
    assert summary["median_correction_kept"] == 0.0 and summary["calibration_windows"] >= 8
    fc = model.predict(60)
    assert np.all(fc.p10 <= fc.p50) and np.all(fc.p50 <= fc.p90) and np.any(fc.p10 < fc.p90)
    # The daily shape is forecast (peak at the daily sine's top), not a flat line.
    peak = fc.timestamps[int(np.argmax(fc.p50[:24]))].hour
    assert peak in (5, 6, 7), peak
    model.save(tmp_path / "m.kale")
    again = Forecaster.load(tmp_path / "m.kale")
    np.testing.assert_allclose(again.predict(60).p90, fc.p90)
    # A network-backed refit of the same object drops the backbone-only band.
    longer = series(np.tile(x, 3))
    model.fit(longer)
    assert model.fit_summary["network"] == "transformer" and model.band is None


@pytest.mark.training
def test_kale_below_its_minimum_history_is_a_clear_error():
    """Two horizons and a day (144 hourly steps at 60 ahead): less is refused up front, with
    the numbers, and the fallback wrapper takes over."""
    hours = np.arange(24 * 6 - 1)
    s = series(100 + 30 * np.sin(2 * np.pi * hours / 24))
    with pytest.raises(ValueError, match=r"kale needs at least 144 steps .* got 143"):
        make_forecaster("kale", horizon=60).fit(s)
    fb = FallbackForecaster(primary="kale", primary_kwargs={"horizon": 60}).fit(s)
    assert fb.fit_summary["fallback"] and "needs 6 days (144 steps)" in fb.fit_summary["reason"]
    make_forecaster("kale", horizon=60, epochs=1).fit(series(np.append(s.to_numpy(), 100.0)))


@pytest.mark.training
def test_kale_fits_on_exactly_two_weeks_of_history():
    rng = np.random.default_rng(0)
    hours = np.arange(24 * 14)
    x = 100 + 60 * np.sin(2 * np.pi * hours / 24) + 10 * np.sin(2 * np.pi * hours / 168)
    s = series(x + rng.normal(0, 2, len(x)))
    fc = make_forecaster("kale", epochs=2).fit(s).predict(24)
    assert len(fc.mean) == 24 and np.all(np.isfinite(fc.mean))


def _hourly_random_walk(days: int = 21, seed: int = 43) -> pd.Series:
    rng = np.random.default_rng(seed)
    n = days * 24
    z = np.cumsum(rng.normal(0, 0.03, n)) + rng.normal(0, 0.05, n)
    return series(200 * np.exp(z))


def test_level_prior_last_is_chosen_for_a_wandering_level_and_mean_for_a_returning_one():
    from forecasting.backbone import Geometry, fit_backbone

    geom = Geometry.choose(horizon=48, day=24, available=24 * 21)
    origins = np.arange(geom.need, 24 * 21 - 48)
    walk = np.log(_hourly_random_walk().to_numpy())
    fit = fit_backbone(walk, geom, origins, priors=("mean", "last"))
    assert fit.prior == "last"
    assert fit.cv_mae["last"] < 0.9 * fit.cv_mae["mean"]
    assert np.all(fit.weights[-1] == 0.0)  # no drift carried forward from the walk's path
    rng = np.random.default_rng(2)
    ar = np.zeros(24 * 21)
    for i in range(1, len(ar)):
        ar[i] = 0.8 * ar[i - 1] + rng.normal(0, 0.1)
    assert fit_backbone(ar, geom, origins, priors=("mean", "last")).prior == "mean"
    # the default offers only "mean" (seasonal traffic returns to its profile)
    assert fit_backbone(walk, geom, origins).prior == "mean"
    with pytest.raises(ValueError, match="unknown level prior"):
        fit_backbone(walk, geom, origins, priors=("mean", "median"))


@pytest.mark.training
def test_kale_forecasts_a_random_walk_without_a_season_from_its_latest_level():
    walk = _hourly_random_walk()
    model = make_forecaster("kale", **{**TINY, "horizon": 48}).fit(walk)
    s = model.fit_summary
    assert s["seasonality"]["detected"] == {}
    assert s["backbone_prior"] == "last"
    # Mean-reverting with the walk's drift, the forecast went from 7 % below the last value
    # to 5 % above it.
    np.testing.assert_allclose(model.predict(48).p50, walk.iloc[-1], rtol=0.03)


def _local_clock_traffic(
    days: int,
    interval_s: float,
    change_day: int | None,
    shift_h: int,
    seed: int = 8,
    share: float = 1.0,
    second: tuple[int, float] | None = None,
) -> tuple[pd.Series, np.ndarray]:
    """Traffic with a sharp evening peak (19:00 on the users' clock) that comes ``shift_h``
    hours later in UTC from midnight of ``change_day`` for ``share`` of the users (a
    daylight-saving change in a UTC trace); ``second``: (day, share) of more users whose
    clock moves the same way later."""
    rng = np.random.default_rng(seed)
    n = int(days * 86400 / interval_s)
    hours = np.arange(n) * interval_s / 3600.0

    def peak(moves_at: float | None) -> np.ndarray:
        h = hours if moves_at is None else hours - shift_h * (hours >= 24 * moves_at)
        return 400 * np.exp(-0.5 * ((np.mod(h, 24) - 19) / 1.5) ** 2)

    later_share = second[1] if second else 0.0
    clean = 50 + (1 - share - later_share) * peak(None) + share * peak(change_day)
    if second:
        clean = clean + later_share * peak(second[0])
    return series(clean * rng.lognormal(0, 0.03, n), interval_s=interval_s), clean


def _clock_residual(s: pd.Series) -> np.ndarray:
    z = np.log(s.to_numpy())
    return z - z.mean()


@pytest.mark.parametrize("shift_h", [1, -1])
def test_find_clock_change_finds_a_one_hour_move_and_nothing_else(shift_h):
    from forecasting.decomposition import find_clock_change

    day, hour = 96, 4  # 15-minute steps
    moved, clean = _local_clock_traffic(16, 900, change_day=10, shift_h=shift_h)
    z = _clock_residual(moved)
    found = find_clock_change(z, day, hour)
    assert found is not None
    assert (found.at, found.shift, found.share) == (10 * day, shift_h * hour, 1.0)
    assert found.gain > 0.8
    # Put on the current clock, a day before the change looks like the days after it.
    on_now = found.apply(np.log(clean), day)
    np.testing.assert_allclose(on_now[9 * day : 10 * day], np.log(clean[11 * day : 12 * day]))
    steady, _ = _local_clock_traffic(16, 900, change_day=None, shift_h=0)
    assert find_clock_change(_clock_residual(steady), day, hour) is None
    level = np.log(steady.to_numpy()) + 0.5 * (np.arange(len(z)) >= 10 * day)
    assert find_clock_change(level - level.mean(), day, hour) is None  # a level, not a clock


def test_find_clock_change_finds_a_move_of_part_of_the_traffic():
    from forecasting.decomposition import find_clock_change

    day, hour = 96, 4
    moved, clean = _local_clock_traffic(16, 900, change_day=9, shift_h=1, share=0.5)
    found = find_clock_change(_clock_residual(moved), day, hour)
    assert found is not None
    assert (found.at, found.shift, found.share) == (9 * day, hour, 0.5)
    # Half of the traffic moved: the mix of the old day with itself an hour later.
    on_now = found.apply(np.log(clean), day)
    np.testing.assert_allclose(
        on_now[8 * day : 9 * day], np.log(clean[10 * day : 11 * day]), rtol=1e-9
    )
    full = _local_clock_traffic(16, 900, change_day=9, shift_h=1, share=1.0)[0]
    assert find_clock_change(_clock_residual(full), day, hour).share == 1.0


def test_moving_all_of_the_traffic_does_not_explain_a_partial_move(monkeypatch):
    import forecasting.decomposition.clock as clock_module

    day, hour = 96, 4
    moved, _ = _local_clock_traffic(16, 900, change_day=9, shift_h=1, share=0.5)
    monkeypatch.setattr(clock_module, "CLOCK_SHARES", (1.0,))  # the only model before
    assert clock_module.find_clock_change(_clock_residual(moved), day, hour) is None


def test_robust_trend_finds_two_clock_changes_weeks_apart():
    from forecasting.decomposition import robust_trend

    day, hour = 96, 4
    moved, _ = _local_clock_traffic(21, 900, change_day=6, shift_h=1, share=0.5, second=(13, 0.5))
    z = np.log(moved.to_numpy())
    found = robust_trend(z, {"daily": day}, hour=hour).clocks
    assert sorted(c.at for c in found) == [6 * day, 13 * day]
    assert all(c.shift == hour for c in found)


@pytest.mark.training
def test_kale_forecasts_on_the_clock_after_a_daylight_saving_change():
    history, _ = _local_clock_traffic(15, 900, change_day=10, shift_h=1)
    _, truth = _local_clock_traffic(16, 900, change_day=10, shift_h=1)
    model = make_forecaster("kale", **{**TINY, "horizon": 96}).fit(history)
    change = model.fit_summary["clock_change"]
    assert change is not None and change["shift_minutes"] == 60.0 and change["share"] == 1.0
    assert change["at"] == "2026-01-15T00:00:00Z"
    assert model.fit_summary["clock_changes"] == [change]
    p50 = model.predict(96).p50
    expected = truth[len(history) :]
    # With the ten old days averaged in, the next day was off by 7.5 % on average (the
    # evening ramps by far more); on the current clock, by under 1 %.
    assert np.mean(np.abs(p50 - expected)) / np.mean(expected) < 0.03


@pytest.mark.training
def test_kale_forecasts_after_half_of_the_traffic_moved_its_clock():
    history, _ = _local_clock_traffic(15, 900, change_day=9, shift_h=1, share=0.5)
    _, truth = _local_clock_traffic(16, 900, change_day=9, shift_h=1, share=0.5)
    model = make_forecaster("kale", **{**TINY, "horizon": 96}).fit(history)
    assert model.fit_summary["clock_change"]["share"] == 0.5
    p50 = model.predict(96).p50
    expected = truth[len(history) :]
    assert np.mean(np.abs(p50 - expected)) / np.mean(expected) < 0.03


def test_a_clock_change_needs_the_days_to_agree_with_it(monkeypatch):
    import forecasting.decomposition.clock as clock_module

    day, hour = 96, 4
    early, _ = _local_clock_traffic(16, 900, change_day=None, shift_h=0)  # 19:00 peaks
    late, _ = _local_clock_traffic(16, 900, change_day=0, shift_h=1, seed=9)  # 20:00
    z = np.log(early.to_numpy())
    for d in range(10, 16, 2):  # from day 10, every other day on the other clock
        z[d * day : (d + 1) * day] = np.log(late.to_numpy()[d * day : (d + 1) * day])
    # On average the days after day 10 look like half of the traffic moved; one by one,
    # half of them moved entirely and half not at all. Isolate the agreement rule.
    monkeypatch.setattr(clock_module, "CLOCK_MIN_GAIN", 0.0)
    assert clock_module.find_clock_change(z - z.mean(), day, hour) is None
    monkeypatch.setattr(clock_module, "CLOCK_MIN_AGREEMENT", 0.0)
    found = clock_module.find_clock_change(z - z.mean(), day, hour)
    assert found is not None and found.share < 1.0


def _weekday_traffic(
    days: int, *, weekend: float, seed: int = 0, walk: float = 0.0, start: str = "2026-01-05"
) -> pd.Series:
    """Hourly traffic from a Monday: a daily wave; weekends at ``weekend`` of the working
    days' level with a later, flatter wave (unless ``weekend`` is 1: every day alike);
    lognormal noise; and (``walk``) a level that wanders day to day."""
    rng = np.random.default_rng(seed)
    hours = np.arange(24 * days)
    off = (hours // 24) % 7 >= 5
    level = np.where(off, weekend, 1.0)
    wander = np.exp(np.repeat(np.cumsum(rng.normal(0, walk, days)), 24)) if walk else 1.0
    wave = np.exp(0.6 * np.sin(2 * np.pi * (hours - 6) / 24))
    if weekend != 1.0:
        wave = np.where(off, np.exp(0.35 * np.sin(2 * np.pi * (hours - 9) / 24)), wave)
    return series(100 * level * wander * wave * rng.lognormal(0, 0.05, len(hours)), start=start)


def test_day_types_find_a_weekend_in_ten_days_and_nothing_in_a_plain_daily_wave():
    """Under two weeks no weekly season is detected; a week and a half is enough to see
    that two neighbouring days differ from the other five. A weekend that differs only in
    level is not taken (see test_day_types_are_not_fooled_by_a_wandering_level)."""
    from forecasting.decomposition import choose_day_types

    day = 24
    z = np.log(_weekday_traffic(10, weekend=0.5).to_numpy())
    found, report = choose_day_types(z, day)
    assert found is not None and report["score"] < 0.5
    middle = np.arange(7) * day + 12  # Monday … Sunday, midday
    groups = found.group_of(middle)
    assert groups[5] == groups[6] != 0 and set(groups[:5]) == {0}
    assert found.start % day in (22, 23, 0, 1, 2)  # days start near midnight
    for seed in range(3):  # the same every day of the week
        plain = np.log(_weekday_traffic(10, weekend=1.0, seed=seed).to_numpy())
        assert choose_day_types(plain, day)[0] is None
    hours = np.arange(10 * day)  # a weekend in level only
    rng = np.random.default_rng(5)
    level_only = (
        np.where((hours // day) % 7 >= 5, np.log(0.5), 0.0)
        + 0.6 * np.sin(2 * np.pi * (hours - 6) / day)
        + rng.normal(0, 0.05, len(hours))
    )
    assert choose_day_types(level_only, day)[0] is None
    assert choose_day_types(z[: 6 * day], day) == (
        None,
        {"score": None, "skipped": "needs 7 to 21 days"},
    )


def test_day_types_are_not_fooled_by_a_wandering_level():
    """Neighbouring days share a wandering level, so any two of them look alike; a grouping
    must also beat the same grouping on the other days of the week."""
    from forecasting.decomposition import choose_day_types

    for seed in range(4):
        z = np.log(_weekday_traffic(11, weekend=1.0, seed=seed, walk=0.08).to_numpy())
        assert choose_day_types(z, 24)[0] is None, seed


@pytest.mark.training
def test_kale_forecasts_the_weekend_from_a_week_and_a_half_of_history():
    """11 days of hourly traffic whose weekends run at half the working days' level (and
    later in the day): the
    forecast from Friday noon over the weekend follows the weekend (before day types, the
    profile was one mean day and the weekend was forecast like Friday)."""
    s = _weekday_traffic(14, weekend=0.5, seed=1)
    cut = 24 * 11 + 12  # Friday of the second week, noon
    history, future = s.iloc[:cut], s.iloc[cut : cut + 60].to_numpy()
    model = make_forecaster("kale", horizon=60).fit(history)
    summary = model.fit_summary["day_types"]
    assert summary["used"] and summary["days_start_at"] in (
        "22:00 UTC",
        "23:00 UTC",
        "00:00 UTC",
        "01:00 UTC",
        "02:00 UTC",
    )
    assert {d for d, g in summary["groups"].items() if g} == {"Sat", "Sun"}
    assert model.fit_summary["profile"]["kind"].startswith("day types")
    with_types = model.predict(60)
    without = make_forecaster("kale", horizon=60, day_types=False).fit(history)
    assert without.fit_summary["day_types"] is None
    mae = np.mean(np.abs(with_types.p50 - future))
    mae_without = np.mean(np.abs(without.predict(60).p50 - future))
    assert mae < 0.5 * mae_without, (mae, mae_without)
    assert np.mean(future <= with_types.p90) >= 0.7


@pytest.mark.training
def test_kale_tells_the_weekend_from_a_week_of_history_with_a_held_out_tail():
    """A week and 18 hours of 15-minute traffic: the network's held-out tail (15 %) leaves
    under seven days before it, too few to choose day types on; they are then chosen on the
    whole history (the profile is still estimated before the tail)."""
    rng = np.random.default_rng(1)
    q = np.arange(96 * 7 + 72)  # Monday 00:00 … next Monday 18:00
    off = (q // 96) % 7 >= 5
    hours = q / 4
    wave = np.where(
        off,
        np.exp(0.35 * np.sin(2 * np.pi * (hours - 9) / 24)),
        np.exp(0.6 * np.sin(2 * np.pi * (hours - 6) / 24)),
    )
    history = pd.Series(
        100 * np.where(off, 0.5, 1.0) * wave * rng.lognormal(0, 0.05, len(q)),
        index=pd.date_range("2026-01-05", periods=len(q), freq="15min", tz="UTC"),
    )
    model = make_forecaster("kale", horizon=16, epochs=1).fit(history)
    assert model.fit_summary["network_skipped"] is None  # so there is a held-out tail
    summary = model.fit_summary["day_types"]
    assert summary["used"], summary
    assert summary["chosen_on"].startswith("whole history")
    assert {d for d, g in summary["groups"].items() if g} == {"Sat", "Sun"}


def test_long_context_spans_a_day_or_four_horizons_but_those_at_most_four_days():
    from forecasting.backbone import LONG_CONTEXT_MAX_DAYS, Geometry

    # hourly, 60 steps ahead, 8 weeks of history: 4·horizon (10 days) is cut to 4 days
    hourly = Geometry.choose(horizon=60, day=24, available=24 * 56)
    assert max(hourly.level_windows) == hourly.long_len == LONG_CONTEXT_MAX_DAYS * 24
    # 30 minutes: 4·horizon is 5 days, cut to 4
    assert max(Geometry.choose(horizon=60, day=48, available=48 * 42).level_windows) == 4 * 48
    # 1 minute: a day is longer than 4·horizon, nothing changes
    minute = Geometry.choose(horizon=60, day=1440, available=1440 * 28)
    assert max(minute.level_windows) == minute.long_len == 1440
    # no daily period: 4·horizon as before; an explicit context is taken as it is
    assert max(Geometry.choose(horizon=60, day=None, available=5000).level_windows) == 240
    assert (
        max(Geometry.choose(horizon=60, day=24, available=24 * 56, context=240).level_windows)
        == 240
    )
    # a short history still shortens it (a third of what is left after the horizon)
    assert max(Geometry.choose(horizon=60, day=24, available=24 * 14).level_windows) == 92
