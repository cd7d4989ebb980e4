"""The planner's dynamic program: the cheapest plan on the forecast, and when a plan is kept.

The program is checked against brute force (every schedule of a tiny horizon replayed
through the simulator's engine, the forecast as the arrivals); following a stored plan is
checked for each thing that must make a new one.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from autoscaler.policy import JobSizing, Observation
from autoscaler.policy.forecasts import ForecastWindow
from autoscaler.policy.horizon import _sizes
from autoscaler.policy.kale import KalePolicy, KaleSettings
from autoscaler.policy.mpc import DpSettings, solve
from autoscaler.policy.queue import allowed_backlog
from autoscaler.sim.engine import simulate
from autoscaler.sim.optimal import ScheduledPolicy

DT = 60.0


def tiny(*, rescale_s: float = 60.0, slo_s: float = 120.0, max_workers: int = 3) -> JobSizing:
    return JobSizing.from_function(
        lambda w: 10.0 * w,
        min_workers=1,
        max_workers=max_workers,
        ratio=1,
        interval_s=DT,
        rescale_s=rescale_s,
        slo_s=slo_s,
    )


def brute_force(sz: JobSizing, past: np.ndarray, upper: np.ndarray, cur: int) -> float:
    """Least GPU-seconds of any schedule keeping the SLO on ``upper`` and ending as the
    program requires (a size sustaining the last step, room for one more resize)."""
    n, warm = len(upper), len(past)
    rates = np.concatenate([past, upper])
    room = allowed_backlog(past, upper, DT, sz.slo_s - sz.rescale_s)[-1]
    m = math.ceil(sz.rescale_s / DT)
    best = math.inf
    for schedule in itertools.product(range(1, sz.max_workers + 1), repeat=n):
        policy = ScheduledPolicy(sz, np.array(schedule), warm)
        res = simulate(policy, sz, rates, warmup_steps=warm, initial_workers=cur)
        end = int(res.target[-1])
        ok = (
            np.count_nonzero(res.delay > sz.slo_s) == 0
            and all(step - warm + m <= n for step, _, _ in res.events)
            and (sz.rate(end) >= upper[-1] or end == sz.peak_workers)
            and res.backlog[-1] <= room + 1e-6
        )
        if ok:
            best = min(best, res.gpu_hours * 3600.0)
    return best


def replay(sz: JobSizing, past: np.ndarray, upper: np.ndarray, cur: int, moves) -> tuple:
    """GPU-seconds and violating steps of a plan's moves, replayed by the engine."""
    schedule, w = [], cur
    for k in range(len(upper)):
        for at, size in moves:
            if at == k:
                w = size
        schedule.append(w)
    rates = np.concatenate([past, upper])
    policy = ScheduledPolicy(sz, np.array(schedule), len(past))
    res = simulate(policy, sz, rates, warmup_steps=len(past), initial_workers=cur)
    return res.gpu_hours * 3600.0, int(np.count_nonzero(res.delay > sz.slo_s))


@pytest.mark.parametrize("seed", range(6))
def test_the_program_finds_the_cheapest_schedule_brute_force_finds(seed):
    sz = tiny()
    rng = np.random.default_rng(seed)
    past = np.full(4, 12.0)
    upper = rng.uniform(4.0, 29.0, 6)
    cur = int(rng.integers(1, 4))
    plan = solve(
        sizing=sz,
        plan_sizing=sz,
        cur=cur,
        backlog=0.0,
        upper=upper,
        median=upper,
        past=past,
        settings=DpSettings(tail_steps=0, buckets=4000),
        resizes_left=np.full(len(upper), 10**6),
        floor_rate=0.0,
        sizes=_sizes(sz),
    )
    want = brute_force(sz, past, upper, cur)
    cost, violating = replay(sz, past, upper, cur, plan.moves)
    if math.isinf(want):
        assert not plan.feasible
        return
    assert plan.feasible and violating == 0
    assert cost == pytest.approx(want, rel=1e-9)
    assert plan.cost_gpu_s == pytest.approx(want, rel=1e-3)  # the lattice rounds backlog up


