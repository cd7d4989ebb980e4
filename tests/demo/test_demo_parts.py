"""The demo's pieces without starting anything: its numbers, the time warp, the live metrics
and the pacing of the demo workers."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from autoscaler.job.loading import parse_job
from autoscaler.kafka.local.demo_consumer import Pacer, my_partitions, ready_time, worker_rate
from autoscaler.policy.forecasts import TrueFuture
from autoscaler.policy.kale import KalePolicy, KaleSettings
from autoscaler.policy.sizing import sizing_for
from autoscaler.sim.engine import simulate
from forecasting.registry import make_forecaster
from kale.demo import plan as plans
from kale.demo.plan import DemoPlan
from kale.demo.summary import closing_lines, format_table, live_metrics
from kale.demo.warp import WarpedForecaster
from kale.demo.wiring import planner_settings

PLAN = DemoPlan()


def test_the_compressed_job_is_the_trace_time_job_with_every_duration_divided():
    slow, slow_problems = parse_job(plans.job_doc(PLAN, wall=False))
    fast, fast_problems = parse_job(plans.job_doc(PLAN, wall=True, command=["worker"]))
    assert slow_problems == [] and fast_problems == []
    for get in (
        lambda j: j.spec.forecast.interval,
        lambda j: j.spec.forecast.horizon,
        lambda j: j.spec.rescale.duration,
        lambda j: j.spec.slo.max_delay,
        lambda j: j.spec.forecast.refit,
    ):
        assert get(fast) == pytest.approx(get(slow) / PLAN.speedup)
    assert fast.spec.target.kind == "Local" and slow.spec.target.kind == "DryRun"
    assert PLAN.tick_s == pytest.approx(1.0)  # one decision a second by default


def test_the_compressed_planner_decides_as_the_trace_time_planner_step_for_step():
    """The live demo runs the planner on the compressed job with :func:`planner_settings`;
    every window it counts in steps (hold, tail, fallback, the ``maxPerHour`` hour) must be
    the trace-time planner's, or the live run stops matching the simulated one (it once
    counted maxPerHour over 3600 compressed seconds = 600 trace hours, and never resized)."""
    model = plans.load_model(PLAN)
    slow_job, _ = parse_job(plans.job_doc(PLAN, wall=False))
    fast_job, _ = parse_job(plans.job_doc(PLAN, wall=True, command=["worker"]))
    slow = sizing_for(slow_job, model, interval_s=PLAN.interval_s)
    fast = sizing_for(fast_job, model, interval_s=PLAN.interval_s / PLAN.speedup)
    rates = np.asarray(plans.on_interval(PLAN, plans.trace(PLAN, slow.peak_throughput)))
    rates = rates[: int(2 * 86400 / PLAN.interval_s)]  # two days: troughs and peaks
    horizon = round(PLAN.horizon_s / PLAN.interval_s)
    base = replace(KaleSettings(), horizon_steps=horizon)
    fast_settings = replace(planner_settings(PLAN), horizon_steps=horizon)
    a = KalePolicy(slow, TrueFuture(rates), settings=base)
    b = KalePolicy(fast, TrueFuture(rates), settings=fast_settings)
    assert (a.hour_steps, a.plan_settings.hold_steps, a.plan_settings.tail_steps) == (
        b.hour_steps,
        b.plan_settings.hold_steps,
        b.plan_settings.tail_steps,
    )
    assert a.lookback_steps == b.lookback_steps
    ra, rb = simulate(a, slow, rates), simulate(b, fast, rates)
    assert ra.rescale_count >= 2  # the trace moves the planner: the comparison means something
    assert list(ra.workers) == list(rb.workers)


def test_a_scaled_model_scales_every_size_by_the_same_factor():
    model = plans.load_model(PLAN)
    scaled = plans.scaled_model(model, 0.01)
    for w in (1, 3, 8, 16, 49):
        p = -(-w // 4)
        assert scaled.throughput(w, p, warn=False) == pytest.approx(
            0.01 * model.throughput(w, p, warn=False)
        )


def test_the_trace_peaks_where_planned_and_the_replay_is_thinned_to_the_record_budget():
    model = plans.load_model(PLAN)
    job, _ = parse_job(plans.job_doc(PLAN, wall=False))
    sizing = sizing_for(job, model, interval_s=PLAN.interval_s)
    series = plans.trace(PLAN, sizing.peak_throughput)
    assert series.max() == pytest.approx(PLAN.peak_fraction * sizing.peak_throughput)
    days = (series.index[-1] - series.index[0]).total_seconds() / 86400
    assert days >= PLAN.history_days + PLAN.live_days
    origin = plans.trace_origin(PLAN, series)
    assert (origin - series.index[0]).total_seconds() == PLAN.history_days * 86400
    live = series[series.index >= origin]
    assert live.max() * plans.records_scale(PLAN, series) == pytest.approx(PLAN.records_at_peak)
    assert len(plans.on_interval(PLAN, series)) == len(series) * 60 // PLAN.interval_s


@pytest.mark.parametrize(
    "kwargs", [{"minutes": 0}, {"speedup": 10_000}, {"rescale_s": 9000.0}, {"history_days": 0.5}]
)
def test_impossible_plans_are_refused(kwargs):
    with pytest.raises(ValueError):
        DemoPlan(**kwargs)


def test_the_warp_puts_the_measured_history_after_the_seed_in_trace_time():
    interval, speedup = 600.0, 600.0
    seed = pd.Series(
        np.arange(10.0), index=pd.date_range("2026-01-05", periods=10, freq="600s", tz="UTC")
    )
    trace0 = seed.index[-1].timestamp() + interval
    wall0 = 1_800_000_000.0
    measured = pd.Series(
        [100.0, 101.0, 102.0, 103.0, 105.0],
        index=pd.date_range(pd.Timestamp(wall0 - 2, unit="s", tz="UTC"), periods=5, freq="1s"),
    )
    measured = measured.drop(measured.index[3])  # a tick was skipped
    wf = WarpedForecaster(
        None,
        seed=seed,
        wall_origin=wall0,
        trace_origin=trace0,
        speedup=speedup,
        interval_s=interval,
    )
    out = wf.warp(measured)
    # The two points before the live start are dropped; the gap is filled forward.
    assert out.tolist() == [*range(10), 102.0, 102.0, 105.0]
    assert out.index[10].timestamp() == trace0 and out.index.freq == pd.Timedelta("600s")


def test_a_warped_forecaster_finds_the_daily_season_of_the_seed():
    day = 144  # ten-minute steps
    t = np.arange(7 * day)
    seed = pd.Series(
        100 + 80 * np.sin(2 * np.pi * t / day),
        index=pd.date_range("2026-01-05", periods=len(t), freq="600s", tz="UTC"),
    )
    trace0 = seed.index[-1].timestamp() + 600.0
    wall0 = 1_800_000_000.0
    live = pd.Series(
        100 + 80 * np.sin(2 * np.pi * np.arange(len(t), len(t) + 6) / day),
        index=pd.date_range(pd.Timestamp(wall0, unit="s", tz="UTC"), periods=6, freq="1s"),
    )
    wf = WarpedForecaster(
        make_forecaster("seasonal_naive"),
        seed=seed,
        wall_origin=wall0,
        trace_origin=trace0,
        speedup=600.0,
        interval_s=600.0,
    )
    fc = wf.fit(live).predict(3, history=live)
    want = 100 + 80 * np.sin(2 * np.pi * np.arange(len(t) + 6, len(t) + 9) / day)
    assert fc.mean == pytest.approx(want, rel=1e-6)


def _row(t: float, *, age: float, workers: int, to: int | None = None) -> dict:
    return {
        "t": t,
        "oldest_age": age,
        "workers": workers,
        "resized": int(to is not None),
        "desired_workers": workers if to is None else to,
    }


def test_live_metrics_count_violations_delay_resizes_and_gpu_hours_in_trace_time():
    plan = DemoPlan(speedup=600.0, interval_s=600.0, slo_s=1800.0, rescale_s=600.0)
    w0 = 1000.0
    rows = [
        _row(w0 - 1, age=9.0, workers=9),  # before the replay: ignored
        _row(w0 + 1, age=0.1, workers=2),
        _row(w0 + 2, age=4.0, workers=4, to=3),  # 40 min > 30 min SLO; a scale-down
        _row(w0 + 4, age=1.0, workers=3),  # a skipped tick: counts for two steps
        _row(w0 + 5, age=0.0, workers=3),
    ]
    m, series = live_metrics(rows, plan, wall_origin=w0, wall_end=w0 + 6, trace_origin=5e8)
    assert m["steps"] == 4
    assert m["slo_violation_rate"] == pytest.approx(0.25)
    assert m["rescale_count"] == 1 and m["downtime_min"] == 10.0
    assert m["cumulative_delay_min"] == pytest.approx((60 + 2400 + 600 * 2 + 0) / 60)
    # Each row's size over the time since the previous tick, plus the old size held for the
    # rescale (one wall second) after the scale-down.
    assert m["gpu_hours"] == pytest.approx((2 * 1 + 4 * 1 + 3 * 2 + 3 * 1 + 1) * 600 / 3600)
    assert m["max_delay_min"] == pytest.approx(40.0)
    assert series["time"][0] == 5e8 + 600.0 and series["workers"] == [2, 4, 3, 3]
    text = format_table({"policies": {"kale-live": m}, "lower_bound_gpu_hours": 2.0})
    # Violations as a percentage, every number through the one formatter (never 2.667).
    assert "kale-live" in text and " 25% " in text and " 2.67 " in text


def test_the_closing_table_says_how_many_and_where():
    from autoscaler.sim.placement_replay import PlacementSettings, replay_workers

    metrics = {"slo_violation_rate": 0.0, "gpu_hours": 3.0, "mean_workers": 2.0}
    sizes = np.array([2, 2, 5, 5, 3, 8, 8, 2])
    where = {"kale": replay_workers(sizes, 1, PlacementSettings(policy="fgd", nodes=16))}
    result = {"policies": {"kale": metrics}, "placement": where, "lower_bound_gpu_hours": 2.0}
    text = "\n".join(closing_lines(result, PLAN, wall_s=1, interrupted=False, state_dir=None))
    assert "where their workers land (fgd on a shared 16-node cluster" in text
    assert "pending" in text and "frag_free" in text
    assert where["kale"]["resizes"] == 4 and where["kale"]["max_nodes_used"] >= 1
    no_where = closing_lines(
        {**result, "placement": {}}, PLAN, wall_s=1, interrupted=False, state_dir=None
    )
    assert not any("where their workers land" in line for line in no_where)


def test_live_metrics_of_a_run_with_no_tick_say_so():
    m, series = live_metrics([], PLAN, wall_origin=0.0, wall_end=10.0)
    assert m == {"steps": 0} and series["time"] == []


@pytest.mark.parametrize("partitions,workers", [(16, 1), (16, 5), (16, 16), (4, 6)])
def test_workers_split_the_partitions_round_robin(partitions, workers):
    parts = [my_partitions(partitions, workers, i) for i in range(workers)]
    assert sorted(p for ps in parts for p in ps) == list(range(partitions))
    sizes = [len(ps) for ps in parts]
    assert max(sizes) - min(sizes) <= 1
    capacity = [100.0 * w for w in range(1, 17)]
    total = sum(worker_rate(capacity, workers, len(ps), partitions) for ps in parts)
    assert total == pytest.approx(capacity[workers - 1])  # together they run at f(w)


def test_a_worker_outside_the_job_is_refused():
    with pytest.raises(ValueError):
        my_partitions(16, 4, 4)


def test_the_pacer_lets_through_the_rate_and_a_small_burst_only():
    pacer = Pacer(100.0, burst_s=0.2, now=0.0)
    assert pacer.allowance(0.05) == 5
    pacer.spend(5)
    assert pacer.allowance(10.0) == 20  # an idle worker saves at most the burst
    pacer.spend(20)
    assert pacer.allowance(10.0) == 0


def test_the_downtime_counts_from_the_resize_when_it_is_known(tmp_path):
    stamp = tmp_path / "resize-started"
    assert ready_time(1.0, stamp_file=str(stamp), started=50.0) == 51.0  # no stamp yet
    stamp.write_text("49.5")
    assert ready_time(1.0, stamp_file=str(stamp), started=50.0) == 50.5
    stamp.write_text("10.0")  # an old resize: count from the process start
    assert ready_time(1.0, stamp_file=str(stamp), started=50.0) == 51.0
    assert math.isfinite(ready_time(0.0))
