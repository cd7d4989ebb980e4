"""The reconcile loop: one :meth:`Controller.tick` measures, plans, approves and acts for all jobs.

A tick, level-triggered (it reads the world every time and acts on the difference, so
running it twice, or after a restart, converges to the same state):

1. **list** the jobs (directory or cluster); a failure to list skips the tick and keeps every
   job as it is; jobs no longer listed are forgotten (their GPUs return to the pool);
2. **observe** each job: its current size from the actuator and a Kafka sample from its
   metric source (in parallel threads: both are I/O);
3. **plan** each job with the same :class:`KalePolicy` the simulator runs, fed the arrival
   history and a cached live forecast. Missing metrics mean *hold the current size* — never
   a zero load, never a scale to zero — and a ``MetricsAvailable=False`` condition;
4. **approve** all wishes in one round of the GPU :class:`ResourceManager` (priority,
   minimum guarantees, max-min fair when short) before any GPU is given or taken back;
5. **act** where the approved size differs from the current one, and **record**: status on
   the job (sizes, last decision, forecast summary, conditions, planner state), an Event per
   resize, Prometheus metrics, one JSON log line per decision, and the state store.

Everything with a clock takes ``clock`` (epoch seconds); nothing here sleeps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from autoscaler.actuators.base import Actuator, Size
from autoscaler.actuators.dryrun import DryRunActuator
from autoscaler.actuators.errors import ActuatorError, TargetGone, TargetRejected
from autoscaler.controller.forecast import FitPool, ForecastCache
from autoscaler.controller.jobs import InvalidJob, JobEntry, JobsSource, Listing
from autoscaler.controller.metering import ArrivalHistory, MetricSource, Sample, WarmingUp
from autoscaler.controller.metrics import ControllerMetrics
from autoscaler.controller.sinks import EventSink, NullSink, StatusSink
from autoscaler.controller.state import JobState, MemoryStateStore, StateStore
from autoscaler.controller.status import (
    Conditions,
    JobReport,
    build_status,
    iso,
    jsonable,
    resize_message,
)
from autoscaler.errors import KaleError, MetricUnavailable
from autoscaler.policy.forecasts import CallbackSource, ForecastWindow
from autoscaler.policy.kale import KalePolicy, KaleSettings
from autoscaler.policy.types import Decision, JobSizing, Observation
from autoscaler.resources import Request, ResourceManager

log = logging.getLogger(__name__)

Clock = Callable[[], float]


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
    """Jobs observed in parallel (metric sources and actuators do I/O)."""
    identity: str = ""
    """This replica's name, written to the status."""
    planner: KaleSettings | None = None
    """Planner tunables (``horizon_steps`` is always set from each job's forecast horizon)."""
    forecast_model: str | None = None
    """The model the forecaster factory uses for every job (None: each job's own)."""
    fit_threads: int = 0
    """Background threads for forecaster fits, shared by all jobs (0: fit inside the tick,
    which keeps a test's ticks deterministic; the real controller uses 1 or more)."""


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
        self.policy = KalePolicy(
            sizing, CallbackSource(self._window, name=forecast.name), settings=settings
        )
        # The planner looks back this far (SLO window, the reactive fallback, a margin).
        self.past_steps = self.policy.lookback_steps
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
        """The planner state before this tick's decision, restored if nothing was applied."""

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


