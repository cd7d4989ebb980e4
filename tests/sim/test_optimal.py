"""The offline optimum: the cheapest schedule within the budget, exactly evaluated, and a bound.

Tiny instances are solved by brute force (every schedule replayed through the engine) and
the optimum must match it; its lower bound must never exceed it.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from autoscaler.policy.types import JobSizing
from autoscaler.sim.engine import simulate
from autoscaler.sim.optimal import OptimalSettings, ScheduledPolicy, optimal


def sizing(*, rescale_s=60.0, slo_s=120.0, max_workers=3):
    return JobSizing.from_function(
        lambda w: 10.0 * w,
        min_workers=1,
        max_workers=max_workers,
        ratio=1,
        interval_s=60.0,
        rescale_s=rescale_s,
        slo_s=slo_s,
    )


def brute_force(sz, rates, warm, budget_steps):
    """Every schedule of sizes: the least GPU-hours with at most ``budget_steps`` violations."""
    best = np.inf
    steps = len(rates) - warm
    for schedule in itertools.product(range(1, sz.max_workers + 1), repeat=steps):
        res = simulate(ScheduledPolicy(sz, np.array(schedule), warm), sz, rates, warmup_steps=warm)
        if np.count_nonzero(res.delay > sz.slo_s) <= budget_steps:
            best = min(best, res.gpu_hours)
    return best


@pytest.mark.parametrize(
    ("rates", "budget"),
    [
        ([10, 10, 25, 25, 8, 8, 25, 8], 0.0),  # two rises; a resize costs a step
        ([10, 10, 25, 25, 8, 8, 25, 8], 0.2),  # one violating step allowed (of 6)
        ([5, 5, 29, 5, 5, 29, 29, 5], 0.0),
        ([12, 12, 12, 31, 12, 12, 12, 12], 0.0),  # a spike beyond the peak: fewest violations
    ],
)
def test_matches_brute_force_on_tiny_traces(rates, budget):
    sz = sizing()
    rates = np.array(rates, dtype=float)
    got = optimal(sz, rates, warmup_steps=2, settings=OptimalSettings(violation_budget=budget))
    steps = len(rates) - 2
    allowed = int(np.floor(budget * steps + 1e-9))
    want = brute_force(sz, rates, 2, allowed)
    if np.isfinite(want):
        assert got.result.gpu_hours == pytest.approx(want)
        assert np.count_nonzero(got.result.delay > sz.slo_s) <= allowed
    assert got.lower_bound_gpu_hours <= got.result.gpu_hours + 1e-9


def test_it_spends_the_slos_slack_and_comes_in_under_the_per_step_minimum():
    # 34/s needs 4 workers per step (Σminw); 3 workers fall behind by 4/s, and a 10-minute
    # SLO lets the backlog grow for most of an hour: the optimum runs smaller for a while.
    sz = sizing(max_workers=8, rescale_s=120.0, slo_s=600.0)
    rates = np.full(200, 34.0)
    got = optimal(sz, rates, warmup_steps=20)
    assert np.count_nonzero(got.result.delay > 600.0) == 0
    assert got.result.gpu_hours < 4 * 180 / 60
    assert set(got.schedule) <= {3, 4} and got.result.rescale_count <= 2
    assert got.lower_bound_gpu_hours <= got.result.gpu_hours + 1e-9


def test_the_budget_buys_a_cheaper_schedule_through_a_short_burst():
    sz = sizing(max_workers=8, rescale_s=120.0, slo_s=180.0)
    rates = np.full(120, 20.0)
    rates[60:64] = 75.0  # four minutes at more than three times the load
    strict = optimal(sz, rates, warmup_steps=10, settings=OptimalSettings(violation_budget=0.0))
    loose = optimal(sz, rates, warmup_steps=10, settings=OptimalSettings(violation_budget=0.05))
    assert np.count_nonzero(strict.result.delay > 180.0) == 0
    assert loose.result.gpu_hours < strict.result.gpu_hours
    assert np.count_nonzero(loose.result.delay > 180.0) <= 5
    for r in (strict, loose):
        assert r.lower_bound_gpu_hours <= r.result.gpu_hours + 1e-9
