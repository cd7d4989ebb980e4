"""A simulated run describes the controller: one trace, two drivers, the same decision each step.

The controller side is the real reconcile loop (fake clock, a DryRun target, an in-memory
metric source that reports the queue of the simulator's own engine, so both sides see the
same backlog); the simulator side is ``make_policy("kale")`` with the simulator's forecast
source. Both drive the one forecast feed; the job asks for a quantile the forecaster does not
produce (p80), refits every 12 h and starts with a day of history, so the refit schedule, the
early refit of a young history, the forecast grid and the quantile choice all take part.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from autoscaler.actuators.base import Size
from autoscaler.actuators.dryrun import DryRunActuator
from autoscaler.controller.jobs import DirectoryJobs, Listing
from autoscaler.controller.loop import Controller
from autoscaler.controller.metering import ArrivalHistory, Sample
from autoscaler.controller.settings import ControllerSettings
from autoscaler.job.loading import load_job
from autoscaler.policy.kale import KaleSettings
from autoscaler.policy.sizing import sizing_for
from autoscaler.sim.engine import JobRun, simulate
from autoscaler.sim.forecasting import source_factory
from autoscaler.sim.policies import make_policy
from tests.support.controller_fakes import T0, FakeClock, daily_rate, job_doc, write_job
from throughput.model import ThroughputModel

ROOT = Path(__file__).resolve().parents[2]
DT = 300.0  # 5-minute steps keep three days short: 864 steps, 576 of them decided
WARM = 288
REFORECAST = 6  # a new forecast every 30 min, sliced in between (both sides)


class Recorder:
    def __init__(self, inner):
        self.inner, self.name, self.decisions = inner, inner.name, []

    def decide(self, obs, state):
        d = self.inner.decide(obs, state)
        self.decisions.append(d.workers)
        return d


class EngineMetrics:
    """The controller's metric source, read from a simulator engine run (no Kafka)."""

    def __init__(self, run: JobRun, start_s: float) -> None:
        self.run, self.start_s = run, start_s

    def sample(self) -> Sample:
        obs = self.run.observe()
        return Sample(
            time=self.start_s + obs.time_s,
            arrival_rate=float(obs.arrivals[-1]),
            consumption_rate=obs.processed_rate,
            lag=obs.backlog,
            oldest_age_s=obs.oldest_age_s,
        )

    def arrivals(self, now: float, interval_s: float, history_s: float) -> ArrivalHistory:
        return ArrivalHistory(self.start_s, interval_s, np.array(self.run.observe().arrivals))

    def close(self) -> None:
        pass


class OneJob:
    """The jobs source: one job file, listed once (reading YAML every tick is not the point)."""

    def __init__(self, folder: Path) -> None:
        self.listing: Listing = DirectoryJobs(folder).list()

    def list(self) -> Listing:
        return self.listing


@pytest.mark.parametrize("planner", ["moves", "dp"])
def test_the_controller_and_the_simulator_make_the_same_decision_at_every_step(tmp_path, planner):
    doc = job_doc(forecast_model="seasonal_naive", interval="5m", rescale="10m", slo="30m")
    doc["spec"]["forecast"].update(refit="12h", quantile=0.8, horizon="2h")
    loaded = load_job(write_job(tmp_path / "jobs", doc))
    sizing = sizing_for(loaded, ThroughputModel.load(loaded.throughput_model_path), interval_s=DT)
    rng = np.random.default_rng(3)
    times = T0 + DT * np.arange(3 * 288)
    rates = np.array([daily_rate(t, high=0.8 * sizing.peak_throughput) for t in times])
    rates *= rng.lognormal(0.0, 0.08, len(rates))
    rates[500:512] *= 1.6  # a burst the forecast cannot know: the reactive plan takes part
    w0 = sizing.workers_for(rates[WARM - 1])[0]

    # -- the simulator -----------------------------------------------------------------------
    fc = loaded.job.spec.forecast
    factory = source_factory(
        "seasonal_naive",
        start=pd.Timestamp(T0, unit="s", tz="UTC"),
        interval_s=DT,
        horizon_steps=round(fc.horizon / DT),
        refit_s=fc.refit,
        quantile=fc.quantile,
        predict_every=REFORECAST,
    )
    kale = Recorder(
        make_policy(
            "kale", sizing=sizing, job=loaded.job, forecaster_factory=factory, planner=planner
        )
    )
    sim = simulate(kale, sizing, rates, warmup_steps=WARM, initial_workers=w0)

    # -- the controller, on the simulator's queue ---------------------------------------------
    clock = FakeClock(T0 + WARM * DT)
    run = JobRun(sizing, rates, warmup_steps=WARM, initial_workers=w0)
    target = DryRunActuator(Size(w0, sizing.ps_for(w0)))
    make = factory().make  # the same forecaster the simulator fits
    controller = Controller(
        jobs_source=OneJob(tmp_path / "jobs"),
        meter_factory=lambda e: EngineMetrics(run, T0),
        forecaster_factory=lambda e: make(),
        actuator_factory=lambda e: target,
        sizing_factory=lambda e: sizing,
        clock=clock,
        settings=ControllerSettings(
            identity="test",
            reforecast_s=REFORECAST * DT,
            planner=KaleSettings(planner=planner),
        ),
    )
    planned, sources = [], set()
    while not run.done:
        clock.t = T0 + run.t * DT
        (report,) = controller.tick()
        planned.append(report.planned.workers)
        sources.add(report.forecast.get("model"))
        run.apply(target.current().workers)
        run.serve()
    controller.close()

    assert len(planned) == len(kale.decisions) == len(rates) - WARM
    differ = [i for i, (a, b) in enumerate(zip(planned, kale.decisions, strict=True)) if a != b]
    assert not differ, f"first difference at step {WARM + differ[0]}"
    ctrl = run.result("controller")
    assert ctrl.events == sim.events and len(sim.events) >= 4  # it did resize, both the same
    assert np.array_equal(ctrl.delay, sim.delay)
    assert sources == {"seasonal_naive"}
    # Fitted on the first decided step's history, then every 12 h on the history up to then.
    fits = kale.inner.source.feed.fits
    assert [(f.step - fits[0].step, f.length) for f in fits] == [
        (0, 288),
        (144, 432),
        (288, 576),
        (432, 720),
    ]
