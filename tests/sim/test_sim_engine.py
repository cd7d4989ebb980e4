"""The simulator's semantics, pinned on tiny traces whose every number is computed by hand.

Unless a test says otherwise: Δ = 60 s, f(w) = 10·w samples/s, one GPU per worker.
"""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler.policy.types import Decision, JobSizing
from autoscaler.sim.engine import JobRun, lower_bound_gpu_hours, simulate


def make_sizing(f=lambda w: 10.0 * w, *, max_workers=4, rescale_s=90.0, slo_s=60.0, gpus=1):
    return JobSizing.from_function(
        f,
        min_workers=1,
        max_workers=max_workers,
        ratio=1,
        interval_s=60.0,
        rescale_s=rescale_s,
        slo_s=slo_s,
        gpus_per_worker=gpus,
    )


class Plan:
    """Scripted policy: ``plan(step) -> workers``; records what it was shown."""

    name = "plan"

    def __init__(self, plan):
        self.plan = plan
        self.seen = []

    def decide(self, obs, state):
        assert len(obs.arrivals) == obs.step, "a policy must never see its own step"
        self.seen.append(obs)
        w = self.plan(obs.step)
        return Decision(w, w)


def test_a_step_load_beyond_capacity_grows_the_delay_by_half_a_step_per_step():
    # w = 1 serves 10/s. From step 2 the rate is 20/s: each step 1200 arrive, 600 are served.
    # End of step 2: the 600 served are the first 30 s of step 2's arrivals → oldest unconsumed
    # arrived at 120 + 30 = 150, the step ends at 180 → delay 30 s, backlog 600.
    # Step 3: 1200 served since 120 = all arrivals up to 180 → delay 240 − 180 = 60, backlog 1200.
    # Step 4: served up to 120 + 1800/20 = 210 → delay 300 − 210 = 90, backlog 1800.
    r = simulate(Plan(lambda t: 1), make_sizing(), [10, 10, 20, 20, 20])
    assert r.delay.tolist() == pytest.approx([0, 0, 30, 60, 90])
    assert r.backlog.tolist() == pytest.approx([0, 0, 600, 1200, 1800])
    assert r.served.tolist() == pytest.approx([10, 10, 10, 10, 10])
    m = r.metrics()
    assert m["cumulative_delay_min"] == pytest.approx(180 / 60)
    assert m["slo_violation_rate"] == pytest.approx(1 / 5)  # 60 is not > 60; only 90 is
    assert m["max_delay_min"] == pytest.approx(1.5)
    # p99 of [0, 0, 30, 60, 90] by linear interpolation: 60 + 0.96 × 30 = 88.8 s.
    assert m["p99_delay_min"] == pytest.approx(88.8 / 60)
    assert m["rescale_count"] == 0 and m["downtime_min"] == 0
    assert m["gpu_hours"] == pytest.approx(5 * 60 / 3600)
    assert m["mean_workers"] == pytest.approx(1.0)


def test_a_ramp_through_capacity_builds_a_backlog_served_oldest_first():
    # Rates 0, 5, 10, 15, 20 with 10/s of capacity.
    # Step 3 (15/s): 900 arrive, 600 served = the first 40 s → oldest at 180 + 40 = 220,
    # delay 240 − 220 = 20, backlog 300 (arrived in [220, 240]).
    # Step 4 (20/s): 600 served = the 300 left + the first 15 s of step 4 → oldest at 255,
    # delay 300 − 255 = 45, backlog 300 + 1200 − 600 = 900.
    r = simulate(Plan(lambda t: 1), make_sizing(), [0, 5, 10, 15, 20])
    assert r.delay.tolist() == pytest.approx([0, 0, 0, 20, 45])
    assert r.backlog.tolist() == pytest.approx([0, 0, 0, 300, 900])
    assert r.served.tolist() == pytest.approx([0, 5, 10, 10, 10])


