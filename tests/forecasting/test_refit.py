"""Incremental refits: the rules that choose between an incremental and a full refit (one test
per rule), and kale's incremental refit itself (starts from the last fit, leaves it untouched,
forecasts well-formed, saves and loads)."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pandas as pd
import pytest

from forecasting.base import Forecaster
from forecasting.decomposition import SeasonalProfile
from forecasting.decomposition.history import clean_history, extend_history
from forecasting.decomposition.trend import coarse_bucket, robust_trend
from forecasting.refit import (
    FULL_FIT_MAX_AGE,
    RefitBasis,
    decide_refit,
    longest_straight_run,
)
from forecasting.registry import make_forecaster

DAY = 96  # 15-minute steps
START = pd.Timestamp("2026-01-05", tz="UTC")


def shape(steps: np.ndarray) -> np.ndarray:
    """Log traffic of a daily pattern (steps from START)."""
    return np.log(200 + 150 * np.sin(2 * np.pi * steps / DAY))


def trace(days: float, seed: int = 0, noise: float = 0.03) -> pd.Series:
    n = round(days * DAY)
    rng = np.random.default_rng(seed)
    values = np.exp(shape(np.arange(n)) + rng.normal(0, noise, n))
    idx = pd.date_range(START, periods=n, freq=pd.Timedelta(minutes=15))
    return pd.Series(values, index=idx)


def basis(history: pd.Series, **kw) -> RefitBasis:
    table = shape(np.arange(DAY))
    fields = {
        "start": history.index[0],
        "interval_s": 900.0,
        "values": history.to_numpy(),
        "full_fit_end": history.index[-1],
        "offset": 1e-6,
        "periods": {"daily": DAY},
        "acf": {"daily": 0.9, "weekly": None},
        "profile": SeasonalProfile(table - table.mean(), 0),
        "layout": "same",
    }
    return RefitBasis(**{**fields, **kw})


def refit_of(series: pd.Series, old_days: float, *, start_day: float = 1, **kw):
    """The decision for ``series`` from day ``start_day`` on, after a fit on its first
    ``old_days`` days."""
    return decide_refit(
        basis(series.iloc[: round(old_days * DAY)], **kw),
        series.iloc[round(start_day * DAY) :],
        layout=kw.get("layout", "same"),
    )


def test_a_day_more_of_the_same_traffic_is_incremental():
    d = refit_of(trace(9), 8)
    assert d.incremental, d.reason
    assert (d.shift, d.new_steps) == (DAY, DAY)


@pytest.mark.parametrize(
    ("cut", "why"),
    [
        (lambda s: s.iloc[::2], "another interval"),
        (lambda s: s, "starts before"),
        (lambda s: s.iloc[DAY : 8 * DAY], "no new steps"),
        (lambda s: s.iloc[7 * DAY + DAY // 2 :], "fitted before"),
    ],
)
def test_a_history_that_does_not_extend_the_last_fit_is_fitted_in_full(cut, why):
    s = trace(9)
    b = basis(s.iloc[DAY : 8 * DAY])
    d = decide_refit(b, cut(s), layout="same")
    assert not d.incremental and "not an extension" in d.reason and why in d.reason


def test_a_history_rewritten_where_it_overlaps_is_fitted_in_full():
    s = trace(9)
    b = basis(s.iloc[: 8 * DAY])
    changed = s.iloc[DAY:].copy()
    changed.iloc[10] += 1.0  # a backfill corrected one old step
    d = decide_refit(b, changed, layout="same")
    assert not d.incremental and "differs" in d.reason


def test_the_full_fit_age_limit_forces_a_full_fit():
    s = trace(9)
    old_full = s.index[8 * DAY - 1] - FULL_FIT_MAX_AGE + pd.Timedelta(days=1)
    d = refit_of(s, 8, full_fit_end=old_full)
    assert not d.incremental and "days old" in d.reason
    young = refit_of(s, 8, full_fit_end=old_full + pd.Timedelta(minutes=15))
    assert young.incremental, young.reason


def test_a_gap_in_the_new_data_forces_a_full_fit():
    s = trace(9)
    values = s.to_numpy().copy()
    lo, hi = 8 * DAY + 20, 8 * DAY + 30  # 2.5 hours filled by interpolation
    values[lo:hi] = np.linspace(values[lo - 1], values[hi], hi - lo + 2)[1:-1]
    d = refit_of(pd.Series(values, index=s.index), 8)
    assert not d.incremental and "gap" in d.reason
    assert longest_straight_run(values[lo - 1 : hi + 1]) == hi - lo


def test_a_changed_model_layout_forces_a_full_fit():
    s = trace(9)
    d = decide_refit(basis(s.iloc[: 8 * DAY]), s.iloc[DAY:], layout="other")
    assert not d.incremental and "layout" in d.reason


def test_a_period_newly_covered_twice_forces_a_full_fit():
    # 13.5 days cannot show a weekly season; 14.5 days can.
    s = trace(14.5)
    d = decide_refit(basis(s.iloc[: round(13.5 * DAY)]), s, layout="same")
    assert not d.incremental and "two weekly cycles" in d.reason


def test_a_season_whose_autocorrelation_crosses_the_threshold_forces_a_full_fit():
    d = refit_of(trace(9), 8, acf={"daily": 0.05, "weekly": None})
    assert not d.incremental and "autocorrelation" in d.reason


def test_a_changed_daily_shape_forces_a_full_fit():
    s = trace(9)
    values = s.to_numpy().copy()
    new = np.arange(8 * DAY, 9 * DAY)
    values[new] = np.exp(shape(new - DAY // 6))  # the day's traffic 4 hours late
    d = refit_of(pd.Series(values, index=s.index), 8)
    assert not d.incremental and "shape" in d.reason


def test_a_level_shift_forces_a_full_fit():
    s = trace(9)
    values = s.to_numpy().copy()
    values[8 * DAY :] *= 2.0
    d = refit_of(pd.Series(values, index=s.index), 8)
    assert not d.incremental and "level shifted" in d.reason


# ---- kale's incremental refit

TINY = {
    "horizon": 6,
    "epochs": 2,
    "steps_per_epoch": 3,
    "batch_size": 16,
    "threads": 1,
    "d_model": 16,
    "members": 2,
}


def weights(model: Forecaster) -> dict[str, np.ndarray]:
    net = model.net  # type: ignore[attr-defined]
    return {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}


@pytest.fixture(scope="module")
def chain() -> tuple[pd.Series, Forecaster, Forecaster]:
    """A kale fit on days 0-8 of a 15-minute trace and an incremental refit on days 1-9."""
    pytest.importorskip("torch")
    s = trace(10, seed=3, noise=0.05)
    first = make_forecaster("kale", **TINY).fit(s.iloc[: 9 * DAY])
    before = weights(first)
    second = make_forecaster("kale", **TINY).fit(s.iloc[DAY : 10 * DAY], previous=first)
    for k, v in weights(first).items():  # the fit it started from is untouched
        np.testing.assert_array_equal(v, before[k])
    return s, first, second


def test_kale_refits_incrementally_and_says_so(chain):
    _, first, second = chain
    refit = second.fit_summary["refit"]
    assert refit["mode"] == "incremental", refit
    assert refit["new_steps"] == DAY and refit["refits_since_full_fit"] == 1
    assert "refit" not in first.fit_summary
    # What the full fit chose is kept.
    assert second.offset == first.offset and second.geom == first.geom
    assert second.fit_summary["backbone_ridge"] == first.fit_summary["backbone_ridge"]


def test_an_incremental_refit_starts_from_the_last_weights():
    pytest.importorskip("torch")
    s = trace(10, seed=4)
    first = make_forecaster("kale", **{**TINY, "refit_steps": 0}).fit(s.iloc[: 9 * DAY])
    second = make_forecaster("kale", **{**TINY, "refit_steps": 0}).fit(s.iloc[DAY:], previous=first)
    assert second.fit_summary["refit"]["mode"] == "incremental"
    assert second.net is not first.net
    for k, v in weights(second).items():  # no fine-tune steps: the same weights
        np.testing.assert_array_equal(v, weights(first)[k])


def test_an_incrementally_refitted_forecast_is_well_formed(chain):
    s, _, second = chain
    fc = second.predict(12)
    assert fc.timestamps[0] == s.index[-1] + pd.Timedelta(minutes=15)
    assert np.isfinite(fc.mean).all() and (fc.p10 >= 0).all()
    assert (fc.p10 <= fc.p50).all() and (fc.p50 <= fc.p90).all()
    # Close to the traffic it continues (the pattern repeats daily).
    assert np.median(np.abs(fc.p50 / s.iloc[-DAY : -DAY + 12].to_numpy() - 1)) < 0.3


def test_an_incrementally_refitted_model_saves_loads_and_refits_the_same(chain, tmp_path):
    s, _, second = chain
    second.save(tmp_path / "m.kale")
    loaded = Forecaster.load(tmp_path / "m.kale")
    np.testing.assert_array_equal(loaded.predict(6).p50, second.predict(6).p50)
    more = s.iloc[2 * DAY :]
    extra = pd.Series(
        trace(11, seed=3, noise=0.05).to_numpy()[10 * DAY :],
        index=pd.date_range(s.index[-1], periods=DAY + 1, freq="15min")[1:],
    )
    more = pd.concat([more, extra])
    a = make_forecaster("kale", **TINY).fit(more, previous=second)
    b = make_forecaster("kale", **TINY).fit(more, previous=loaded)
    assert a.fit_summary["refit"]["mode"] == b.fit_summary["refit"]["mode"] == "incremental"
    assert a.fit_summary["refit"]["refits_since_full_fit"] == 2
    np.testing.assert_array_equal(a.predict(6).p50, b.predict(6).p50)


def test_a_model_saved_without_refit_state_loads_and_refits_in_full(chain, tmp_path):
    from forecasting.persistence import read_model_file, write_model_file

    s, first, _ = chain
    first.save(tmp_path / "m.kale")
    payload = read_model_file(tmp_path / "m.kale")
    del payload.meta["state"]["refit"]  # as an older version saved it
    for key in ("refit_z", "refit_trend", "refit_outliers"):
        del payload.arrays[key]
    write_model_file(tmp_path / "old.kale", payload)
    old = Forecaster.load(tmp_path / "old.kale")
    np.testing.assert_array_equal(old.predict(6).p50, first.predict(6).p50)
    again = make_forecaster("kale", **TINY).fit(s.iloc[DAY:], previous=old)
    assert again.fit_summary["refit"]["mode"] == "full"
    assert "no state" in again.fit_summary["refit"]["reason"]


def test_a_drifted_history_is_refitted_in_full(chain):
    s, first, _ = chain
    shifted = s.iloc[DAY:].copy()
    shifted.iloc[-DAY:] *= 3.0
    again = make_forecaster("kale", **TINY).fit(shifted, previous=first)
    assert again.fit_summary["refit"]["mode"] == "full"
    assert "level shifted" in again.fit_summary["refit"]["reason"]


def test_other_settings_or_models_refit_in_full(chain):
    s, first, _ = chain
    other = make_forecaster("kale", **{**TINY, "seed": 9}).fit(s.iloc[DAY:], previous=first)
    assert other.fit_summary["refit"]["mode"] == "full"
    assert "other settings" in other.fit_summary["refit"]["reason"]
    naive = make_forecaster("seasonal_naive").fit(s.iloc[:-DAY])
    again = make_forecaster("seasonal_naive").fit(s.iloc[DAY:], previous=naive)
    assert again.fit_summary["refit"]["mode"] == "full"


def test_refit_in_place_and_through_the_fallback_wrapper(chain):
    s, _, _ = chain
    model = make_forecaster("kale", **TINY).fit(s.iloc[: 9 * DAY])
    assert model.refit(s.iloc[DAY:]) is model
    assert model.fit_summary["refit"]["mode"] == "incremental"
    assert model.fit_summary["history_steps"] == 9 * DAY
    wrapped = make_forecaster("fallback", primary="kale", **TINY).fit(s.iloc[: 9 * DAY])
    again = make_forecaster("fallback", primary="kale", **TINY).fit(s.iloc[DAY:], previous=wrapped)
    assert again.fit_summary["refit"]["mode"] == "incremental"
    assert again.fit_summary["model"] == "kale"


def test_an_incremental_refit_keeps_no_more_of_the_correction_than_the_full_fit(chain):
    s, first, second = chain
    # The share the full fit kept travels down the chain of incremental refits.
    assert second.refit_memory.kept_share == first.alpha
    assert second.alpha <= first.alpha
    # A full fit that kept none of the network's correction: its refits may not keep any
    # (their held-out tail chose the fine-tuned weights, which flatters them).
    capped = copy.copy(first)
    capped.refit_memory = dataclasses.replace(first.refit_memory, kept_share=0.0)
    third = make_forecaster("kale", **TINY).fit(s.iloc[DAY : 10 * DAY], previous=capped)
    assert third.fit_summary["refit"]["mode"] == "incremental"
    assert third.alpha == 0.0
    assert set(third.fit_summary["val_mae_by_kept_share"]) == {0.0}


@pytest.mark.parametrize("day", [DAY, 3 * DAY])
def test_an_incremental_refit_cleans_a_coarse_history_again_and_extends_a_fine_one(day):
    """At 15 minutes (a day of 96 steps) extending the trend costs about what cleaning the
    whole history does, so the refit cleans it as a full fit would; at 5 minutes the old
    steps keep their cleaned values."""
    rng = np.random.default_rng(7)
    n = 10 * day
    steps = np.arange(n)
    z = np.log(200 + 150 * np.sin(2 * np.pi * steps / day)) + rng.normal(0, 0.03, n)
    z[8 * day + day // 3 : 8 * day + day // 2] -= 1.5  # an outage on the last old day
    periods = {"daily": day}
    old = clean_history(
        z[: 9 * day], periods, day_start=0, hour=day // 24, held=np.zeros(9 * day, bool)
    )
    new = extend_history(
        old, z[day:], periods, shift=day, day_start=0, held=np.zeros(9 * day, bool), hour=day // 24
    )
    if coarse_bucket(periods) == 1:
        again = robust_trend(z[day:], periods, day_start=0, hour=day // 24)
        np.testing.assert_allclose(new.z, again.filled)
        np.testing.assert_allclose(new.trend, again.trend)
    else:
        np.testing.assert_array_equal(new.z[: 8 * day], old.z[day:])
        np.testing.assert_array_equal(new.outliers[: 8 * day], old.outliers[day:])


def _evening_peak(days: int, day: int, moves_on: int | None) -> np.ndarray:
    """Log traffic with a sharp 19:00 peak (users' clock) that comes an hour later in UTC
    from midnight of ``moves_on`` (a daylight-saving change in a UTC trace)."""
    rng = np.random.default_rng(8)
    hours = np.arange(days * day) * 24.0 / day
    if moves_on is not None:
        hours = hours - 1.0 * (hours >= 24 * moves_on)
    peak = 400 * np.exp(-0.5 * ((np.mod(hours, 24) - 19) / 1.5) ** 2)
    return np.log((50 + peak) * rng.lognormal(0, 0.03, len(hours)))


@pytest.mark.parametrize("day", [DAY, 3 * DAY])
def test_a_coarse_refit_finds_a_clock_change_in_its_new_days_and_a_fine_one_leaves_it(day):
    """A clock change that happens after the last fit: at 15 minutes the refit, cleaning the
    whole history again, finds it where a full fit would (the new days' peaks an hour
    later); at 5 minutes the extended history keeps the clock changes it had (none here),
    and a change shows up as drift for a full fit to judge."""
    hour = day // 24
    z = _evening_peak(16, day, moves_on=12)
    old = clean_history(
        z[: 12 * day], {"daily": day}, day_start=0, hour=hour, held=np.zeros(12 * day, bool)
    )
    assert old.clocks == ()
    new = extend_history(
        old,
        z[2 * day :],
        {"daily": day},
        shift=2 * day,
        day_start=0,
        held=np.zeros(14 * day, bool),
        hour=hour,
    )
    full = clean_history(
        z[2 * day :], {"daily": day}, day_start=0, hour=hour, held=np.zeros(14 * day, bool)
    )
    if coarse_bucket({"daily": day}) == 1:
        assert [(c.at, c.shift) for c in new.clocks] == [(10 * day, hour)]
        assert [(c.at, c.shift) for c in full.clocks] == [(10 * day, hour)]
    else:
        assert new.clocks == ()
