"""Trace preparation (resample, scale-peak, warm-up) and job → sizing translation."""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler.job.loading import parse_job
from autoscaler.policy.sizing import sizing_for
from autoscaler.sim.runner import resample, scale_to_peak, warmup_steps_for
from common.errors import UserError


def test_resample_interpolates_a_coarser_trace_onto_a_finer_grid():
    # 5-minute points 0, 50, 100 onto 1 minute: linear between points, the last one held.
    got = resample(np.array([0.0, 50.0, 100.0]), 300, 60)
    assert got.tolist() == pytest.approx(
        [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 100, 100, 100, 100]
    )


def test_resample_to_a_coarser_step_averages_whole_blocks():
    got = resample(np.array([1.0, 3.0, 5.0, 7.0, 9.0]), 60, 120)
    assert got.tolist() == [2.0, 6.0]  # the incomplete last block is dropped


def test_resample_rejects_steps_that_do_not_fit_the_interval():
    with pytest.raises(UserError, match="divide"):
        resample(np.ones(4), 300, 70)
    with pytest.raises(UserError, match="multiple"):
        resample(np.ones(4), 60, 90)


def test_scale_peak_sets_the_maximum_to_k_times_the_peak_throughput():
    values, scale = scale_to_peak(np.array([1.0, 4.0, 2.0]), 0.8, 1000.0)
    assert values.max() == pytest.approx(800) and scale == pytest.approx(200)
    same, one = scale_to_peak(np.array([1.0, 4.0]), None, 1000.0)
    assert one == 1.0 and same.tolist() == [1.0, 4.0]
    with pytest.raises(UserError, match="all zeros"):
        scale_to_peak(np.zeros(3), 0.8, 1000.0)


def test_warm_up_must_leave_something_to_evaluate():
    assert warmup_steps_for(1, 60, 2000) == 1440
    with pytest.raises(UserError, match="warm-up"):
        warmup_steps_for(2, 60, 2880)


def _job(duration="5m", ratio=4):
    data = {
        "apiVersion": "kale.dev/v1alpha1",
        "kind": "ElasticTrainingJob",
        "metadata": {"name": "j"},
        "spec": {
            "source": {
                "kafka": {"bootstrapServers": ["h:9092"], "topic": "t", "consumerGroup": "g"}
            },
            "training": {
                "mode": "sync",
                "globalBatchSize": 4096,
                "workersPerPS": ratio,
                "minWorkers": 2,
                "maxWorkers": 16,
                "gpusPerWorker": 2,
            },
            "slo": {"maxDelay": "10m"},
            "rescale": {"duration": duration},
            "throughput": {"model": "m.json"},
            "target": {"kind": "DryRun"},
        },
    }
    if duration == "auto":
        data["spec"]["rescale"]["measurement"] = "x.json"
    job, problems = parse_job(data)
    assert job is not None and not problems, problems
    return job


def _model(ratio=4):
    from throughput.model import ThroughputModel

    return ThroughputModel(
        family="fixed-ratio",
        mode="sync",
        theta=(0.05, 2.0, 0.002),
        global_batch=4096,
        ratio=ratio,
        min_workers=1,
        max_workers=64,
    )


def test_sizing_tabulates_the_model_with_p_tied_by_the_jobs_ratio():
    model = _model()
    s = sizing_for(_job(), model, interval_s=300)
    w = np.arange(1, 17)
    assert s.capacity[0] == 0
    assert s.capacity[1:].tolist() == pytest.approx(model.throughput(w, -(-w // 4)).tolist())
    assert (s.min_workers, s.max_workers, s.ratio, s.gpus_per_worker) == (2, 16, 4, 2)
    assert (s.interval_s, s.rescale_s, s.slo_s) == (300, 300, 600)
    t = sizing_for(_job(), model, rescale_s=60, slo_s=900)
    assert (t.rescale_s, t.slo_s) == (60, 900)


def test_sizing_refuses_a_ratio_the_model_cannot_honour_and_an_unmeasured_auto_rescale():
    with pytest.raises(UserError, match="workersPerPS"):
        sizing_for(_job(ratio=8), _model(ratio=4))
    with pytest.raises(UserError, match="--rescale"):
        sizing_for(_job(duration="auto"), _model())
    assert sizing_for(_job(duration="auto"), _model(), rescale_s=240).rescale_s == 240


def test_each_job_of_a_multi_job_run_forecasts_with_its_own_source():
    import pandas as pd

    from autoscaler.policy.forecasts import ForecastWindow
    from autoscaler.sim.runner import MultiJob, compare_multi

    calls: dict[str, int] = {"a": 0, "b": 0}
    starts = {"a": pd.Timestamp("2026-01-05", tz="UTC"), "b": pd.Timestamp("2026-03-02", tz="UTC")}

    class Constant:
        def __init__(self, name: str, rate: float) -> None:
            self.name, self.rate = name, rate

        def window(self, step, past, horizon):
            calls[self.name] += 1
            v = np.full(horizon, self.rate)
            return ForecastWindow(v, v, v, source=self.name)

    sizing = sizing_for(_job(), _model(), interval_s=300)
    load = np.full(40, 0.3 * sizing.peak_throughput)
    jobs = [
        MultiJob(
            n,
            sizing,
            load,
            job=_job(),
            trace_start=starts[n],
            forecaster_factory=lambda n=n: Constant(n, 0.3 * sizing.peak_throughput),
        )
        for n in ("a", "b")
    ]
    runs = compare_multi(jobs, ["kale"], quota_gpus=64, warmup_steps=10)
    assert set(runs["kale"].results) == {"a", "b"}
    assert calls["a"] > 0 and calls["b"] > 0