def test_a_resize_that_ends_mid_step_serves_only_after_it_ends():
    # f(1) = 10, f(2) = 25; D = 90 s; 10/s throughout. The policy asks for 2 at step 2, so the
    # resize runs from 120 to 210 (the middle of step 3).
    # Step 2: nothing served; 600 arrive in [120, 180] → delay 60, backlog 600.
    # Step 3: [180, 210) down: 300 more arrive (backlog 900 spread over [120, 210]);
    #         [210, 240) up at 25/s: serves min(750, 900 + 300) = 750, the oldest 750 of the
    #         900 → the oldest left arrived at 120 + 75 = 195 → delay 240 − 195 = 45,
    #         backlog 150 + 300 = 450; served 750 / 60 = 12.5/s; capacity 25 × 30/60 = 12.5.
    # Step 4: min(1500, 450 + 600) → everything → delay 0; served 1050 / 60 = 17.5/s.
    sizing = make_sizing(lambda w: [0, 10, 25, 30, 40][w])
    r = simulate(Plan(lambda t: 1 if t < 2 else 2), sizing, [10] * 5)
    assert r.delay.tolist() == pytest.approx([0, 0, 60, 45, 0])
    assert r.backlog.tolist() == pytest.approx([0, 0, 600, 450, 0])
    assert r.served.tolist() == pytest.approx([10, 10, 0, 12.5, 17.5])
    assert r.capacity.tolist() == pytest.approx([10, 10, 0, 12.5, 25])
    # GPU-seconds: 60 + 60 (1 worker), then max(1, 2) = 2 held through the resize and after:
    # 120 + 120 + 120 = 480 s → 480 / 3600 GPU-hours.
    assert r.gpu_hours == pytest.approx(480 / 3600)
    assert r.workers.tolist() == pytest.approx([1, 1, 2, 2, 2])
    assert r.downtime_s == pytest.approx(90)
    assert r.metrics()["downtime_min"] == pytest.approx(1.5)
    assert r.rescale_count == 1 and r.events == [(2, 1, 2)]


def test_a_shrink_holds_the_old_size_until_its_resize_ends_and_gpu_hours_are_pro_rated():
    # 2 GPUs per worker, f = 10·w, D = 90 s, 10/s. 2 workers at step 0, 1 from step 1:
    # resize [60, 150). Worker-seconds: step 0: 2·60; step 1: 2·60 (held through the
    # resize); step 2: 2·30 + 1·30; step 3: 1·60 → 390 → 780 GPU-seconds.
    # Queue: step 1 serves nothing (backlog 600, delay 60). Step 2: [120, 150) adds 300
    # (900 over [60, 150]); [150, 180) serves min(300, 1200) = 300 → oldest at 90, delay 90.
    # Step 3: capacity = rate, 600 served → oldest at 150, delay 90: the delay never recovers.
    sizing = make_sizing(gpus=2)
    r = simulate(Plan(lambda t: 2 if t == 0 else 1), sizing, [10] * 4)
    assert r.gpu_hours == pytest.approx(780 / 3600)
    assert r.workers.tolist() == pytest.approx([2, 2, 1.5, 1])
    assert r.gpus.tolist() == [4, 4, 4, 2]
    assert r.delay.tolist() == pytest.approx([0, 60, 90, 90])
    assert r.backlog.tolist() == pytest.approx([0, 600, 900, 900])
    assert r.downtime_s == pytest.approx(90)


def test_a_backlog_drains_oldest_first_and_the_delay_returns_to_zero():
    # 30/s in step 0 against 10/s: 1800 arrive, 600 served (the first 20 s) → oldest at 20,
    # delay 40, backlog 1200. Then nothing arrives: step 1 serves 600 → oldest at 40,
    # delay 120 − 40 = 80; step 2 serves the last 600 → delay 0.
    r = simulate(Plan(lambda t: 1), make_sizing(), [30, 0, 0, 0])
    assert r.delay.tolist() == pytest.approx([40, 80, 0, 0])
    assert r.backlog.tolist() == pytest.approx([1200, 600, 0, 0])
    m = r.metrics()
    assert m["cumulative_delay_min"] == pytest.approx(2.0)
    assert m["slo_violation_rate"] == pytest.approx(0.25)
    assert m["max_delay_min"] == pytest.approx(80 / 60)


def test_draining_while_new_samples_arrive_consumes_into_the_new_step():
    # Instant resizes (D = 0). Step 0 as above: backlog 1200 over [20, 60], delay 40.
    # Step 1 at 25/s (f(2) = 25) with 15/s arriving: serves min(1500, 1200 + 900) = 1500 =
    # the 1200 old + the first 300 of step 1 (20 s at 15/s) → oldest at 80, delay 40,
    # backlog 600. Step 2: min(1500, 600 + 900) = 1500 = everything → delay 0.
    sizing = make_sizing(lambda w: [0, 10, 25, 30, 40][w], rescale_s=0.0)
    r = simulate(Plan(lambda t: 1 if t == 0 else 2), sizing, [30, 15, 15])
    assert r.delay.tolist() == pytest.approx([40, 40, 0])
    assert r.backlog.tolist() == pytest.approx([1200, 600, 0])
    assert r.rescale_count == 1 and r.downtime_s == 0


