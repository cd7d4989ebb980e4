"""One job's long-lived pieces in the controller, and what one tick learned about it.

Kept apart from the loop so the loop reads as the tick's stages; everything per job that
outlives a tick (sizing, planner, forecast cache, meter, actuator, saved state, work still
running on a pool thread) lives on :class:`JobRuntime`.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from autoscaler.actuators.base import Actuator, Size
from autoscaler.controller.forecast import ForecastCache
from autoscaler.controller.isolation import MAX_PLAN_STEPS, JobFailure, JobLimitError, steps
from autoscaler.controller.jobs import JobEntry
from autoscaler.controller.metering import ArrivalHistory, MetricSource, Sample
from autoscaler.controller.state import Condition, JobState
from autoscaler.job.overrides import Override
from autoscaler.policy.forecasts import CallbackSource, ForecastWindow
from autoscaler.policy.kale import KalePolicy, KaleSettings
from autoscaler.policy.types import JobSizing
from common.errors import MetricUnavailable
from kube.errors import ActuatorError

log = logging.getLogger(__name__)


@dataclass
class Observed:
    """What one measurement task found (built on a pool thread, applied by the loop)."""

    current: Size | None = None
    target_error: ActuatorError | None = None
    sample: Sample | None = None
    metric_error: MetricUnavailable | None = None
    history: ArrivalHistory | None = None
    unexpected: list[tuple[str, BaseException]] | None = None
    """Exceptions of unexpected types, turned into the errors above (counted per job)."""


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
        self.sizing = sizing
        self.forecast = forecast
        self.meter = meter
        self.actuator = actuator
        self.state = state
        self.window: ForecastWindow | None = None
        settings = replace(planner or KaleSettings(), horizon_steps=forecast.horizon_steps)
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
        self.policy = KalePolicy(
            sizing, CallbackSource(self._window, name=forecast.name), settings=settings
        )
        # Scratch of the current tick.
        self.current: Size | None = None
        self.sample: Sample | None = None
        self.last_observed: tuple[float, Sample, Size] | None = None
        """(time, sample, size) of the latest tick that measured both: what a progress line
        shows (``sample`` and ``current`` are cleared while a tick measures again)."""
        self.history: ArrivalHistory | None = None
        self.problem: str | None = None
        self.target_error: ActuatorError | None = None
        self.metric_error: MetricUnavailable | None = None
        self.saved_policy: dict[str, Any] | None = None
        self.override: Override | None = None
        """A pause or pin in force this tick (:mod:`autoscaler.job.overrides`), set by the plan."""
        """The planner state before this tick's decision, restored if nothing was applied."""
        self.failure: JobFailure | None = None
        """The first unexpected exception of this tick (the job then holds)."""
        self.events: list[tuple[str, str, str]] = []
        """(reason, message, type) of the Events this tick raised, sent with the status."""
        self.tick_conditions: list[Condition] = state.conditions
        """The conditions as the tick found them (a failure report compares with these)."""
        # Work that outlives a tick.
        self.measuring: Future[Observed] | None = None
        """The measurement running on a pool thread (None: none running)."""
        self.measuring_since = 0.0
        self.measured_at: float | None = None
        """When a measurement last finished in time (the oldest are measured first)."""
        self.applying: Future[Any] | None = None
        """A resize write still running on a pool thread after its tick's deadline."""
        self.writing: Future[Any] | None = None
        """A status write still running on a pool thread after its tick's deadline."""

    def begin_tick(self) -> None:
        self.current = self.sample = self.history = None
        self.problem = self.target_error = self.metric_error = None
        self.window = None
        self.saved_policy = None
        self.override = None
        self.failure = None
        self.events = []
        self.tick_conditions = self.state.conditions

    def _window(self, step: int, past: np.ndarray, horizon: int) -> ForecastWindow | None:
        w = self.window
        if w is None or len(w) < horizon:
            return None
        return w

    @property
    def key(self) -> str:
        return self.entry.key

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
