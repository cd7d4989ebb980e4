"""The knobs' wrapper on its own: the HPA's stabilization rule, exactly, with a bounded record."""

from __future__ import annotations

import random

import numpy as np

from autoscaler.policy.behavior import BehavedPolicy, Behavior
from autoscaler.policy.types import Decision, JobSizing, Observation

SIZING = JobSizing.from_function(
    lambda w: 100.0 * w,
    min_workers=1,
    max_workers=64,
    ratio=4,
    interval_s=10.0,
    rescale_s=0.0,
    slo_s=600.0,
)


class Scripted:
    """A policy that recommends what it is told."""

    name = "scripted"

    def __init__(self) -> None:
        self.next = 1

    def decide(self, obs: Observation, state: dict) -> Decision:
        state["calls"] = state.get("calls", 0) + 1
        return Decision(self.next, SIZING.ps_for(self.next), {"action": "plan", "why": "told"})


def obs(step: int, workers: int) -> Observation:
    return Observation(
        step, step * 10.0, np.zeros(0), workers, SIZING.ps_for(workers), 0, 0, 0, False
    )


def test_the_hpa_rule_on_random_recommendations_with_a_short_record():
    rng = random.Random(7)
    up_s, down_s = 300.0, 3600.0
    inner = Scripted()
    wrapped = BehavedPolicy(inner, Behavior(up_window_s=up_s, down_window_s=down_s), SIZING)
    state: dict = {}
    history: list[tuple[float, int]] = []
    current = 8
    for step in range(3000):
        inner.next = rng.randint(1, 64)
        t = step * 10.0
        history.append((t, inner.next))
        got = wrapped.decide(obs(step, current), state).workers
        # The HPA's stabilizeRecommendationWithBehaviors, over the whole history.
        low = min(w for s, w in history if s > t - up_s)
        high = max(w for s, w in history if s > t - down_s)
        want = current
        want = max(want, low)
        want = min(want, high)
        assert got == want, step
        current = got
        assert len(state["behavior"]["down"]) <= 64 and len(state["behavior"]["up"]) <= 64


def test_a_stopped_move_is_forgotten_by_the_planner():
    inner = Scripted()
    wrapped = BehavedPolicy(inner, Behavior(down_window_s=600.0), SIZING)
    state: dict = {}
    inner.next = 10
    assert wrapped.decide(obs(0, 10), state).workers == 10
    assert state["calls"] == 1
    inner.next = 2
    d = wrapped.decide(obs(1, 10), state)
    assert d.workers == 10 and d.reason["action"] == "hold_stabilizing"
    assert state["calls"] == 1  # the planner's state is as before the stopped move


def test_without_knobs_the_policy_is_untouched():
    inner = Scripted()
    wrapped = BehavedPolicy(inner, Behavior(), SIZING)
    state: dict = {}
    inner.next = 5
    assert wrapped.decide(obs(0, 1), state) == inner.decide(obs(0, 1), {})
    assert "behavior" not in state
