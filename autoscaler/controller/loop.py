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

Every stage runs every job under a guard (:mod:`autoscaler.controller.isolation`): an
exception of any type marks that job and the tick goes on with the others.

Everything with a clock takes ``clock`` (epoch seconds); nothing here sleeps.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np

from autoscaler.actuators.base import Actuator, Size
from autoscaler.actuators.dryrun import DryRunActuator
from autoscaler.actuators.errors import ActuatorError
from autoscaler.controller.acting import ActingStages
from autoscaler.controller.forecast import FitPool, ForecastCache
from autoscaler.controller.isolation import (
    MAX_HISTORY_STEPS,
    JobFailure,
    safe_text,
    steps,
)
from autoscaler.controller.jobs import InvalidJob, JobEntry, JobsSource, Listing
from autoscaler.controller.metering import (
    ArrivalHistory,
    Backfilling,
    MeasurementTimedOut,
    MetricSource,
    WarmingUp,
)
from autoscaler.controller.metrics import ControllerMetrics
from autoscaler.controller.overrides import pinned_decision
from autoscaler.controller.runtime import JobRuntime, Observed
from autoscaler.controller.sinks import EventSink, NullSink, StatusSink
from autoscaler.controller.state import JobState, MemoryStateStore, SavedState, StateStore
from autoscaler.controller.status import Conditions, JobReport
from autoscaler.controller.timeline import TimelineStore
from autoscaler.controller.workers import DaemonPool, wait_until
from autoscaler.errors import KaleError, MetricUnavailable
from autoscaler.overrides import override_of
from autoscaler.policy.kale import KaleSettings
from autoscaler.policy.types import Decision, JobSizing, Observation
from autoscaler.resources import Request, ResourceManager

log = logging.getLogger(__name__)

Clock = Callable[[], float]

#: Longest pause before retrying a job whose build raised an unexpected exception.
MAX_BUILD_BACKOFF_S = 3600.0


@dataclass
class ControllerSettings:
    """How the loop runs (the job files say what each job wants)."""

    interval_s: float = 60.0
    """Time between ticks (the runner's business; here only for messages)."""
    history_s: float = 28 * 86400.0
    """Arrival history handed to the forecaster."""
    reforecast_s: float | None = None
    """Reuse a forecast this long; None: a new forecast whenever the history grew."""
    dry_run: bool = False
    """Read real sizes, apply nothing (every actuator is wrapped in :class:`DryRunActuator`)."""
    observe_threads: int = 1
    """Jobs measured in parallel (1: one after another inside the tick, no deadline — what
    fake-clock tests want; the real controller uses ``meter.threads``)."""
    observe_deadline_s: float | None = None
    """Longest a tick waits for measurements and target reads (None: until all are done).
    A job whose measurement is still running holds its size and is measured again later."""
    act_threads: int = 1
    """Target reads, resize writes and status writes of different jobs run in parallel on
    this many threads (1: one after another inside the tick, no deadline)."""
    act_deadline_s: float | None = None
    """Longest a tick waits for resize and status writes (None: until all are done)."""
    identity: str = ""
    """This replica's name, written to the status."""
    planner: KaleSettings | None = None
    """Planner tunables (``horizon_steps`` is always set from each job's forecast horizon)."""
    forecast_model: str | None = None
    """The model the forecaster factory uses for every job (None: each job's own)."""
    fit_threads: int = 0
    """Background threads for forecaster fits, shared by all jobs (0: fit inside the tick,
    which keeps a test's ticks deterministic; the real controller uses 1 or more)."""


@dataclass
class _BuildFailure:
    fingerprint: str
    retry_at: float
    tries: int
    problems: list[str]