class Controller:
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
        timeline: Any = None,
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
                return job_sizing(entry.loaded, models)

        self.sizing_factory = sizing_factory
        self.status_sink: StatusSink = status_sink or NullSink()
        self.event_sink: EventSink = event_sink or NullSink()
        self.metrics = metrics or ControllerMetrics()
        self.store: StateStore = state_store or MemoryStateStore()
        self.settings = settings or ControllerSettings()
        self.timeline = timeline
        """Per-tick history (:class:`~autoscaler.controller.timeline.TimelineStore`) or None."""
        self.runtimes: dict[str, JobRuntime] = {}
        self.invalid: dict[str, list[str]] = {}
        self._fits = FitPool(self.settings.fit_threads) if self.settings.fit_threads > 0 else None
        self._pool = (
            ThreadPoolExecutor(self.settings.observe_threads, thread_name_prefix="kale-observe")
            if self.settings.observe_threads > 1
            else None
        )
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
        except (KaleError, OSError) as exc:
            self.metrics.errors.labels(kind="list").inc()
            log.error(
                "cannot list jobs, keeping every job as it is: %s",
                exc,
                extra={"fields": {"event": "list_failed", "error": str(exc)}},
            )
            return []
        self._sync(listing, now)
        runtimes = list(self.runtimes.values())
        if self._pool is not None and len(runtimes) > 1:
            list(self._pool.map(lambda rt: self._observe(rt, now), runtimes))
        else:
            for rt in runtimes:
                self._observe(rt, now)
        plans = {rt.key: self._plan(rt, now) for rt in runtimes}
        approved = self._approve(runtimes, plans, now)
        reports = [self._act(rt, plans[rt.key], approved.get(rt.key), now) for rt in runtimes]
        self.store.save_many({rt.key: rt.state.to_dict() for rt in runtimes})
        self.metrics.jobs.labels(state="valid").set(len(self.runtimes))
        self.metrics.jobs.labels(state="invalid").set(len(self.invalid))
        if self.resources is not None:
            self.metrics.quota_used.set(sum(self.resources.held.values()))
        self.metrics.tick_seconds.observe(time.perf_counter() - started)
        self.metrics.last_tick.set(now)
        return reports

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
        for key, entry in valid.items():
            rt = self.runtimes.get(key)
            if rt is not None and rt.entry.fingerprint == entry.fingerprint:
                rt.entry = entry
                continue
            try:
                self.runtimes[key] = self._build(entry, rt)
            except (KaleError, ValueError, OSError) as exc:
                if rt is not None:
                    self.forget(key, why="rebuild failed")
                bad = InvalidJob(key, [f"{key}: {exc}"], uid=entry.uid, origin=entry.origin)
                self.invalid[key] = bad.problems
                self.metrics.errors.labels(kind="build").inc()
                log.warning(
                    "cannot manage job %s: %s",
                    key,
                    exc,
                    extra={
                        "fields": {"event": "invalid_job", "job": key, "problems": bad.problems}
                    },
                )
                self._report_invalid(bad, now)

    def _build(self, entry: JobEntry, old: JobRuntime | None) -> JobRuntime:
        job = entry.job
        sizing = self.sizing_factory(entry)
        fc = job.spec.forecast
        horizon = max(1, round(fc.horizon / fc.interval))
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
        keep_meter = old is not None and old.entry.job.spec.source == job.spec.source
        keep_actuator = old is not None and old.entry.job.spec.target == job.spec.target
        meter = old.meter if keep_meter and old else self.meter_factory(entry)
        if keep_actuator and old:
            actuator = old.actuator
        else:
            actuator = self.actuator_factory(entry)
            if self.settings.dry_run and not isinstance(actuator, DryRunActuator):
                actuator = DryRunActuator(reader=actuator, label=entry.key)
        if old is not None:
            state = old.state
            for part, kept in ((old.meter, keep_meter), (old.actuator, keep_actuator)):
                if not kept:
                    part.close()
        else:
            stored = self.store.load(entry.key)
            if stored is None and entry.status:
                stored = entry.status.get("plannerState")
            state = JobState.from_dict(stored)
        log.info(
            "managing job %s (%s target, %s forecast)",
            entry.key,
            job.spec.target.kind,
            cache.name,
            extra={"fields": {"event": "job_added", "job": entry.key}},
        )
        return JobRuntime(
            entry,
            sizing=sizing,
            forecast=cache,
            meter=meter,
            actuator=actuator,
            state=state,
            planner=self.settings.planner,
        )

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

    def _report_invalid(self, bad: InvalidJob, now: float) -> None:
        ns, _, name = bad.key.partition("/")
        if not name:
            return
        cond = Conditions([], now)
        cond.set("Ready", False, "InvalidSpec", "; ".join(bad.problems))
        try:
            self.status_sink.write_status(
                ns, name, {"conditions": cond.to_list(), "controller": self.settings.identity}
            )
        except ActuatorError as exc:
            log.debug("cannot write the status of invalid job %s: %s", bad.key, exc)

    # -- 2. observe ----------------------------------------------------------------------
    def _observe(self, rt: JobRuntime, now: float) -> None:
        rt.current = rt.sample = rt.history = None
        rt.problem = rt.target_error = rt.metric_error = None
        try:
            rt.current = rt.actuator.current()
            rt.state.last_current = [rt.current.workers, rt.current.ps]
        except ActuatorError as exc:
            rt.problem = f"target: {exc}"
            self.metrics.errors.labels(kind="actuator").inc()
            rt.target_error = exc
        except Exception as exc:  # an actuator bug must not stop the tick
            rt.problem = f"target: {type(exc).__name__}: {exc}"
            self.metrics.errors.labels(kind="actuator").inc()
            rt.target_error = ActuatorError(rt.problem)
            log.exception("reading the size of %s", rt.key)
        try:
            rt.sample = rt.meter.sample()
            if rt.current is not None:
                rt.last_observed = (now, rt.sample, rt.current)
        except MetricUnavailable as exc:
            rt.metric_error = exc
            if not isinstance(exc, WarmingUp):
                self.metrics.errors.labels(kind="metrics").inc()
            return
        except Exception as exc:  # whatever the Kafka client raised
            rt.metric_error = MetricUnavailable(f"{type(exc).__name__}: {exc}")
            self.metrics.errors.labels(kind="metrics").inc()
            log.exception("measuring %s", rt.key)
            return
        interval = rt.sizing.interval_s
        try:
            hist = rt.meter.arrivals(now, interval, self.settings.history_s)
        except Exception as exc:  # no history: plan on the sample alone
            log.warning("arrival history of %s unavailable: %s", rt.key, exc)
            self.metrics.errors.labels(kind="metrics").inc()
            hist = ArrivalHistory.empty(interval)
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
        if cur is None:
            return None
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
            log.exception("planning %s", rt.key)
            rt.state.policy = saved
            return Decision(
                cur.workers, cur.ps, {"action": "hold", "why": f"planner failed: {exc}"}
            )

    # -- 4. approve ----------------------------------------------------------------------
    def _approve(
        self, runtimes: list[JobRuntime], plans: dict[str, Decision | None], now: float
    ) -> dict[str, Size]:
        if self.resources is None:
            return {k: Size(d.workers, d.ps) for k, d in plans.items() if d is not None}
        requests = []
        for rt in runtimes:
            gpw = rt.sizing.gpus_per_worker
            known = rt.current or (Size(*rt.state.last_current) if rt.state.last_current else None)
            if known is None:
                continue
            held = known.workers
            resizing, _ = rt.resizing(now)
            if resizing:  # a resizing job holds the larger of its old and new size
                for size in (rt.state.resize_from, rt.state.resize_to):
                    if size:
                        held = max(held, size[0])
            plan = plans.get(rt.key)
            wish = plan.workers if plan is not None else known.workers
            requests.append(
                Request(
                    job=rt.key,
                    current_gpus=held * gpw,
                    desired_gpus=wish * gpw,
                    priority=int(rt.entry.job.spec.priority),
                    min_gpus=rt.sizing.min_workers * gpw,
                    unit=gpw,
                )
            )
        try:
            granted = self.resources.allocate(requests)
        except ValueError as exc:
            self.metrics.errors.labels(kind="quota").inc()
            log.error("quota round failed, holding every job: %s", exc)
            return {}
        out: dict[str, Size] = {}
        by_key = {rt.key: rt for rt in runtimes}
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

    # -- 5. act and record ---------------------------------------------------------------
    def _act(
        self, rt: JobRuntime, plan: Decision | None, approved: Size | None, now: float
    ) -> JobReport:
        state = rt.state
        cond = Conditions(state.conditions, now)
        cur = rt.current
        reason: dict[str, Any] = dict(plan.reason) if plan is not None else {}
        action = str(reason.get("action", "hold"))
        error: str | None = None
        if cur is None:
            error = str(rt.target_error or rt.problem)
            action, reason = "hold", {"action": "hold", "why": f"cannot read the target: {error}"}
        action = self._observed_conditions(rt, cond) or action

        planned = Size(plan.workers, plan.ps) if plan is not None else None
        desired = approved if approved is not None else planned
        if planned is not None and desired is not None and cur is not None:
            if desired.workers < planned.workers and planned.workers > cur.workers:
                cond.set(
                    "QuotaLimited",
                    True,
                    "InsufficientQuota",
                    f"wanted {planned.workers} workers, approved {desired.workers}",
                )
                reason["quota"] = f"approved {desired.workers} of {planned.workers} workers"
                if desired.workers <= cur.workers:
                    action = "hold_quota"
            else:
                cond.set("QuotaLimited", False, "WithinQuota", "")

        resized = False
        if cur is not None and desired is not None and rt.sample is not None:
            if desired != cur:
                resized, failure = self._apply(rt, cur, desired, reason, cond, now)
                if failure is not None:
                    error, action = failure, "resize_failed"
            elif planned is not None and planned != cur and rt.saved_policy is not None:
                state.policy = rt.saved_policy  # nothing was applied: plan afresh next tick
        self._summarise(
            rt, cond, action=action, reason=reason, error=error, resized=resized, now=now
        )
        state.conditions = cond.to_list()
        state.last_decision = jsonable(
            {
                "time": iso(now),
                "action": action,
                "reason": str(reason.get("why", "")),
                "workers": desired.workers if desired else None,
                "ps": desired.ps if desired else None,
            }
        )
        report = JobReport(
            job=rt.key,
            time=now,
            current=cur,
            planned=planned,
            desired=desired if cur is not None else None,
            action=action,
            reason=jsonable(reason),
            forecast=jsonable(rt.forecast.summary()),
            sample=rt.sample,
            resized=resized,
            error=error,
        )
        self._record(rt, report, now)
        return report

    def _observed_conditions(self, rt: JobRuntime, cond: Conditions) -> str | None:
        """Target, metrics and forecast conditions; returns the action a hold forces."""
        cur, sample = rt.current, rt.sample
        if cur is None:
            gone = isinstance(rt.target_error, TargetGone)
            cond.set(
                "TargetAvailable",
                False,
                "TargetNotFound" if gone else "TargetUnavailable",
                str(rt.target_error or rt.problem or ""),
            )
            return None
        cond.set("TargetAvailable", True, "TargetFound", f"{rt.actuator.kind} at {cur}")
        if sample is None:
            warming = isinstance(rt.metric_error, WarmingUp)
            cond.set(
                "MetricsAvailable",
                False,
                "WarmingUp" if warming else "KafkaUnavailable",
                f"{rt.metric_error}; holding the current size",
            )
            return "hold_warming_up" if warming else "hold_metrics_unavailable"
        cond.set(
            "MetricsAvailable",
            True,
            "Measured",
            f"arrival {sample.arrival_rate:.4g}/s, lag {sample.lag:.0f}",
        )
        if rt.window is not None:
            cond.set("ForecastAvailable", True, "Forecasting", rt.forecast.name)
        else:
            cond.set(
                "ForecastAvailable",
                False,
                "NoForecast",
                f"{rt.forecast.reason or 'no forecast'}; sizing for the recent peak",
            )
        return None

    def _apply(
        self,
        rt: JobRuntime,
        cur: Size,
        desired: Size,
        reason: dict[str, Any],
        cond: Conditions,
        now: float,
    ) -> tuple[bool, str | None]:
        """Resize; returns (resized, error message)."""
        state = rt.state
        try:
            rt.actuator.apply(desired)
        except ActuatorError as exc:
            self.metrics.errors.labels(kind="actuator").inc()
            if rt.saved_policy is not None:
                state.policy = rt.saved_policy  # the decision did not happen
            cond.set(
                "TargetAvailable",
                False,
                "TargetNotFound"
                if isinstance(exc, TargetGone)
                else "ResizeRejected"
                if isinstance(exc, TargetRejected)
                else "ResizeFailed",
                str(exc),
            )
            self._event(rt, "ResizeFailed", f"resize {cur} -> {desired} failed: {exc}", "Warning")
            log.warning("resizing %s failed: %s", rt.key, exc)
            return False, str(exc)
        state.resize_started = now
        state.resize_from = [cur.workers, cur.ps]
        state.resize_to = [desired.workers, desired.ps]
        up = desired.workers > cur.workers or (
            desired.workers == cur.workers and desired.ps > cur.ps
        )
        self.metrics.resizes.labels(job=rt.key, direction="up" if up else "down").inc()
        peak = float(np.max(rt.window.high)) if rt.window is not None else None
        self._event(
            rt, "ScaledUp" if up else "ScaledDown", resize_message(cur, desired, reason, peak)
        )
        return True, None

    def _summarise(
        self,
        rt: JobRuntime,
        cond: Conditions,
        *,
        action: str,
        reason: dict[str, Any],
        error: str | None,
        resized: bool,
        now: float,
    ) -> None:
        """Resizing and Ready conditions, and Warning events on transitions."""
        state = rt.state
        resizing, left = rt.resizing(now)
        if resizing and state.resize_to:
            up = state.resize_from is not None and state.resize_to[0] > state.resize_from[0]
            cond.set(
                "Resizing",
                True,
                "ScalingUp" if up else "ScalingDown",
                f"to {state.resize_to[0]} workers, {left:.0f}s of downtime left",
            )
        else:
            cond.set("Resizing", False, "Stable", "")
        if rt.current is None:
            cond.set("Ready", False, "TargetUnavailable", str(error or ""))
        elif rt.sample is None:
            cond.set("Ready", False, "MetricsUnavailable", str(rt.metric_error or ""))
        elif error:
            cond.set("Ready", False, "ResizeFailed", error)
        else:
            cond.set("Ready", True, "Reconciled", f"{action}: {reason.get('why', '')}")
        for type_, event in (
            ("MetricsAvailable", "MetricsUnavailable"),
            ("TargetAvailable", "TargetUnavailable"),
        ):
            if cond.became(type_, False) and not (
                type_ == "TargetAvailable" and error and rt.current is not None
            ):
                self._event(rt, event, cond.by_type[type_]["message"], "Warning")
        if cond.became("QuotaLimited", True):
            self._event(rt, "QuotaLimited", cond.by_type["QuotaLimited"]["message"], "Warning")

    def _event(self, rt: JobRuntime, reason: str, message: str, type_: str = "Normal") -> None:
        try:
            self.event_sink.emit(
                namespace=rt.entry.namespace,
                name=rt.entry.name,
                uid=rt.entry.uid,
                reason=reason,
                message=message,
                type=type_,
            )
        except Exception as exc:  # events are a courtesy
            self.metrics.errors.labels(kind="event").inc()
            log.warning("event %s for %s failed: %s", reason, rt.key, exc)

    def _record(self, rt: JobRuntime, rep: JobReport, now: float) -> None:
        st = rt.state
        m = self.metrics
        m.decisions.labels(job=rt.key, action=rep.action).inc()
        w = rt.window
        s = rep.sample
        m.set_job(
            rt.key,
            predicted_rate=float(w.mean[0]) if w is not None and len(w) else None,
            forecast_peak_rate=float(np.max(w.high)) if w is not None and len(w) else None,
            actual_rate=s.arrival_rate if s else None,
            consumption_rate=s.consumption_rate if s else None,
            backlog_records=s.lag if s else None,
            oldest_age_seconds=s.oldest_age_s if s else None,
            current_workers=rep.current.workers if rep.current else None,
            current_ps=rep.current.ps if rep.current else None,
            desired_workers=rep.desired.workers if rep.desired else None,
            desired_ps=rep.desired.ps if rep.desired else None,
            planned_workers=rep.planned.workers if rep.planned else None,
        )
        status = build_status(
            rep, st, generation=rt.entry.generation, identity=self.settings.identity
        )
        try:
            self.status_sink.write_status(rt.entry.namespace, rt.entry.name, status)
        except TargetGone:
            self.forget(rt.key, why="its resource was deleted (404 on status)")
        except ActuatorError as exc:
            m.errors.labels(kind="status").inc()
            log.warning("cannot write the status of %s: %s", rt.key, exc)
        fields = {
            "event": "decision",
            "job": rt.key,
            "action": rep.action,
            "current": [rep.current.workers, rep.current.ps] if rep.current else None,
            "desired": [rep.desired.workers, rep.desired.ps] if rep.desired else None,
            "planned": [rep.planned.workers, rep.planned.ps] if rep.planned else None,
            "resized": rep.resized,
            "reason": rep.reason,
        }
        if s is not None:
            fields.update(arrival_rate=s.arrival_rate, lag=s.lag, oldest_age_s=s.oldest_age_s)
        level = logging.INFO if rep.resized or rep.error else logging.DEBUG
        log.log(
            level,
            "%s: %s (%s)",
            rt.key,
            rep.action,
            rep.reason.get("why", ""),
            extra={"fields": fields},
        )
        if self.timeline is not None:
            try:
                self.timeline.record(rt, rep, now)
            except Exception:  # the history is for people; it must not stop a tick
                m.errors.labels(kind="timeline").inc()
                log.exception("recording the timeline of %s", rt.key)

    def close(self) -> None:
        """Close every job's meter and actuator (local workers stop); keep the state."""
        for key in list(self.runtimes):
            self.runtimes.pop(key).close()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        if self._fits is not None:
            self._fits.close()
        self.store.close()
        if self.timeline is not None:
            self.timeline.close()


def _interim_model() -> Any:
    """Serves while a job's first background fit runs: seasonal naive needs no training."""
    from forecasting.registry import make_forecaster

    return make_forecaster("seasonal_naive")
