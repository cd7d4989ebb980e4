"""The demo's controller in compressed time: its job file, planner, forecasters, actuators.

Why this module exists: the demo runs the controller exactly as ``kale controller`` builds it
(:func:`autoscaler.controller.app.build`); what differs is time — every duration of the job
divided by the speed-up, the planner's windows too, forecasts warped between wall and trace
time — and a stamp at each resize start that the paced workers count their downtime from.
Those differences are passed in through :class:`~autoscaler.controller.app.BuildOptions`;
nothing is patched after ``build``.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from autoscaler.actuators.base import Actuator, Size
from kale.demo import plan as plans
from kale.demo.plan import DemoPlan
from kale.demo.segment import DemoSetup

if TYPE_CHECKING:
    from autoscaler.controller.app import App
    from autoscaler.controller.jobs import JobEntry
    from autoscaler.policy.kale import KaleSettings

TOPIC = "clicks"
GROUP = "ctr-trainer"


def write_job_file(setup: DemoSetup, *, bootstrap: str, stamp_path: Path) -> Path:
    """The example CTR job with every duration divided by the speed-up, its workers the
    paced demo consumers (one per worker, at the fitted throughput of the job's size)."""
    plan = setup.plan
    jobs = setup.state / "jobs"
    jobs.mkdir(exist_ok=True)
    model_path = jobs / "ctr-sync-demo.json"
    plans.scaled_model(setup.model, setup.records_scale).save(model_path)
    caps = [setup.records_scale * setup.sizing.rate(w) for w in range(1, plan.max_workers + 1)]
    command = [
        sys.executable,
        "-m",
        "autoscaler.kafka.local.demo_consumer",
        "--bootstrap",
        bootstrap,
        "--topic",
        TOPIC,
        "--group",
        GROUP,
        "--capacity",
        ",".join(f"{c:.6g}" for c in caps),
        "--ready-after",
        f"{plan.wall(plan.rescale_s):.6g}",
        "--resize-stamp",
        str(stamp_path),
    ]
    doc = plans.job_doc(
        plan,
        wall=True,
        bootstrap=bootstrap,
        topic=TOPIC,
        group=GROUP,
        model=model_path.name,
        command=command,
    )
    path = jobs / "ctr-model.yaml"
    path.write_text(
        "# kale demo: the example CTR job, every duration divided by "
        f"{plan.speedup:g}\n" + yaml.safe_dump(doc, sort_keys=False),
        encoding="utf-8",
    )
    return path


def build_app(setup: DemoSetup, *, wall_origin: Callable[[], float], stamp_path: Path) -> App:
    """The controller exactly as ``kale controller`` builds it, with the demo's time base
    passed in: planner windows and forecasts in compressed time, stamped resizes.

    ``wall_origin`` gives the wall time the replay starts at (known only once the broker
    and the workers are up, so it is read when a job's forecaster is made)."""
    from autoscaler.controller.app import BuildOptions, build
    from autoscaler.controller.config import parse_controller_config

    plan, state = setup.plan, setup.state
    cfg = parse_controller_config(
        {
            "apiVersion": "kale.dev/v1alpha1",
            "kind": "ControllerConfig",
            "interval": plan.tick_s,
            "jobs": {"directory": str(state / "jobs")},
            "quota": {"gpus": plan.quota_gpus},
            "metrics": {"port": 0},
            "meter": {"window": plan.tick_s, "timeout": 5.0, "threads": 1},
            "stateDir": str(state),
            "logFormat": "text",
            # Time is compressed: the job's interval is plan.tick_s, below the 10 s floor.
            "policy": {"limits": {"minForecastInterval": plan.tick_s}},
        },
        source="demo controller",
    )

    def stamped(entry: JobEntry, actuator: Actuator) -> Actuator:
        """Stamping each resize start, at the size the simulator starts at."""
        act = StampingActuator(actuator, stamp_path)
        act.apply(Size(setup.w0, setup.sizing.ps_for(setup.w0)))  # steady state, as simulated
        return act

    options = BuildOptions(
        planner=planner_settings(plan),
        forecaster_factory=forecasters(setup, wall_origin=wall_origin),
        wrap_actuator=stamped,
    )
    return build(cfg, options=options)


def planner_settings(plan: DemoPlan) -> KaleSettings:
    """The planner's defaults with its time windows divided by the speed-up."""
    from autoscaler.policy.kale import KaleSettings

    d = KaleSettings()
    k = plan.speedup
    return dataclasses.replace(
        d,
        hold_windows_s=tuple(h / k for h in d.hold_windows_s),
        fallback_window_s=d.fallback_window_s / k,
        tail_s=d.tail_s / k,
        budget_window_s=d.budget_window_s / k,
        timing_error_s=d.timing_error_s / k,
        noise_lookback_s=d.noise_lookback_s / k,
    )


def forecasters(setup: DemoSetup, *, wall_origin: Callable[[], float]) -> Callable[[JobEntry], Any]:
    """The configured model, warped between wall and trace time, seeded with the warm-up."""
    import pandas as pd

    from autoscaler.controller.factories import forecaster_factory
    from kale.demo.warp import WarpedForecaster

    plan = setup.plan
    base = forecaster_factory(plan.forecaster)
    warm = plan.warmup_steps
    # In the controller's units: records/s of the thinned replay.
    seed = pd.Series(
        setup.values[:warm] * setup.records_scale,
        index=pd.date_range(
            setup.trace.index[0], periods=warm, freq=pd.Timedelta(seconds=plan.interval_s)
        ),
    )

    def make(entry: JobEntry) -> Any:
        return WarpedForecaster(
            base(entry),
            seed=seed,
            wall_origin=wall_origin(),
            trace_origin=setup.trace_origin.timestamp(),
            speedup=plan.speedup,
            interval_s=plan.interval_s,
        )

    return make


def seed_history(state: Path, topic_partitions: int) -> None:
    """The topic starts empty: say so, so the meter does not backfill it."""
    from autoscaler.kafka.history import HistoryStore, StoredSnapshot

    with HistoryStore(state / "history.sqlite") as history:
        history.append(
            StoredSnapshot(
                topic=TOPIC,
                group=GROUP,
                time=time.time(),
                end_total=0,
                committed_total=0,
                lag=0,
                partitions=topic_partitions,
                source="demo",
            )
        )


class StampingActuator:
    """The Local actuator, writing when each resize begins to ``stamp`` first: the workers
    count their rescale downtime from it (see :mod:`autoscaler.kafka.local.demo_consumer`)."""

    def __init__(self, inner: Actuator, stamp: Path) -> None:
        self.inner = inner
        self.stamp = stamp
        self.kind = inner.kind

    def current(self) -> Size:
        return self.inner.current()

    def apply(self, size: Size) -> Size:
        self.stamp.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.stamp.with_suffix(".tmp")
        tmp.write_text(f"{time.time():.6f}", encoding="ascii")
        tmp.replace(self.stamp)
        return self.inner.apply(size)

    def close(self) -> None:
        self.inner.close()
