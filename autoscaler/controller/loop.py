"""The reconcile loop: one :meth:`Controller.tick` measures, plans, approves and acts for all jobs.

A tick, level-triggered (it reads the world every time and acts on the difference, so
running it twice, or after a restart, converges to the same state):

1. **list** the jobs (directory or cluster); a failure to list skips the tick and keeps every
   job as it is; jobs no longer listed are forgotten (their GPUs return to the pool);
2. **observe** each job: its current size from the actuator and a Kafka sample from its
   metric source (on bounded thread pools, waited for at most ``observe_deadline_s``: a job
   whose measurement is still running holds its size; it never holds up the others);
3. **plan** each job with the same :class:`KalePolicy` the simulator runs, fed the arrival
   history and a cached live forecast. Missing metrics mean *hold the current size* — never
   a zero load, never a scale to zero — and a ``MetricsAvailable=False`` condition;
4. **approve** all wishes in one round of the GPU :class:`ResourceManager` (priority,
   minimum guarantees, max-min fair when short) before any GPU is given or taken back;
5. **act** where the approved size differs from the current one, and **record**: status on
   the job (sizes, last decision, forecast summary, conditions, planner state), an Event per
   resize, Prometheus metrics, one JSON log line per decision, and the state store
   (:mod:`autoscaler.controller.acting`: resize markers, concurrent bounded writes).

The stages live in mixins, one module each: :mod:`~autoscaler.controller.job_sync` (1),
:mod:`~autoscaler.controller.observing` (2), :mod:`~autoscaler.controller.planning` (3, 4)
and :mod:`~autoscaler.controller.acting` (5); this module holds the wiring and the order of
the stages (the settings are :mod:`~autoscaler.controller.settings`).

Every stage runs every job under a guard (:mod:`autoscaler.controller.isolation`): an
exception of any type marks that job and the tick goes on with the others.

Everything with a clock takes ``clock`` (epoch seconds); nothing here sleeps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from autoscaler.actuators.base import Actuator
from autoscaler.controller.acting import ActingStages
from autoscaler.controller.forecast import FitPool
from autoscaler.controller.isolation import JobFailure, safe_text
from autoscaler.controller.job_sync import BuildFailure, JobSyncStages
from autoscaler.controller.jobs import JobEntry, JobsSource
from autoscaler.controller.metering import MetricSource
from autoscaler.controller.metrics import ControllerMetrics
from autoscaler.controller.observing import ObservingStages
from autoscaler.controller.planning import PlanningStages
from autoscaler.controller.runtime import JobRuntime
from autoscaler.controller.settings import Clock, ControllerSettings
from autoscaler.controller.sinks import EventSink, NullSink, StatusSink
from autoscaler.controller.state import MemoryStateStore, SavedState, StateStore
from autoscaler.controller.status import JobReport
from autoscaler.controller.timeline import TimelineStore
from autoscaler.controller.workers import DaemonPool
from autoscaler.policy.quota import ResourceManager
from autoscaler.policy.types import JobSizing
from common.errors import KaleError

log = logging.getLogger(__name__)


class Controller(JobSyncStages, ObservingStages, PlanningStages, ActingStages):
    """See the module docstring. All collaborators are injected:

    * ``jobs_source.list() -> Listing``;
    * ``meter_factory(entry) -> MetricSource``; ``forecaster_factory(entry) -> Forecaster``
      (fresh, unfitted); ``actuator_factory(entry) -> Actuator``;
    * ``sizing_factory(entry) -> JobSizing`` (default: from the job's throughput model);
    * ``resource_manager``: the GPU quota (None: unlimited);
    * ``status_sink``, ``event_sink``, ``metrics``, ``state_store``; ``clock`` (epoch s).
    """

    def __init__(
        self,
        *,
        jobs_source: JobsSource,
        meter_factory: Callable[[JobEntry], MetricSource],
        forecaster_factory: Callable[[JobEntry], Any],
        actuator_factory: Callable[[JobEntry], Actuator],
        resource_manager: ResourceManager | None = None,
        clock: Clock = time.time,
        sizing_factory: Callable[[JobEntry], JobSizing] | None = None,
        status_sink: StatusSink | None = None,
        event_sink: EventSink | None = None,
        metrics: ControllerMetrics | None = None,
        state_store: StateStore | None = None,
        settings: ControllerSettings | None = None,
        timeline: TimelineStore | None = None,
    ) -> None:
        self.jobs_source = jobs_source
        self.meter_factory = meter_factory
        self.forecaster_factory = forecaster_factory
        self.actuator_factory = actuator_factory
        self.resources = resource_manager
        self.clock = clock
        if sizing_factory is None:
            from autoscaler.controller.factories import ModelCache, job_sizing

            models = ModelCache()

            def sizing_factory(entry: JobEntry) -> JobSizing:
                return job_sizing(entry.loaded, models, model_data=entry.model_data)

        self.sizing_factory = sizing_factory
        self.status_sink: StatusSink = status_sink or NullSink()
        self.event_sink: EventSink = event_sink or NullSink()
        self._writes_status = not isinstance(self.status_sink, NullSink)
        self.metrics = metrics or ControllerMetrics()
        self.store: StateStore = state_store or MemoryStateStore()
        self.settings = settings or ControllerSettings()
        self.timeline = timeline
        """Per-tick history (:class:`~autoscaler.controller.timeline.TimelineStore`) or None."""
        self.runtimes: dict[str, JobRuntime] = {}
        self.invalid: dict[str, list[str]] = {}
        self._build_failures: dict[str, BuildFailure] = {}
        self.on_progress: Callable[[], None] | None = None
        """Called as slow work finishes (the runner beats the liveness probe with it)."""
        s = self.settings
        self._fits = FitPool(s.fit_threads) if s.fit_threads > 0 else None
        self._meter_pool = (
            DaemonPool(s.observe_threads, name="kale-observe") if s.observe_threads > 1 else None
        )
        self._act_pool = DaemonPool(s.act_threads, name="kale-act") if s.act_threads > 1 else None
        self.metrics.quota_total.set(
            -1 if resource_manager is None else resource_manager.quota_gpus
        )

    # -- the tick ------------------------------------------------------------------------
    def tick(self) -> list[JobReport]:
        """One reconcile round over every job; returns what happened to each."""
        started = time.perf_counter()
        now = self.clock()
        try:
            listing = self.jobs_source.list()
        except Exception as exc:  # whatever reading the jobs raised: skip, keep every job
            self.metrics.errors.labels(kind="list").inc()
            log.error(
                "cannot list jobs, keeping every job as it is: %s",
                safe_text(exc),
                exc_info=not isinstance(exc, KaleError | OSError),
                extra={"fields": {"event": "list_failed", "error": safe_text(exc)}},
            )
            return []
        self._sync(listing, now)
        runtimes = list(self.runtimes.values())
        for rt in runtimes:
            rt.begin_tick()
        self._collect_late_io(runtimes, now)
        self._observe_all(runtimes, now)
        for rt in runtimes:
            if rt.current is not None and rt.sample is not None:
                rt.last_observed = (now, rt.sample, rt.current)
        plans = {rt.key: self._guarded(rt, "plan", self._plan, rt, now) for rt in runtimes}
        approved = self._approve(runtimes, plans, now)
        reports = self._act_all(runtimes, plans, approved, now)
        self._save([rt for rt in runtimes if rt.key in self.runtimes])
        self.metrics.jobs.labels(state="valid").set(len(self.runtimes))
        self.metrics.jobs.labels(state="invalid").set(len(self.invalid))
        if self.resources is not None:
            self.metrics.quota_used.set(sum(self.resources.held.values()))
        self.metrics.tick_seconds.observe(time.perf_counter() - started)
        self.metrics.last_tick.set(now)
        return reports

    # -- isolation -----------------------------------------------------------------------
    def _guarded(self, rt: JobRuntime, stage: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` unless the job already failed this tick; an exception of any type
        marks the job (and returns None) instead of leaving the tick."""
        if rt.failure is not None:
            return None
        try:
            return fn(*args)
        except Exception as exc:
            self._fail(rt, stage, exc)
            return None

    def _fail(self, rt: JobRuntime, stage: str, exc: BaseException) -> None:
        failure = JobFailure.of(stage, exc)
        first = rt.failure is None
        if first:
            rt.failure = failure
        self.metrics.job_error(rt.key, stage, failure.error)
        seen: set[tuple[str, str]] = getattr(rt, "_logged_failures", set())
        known = (stage, failure.error) in seen
        seen.add((stage, failure.error))
        rt._logged_failures = seen  # type: ignore[attr-defined]
        log.error(
            "job %s failed in %s (it holds; the other jobs go on): %s",
            rt.key,
            stage,
            failure.describe(),
            exc_info=exc if not known else None,
            extra={
                "fields": {
                    "event": "job_error",
                    "job": rt.key,
                    "stage": stage,
                    "error": failure.error,
                }
            },
        )

    # -- 6. save -------------------------------------------------------------------------
    def _save(self, runtimes: list[JobRuntime]) -> None:
        """Every job's state in one transaction; a state that cannot be stored fails alone."""
        states: dict[str, SavedState] = {}
        for rt in runtimes:
            try:
                states[rt.key] = rt.state.to_dict()
            except Exception as exc:
                self.metrics.job_error(rt.key, "save", type(exc).__name__)
        try:
            self.store.save_many(states)
            return
        except Exception as exc:
            log.warning("saving the job states together failed, one by one: %s", safe_text(exc))
        for key, state in states.items():
            try:
                self.store.save_many({key: state})
            except Exception as exc:
                self.metrics.job_error(key, "save", type(exc).__name__)
                log.error("cannot save the state of %s: %s", key, safe_text(exc))

    def close(self) -> None:
        """Close every job's meter and actuator (local workers stop); keep the state."""
        for key in list(self.runtimes):
            self.runtimes.pop(key).close()
        for pool in (self._meter_pool, self._act_pool, self._fits):
            if pool is not None:
                pool.close()
        self.store.close()
        if self.timeline is not None:
            self.timeline.close()
