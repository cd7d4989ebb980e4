"""``kale plan`` as a library call: the controller's loop for one job file, never resizing.

Why this module exists: planning one job against live Kafka needs the same pieces as the
controller — the meter with its history, the forecaster factory, the planner — but a
read-only actuator: the current size comes from ``--current-workers``, from the cluster
(``--kubeconfig``, read only) or from ``minWorkers``. Building that is wiring, so it sits
next to :mod:`autoscaler.controller.app` rather than in the command.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from autoscaler.actuators.base import Actuator, Size
from autoscaler.actuators.dryrun import DryRunActuator
from autoscaler.controller.app import CLUSTER_KINDS, LazyKube, actuator_factory, meter_factory
from autoscaler.controller.config import ControllerConfig
from autoscaler.controller.factories import forecaster_factory
from autoscaler.controller.jobs import JobEntry, StaticJobs
from autoscaler.controller.loop import Controller
from autoscaler.controller.settings import ControllerSettings
from autoscaler.controller.status import JobReport
from autoscaler.job.loading import LoadedJob
from common.errors import UserError


@dataclass(frozen=True)
class PlanSettings:
    """Where ``kale plan`` keeps history and how it learns the current size."""

    state_dir: str = ".kale-state"
    """Where the arrival history is kept (shared with the controller's)."""
    window_s: float = 5.0
    """Seconds between the two Kafka snapshots of a first measurement."""
    current_workers: int | None = None
    """The current size (None: read from the cluster with ``kubeconfig``, else minWorkers)."""
    kubeconfig: str | None = None
    """Read the current size of the job's target from this cluster (read only)."""
    forecast_model: str | None = None
    """Use this model instead of ``spec.forecast.model``."""


class JobPlanner:
    """One job, planned every tick with the controller's own loop; nothing is ever applied."""

    def __init__(self, loaded: LoadedJob, settings: PlanSettings) -> None:
        self.loaded, self.settings = loaded, settings
        job = loaded.job
        self.interval_s = float(job.spec.forecast.interval)
        folder = str(loaded.path.parent) if loaded.path is not None else "."
        cfg = ControllerConfig.model_validate(
            {
                "jobs": {"directory": folder},
                "stateDir": settings.state_dir,
                "meter": {"window": settings.window_s},
            }
        )
        self.kube = LazyKube(kubeconfig=settings.kubeconfig, context=None)
        self.controller = Controller(
            jobs_source=StaticJobs([loaded]),
            meter_factory=meter_factory(cfg, block_first=True),
            forecaster_factory=forecaster_factory(settings.forecast_model),
            actuator_factory=self._actuator,
            settings=ControllerSettings(
                interval_s=self.interval_s, dry_run=True, forecast_model=settings.forecast_model
            ),
        )

    def _actuator(self, entry: JobEntry) -> Actuator:
        s, job = self.settings, self.loaded.job
        reads_cluster = s.kubeconfig is not None and job.spec.target.kind in CLUSTER_KINDS
        if reads_cluster and s.current_workers is None:
            return DryRunActuator(reader=actuator_factory(self.kube)(entry), label=entry.key)
        w = job.spec.training.min_workers if s.current_workers is None else s.current_workers
        ratio = job.spec.training.workers_per_ps
        return DryRunActuator(Size(w, -(-w // ratio) if w else 0), label=entry.key)

    def tick(self) -> JobReport:
        """One round: measure, forecast, plan. A job that cannot be planned is a UserError."""
        reports = self.controller.tick()
        if not reports:
            problems = [p for lines in self.controller.invalid.values() for p in lines]
            where = self.loaded.path or self.loaded.name
            raise UserError(f"{where}: the job could not be planned: " + "; ".join(problems))
        return reports[0]

    def wait_for_next_tick(
        self, *, sleep: Callable[[float], None] = time.sleep, now: Callable[[], float] = time.time
    ) -> None:
        """Sleep to the next whole interval (ticks stay on the job's grid)."""
        sleep(self.interval_s - now() % self.interval_s)

    def close(self) -> None:
        self.controller.close()
        self.kube.close()

    def __enter__(self) -> JobPlanner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
