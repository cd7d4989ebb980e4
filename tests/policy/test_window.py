"""Sizing for the SLO window: the window load and the planner on noisy traffic."""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler.policy import JobSizing
from autoscaler.policy.forecasts import PrecomputedSource, TrueFuture
from autoscaler.policy.kale import KalePolicy, KaleSettings
from autoscaler.policy.window import noise_share, rolling_mean, window_load, z_of
from autoscaler.sim.engine import simulate

DT = 60.0


def sizing() -> JobSizing:
    return JobSizing.from_function(
        lambda w: 100.0 * w,
        min_workers=1,
        max_workers=40,
        ratio=4,
        interval_s=DT,
        rescale_s=300.0,
        slo_s=600.0,
    )


def test_rolling_mean_is_centred_and_uses_the_steps_that_exist_at_the_ends():
    x = np.array([0.0, 3.0, 6.0, 9.0, 12.0])
    assert rolling_mean(x, 3).tolist() == pytest.approx([1.5, 3.0, 6.0, 9.0, 10.5])
    assert rolling_mean(x, 1).tolist() == x.tolist()


def test_noise_share_measures_the_scatter_around_the_rolling_mean():
    rng = np.random.default_rng(1)
    noisy = 1000.0 * (1.0 + rng.normal(0.0, 0.2, 600))
    assert noise_share(noisy, 10, 600) == pytest.approx(0.2, rel=0.15)
    assert noise_share(np.full(600, 1000.0), 10, 600) == 0.0
    assert noise_share(noisy[:5], 10, 600) == 0.0  # too little history


def test_window_load_shrinks_the_noise_part_keeps_the_level_part_and_charges_timing():
    m = np.full(30, 1000.0)
    up = np.full(30, 1300.0)
    # A perfect forecast: no band, nothing to charge.
    assert window_load(m, m, noise=0.3, z=1.28, window=10, timing_steps=5).tolist() == m.tolist()
    # No noise: the band is all level error and stays whole.
    assert window_load(m, up, noise=0.0, z=1.28, window=10, timing_steps=0) == pytest.approx(up)
    # All noise: the band shrinks by √window.
    all_noise = window_load(m, up, noise=1.0, z=1.28, window=10, timing_steps=0)
    assert all_noise == pytest.approx(1000.0 + 300.0 / np.sqrt(10.0))
    # A rise at step 20, forecast with a band: met up to 5 steps early.
    rise = np.where(np.arange(30) < 20, 1000.0, 2000.0)
    load = window_load(rise, rise * 1.1, noise=0.0, z=1.28, window=1, timing_steps=5)
    assert load[14] == pytest.approx(1100.0)
    assert load[15] == pytest.approx(1100.0 + 1000.0)
    assert z_of(0.9) == pytest.approx(1.2816, abs=1e-4)


def noisy_day(seed: int = 3) -> np.ndarray:
    """A steady 1500/s in minutes that alternate around it by ±60 % (web traffic's minutes)."""
    rng = np.random.default_rng(seed)
    return 1500.0 * (1.0 + 0.6 * rng.choice([-1.0, 1.0], 900) * rng.uniform(0.5, 1.0, 900))


def test_the_oracle_rides_minute_spikes_on_the_backlog_within_the_slo():
    rates = noisy_day()
    sz = sizing()
    runs = {}
    for on in (True, False):
        policy = KalePolicy(sz, TrueFuture(rates), settings=KaleSettings(window_sizing=on))
        runs[on] = simulate(policy, sz, rates, warmup_steps=120)
    window, minute = runs[True], runs[False]
    assert (window.delay > sz.slo_s).sum() == 0
    # The minute's peak needs 24 workers, the mean 15.
    assert window.gpu_hours < 0.95 * minute.gpu_hours
    assert np.median(window.workers) < 20


def test_a_noisy_forecast_band_is_charged_for_the_window_not_each_minute():
    rates = noisy_day(4)
    sz = sizing()
    n = 60
    ahead = np.append(rates, np.full(n, rates[-1]))
    central = np.lib.stride_tricks.sliding_window_view(ahead, n)[: len(rates)]
    source = PrecomputedSource(central, central * 0.6, central * 1.4)
    runs = {}
    for on in (True, False):
        policy = KalePolicy(sz, source, settings=KaleSettings(window_sizing=on))
        runs[on] = simulate(policy, sz, rates, warmup_steps=120)
    assert (runs[True].delay > sz.slo_s).sum() == 0
    assert runs[True].gpu_hours < runs[False].gpu_hours


def test_the_band_is_scaled_to_how_often_the_window_means_went_over_it():
    # A forecast whose median is the truth and whose band is ±40 %: no window's mean ever
    # goes over the band, so the planner charges less and less of it (down to its floor).
    # One whose median runs 30 % low with a 10 % band: window means go over it, so the
    # band is widened. Without calibration the band is charged as forecast.
    rates = noisy_day(4)
    sz = sizing()
    n = 60
    ahead = np.append(rates, np.full(n, rates[-1]))
    truth = np.lib.stride_tricks.sliding_window_view(ahead, n)[: len(rates)]
    settings = KaleSettings()
    wide = PrecomputedSource(truth, truth * 0.6, truth * 1.4)
    state: dict = {}
    simulate(KalePolicy(sz, wide, settings=settings), sz, rates, warmup_steps=120, state=state)
    assert settings.band_scale_min <= state["band_scale"][1] < 1.0
    low = truth * 0.7
    narrow = PrecomputedSource(low, low * 0.9, low * 1.1)
    state = {}
    simulate(KalePolicy(sz, narrow, settings=settings), sz, rates, warmup_steps=120, state=state)
    assert 1.0 < state["band_scale"][1] <= settings.band_scale_max
    state = {}
    off = KaleSettings(calibrate_band=False)
    simulate(KalePolicy(sz, wide, settings=off), sz, rates, warmup_steps=120, state=state)
    assert "band_scale" not in state


def test_the_calibrated_band_buys_less_capacity_where_the_forecast_was_too_wide():
    rates = noisy_day(5)
    sz = sizing()
    n = 60
    ahead = np.append(rates, np.full(n, rates[-1]))
    truth = np.lib.stride_tricks.sliding_window_view(ahead, n)[: len(rates)]
    source = PrecomputedSource(truth, truth * 0.5, truth * 1.5)
    runs = {}
    for on in (True, False):
        policy = KalePolicy(sz, source, settings=KaleSettings(calibrate_band=on))
        runs[on] = simulate(policy, sz, rates, warmup_steps=120)
    assert (runs[True].delay > sz.slo_s).sum() == 0
    assert runs[True].gpu_hours < runs[False].gpu_hours