class Controller(ActingStages):
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
        self._build_failures: dict[str, _BuildFailure] = {}
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

    # -- 1. jobs -------------------------------------------------------------------------
    def _sync(self, listing: Listing, now: float) -> None:
        valid = {e.key: e for e in listing.jobs}
        invalid = {i.key: i for i in listing.invalid if i.key not in valid}
        for key in list(self.runtimes):
            if key not in valid:
                self.forget(
                    key, why="no longer listed" if key not in invalid else "its spec became invalid"
                )
        for key, bad in invalid.items():
            if self.invalid.get(key) != bad.problems:
                log.warning(
                    "job %s is invalid: %s",
                    key,
                    "; ".join(bad.problems),
                    extra={
                        "fields": {"event": "invalid_job", "job": key, "problems": bad.problems}
                    },
                )
            self._report_invalid(bad, now)
        self.invalid = {k: v.problems for k, v in invalid.items()}
        for key in list(self._build_failures):
            if key not in valid:
                del self._build_failures[key]
        for key, entry in valid.items():
            rt = self.runtimes.get(key)
            if rt is not None and rt.entry.fingerprint == entry.fingerprint:
                rt.entry = self._new_credentials(rt, entry)
                self._adopt_newer_state(rt, entry)
                continue
            held = self._build_failures.get(key)
            if held is not None and held.fingerprint == entry.fingerprint and now < held.retry_at:
                self.invalid[key] = held.problems  # not retried yet: it raised last time
                continue
            try:
                self.runtimes[key] = self._build(entry, rt)
                self._build_failures.pop(key, None)
            except Exception as exc:
                self._build_failed(key, entry, rt, exc, now)

    def _build_failed(
        self, key: str, entry: JobEntry, old: JobRuntime | None, exc: Exception, now: float
    ) -> None:
        if old is not None:
            self.forget(key, why="rebuild failed")
        expected = isinstance(exc, KaleError | ValueError | OSError)
        failure = JobFailure.of("build", exc)
        text = safe_text(exc) if expected else failure.describe()
        bad = InvalidJob(key, [f"{key}: {text}"], uid=entry.uid, origin=entry.origin)
        self.invalid[key] = bad.problems
        self.metrics.errors.labels(kind="build").inc()
        if expected:
            log.warning(
                "cannot manage job %s: %s",
                key,
                text,
                extra={"fields": {"event": "invalid_job", "job": key, "problems": bad.problems}},
            )
            self._report_invalid(bad, now)
            return
        # An exception no job should be able to cause: count it, say so on the job, and
        # back off (the same spec raised last time; rebuilding every tick would only repeat).
        held = self._build_failures.get(key)
        tries = held.tries + 1 if held is not None and held.fingerprint == entry.fingerprint else 1
        backoff = min(MAX_BUILD_BACKOFF_S, self.settings.interval_s * 2 ** (tries - 1))
        self._build_failures[key] = _BuildFailure(
            entry.fingerprint, now + backoff, tries, bad.problems
        )
        self.metrics.job_error(key, "build", failure.error)
        log.error(
            "cannot manage job %s (retried in %.0fs): %s",
            key,
            backoff,
            failure.describe(),
            exc_info=exc if tries == 1 else None,
            extra={"fields": {"event": "job_error", "job": key, "stage": "build"}},
        )
        self._report_invalid(bad, now, reason="ControllerError")
        if tries == 1:
            try:
                self.event_sink.emit(
                    namespace=entry.namespace,
                    name=entry.name,
                    uid=entry.uid,
                    reason="ControllerError",
                    message=f"cannot manage the job: {failure.describe()}",
                    type="Warning",
                )
            except Exception as err:  # events are a courtesy
                self.metrics.errors.labels(kind="event").inc()
                log.warning("event for %s failed: %s", key, safe_text(err))

    def _build(self, entry: JobEntry, old: JobRuntime | None) -> JobRuntime:
        job = entry.job
        sizing = self.sizing_factory(entry)
        fc = job.spec.forecast
        horizon = steps(float(fc.horizon), float(fc.interval), what="spec.forecast.horizon")
        cache = ForecastCache(
            lambda: self.forecaster_factory(entry),
            name=self.settings.forecast_model or fc.model,
            interval_s=float(fc.interval),
            horizon_steps=horizon,
            refit_s=float(fc.refit),
            quantile=float(fc.quantile),
            reforecast_s=self.settings.reforecast_s,
            pool=self._fits,
            interim=_interim_model,
        )
        keep_meter = (
            old is not None
            and old.entry.job.spec.source == job.spec.source
            and old.entry.kafka_security == entry.kafka_security
        )
        keep_actuator = old is not None and old.entry.job.spec.target == job.spec.target
        meter = old.meter if keep_meter and old else self.meter_factory(entry)
        if keep_actuator and old:
            actuator = old.actuator
        else:
            actuator = self.actuator_factory(entry)
            if self.settings.dry_run and not isinstance(actuator, DryRunActuator):
                actuator = DryRunActuator(reader=actuator, label=entry.key)
        state = old.state if old is not None else self._resume_state(entry)
        rt = JobRuntime(
            entry,
            sizing=sizing,
            forecast=cache,
            meter=meter,
            actuator=actuator,
            state=state,
            planner=self.settings.planner,
        )
        if old is not None:
            for part, kept in ((old.meter, keep_meter), (old.actuator, keep_actuator)):
                if not kept:
                    part.close()
            rt.applying, rt.writing, rt.measuring = old.applying, old.writing, old.measuring
        log.info(
            "managing job %s (%s target, %s forecast)",
            entry.key,
            job.spec.target.kind,
            cache.name,
            extra={"fields": {"event": "job_added", "job": entry.key}},
        )
        return rt

    def _new_credentials(self, rt: JobRuntime, entry: JobEntry) -> JobEntry:
        """A rotated Secret: reconnect with the new credentials (a new meter), keeping the
        job's forecaster and state; while a measurement is running, at a later tick (the
        entry kept then still carries the old credentials, so the change is seen again)."""
        if rt.entry.kafka_security == entry.kafka_security:
            return entry
        if rt.measuring is not None and not rt.measuring.done():
            return replace(entry, kafka_security=rt.entry.kafka_security)
        log.info("%s: Kafka credentials changed; reconnecting", entry.key)
        rt.meter.close()
        rt.meter = self.meter_factory(entry)
        return entry

    def _resume_state(self, entry: JobEntry) -> JobState:
        """The newer of the state in the store and the one in the job's status."""
        try:
            stored = self.store.load(entry.key)
        except Exception as exc:  # a damaged row must not stop the job being managed
            log.warning("stored state of %s unreadable, ignored: %s", entry.key, safe_text(exc))
            stored = None
        from_status = entry.status.get("plannerState") if isinstance(entry.status, dict) else None
        if not isinstance(from_status, dict):
            return JobState.from_dict(stored)
        if not isinstance(stored, dict) or _saved_at(from_status) > _saved_at(stored):
            return JobState.from_dict(from_status)
        return JobState.from_dict(stored)

    def _adopt_newer_state(self, rt: JobRuntime, entry: JobEntry) -> None:
        """Another replica led meanwhile and wrote a newer state to the status: take it."""
        if rt.applying is not None or not isinstance(entry.status, dict):
            return
        theirs = entry.status.get("plannerState")
        if isinstance(theirs, dict) and _saved_at(theirs) > (rt.state.saved_at or -math.inf):
            rt.state = JobState.from_dict(theirs)

    def forget(self, key: str, *, why: str = "") -> None:
        """Stop managing a job: close its meter and actuator, return its GPUs to the pool."""
        rt = self.runtimes.pop(key, None)
        if rt is not None:
            rt.close()
        if self.resources is not None:
            self.resources.release(key)
        self.metrics.forget(key)
        self.store.delete(key)
        log.info(
            "forgot job %s%s",
            key,
            f" ({why})" if why else "",
            extra={"fields": {"event": "job_removed", "job": key, "why": why}},
        )

    def _report_invalid(self, bad: InvalidJob, now: float, reason: str = "InvalidSpec") -> None:
        ns, _, name = bad.key.partition("/")
        if not name:
            return
        cond = Conditions([], now)
        cond.set("Ready", False, reason, "; ".join(bad.problems))
        try:
            self.status_sink.write_status(
                ns, name, {"conditions": cond.to_list(), "controller": self.settings.identity}
            )
        except ActuatorError as exc:
            log.debug("cannot write the status of invalid job %s: %s", bad.key, exc)
        except Exception as exc:  # a status sink bug must not stop the tick
            self.metrics.errors.labels(kind="status").inc()
            log.warning("status of invalid job %s: %s", bad.key, safe_text(exc))

    # -- 2. observe ----------------------------------------------------------------------
    def _observe_all(self, runtimes: list[JobRuntime], now: float) -> None:
        # A job with a resize write still running is not read meanwhile (the write owns it).
        active = [rt for rt in runtimes if rt.failure is None and rt.applying is None]
        for rt in active:  # without a pool, inline: one job after another
            if self._act_pool is None:
                self._guarded(rt, "observe", self._absorb, rt, self._read_target(rt), now)
            if self._meter_pool is None:
                self._guarded(rt, "observe", self._absorb, rt, self._measure(rt, now), now)
        if self._meter_pool is None and self._act_pool is None:
            return
        started = time.monotonic()
        futures: list[Future[Any]] = []
        # The jobs measured longest ago go first: a backlog of slow jobs cannot starve one.
        order = sorted(active, key=lambda rt: rt.measured_at or -math.inf)
        kinds: list[tuple[str, DaemonPool, Callable[[JobRuntime], Any]]] = []
        if self._act_pool is not None:
            kinds.append(("reading", self._act_pool, self._read_target))
        if self._meter_pool is not None:
            kinds.append(("measuring", self._meter_pool, lambda rt: self._measure(rt, now)))
        for rt in order:
            for attr, pool, fn in kinds:
                fut = getattr(rt, attr, None)
                if fut is None or fut.done():  # a result a tick late is dropped: measure anew
                    fut = pool.submit(partial(fn, rt))
                    setattr(rt, attr, fut)
                    if attr == "measuring":
                        rt.measuring_since = started
                futures.append(fut)
        progress = self.on_progress
        wait_until(
            futures, self.settings.observe_deadline_s, on_done=lambda f: progress and progress()
        )
        for rt in order:
            for attr, _, _ in kinds:
                fut = getattr(rt, attr)
                if fut.done():
                    setattr(rt, attr, None)
                    exc = fut.exception()
                    if exc is not None:
                        self._fail(rt, "observe", exc)
                    else:
                        self._guarded(rt, "observe", self._absorb, rt, fut.result(), now)
                    continue
                if attr == "measuring":
                    running = time.monotonic() - rt.measuring_since
                    rt.metric_error = MeasurementTimedOut(
                        f"the measurement has been running for {running:.0f}s, past the "
                        f"tick's deadline of {self.settings.observe_deadline_s:g}s"
                    )
                    self.metrics.errors.labels(kind="metrics").inc()
                else:
                    rt.target_error = ActuatorError(
                        f"reading the target took longer than the tick's deadline "
                        f"of {self.settings.observe_deadline_s:g}s"
                    )
                    rt.problem = f"target: {rt.target_error}"
                    self.metrics.errors.labels(kind="actuator").inc()

    def _read_target(self, rt: JobRuntime) -> Observed:
        out = Observed()
        try:
            out.current = rt.actuator.current()
        except ActuatorError as exc:
            out.target_error = exc
        except Exception as exc:  # an actuator bug must not stop the tick
            out.target_error = ActuatorError(f"{type(exc).__name__}: {safe_text(exc)}")
            out.unexpected = [("observe", exc)]
        return out

    def _measure(self, rt: JobRuntime, now: float) -> Observed:
        """The job's sample and arrival history (on a pool thread: touches no loop state)."""
        out = Observed()
        try:
            out.sample = rt.meter.sample()
        except MetricUnavailable as exc:
            out.metric_error = exc
            return out
        except Exception as exc:  # whatever the Kafka client raised
            out.metric_error = MetricUnavailable(f"{type(exc).__name__}: {safe_text(exc)}")
            out.unexpected = [("observe", exc)]
            return out
        interval = rt.sizing.interval_s
        history_s = min(self.settings.history_s, MAX_HISTORY_STEPS * interval)
        try:
            out.history = rt.meter.arrivals(now, interval, history_s)
        except Exception as exc:  # no history: plan on the sample alone
            log.warning("arrival history of %s unavailable: %s", rt.key, safe_text(exc))
            out.history = ArrivalHistory.empty(interval)
            out.unexpected = [("observe", exc)]
        return out

    def _absorb(self, rt: JobRuntime, got: Observed, now: float) -> None:
        """Take a measurement task's result into the job (on the loop's thread)."""
        for stage, exc in got.unexpected or ():
            self.metrics.job_error(rt.key, stage, type(exc).__name__)
        if got.current is not None or got.target_error is not None:
            rt.current, rt.target_error = got.current, got.target_error
            if got.target_error is not None:
                rt.problem = f"target: {got.target_error}"
                self.metrics.errors.labels(kind="actuator").inc()
                if got.unexpected:
                    log.error("reading the size of %s: %s", rt.key, got.target_error)
            else:
                rt.state.last_current = [got.current.workers, got.current.ps]  # type: ignore[union-attr]
        if got.sample is None and got.metric_error is None:
            return  # a target read only
        rt.sample, rt.metric_error = got.sample, got.metric_error
        if got.sample is None:
            err = got.metric_error
            if not isinstance(err, _QUIET_METRIC_ERRORS):
                self.metrics.errors.labels(kind="metrics").inc()
            if got.unexpected:
                log.error("measuring %s: %s", rt.key, err)
            return
        rt.measured_at = now
        interval = rt.sizing.interval_s
        hist = got.history if got.history is not None else ArrivalHistory.empty(interval)
        if got.unexpected and got.history is not None and not len(got.history):
            self.metrics.errors.labels(kind="metrics").inc()
        step = int(now // interval)
        if len(hist) and hist.end_step > step:  # never show the planner the step it decides
            hist = ArrivalHistory(
                hist.start_s, interval, hist.rates[: max(0, len(hist) - (hist.end_step - step))]
            )
        rt.history = hist

    # -- 3. plan -------------------------------------------------------------------------
    def _plan(self, rt: JobRuntime, now: float) -> Decision | None:
        """The planner's wish (None: nothing known about the target, nothing to plan)."""
        rt.window = None
        cur = rt.current
        if cur is None or rt.applying is not None:
            return None
        rt.override = override_of(rt.entry.job)
        if rt.override is not None:  # paused or pinned: the planner is bypassed
            return pinned_decision(rt.override, cur, rt.sizing)
        pending = self._pending_target(rt)
        if pending is not None:  # finish the resize under way before planning anew
            since = float(rt.state.pending.get("since", now))  # type: ignore[union-attr]
            return Decision(
                pending.workers,
                pending.ps,
                {
                    "action": "resize_resumed",
                    "why": f"finishing the resize to {pending} started "
                    f"{max(0.0, now - since):.0f}s ago",
                },
            )
        if rt.sample is None:
            err = rt.metric_error
            why = f"metrics unavailable: {err}" if err else "metrics unavailable"
            return Decision(
                cur.workers, cur.ps, {"action": "hold", "why": why, "metrics": "unavailable"}
            )
        sz = rt.sizing
        step = int(now // sz.interval_s)
        hist = rt.history or ArrivalHistory.empty(sz.interval_s)
        past = hist.rates[-rt.past_steps :]
        if not len(hist) or hist.end_step < step:
            past = np.append(past, rt.sample.arrival_rate)  # the freshest measurement
        if len(hist) >= 2:
            failures = rt.forecast.failures
            rt.window = rt.forecast.window(now, hist, step)
            if rt.forecast.failures > failures:
                self.metrics.errors.labels(kind="forecast").inc()
        else:
            rt.forecast.reason = f"history has {len(hist)} intervals"
        resizing, left = rt.resizing(now)
        obs = Observation(
            step=step,
            time_s=now,
            arrivals=np.asarray(past, dtype=float),
            workers=cur.workers,
            ps=cur.ps,
            backlog=float(rt.sample.lag),
            oldest_age_s=float(rt.sample.oldest_age_s),
            processed_rate=float(rt.sample.consumption_rate),
            resizing=resizing,
            resize_remaining_s=left,
        )
        saved = rt.saved_policy = dict(rt.state.policy)
        try:
            return rt.policy.decide(obs, rt.state.policy)
        except Exception as exc:  # a planner bug holds this job only
            self.metrics.errors.labels(kind="planner").inc()
            self.metrics.job_error(rt.key, "plan", type(exc).__name__)
            log.exception("planning %s", rt.key)
            rt.state.policy = saved
            return Decision(
                cur.workers, cur.ps, {"action": "hold", "why": f"planner failed: {safe_text(exc)}"}
            )

    def _pending_target(self, rt: JobRuntime) -> Size | None:
        """The size an unfinished resize goes to (None: none, or one the spec now forbids)."""
        pending = rt.state.pending
        if pending is None:
            return None
        to = Size(*pending["to"])
        sz = rt.sizing
        if not sz.min_workers <= to.workers <= sz.max_workers:
            log.warning(
                "%s: dropping the unfinished resize to %s: outside %d..%d workers now",
                rt.key,
                to,
                sz.min_workers,
                sz.max_workers,
            )
            rt.state.pending = None
            return None
        return to

    # -- 4. approve ----------------------------------------------------------------------
    def _approve(
        self, runtimes: list[JobRuntime], plans: dict[str, Decision | None], now: float
    ) -> dict[str, Size]:
        if self.resources is None:
            return {k: Size(d.workers, d.ps) for k, d in plans.items() if d is not None}
        requests = []
        by_key = {}
        for rt in runtimes:
            req = self._guarded(rt, "approve", self._request, rt, plans.get(rt.key), now)
            if req is not None:
                requests.append(req)
                by_key[rt.key] = rt
        try:
            granted = self.resources.allocate(requests)
        except Exception as exc:
            self.metrics.errors.labels(kind="quota").inc()
            log.error("quota round failed, holding every job: %s", safe_text(exc))
            return {}
        out: dict[str, Size] = {}
        for req in requests:
            plan = plans.get(req.job)
            if plan is None:
                continue
            rt = by_key[req.job]
            workers = (
                plan.workers if req.unit == 0 else min(plan.workers, granted[req.job] // req.unit)
            )
            out[req.job] = Size(workers, rt.sizing.ps_for(workers) if workers else 0)
        return out

    def _request(self, rt: JobRuntime, plan: Decision | None, now: float) -> Request | None:
        """The job's quota request (None: nothing known about its size)."""
        gpw = _gpus(rt.sizing.gpus_per_worker, "gpusPerWorker")
        known = rt.current or (Size(*rt.state.last_current) if rt.state.last_current else None)
        if known is None:
            return None
        held = known.workers
        resizing, _ = rt.resizing(now)
        sizes = [rt.state.resize_from, rt.state.resize_to] if resizing else []
        if rt.state.pending is not None:  # an unfinished resize holds both sizes too
            sizes += [rt.state.pending.get("from"), rt.state.pending.get("to")]
        for size in sizes:
            if size:
                held = max(held, int(size[0]))
        wish = plan.workers if plan is not None else known.workers
        return Request(
            job=rt.key,
            current_gpus=_gpus(held * gpw, "held GPUs"),
            desired_gpus=_gpus(wish * gpw, "desired GPUs"),
            priority=int(rt.entry.job.spec.priority),
            min_gpus=_gpus(rt.sizing.min_workers * gpw, "minimum GPUs"),
            unit=gpw,
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


_QUIET_METRIC_ERRORS: tuple[type[MetricUnavailable], ...] = (WarmingUp, Backfilling)
"""Not failures: a new topic's first snapshot, and its history being rebuilt."""


def _saved_at(state: dict[str, Any]) -> float:
    v = state.get("saved_at")
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else -math.inf


def _gpus(value: Any, what: str) -> int:
    """A GPU amount the quota round can take (a whole number ≥ 0, not absurd)."""
    n = int(value)
    if not 0 <= n <= 10**9:
        raise ValueError(f"{what} is {n}")
    return n


def _interim_model() -> Any:
    """Serves while a job's first background fit runs: seasonal naive needs no training."""
    from forecasting.registry import make_forecaster

    return make_forecaster("seasonal_naive")
