"""The one forecast feed: its refit schedule, forecast grid, quantile choice and determinism."""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler.policy.feed import FeedSettings, ForecastFeed, History, band, refresh
from forecasting.base import Forecast, future_index

DT = 60.0
START = 1_767_225_600.0  # a whole number of days since the epoch: step 0 is grid-aligned


class Level:
    """Forecasts the mean of the history it was fitted on; p10/p50/p90 = ×0.5/×1/×1.5."""

    name = "level"

    def __init__(self) -> None:
        self.fitted_on: int | None = None
        self.level = 0.0

    def fit(self, series):
        self.fitted_on, self.level = len(series), float(series.mean())
        return self

    def predict(self, horizon, history=None):
        idx = future_index(history.index[-1], DT, horizon)
        v = np.full(horizon, self.level)
        return Forecast.build(idx, v, {0.1: 0.5 * v, 0.5: v, 0.9: 1.5 * v}, model="level")


def feed(**kw) -> ForecastFeed:
    return ForecastFeed(FeedSettings(interval_s=DT, horizon_steps=5, **kw))


def hist(n: int) -> History:
    return History(START, DT, np.arange(1.0, n + 1.0))


def at(n: int) -> int:
    return round(START / DT) + n


def ask(f: ForecastFeed, n: int):
    h = hist(n)
    refresh(f, h, at(n), Level)
    return f.window(h, at(n))


def test_refits_on_schedule_and_early_while_the_history_is_young():
    f = feed(refit_s=100 * DT)
    for n in range(10, 300):
        ask(f, n)
    # Young: at 10 steps, doubled at 20, 40, 80 and 160; then every 100 steps.
    assert [(fit.step - at(0), fit.length) for fit in f.fits] == [
        (10, 10),
        (20, 20),
        (40, 40),
        (80, 80),
        (160, 160),
        (260, 260),
    ]


def test_a_fit_noticed_late_is_fitted_on_the_history_up_to_its_due_step():
    f = feed(refit_s=10 * DT, context_s=1000 * DT)
    ask(f, 600)
    ask(f, 627)  # due at 610 and 620, noticed at 627
    assert [(fit.step - at(0), fit.length) for fit in f.fits] == [
        (600, 600),
        (610, 610),
        (620, 620),
    ]
    ask(f, 700)  # seven missed: only the last two are fitted
    assert [fit.step - at(0) for fit in f.fits][3:] == [690, 700]


def test_answers_do_not_depend_on_which_steps_were_asked_before():
    every, sparse = feed(refit_s=7 * DT, predict_every=3), feed(refit_s=7 * DT, predict_every=3)
    got = {n: ask(every, n) for n in range(30, 60)}
    for n in (30, 44, 45, 59):
        w = ask(sparse, n)
        assert np.array_equal(w.high, got[n].high) and np.array_equal(w.mean, got[n].mean)


def test_a_second_reader_behind_the_first_never_sees_a_later_model():
    f = feed(refit_s=10 * DT, context_s=1000 * DT)
    for n in range(100, 160):
        ask(f, n)
    # Replaying step 105 after the run: the model in force then was fitted on 100 steps.
    w = f.window(hist(105), at(105))
    assert w.mean[0] == pytest.approx(np.mean(np.arange(1.0, 101.0)))


def test_forecasts_sit_on_a_grid_and_the_steps_between_slice_them():
    f = feed(refit_s=None, predict_every=4)
    w8, w9 = ask(f, 8), ask(f, 9)  # origin 8 serves 8 … 11
    assert len(f._forecasts) == 1 and len(w9) == 5
    ask(f, 12)
    assert sorted(o - at(0) for o in f._forecasts) == [8, 12]
    assert w8.source == "level"


def test_the_upper_band_is_the_jobs_quantile_derived_when_the_model_lacks_it():
    f80, f90 = feed(quantile=0.8), feed(quantile=0.9)
    w80, w90 = ask(f80, 20), ask(f90, 20)
    level = np.mean(np.arange(1.0, 21.0))
    assert w90.high[0] == pytest.approx(1.5 * level)
    # p80 on the normal scale between p50 and p90: z(0.8)/z(0.9) of the way.
    assert w80.high[0] == pytest.approx(level * (1 + 0.5 * 0.8416212 / 1.2815516), rel=1e-6)
    assert w80.median[0] == pytest.approx(level) and "p80 derived" in f80.reason


def test_band_extrapolates_past_the_outermost_level():
    idx = future_index(__import__("pandas").Timestamp(START, unit="s", tz="UTC"), DT, 1)
    fc = Forecast.build(idx, [10.0], {0.1: [5.0], 0.5: [10.0], 0.9: [15.0]})
    high, note = band(fc, 0.95)
    assert high[0] == pytest.approx(10 + 5 * 1.6448536 / 1.2815516, rel=1e-6) and note


def test_a_failed_fit_is_retried_at_the_next_step_and_the_old_model_keeps_serving():
    f = feed(refit_s=10 * DT, context_s=1000 * DT)
    ask(f, 100)
    fail = [True]

    def flaky():
        if fail[0]:
            raise RuntimeError("boom")
        return Level()

    h = hist(110)
    assert not refresh(f, h, at(110), flaky)
    assert f.failures == 1 and "boom" in f.reason
    assert f.window(h, at(110)) is not None  # the model fitted at 100 still serves
    assert refresh(f, h, at(110), flaky)  # no second try within the step
    assert len(f.fits) == 1
    fail[0] = False
    refresh(f, hist(111), at(111), flaky)
    assert [(fit.step - at(0), fit.length) for fit in f.fits] == [(100, 100), (111, 111)]


def test_no_forecast_without_a_model_or_from_a_too_short_history():
    f = feed()
    assert f.window(hist(10), at(10)) is None
    assert f.due(hist(1), at(1)) is None


def test_count_is_the_length_of_the_window_without_building_it():
    h = hist(10)
    for end in range(at(-3), at(14)):
        for steps in (0, 1, 4, 10, 20):
            assert h.count(end, steps) == len(h.window(end, steps))