def test_a_plan_the_program_calls_feasible_keeps_the_slo_when_replayed():
    sz = tiny(max_workers=8, rescale_s=150.0, slo_s=600.0)  # a downtime of 2.5 steps
    rng = np.random.default_rng(7)
    for _ in range(20):
        past = rng.uniform(10.0, 70.0, 12)
        upper = np.clip(np.cumsum(rng.normal(0.0, 6.0, 30)) + 40.0, 5.0, 75.0)
        cur = int(rng.integers(1, 9))
        plan = solve(
            sizing=sz,
            plan_sizing=sz,
            cur=cur,
            backlog=0.0,
            upper=upper,
            median=upper,
            past=past,
            settings=DpSettings(),
            resizes_left=np.full(len(upper), 2),
            floor_rate=0.0,
            sizes=_sizes(sz),
        )
        assert len(plan.moves) <= 2  # the hourly budget
        if plan.feasible:
            assert replay(sz, past, upper, cur, plan.moves)[1] == 0


# -- following a stored plan -------------------------------------------------------------------
class Scripted:
    """A forecast source whose window and key the test sets."""

    def __init__(self, rates: np.ndarray, key: str = "a") -> None:
        self.rates, self.key, self.spread = rates, key, 0.1

    def window(self, step, past, horizon):
        f = self.rates[step : step + horizon]
        return ForecastWindow(f, f * (1 - self.spread), f * (1 + self.spread), key=self.key)


def obs(step: int, rates: np.ndarray, workers: int, backlog: float = 0.0) -> Observation:
    return Observation(
        step=step,
        time_s=step * DT,
        arrivals=rates[:step],
        workers=workers,
        ps=workers,
        backlog=backlog,
        oldest_age_s=0.0,
        processed_rate=0.0,
        resizing=False,
    )


def rising() -> np.ndarray:
    sz_rates = np.full(300, 40.0)
    sz_rates[140:] = 70.0  # a rise 40 steps after the decisions below
    return sz_rates


def planner(source) -> KalePolicy:
    # Resizes charged 3× their downtime: the plan at step 115 is one move for the rise.
    sz = tiny(max_workers=10, rescale_s=120.0, slo_s=600.0)
    settings = KaleSettings(
        planner="dp", horizon_steps=30, replan_every_steps=5, resize_cost_factor=3.0
    )
    return KalePolicy(sz, source, settings=settings)


def test_a_plan_is_followed_while_its_forecast_holds_and_the_backlog_is_as_planned():
    rates = rising()
    source = Scripted(rates)
    policy, state = planner(source), {}
    first = policy.decide(obs(115, rates, 5), state)
    assert "followed" not in first.reason and state["plan"]["at"] == 115
    later = [policy.decide(obs(t, rates, 5), state) for t in range(116, 120)]
    assert [d.reason.get("followed") for d in later] == [1, 2, 3, 4]
    assert all(d.workers == 5 for d in later)
    # replan_every_steps = 5: the fifth step after planning plans again
    assert "followed" not in policy.decide(obs(120, rates, 5), state).reason


@pytest.mark.parametrize(
    "change",
    ["new forecast", "backlog above the plan", "rate outside the band", "another size"],
)
def test_anything_the_plan_depends_on_changing_makes_a_new_plan(change):
    rates = rising()
    source = Scripted(rates)
    policy, state = planner(source), {}
    policy.decide(obs(115, rates, 5), state)
    workers, backlog, seen = 5, 0.0, rates
    if change == "new forecast":
        source.key = "b"
    elif change == "backlog above the plan":
        backlog = 50.0
    elif change == "rate outside the band":
        seen = rates.copy()
        seen[115] = 30.0  # below the band predicted for it (36 … 44)
    else:
        workers = 6
    d = policy.decide(obs(116, seen, workers, backlog), state)
    assert "followed" not in d.reason and state.get("plan", {}).get("at") != 115


def test_no_plan_is_kept_without_a_forecast_key():
    rates = rising()
    source = Scripted(rates, key=None)
    policy, state = planner(source), {}
    policy.decide(obs(115, rates, 5), state)
    assert "plan" not in state
    assert "followed" not in policy.decide(obs(116, rates, 5), state).reason
