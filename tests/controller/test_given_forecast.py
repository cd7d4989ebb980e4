"""The plan stage hands each decision its forecast window: whole, for that step only."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from autoscaler.controller.forecast import GivenForecast
from autoscaler.policy.forecasts import ForecastWindow


def _window(n: int = 10, *, source: str = "seasonal_naive (interim)") -> ForecastWindow:
    z = np.arange(float(n))
    made = ForecastWindow(z, z, z + 1, source=source, median=z, key="1/2")
    return replace(made, interim=True)


def test_the_window_reaches_the_planner_whole_cut_to_the_horizon():
    given = GivenForecast("seasonal_naive")
    with given.given(7, _window()):
        got = given.window(7, np.zeros(3), 4)
    assert got is not None and len(got) == 4 and got.median is not None and len(got.median) == 4
    assert (got.source, got.key, got.interim) == ("seasonal_naive (interim)", "1/2", True)
    assert list(got.high) == [1.0, 2.0, 3.0, 4.0]


def test_a_window_without_a_source_is_named_after_the_jobs_model():
    given = GivenForecast("seasonal_naive")
    with given.given(7, _window(source="")):
        got = given.window(7, np.zeros(3), 4)
    assert got is not None and got.source == "seasonal_naive"


def test_no_forecast_for_another_step_outside_the_decision_or_short_of_the_horizon():
    given = GivenForecast("m")
    with given.given(7, _window(3)):
        assert given.window(7, np.zeros(3), 4) is None  # shorter than the horizon
    with given.given(7, _window()):
        assert given.window(8, np.zeros(3), 4) is None  # another decision step
    assert given.window(7, np.zeros(3), 4) is None  # the decision is over
    with given.given(7, None):
        assert given.window(7, np.zeros(3), 4) is None