def test_decisions_during_a_resize_are_ignored_and_the_policy_sees_it_resizing():
    # D = 150 s: the resize decided at step 1 runs [60, 210); steps 2 and 3 start inside it,
    # so their wish for 3 workers is ignored; step 4 starts a second resize.
    plan = Plan(lambda t: {0: 1, 1: 2}.get(t, 3))
    r = simulate(plan, make_sizing(rescale_s=150.0), [5] * 6)
    assert r.events == [(1, 1, 2), (4, 2, 3)]
    seen = {o.step: o for o in plan.seen}
    assert seen[2].resizing and seen[2].resize_remaining_s == pytest.approx(90)
    assert seen[2].workers == 2  # the size being resized to
    assert seen[3].resizing and seen[3].resize_remaining_s == pytest.approx(30)
    assert not seen[4].resizing
    # Downtime: 150 s for the first resize, then step 4 and step 5 fully (150 s from 240).
    assert r.downtime_s == pytest.approx(150 + 120)


def test_the_warm_up_is_history_only_and_the_first_decision_is_placed_instantly():
    # 3 warm-up steps at 10/s: the first observation is for step 3, sees 3 rates, and reports
    # the size that served the last warm-up step: smallest w with f(w) > 10 → 2.
    plan = Plan(lambda t: 1)
    r = simulate(plan, make_sizing(), [10, 10, 10, 10, 20], warmup_steps=3)
    first = plan.seen[0]
    assert first.step == 3 and len(first.arrivals) == 3
    assert first.workers == 2 and first.processed_rate == pytest.approx(10)
    assert first.backlog == 0 and not first.resizing
    # The placement at 1 worker is no resize: no downtime, nothing counted.
    assert r.rescale_count == 0 and r.downtime_s == 0
    assert r.steps == 2 and r.start_step == 3
    assert r.delay.tolist() == pytest.approx([0, 30])
    assert r.gpu_hours == pytest.approx(2 * 60 / 3600)


def test_observations_carry_the_backlog_age_and_processed_rate_of_the_step_before():
    plan = Plan(lambda t: 1)
    simulate(plan, make_sizing(), [30, 0, 0])
    second = plan.seen[1]
    assert second.backlog == pytest.approx(1200)
    assert second.oldest_age_s == pytest.approx(60 - 20)
    assert second.processed_rate == pytest.approx(10)
    assert second.time_s == 60


def test_arrivals_shown_to_policies_are_read_only():
    class Vandal:
        name = "vandal"

        def decide(self, obs, state):
            if len(obs.arrivals):
                with pytest.raises(ValueError):
                    obs.arrivals[0] = 1e9
            return Decision(1, 1)

    simulate(Vandal(), make_sizing(), [1, 2, 3])


def test_decisions_are_clamped_to_the_job_bounds():
    r = simulate(Plan(lambda t: 0 if t == 0 else 99), make_sizing(rescale_s=0.0), [5, 5])
    assert r.target.tolist() == [1, 4]


def test_lower_bound_sizes_every_step_for_its_own_rate():
    # f = 10·w, max 4 (peak 40): rates 0, 10, 15, 45, 100 need w = 1 (f > 0), 2 (f > 10
    # strictly), 2, 4 (saturated: the peak), 4 → 13 worker-steps × 2 GPUs × 60 s.
    sizing = make_sizing(gpus=2)
    assert lower_bound_gpu_hours(sizing, [0, 10, 15, 45, 100]) == pytest.approx(13 * 2 * 60 / 3600)


def test_job_run_rejects_a_warm_up_covering_the_whole_trace():
    with pytest.raises(ValueError):
        JobRun(make_sizing(), [1, 2], warmup_steps=2)


def test_every_baseline_runs_a_generated_week_and_static_never_resizes():
    # Behaviour only; how fast four weeks of minutes run is measured by benchmarks/simulate.py.
    from autoscaler.sim.runner import compare
    from autoscaler.sim.tracegen import generate_trace

    sizing = make_sizing(
        lambda w: 1000.0 * w / (1 + 0.02 * w), max_workers=64, rescale_s=300, slo_s=600
    )
    values = generate_trace(days=2, interval_s=60, seed=2).to_numpy()
    values = values * 0.8 * sizing.peak_throughput / values.max()
    comp = compare(sizing, values, ["hpa", "keda", "autopilot", "static"], warmup_steps=1440)
    assert all(r.steps == 1440 for r in comp.results.values())
    assert np.all(comp.results["static"].target == comp.results["static"].target[0])
    assert comp.results["static"].rescale_count == 0
