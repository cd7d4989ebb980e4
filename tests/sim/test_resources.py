"""The resource manager's approval rules, and several simulated jobs sharing one quota."""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler.policy.quota import Request, ResourceManager
from autoscaler.policy.types import Decision, JobSizing
from autoscaler.sim.multi import JobInput, simulate_jobs


def test_growth_within_the_free_pool_is_granted_in_full():
    rm = ResourceManager(10)
    got = rm.allocate([Request("a", 2, 5), Request("b", 1, 3)])
    assert got == {"a": 5, "b": 3}


def test_shrinks_are_approved_but_never_below_the_minimum():
    rm = ResourceManager(10)
    assert rm.allocate([Request("a", 6, 1, min_gpus=2)]) == {"a": 2}


def test_gpus_given_back_by_a_shrink_are_not_handed_out_in_the_same_round():
    # a shrinks 8 → 2 but holds 8 until its resize ends: b may only take the 2 free GPUs.
    rm = ResourceManager(10)
    got = rm.allocate([Request("a", 8, 2), Request("b", 0, 8, min_gpus=1)])
    assert got == {"a": 2, "b": 2}


def test_minimum_guarantees_come_before_anyone_grows():
    # a (priority 5) wants everything; the new job c still gets its minimum of 3 first.
    rm = ResourceManager(10)
    got = rm.allocate([Request("a", 2, 10, priority=5), Request("c", 0, 3, priority=0, min_gpus=3)])
    assert got["c"] == 3 and got["a"] == 7


def test_higher_priority_grows_first():
    rm = ResourceManager(10)
    got = rm.allocate([Request("low", 2, 8, priority=0), Request("high", 2, 8, priority=1)])
    assert got == {"high": 8, "low": 2}


def test_equal_priorities_share_a_shortage_max_min_fairly():
    # 6 free GPUs: 3 each. With a small request (1 more), it is met in full first.
    rm = ResourceManager(8)
    assert rm.allocate([Request("a", 1, 10), Request("b", 1, 10)]) == {"a": 4, "b": 4}
    rm = ResourceManager(8)
    got = rm.allocate([Request("a", 1, 10), Request("b", 1, 2), Request("c", 1, 10)])
    assert got == {"a": 3, "b": 2, "c": 3}


def test_grants_come_in_whole_workers():
    # 2 GPUs per worker: 5 free GPUs allow 2 more workers (4 GPUs), never an odd GPU.
    rm = ResourceManager(9)
    assert rm.allocate([Request("a", 4, 12, unit=2)]) == {"a": 8}


def test_workers_without_gpus_use_no_quota():
    rm = ResourceManager(0)
    assert rm.allocate([Request("cpu", 0, 7, unit=0)]) == {"cpu": 7}


def test_single_requests_are_checked_against_what_others_hold():
    rm = ResourceManager(10)
    assert rm.request("a", 0, 7, min_gpus=1) == 7
    assert rm.request("b", 0, 7, min_gpus=1) == 3
    rm.release("a")
    assert rm.request("b", 3, 7) == 7


@pytest.mark.parametrize("seed", range(20))
def test_random_rounds_never_exceed_the_quota_nor_cut_below_a_minimum(seed):
    rng = np.random.default_rng(seed)
    quota = int(rng.integers(10, 40))
    rm = ResourceManager(quota)
    held = {f"j{i}": 0 for i in range(4)}
    mins = {j: int(rng.integers(1, 3)) for j in held}
    for _ in range(50):
        reqs = [
            Request(j, held[j], int(rng.integers(0, 20)), int(rng.integers(0, 3)), mins[j])
            for j in held
        ]
        got = rm.allocate(reqs)
        # a shrink keeps its old GPUs until the (instant here) next round
        assert sum(max(got[j], held[j]) for j in held) <= quota
        assert all(got[j] >= mins[j] for j in held)
        held = got


# -- multi-job simulation ---------------------------------------------------------------------


class Greedy:
    """Asks for enough workers for the last rate seen, doubled (hungry on purpose)."""

    name = "greedy"

    def __init__(self, sizing):
        self.sizing = sizing

    def decide(self, obs, state):
        last = float(obs.arrivals[-1]) if len(obs.arrivals) else 0.0
        w = self.sizing.workers_for(2 * last)[0]
        return Decision(w, self.sizing.ps_for(w))


def _sizing(gpus=1, min_workers=1):
    return JobSizing.from_function(
        lambda w: 100.0 * w,
        min_workers=min_workers,
        max_workers=16,
        ratio=4,
        interval_s=60.0,
        rescale_s=90.0,
        slo_s=600.0,
        gpus_per_worker=gpus,
    )


def _jobs(n=300):
    rng = np.random.default_rng(1)
    t = np.arange(n)
    out = []
    for i, (prio, gpus, mn) in enumerate([(2, 1, 1), (0, 2, 2), (0, 1, 1)]):
        rate = 500 + 450 * np.sin(t / 15.0 + i) + rng.normal(0, 30, n)
        sizing = _sizing(gpus, mn)
        out.append(JobInput(f"job{i}", sizing, np.clip(rate, 0, None), Greedy(sizing), prio))
    return out


def test_jobs_sharing_a_quota_never_exceed_it_and_keep_their_minimums():
    jobs = _jobs()
    res = simulate_jobs(jobs, quota_gpus=14, warmup_steps=5)
    assert res.gpus_in_use.max() <= 14
    assert res.max_gpus_in_use <= 14
    for job in jobs:
        r = res.results[job.name]
        assert r.target.min() >= job.sizing.min_workers  # nobody starves
        assert r.steps == 295
    # the quota binds (someone was short), and the high-priority job is short least
    assert sum(res.short_steps.values()) > 0
    assert res.short_steps["job0"] <= min(res.short_steps["job1"], res.short_steps["job2"])


def test_a_generous_quota_changes_nothing():
    from autoscaler.sim.engine import simulate

    res = simulate_jobs(_jobs(), quota_gpus=1000, warmup_steps=5)
    assert all(v == 0 for v in res.short_steps.values())
    for job in _jobs():
        single = simulate(job.policy, job.sizing, job.arrivals, warmup_steps=5)
        assert res.results[job.name].gpu_hours == pytest.approx(single.gpu_hours)
        assert res.results[job.name].delay.tolist() == pytest.approx(single.delay.tolist())


def test_minimums_above_the_quota_are_refused():
    with pytest.raises(ValueError, match="minimums need"):
        simulate_jobs(_jobs(), quota_gpus=3)
