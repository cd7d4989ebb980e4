"""One job's long-lived pieces in the controller: what outlives a tick.

Everything per job that a later tick needs lives on :class:`JobRuntime` — sizing, planner,
forecast cache, meter, actuator, saved state, and work still running on a pool thread.
What one tick learns about a job travels between the stages as values
(:mod:`autoscaler.controller.tick`) and is not kept here, except the latest observation,
which people read between ticks (a progress line, a test).
"""

from __future__ import annotations

import logging
import zlib
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from autoscaler.actuators.base import Actuator, Size
from autoscaler.controller.forecast import ForecastCache, GivenForecast
from autoscaler.controller.isolation import MAX_PLAN_STEPS, JobLimitError, steps
from autoscaler.controller.jobs import JobEntry
from autoscaler.controller.metering import MetricSource, Sample
from autoscaler.controller.state import JobState
from autoscaler.controller.tick import NOTHING_OBSERVED, Observation
from autoscaler.policy.behavior import behaved
from autoscaler.policy.kale import KalePolicy, KaleSettings
from autoscaler.policy.types import JobSizing
from common.errors import MetricUnavailable

log = logging.getLogger(__name__)


class JobRuntime:
    """One job's long-lived pieces: sizing, planner, forecast cache, meter, actuator, state."""

    def __init__(
        self,
        entry: JobEntry,
        *,
        sizing: JobSizing,
        forecast: ForecastCache,
        meter: MetricSource,
        actuator: Actuator,
        state: JobState,
        planner: KaleSettings | None,
    ) -> None:
        self.entry = entry
        self.key = entry.key
        """``namespace/name`` (a rebuilt or re-credentialed entry keeps it)."""
        self.sizing = sizing
        self.forecast = forecast
        self.meter = meter
        self.actuator = actuator
        self.state = state
        settings = replace(
            planner or KaleSettings(),
            horizon_steps=forecast.horizon_steps,
            band_quantile=float(entry.job.spec.forecast.quantile),
        )
        # The planner looks back this far (SLO window, the reactive fallback, a margin).
        back = steps(
            max(settings.fallback_window_s, sizing.slo_s),
            sizing.interval_s,
            what="spec.slo.maxDelay",
        )
        self.past_steps = back + settings.horizon_steps + 4
        if self.past_steps > MAX_PLAN_STEPS:
            raise JobLimitError(
                f"the planner would look back {self.past_steps} intervals; the controller "
                f"handles at most {MAX_PLAN_STEPS} per job"
            )
        self.forecast_given = GivenForecast(forecast.name)
        """The planner's forecast source: the plan stage hands it each decision's window."""
        self.policy = behaved(
            KalePolicy(sizing, self.forecast_given, settings=settings),
            entry.job.spec,
            sizing,
            always=True,  # a decision without metrics goes through it (hold, or the fallback)
        )
        self.observed: Observation = NOTHING_OBSERVED
        """What the latest tick observed (the stages pass it along as a value; this copy is
        for readers between ticks)."""
        self.last_observed: tuple[float, Sample, Size] | None = None
        """(time, sample, size) of the latest tick that measured both: what a progress line
        shows (``observed`` has neither while a tick cannot measure)."""
        self.shard: int | None = None
        """The job's shard when jobs are spread over replicas (None: they are not)."""
        self.gauge_basis: object | None = None
        """What the job's gauges take from its sizing and spec alone
        (:class:`~autoscaler.controller.job_metrics.JobBasis`), made at the first report."""
        self.saved_view: object | None = None
        """:func:`~autoscaler.controller.state.restart_view` of the state last written (a
        private copy; None: not written by this process yet, or it could not be copied)."""
        self.save_phase = zlib.crc32(self.key.encode())
        """Which ticks write the state when nothing a restart needs changed (spread over
        the jobs, so that no tick writes them all)."""
        self.logged_failures: set[tuple[str, str]] = set()
        """(stage, error) pairs already logged with a traceback (later ones log one line)."""
        # Work that outlives a tick.
        self.reading: Future[Any] | None = None
        """The target read running on a pool thread past its tick's deadline."""
        self.measuring: Future[Any] | None = None
        """The measurement running on a pool thread (None: none running)."""
        self.measuring_since = 0.0
        self.measured_at: float | None = None
        """When a measurement last finished in time (the oldest are measured first)."""
        self.applying: Future[Any] | None = None
        """A resize write still running on a pool thread after its tick's deadline."""
        self.writing: Future[Any] | None = None
        """A status write still running on a pool thread after its tick's deadline."""

    @property
    def current(self) -> Size | None:
        """The size the latest tick read (None: it could not)."""
        return self.observed.current

    @property
    def sample(self) -> Sample | None:
        """The Kafka sample the latest tick took (None: it could not)."""
        return self.observed.sample

    @property
    def metric_error(self) -> MetricUnavailable | None:
        """Why the latest tick has no sample."""
        return self.observed.metric_error

    def resizing(self, now: float) -> tuple[bool, float]:
        started = self.state.resize_started
        if started is None:
            return False, 0.0
        left = started + self.sizing.rescale_s - now
        return left > 0, max(0.0, left)

    def close(self) -> None:
        self.forecast.close()
        for part in (self.meter, self.actuator):
            try:
                part.close()
            except Exception:  # closing must not stop the others
                log.exception("closing %s of %s", type(part).__name__, self.key)
