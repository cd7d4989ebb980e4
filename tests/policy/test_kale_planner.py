"""Kale's planner: ahead of the peak, no sawtooth, no cascade, reactive when forecasts fail."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.policy import JobSizing, Observation
from autoscaler.policy.forecasts import (
    ForecastWindow,
    PrecomputedSource,
    TrueFuture,
)
from autoscaler.policy.kale import (
    KalePolicy,
    KaleSettings,
    oracle_policy,
)
from autoscaler.policy.madu import linear_sizing, madu_policy
from autoscaler.policy.queue import allowed_backlog, backlog_path, oldest_age
from autoscaler.sim.engine import simulate

DT = 60.0


def sizing(*, rescale_s: float = 300.0, slo_s: float = 600.0, max_workers: int = 32) -> JobSizing:
    # 100 samples/s per worker up to 20 workers, then contention: a peak at w = 20.
    def f(w: int) -> float:
        return 100.0 * w if w <= 20 else 2000.0 - 20.0 * (w - 20)

    return JobSizing.from_function(
        f,
        min_workers=1,
        max_workers=max_workers,
        ratio=4,
        interval_s=DT,
        rescale_s=rescale_s,
        slo_s=slo_s,
    )


def obs(
    step: int, rates: np.ndarray, workers: int, *, backlog: float = 0.0, resizing: bool = False
) -> Observation:
    past = rates[:step]
    return Observation(
        step=step,
        time_s=step * DT,
        arrivals=past,
        workers=workers,
        ps=math.ceil(workers / 4),
        backlog=backlog,
        oldest_age_s=oldest_age(backlog, past, DT),
        processed_rate=0.0,
        resizing=resizing,
    )


# -- the queue model, by hand -------------------------------------------------------------
def test_backlog_path_is_the_lindley_recursion():
    # inflow − service per step (×60 s): +60, +60, −180, +0  → 60, 120, 0 (not −60), 0
    path = backlog_path(0.0, np.array([2.0, 2.0, 0.0, 1.0]), np.array([1.0, 1.0, 3.0, 1.0]), DT)
    assert path.tolist() == [60.0, 120.0, 0.0, 0.0]


def test_allowed_backlog_counts_recent_arrivals():
    # 10/s forever: within 120 s of any step end, 1200 samples arrived.
    allowed = allowed_backlog(np.full(5, 10.0), np.full(3, 10.0), DT, 120.0)
    assert allowed.tolist() == pytest.approx([1200.0, 1200.0, 1200.0])


def test_oldest_age_walks_back_over_arrivals():
    # last step 10/s (600 samples), before it 5/s: 900 samples back = 60 s + 300/5 = 120 s
    assert oldest_age(900.0, np.array([5.0, 5.0, 10.0]), DT) == pytest.approx(120.0)
    assert oldest_age(0.0, np.array([5.0]), DT) == 0.0


def test_workers_for_is_exact_at_the_boundary_and_stops_at_the_peak():
    sz = sizing()
    assert sz.workers_for(500.0) == (6, False)  # f(5) = 500 is not > 500
    assert sz.workers_for(499.9) == (5, False)
    assert sz.workers_for(5000.0) == (20, True)
    assert sz.peak_workers == 20


# -- behaviour ------------------------------------------------------------------------------
def step_load(n: int = 200, at: int = 100, low: float = 300.0, high: float = 1500.0):
    rates = np.full(n, low)
    rates[at:] = high
    return rates


def test_scales_up_in_time_for_a_step_load():
    # The plan may start the resize as the load rises, spending the SLO's slack: the oldest
    # sample's age stays within the SLO through the rise and the resize.
    from autoscaler.sim.engine import simulate

    sz = sizing()
    rates = step_load()
    res = simulate(oracle_policy(sz, rates), sz, rates, warmup_steps=40)
    (step, _, new), *_ = res.events
    assert step <= 100 and new >= 15 and np.all(res.delay <= sz.slo_s)


def test_with_up_before_rise_the_resize_is_done_before_the_load_arrives():
    rates = step_load()
    policy = oracle_policy(
        sizing(), rates, settings=KaleSettings(planner="dp", up_before_rise=True)
    )
    state: dict = {}
    first_up = None
    for t in range(40, 100):
        d = policy.decide(obs(t, rates, 4), state)
        if d.workers > 4:
            first_up = t
            break
    assert first_up is not None
    lead = 300 / DT + 1
    assert first_up <= 100 - lead  # resize is done before the step arrives
    assert d.workers >= 15 and d.ps == math.ceil(d.workers / 4)  # 15 × 100/s = the load
    assert d.reason["action"] == "scale_up" and d.reason["lead_s"] == 360.0


def test_holds_when_the_current_size_keeps_the_slo():
    rates = np.full(200, 320.0)  # 3 workers serve 300/s: no smaller size keeps up
    d = oracle_policy(sizing(), rates).decide(obs(100, rates, 4), {})
    assert d.workers == 4 and d.reason["action"] == "hold"


def test_scales_in_when_the_forecast_stays_low_but_not_before_a_rise():
    sz = sizing()
    low = np.full(300, 200.0)
    d = oracle_policy(sz, low).decide(obs(100, low, 16), {})
    assert d.workers < 16 and d.reason["action"] == "scale_down"
    # the same low load, but a rise back to 1500/s 20 minutes later: keep the size
    dip = low.copy()
    dip[112:] = 1500.0
    d = oracle_policy(sz, dip).decide(obs(100, dip, 16), {})
    assert d.workers == 16


def test_backlog_left_by_a_resize_does_not_trigger_another_resize():
    # A 5-minute resize just ended at 10 workers (1000/s) with 800/s arriving: the 240,000
    # samples of backlog drain at 200/s within the SLO, so the planner must not resize again.
    rates = np.full(200, 800.0)
    policy = oracle_policy(sizing(), rates)
    state: dict = {}
    policy.decide(obs(95, rates, 10, resizing=True), state)
    d = policy.decide(obs(100, rates, 10, backlog=240_000.0), state)
    assert d.workers == 10, d.reason


def test_holds_when_a_resize_would_break_the_slo_that_staying_keeps():
    # 400,000 samples at 900/s: the oldest is 444 s old; a 5-minute resize would push it past
    # the SLO, while 10 workers (1000/s) slowly drain it: staying is the better plan.
    rates = np.full(200, 900.0)
    d = oracle_policy(sizing(), rates).decide(obs(100, rates, 10, backlog=400_000.0), {})
    assert d.workers == 10 and d.reason["violating_steps"] == 0


def test_plans_to_drain_a_backlog_the_current_size_cannot():
    # 240,000 samples at 1050/s (oldest 229 s old): 10 workers (1000/s) fall further behind
    # and would soon leave no room for a resize: serving less than the rate just observed,
    # the plan scales up now (the dynamic program: its up_when_behind rule).
    rates = np.full(200, 1050.0)
    for planner in ("moves", "dp"):
        policy = oracle_policy(sizing(), rates, settings=KaleSettings(planner=planner))
        d = policy.decide(obs(100, rates, 10, backlog=240_000.0), {})
        (at_s, workers), *_ = d.reason["plan"]
        assert workers > 10 and at_s <= 300 and d.reason["violating_steps"] == 0, planner
    # Without that rule the program still scales up in time, never staying for good.
    later = KaleSettings(planner="dp", up_when_behind=False)
    d = oracle_policy(sizing(), rates, settings=later).decide(
        obs(100, rates, 10, backlog=240_000.0), {}
    )
    (at_s, workers), *_ = d.reason["plan"]
    assert workers > 10 and 0 < at_s < 3600 and d.reason["violating_steps"] == 0
    assert d.workers == 10 and d.reason["action"] == "hold"


@pytest.mark.parametrize(
    ("on", "backlog", "holds"),
    [
        (False, 30_000.0, False),  # the backlog shows the shortfall: the plans judge it
        (False, 0.0, True),  # behind with no backlog reported: the rise rule judges it
        (True, 30_000.0, True),  # the rule before: behind alone holds it
    ],
)
def test_being_behind_holds_the_rise_rule_only_where_the_backlog_does_not_show_it(
    on: bool, backlog: float, holds: bool
) -> None:
    # 10 workers serve 1000/s under 1050/s that the forecast's band covers: ten minutes of
    # it build 30,000 samples of backlog.
    sz = sizing()
    rates = np.full(200, 1050.0)
    flat = np.full((200, 60), 1050.0)
    policy = KalePolicy(
        sz,
        PrecomputedSource(flat, flat * 0.9, flat * 1.1),
        settings=KaleSettings(rise_when_behind=on),
    )
    d = policy.decide(obs(100, rates, 10, backlog=backlog), {})
    assert "reactive" not in d.reason and policy.searches == 1
    assert (policy.search_settings is policy.plan_settings) is holds
    assert math.isinf(policy.search_settings.rise_tolerance) is not holds


def test_reactive_plan_when_the_observed_rate_leaves_the_forecast_band():
    sz = sizing()
    rates = np.full(200, 300.0)
    rates[99] = 1200.0  # a surge the forecast did not see
    flat = np.full((200, 60), 300.0)
    policy = KalePolicy(sz, PrecomputedSource(flat, flat * 0.9, flat * 1.1))
    state: dict = {}
    policy.decide(obs(99, rates, 4), state)
    d = policy.decide(obs(100, rates, 4), state)
    assert "reactive" in d.reason and d.workers >= 13


def test_never_exceeds_the_peak_or_max_workers():
    rates = np.full(200, 10_000.0)
    d = oracle_policy(sizing(), rates).decide(obs(100, rates, 4), {})
    assert d.workers == 20 and d.reason.get("bound") == "peak"


def test_resize_in_progress_is_not_interrupted():
    rates = step_load()
    d = oracle_policy(sizing(), rates).decide(obs(98, rates, 4, resizing=True), {})
    assert d.workers == 4 and d.reason["why"] == "resize in progress"


def test_no_forecast_falls_back_to_the_recent_peak():
    class Nothing:
        def window(self, step, past, horizon):
            return None

    rates = np.full(200, 300.0)
    rates[80] = 1200.0
    d = KalePolicy(sizing(), Nothing()).decide(obs(100, rates, 4), {})
    assert d.workers >= 13 and "unavailable" in d.reason["forecast"]


def test_without_a_forecast_a_young_history_shrinks_nothing():
    """A just-started controller reads a quiet first rate: it holds until the recent peak
    is read over a full fallback window, then sizes for it."""

    class Nothing:
        def window(self, step, past, horizon):
            return None

    policy = KalePolicy(sizing(), Nothing())  # fallback window 3600 s = 60 steps
    rates = np.zeros(200)
    young = policy.decide(obs(2, rates, 8), {})
    assert young.workers == 8 and "no scale-in" in young.reason["why"]
    grown = policy.decide(obs(60, rates, 8), {})
    assert grown.workers == 1
    # Growing is never held back.
    rates[:2] = 1500.0
    assert policy.decide(obs(2, rates, 8), {}).workers >= 15


def test_the_interim_forecast_of_a_young_job_shrinks_nothing_either():
    """The stand-in model that serves until the first fit knows only the rates just seen."""

    class Interim:
        def __init__(self, interim: bool) -> None:
            self.interim = interim

        def window(self, step, past, horizon):
            z = np.zeros(horizon)
            return ForecastWindow(z, z, z, source="seasonal_naive (interim)", interim=self.interim)

    rates = np.zeros(200)
    held = KalePolicy(sizing(), Interim(True)).decide(obs(2, rates, 8), {})
    assert held.workers == 8 and "no scale-in" in held.reason["why"]
    assert KalePolicy(sizing(), Interim(False)).decide(obs(2, rates, 8), {}).workers < 8


def test_madu_plans_with_a_linear_fit_and_over_allocates():
    sz = sizing()
    lin = linear_sizing(sz)
    assert lin.rate(10) < sz.rate(10)  # the post-peak decline drags the slope down
    rates = np.full(200, 1000.0)
    kale = oracle_policy(sz, rates).decide(obs(100, rates, 1), {})
    madu = madu_policy(sz, TrueFuture(rates)).decide(obs(100, rates, 1), {})
    # the sizes each plan scales up to (each may wait a step or two, using the SLO's slack)
    assert madu.reason["plan"][0][1] > kale.reason["plan"][0][1]


# -- property: free instant resizes + perfect forecast + no SLO slack = the lower bound -----
@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.floats(min_value=0.0, max_value=1900.0).filter(lambda x: x % 100 != 0),
        min_size=10,
        max_size=40,
    )
)
def test_with_instant_resizes_and_a_perfect_forecast_kale_is_the_lower_bound(loads):
    sz = sizing(rescale_s=0.0, slo_s=DT)  # a one-step margin leaves no slack
    rates = np.array(loads)
    policy = oracle_policy(sz, rates, settings=KaleSettings(slo_margin_steps=1.0))
    state: dict = {}
    w = sz.min_workers
    for t in range(len(rates)):
        d = policy.decide(obs(t, rates, w), state)
        w = d.workers
        assert w == sz.workers_for(rates[t])[0], (t, rates[t], d.reason)


# -- whole-horizon plans and the resize budget ----------------------------------------------
def test_a_short_peak_is_planned_as_up_then_down_together():
    sz = sizing()
    rates = np.full(300, 300.0)
    rates[120:135] = 1500.0  # 15 minutes at five times the load, 20 minutes ahead
    d = oracle_policy(sz, rates).decide(obs(100, rates, 4), {})
    (up_s, up), (down_s, down) = d.reason["plan"]
    assert up > 4 and down < up and up_s < 20 * DT < down_s


@pytest.mark.slow  # two 900-step simulations of the planner
def test_the_hourly_resize_budget_is_never_exceeded():
    import dataclasses

    from autoscaler.sim.engine import simulate

    sz = dataclasses.replace(sizing(rescale_s=120.0), max_resizes_per_hour=2.0)
    t = np.arange(900)
    rates = 300.0 + 900.0 * (np.sin(t / 10.0) > 0)  # a square wave, ~31 minutes each way
    free = simulate(oracle_policy(sizing(rescale_s=120.0), rates), sz, rates, warmup_steps=60)
    res = simulate(oracle_policy(sz, rates), sz, rates, warmup_steps=60)
    starts = np.array([step for step, _, _ in res.events])
    assert len(free.events) > len(starts) >= 4  # the budget binds, and resizes still happen
    assert all(np.count_nonzero((starts > s - 60) & (starts <= s)) <= 2 for s in starts)


def test_planning_a_decision_is_cheap_enough_for_thousands_of_jobs():
    # Behaviour, not a timing: the program's states stay bounded (horizon × budget layers ×
    # sizes × backlog lattice), the old search a few thousand candidate plans.
    rates = step_load()
    dp = KaleSettings(planner="dp")
    d = oracle_policy(sizing(), rates, settings=dp).decide(obs(90, rates, 4), {})
    assert 0 < d.reason["plans"] <= 60 * 3 * 16 * 41
    moves = KaleSettings(planner="moves")
    d = oracle_policy(sizing(), rates, settings=moves).decide(obs(90, rates, 4), {})
    assert 0 < d.reason["plans"] <= 5000


def test_a_resize_now_must_beat_staying_by_more_than_it_costs():
    # 10 workers (1000/s) under a steady 800/s: 9 workers keep the SLO, and going there
    # now saves one worker for 70 minutes (4,200 GPU-s) for a charge of 5 minutes of the
    # larger size (3,000 GPU-s). The plans' costs say resize (1,200 GPU-s better); with
    # the margin of one charge, that saving does not pay for the resize twice over, so
    # the job stays.
    from autoscaler.policy.horizon import PlanSettings, search

    sz = JobSizing.from_function(
        lambda w: 100.0 * w,
        min_workers=1,
        max_workers=32,
        ratio=4,
        interval_s=60.0,
        rescale_s=300.0,
        slo_s=600.0,
    )
    load = np.full(60, 800.0)
    chosen = {}
    for margin in (0.0, 1.0):
        plan = search(
            sizing=sz,
            plan_sizing=sz,
            cur=10,
            backlog=0.0,
            upper=load,
            median=load,
            past=np.full(30, 800.0),
            settings=PlanSettings(margin_s=60.0, hold_steps=(5, 15, 30, 45), resize_margin=margin),
            resizes_left=np.full(60, 10**6),
            floor_rate=0.0,
            hour_steps=60,
        )
        assert plan.feasible
        chosen[margin] = plan.moves
    assert chosen[0.0][:1] == ((0, 9),)
    assert not chosen[1.0] or chosen[1.0][0][0] > 0


def _descent() -> tuple[np.ndarray, PrecomputedSource]:
    """A load falling from 1600/s to 300/s over four hours, forecast exactly but with a band
    that widens with the lead time (as a forecaster's does)."""
    rates = np.concatenate([np.full(120, 1600.0), np.linspace(1600.0, 300.0, 240)])
    rates = np.concatenate([rates, np.full(240, 300.0)])
    ahead = np.append(rates, np.full(60, rates[-1]))
    windows = np.lib.stride_tricks.sliding_window_view(ahead, 60)[: len(rates)]
    widen = 1.0 + 0.3 * np.arange(60) / 59
    return rates, PrecomputedSource(windows, windows / widen, windows * widen)


def test_a_descent_is_not_taken_in_steps_too_small_for_their_resize():
    # 18 workers where 15 serve the load, an hour into the descent: the plan's horizon
    # ends before the descent does, so the cheapest plan over it steps down by two now —
    # and the next re-plan would step down again. Held, the job waits for a step that pays
    # for its resize over the descent.
    sz = sizing()
    rates, source = _descent()
    off = KalePolicy(sz, source, settings=KaleSettings(descent_step=0.0))
    d = off.decide(obs(150, rates, 18), {})
    assert d.reason["action"] == "scale_down" and d.workers >= 16
    d = KalePolicy(sz, source).decide(obs(150, rates, 18), {})
    assert d.workers == 18 and d.reason["action"] == "hold"
    assert "descent" in d.reason["why"]


def test_without_a_descent_a_scale_down_is_not_held():
    sz = sizing()
    low = np.full(300, 300.0)
    d = KalePolicy(sz, TrueFuture(low)).decide(obs(100, low, 8), {})
    assert d.reason["action"] == "scale_down" and d.workers < 8


def test_a_held_descent_keeps_the_slo_with_fewer_resizes():
    sz = sizing()
    rates, source = _descent()
    runs = {}
    for k in (0.0, 1.0):
        policy = KalePolicy(sz, source, settings=KaleSettings(descent_step=k))
        runs[k] = simulate(policy, sz, rates, warmup_steps=100)
    assert runs[1.0].metrics()["slo_violation_rate"] == 0.0
    assert runs[1.0].rescale_count < runs[0.0].rescale_count
