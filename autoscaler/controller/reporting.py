"""The report stage: conditions, status, the decision log, Events — and sending them.

Why a stage of its own: what the controller *says* about a job (conditions a person reads
with ``kubectl describe``, one JSON log line per decision, Warning Events on transitions,
metrics, the timeline) is separate from what it *does* to the job (:mod:`acting`, the
resize and its marker). Status writes and Events of all jobs go out together on the act
pool, waited for at most ``act_deadline_s``; a 404 on the status means the job was deleted
and is forgotten.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from autoscaler.actuators.base import Size
from autoscaler.controller.guard import Guard
from autoscaler.controller.isolation import JobFailure, safe_text
from autoscaler.controller.job_metrics import basis_of, gauges_of
from autoscaler.controller.metrics import ControllerMetrics
from autoscaler.controller.runtime import JobRuntime
from autoscaler.controller.settings import ControllerSettings
from autoscaler.controller.sinks import EventSink, StatusSink
from autoscaler.controller.state import Condition
from autoscaler.controller.status import (
    Conditions,
    JobReport,
    build_status,
    iso,
    jsonable,
    selector_of,
    size_text,
)
from autoscaler.controller.tick import NO_PLAN, Event, Observation, Outcome, Plan, Tick, TickEvents
from autoscaler.controller.timeline import TimelineStore
from autoscaler.controller.workers import DaemonPool, IoResult, run_all
from kube.errors import ActuatorError, TargetGone

log = logging.getLogger("autoscaler.controller.loop")

Status = dict[str, Any]
"""A status document to write (the custom resource's ``status``, or its file)."""


@dataclass
class Report:
    """The report stage: one :class:`JobReport` per job, and its status and Events sent."""

    settings: ControllerSettings
    metrics: ControllerMetrics
    status_sink: StatusSink
    event_sink: EventSink
    writes_status: bool
    """False: the status goes nowhere, so none is built."""
    timeline: TimelineStore | None
    act_pool: DaemonPool | None
    forget: Callable[[str, str], None]
    """Stops managing a job (``forget(key, why)``): its status answered 404."""
    progress: Callable[[], None] | None = None
    """Called as each pooled write finishes (the runner's liveness beat)."""

    def __call__(
        self,
        runtimes: list[JobRuntime],
        observations: dict[str, Observation],
        plans: dict[str, Plan],
        outcomes: dict[str, Outcome],
        found: dict[str, list[Condition]],
        tick: Tick,
        guard: Guard,
        events: TickEvents,
    ) -> list[JobReport]:
        """Every job's report; ``found``: the conditions each job had when the tick began
        (a failed job's report compares with them)."""
        now = tick.now
        reports = []
        status: dict[str, Status | None] = {}
        for rt in runtimes:
            act = outcomes.get(rt.key)
            seen, plan = observations[rt.key], plans.get(rt.key, NO_PLAN)
            done = None
            if not guard.failed(rt):
                done = guard.run(rt, "record", self._report, rt, seen, plan, act, now, events)
            if done is None:
                failure = guard.failures.get(rt.key)
                done = self._failure_report(
                    rt, failure, seen, plan, act, found[rt.key], now, events
                )
            reports.append(done[0])
            status[rt.key] = done[1]
        self._send(runtimes, status, events)
        return reports

    def _report(
        self,
        rt: JobRuntime,
        seen: Observation,
        plan: Plan,
        act: Outcome | None,
        now: float,
        events: TickEvents,
    ) -> tuple[JobReport, Status | None]:
        if act is None:  # a write of an earlier tick is still running
            return self._busy_report(rt, now), None
        state = rt.state
        self._summarise(rt, seen, act, now, events)
        state.conditions = act.cond.to_list()
        desired, cur = act.desired, seen.current
        state.last_decision = {
            "time": iso(now),
            "action": act.action,
            "reason": str(act.reason.get("why", "")),
            "workers": desired.workers if desired else None,
            "ps": desired.ps if desired else None,
        }
        report = JobReport(
            job=rt.key,
            time=now,
            current=cur,
            planned=act.planned,
            desired=desired if cur is not None else None,
            action=act.action,
            reason=jsonable(act.reason),
            forecast=rt.forecast.summary(),
            sample=seen.sample,
            resized=act.resized,
            error=act.error,
        )
        return report, self._record(rt, plan, report, now)

    def _busy_report(self, rt: JobRuntime, now: float) -> JobReport:
        last = rt.state.last_current
        cur = Size(*last) if last else None
        to = (rt.state.pending or {}).get("to")
        reason = {
            "action": "resize_in_progress",
            "why": f"the write of the resize to {size_text(to)} is still running",
        }
        report = JobReport(rt.key, now, cur, None, None, "resize_in_progress", reason)
        self.metrics.decided(rt.key, report.action)
        return report

    def _summarise(
        self, rt: JobRuntime, seen: Observation, act: Outcome, now: float, events: TickEvents
    ) -> None:
        """Resizing and Ready conditions, and Warning events on transitions."""
        state, cond, error = rt.state, act.cond, act.error
        resizing, left = rt.resizing(now)
        if state.pending is not None:
            cond.set(
                "Resizing",
                True,
                "ResizeUnfinished",
                f"to {size_text(state.pending.get('to'))}; the next tick finishes it",
            )
        elif resizing and state.resize_to:
            up = state.resize_from is not None and state.resize_to[0] > state.resize_from[0]
            cond.set(
                "Resizing",
                True,
                "ScalingUp" if up else "ScalingDown",
                f"to {state.resize_to[0]} workers, {left:.0f}s of downtime left",
            )
        else:
            cond.set("Resizing", False, "Stable", "")
        if seen.current is None:
            cond.set("Ready", False, "TargetUnavailable", str(error or ""))
        elif seen.sample is None and not act.resized:
            cond.set("Ready", False, "MetricsUnavailable", str(seen.metric_error or ""))
        elif error:
            cond.set("Ready", False, "ResizeFailed", error)
        else:
            cond.set("Ready", True, "Reconciled", f"{act.action}: {act.reason.get('why', '')}")
        for type_, event in (
            ("MetricsAvailable", "MetricsUnavailable"),
            ("TargetAvailable", "TargetUnavailable"),
        ):
            entered = cond.became(type_, False) or (
                type_ == "MetricsAvailable" and cond.entered(type_, "KafkaUnavailable")
            )
            if entered and not (type_ == "TargetAvailable" and error and seen.current is not None):
                events.add(rt.key, event, cond.by_type[type_]["message"], "Warning")
        if cond.became("QuotaLimited", True):
            events.add(rt.key, "QuotaLimited", cond.by_type["QuotaLimited"]["message"], "Warning")

    def _failure_report(
        self,
        rt: JobRuntime,
        failure: JobFailure | None,
        seen: Observation,
        plan: Plan,
        act: Outcome | None,
        found: list[Condition],
        now: float,
        events: TickEvents,
    ) -> tuple[JobReport, Status | None]:
        """The report (and status) of a job whose handling raised: it holds; say so."""
        failure = failure or JobFailure("record", "Unknown", "")
        state = rt.state
        resized = act is not None and act.resized
        if plan.saved_policy is not None and not resized:
            state.policy = plan.saved_policy  # the decision did not happen
        why = f"controller error in {failure.describe()}; holding the current size"
        try:
            cond = Conditions(found, now)
            cond.set("Ready", False, "ControllerError", why)
            if cond.became("Ready", False) or _reason_changed(found, failure):
                events.add(rt.key, "ControllerError", why, "Warning")
            state.conditions = cond.to_list()
            state.last_decision = {"time": iso(now), "action": "error", "reason": why}
        except Exception:  # hostile state: keep only what we can say
            log.exception("conditions of %s", rt.key)
            state.conditions = []
        self.metrics.decided(rt.key, "error")
        report = JobReport(
            job=rt.key,
            time=now,
            current=seen.current,
            planned=None,
            desired=None,
            action="error",
            reason={"action": "error", "why": why, "stage": failure.stage},
            sample=seen.sample,
            resized=resized,
            error=failure.describe(),
        )
        status: Status | None = None
        if self.writes_status:
            try:
                status = build_status(
                    report,
                    state,
                    generation=rt.entry.generation,
                    identity=self.settings.identity,
                    shard=rt.shard,
                )
            except Exception:  # the minimum that tells a person what is wrong
                status = {"conditions": state.conditions, "controller": self.settings.identity}
        log.error(
            "%s: %s",
            rt.key,
            why,
            extra={
                "fields": {
                    "event": "decision",
                    "job": rt.key,
                    "action": "error",
                    "stage": failure.stage,
                    "error": failure.error,
                }
            },
        )
        return report, status

    def _record(self, rt: JobRuntime, plan: Plan, rep: JobReport, now: float) -> Status | None:
        """Metrics, the decision log line, the timeline; returns the status to write."""
        st = rt.state
        m = self.metrics
        m.decided(rt.key, rep.action)
        s = rep.sample
        # Worked out when scraped: from this tick's report, window and conditions, which
        # no later tick changes (each tick makes new ones).
        m.defer_job_gauges(
            rt.key, partial(gauges_of, basis_of(rt), rep, plan.window, plan.override, st.conditions)
        )
        m.owned(rt.key, self.settings.identity, rt.shard)
        st.saved_at = now
        status = None
        if self.writes_status:
            status = build_status(
                rep,
                st,
                generation=rt.entry.generation,
                identity=self.settings.identity,
                selector=selector_of(rt.actuator),
                shard=rt.shard,
            )
        level = logging.INFO if rep.resized or rep.error else logging.DEBUG
        if log.isEnabledFor(level):
            fields: dict[str, Any] = {  # the log line's JSON
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
                self.timeline.record(rt, rep, now, plan.window)
            except Exception:  # the history is for people; it must not stop a tick
                m.errors.labels(kind="timeline").inc()
                log.exception("recording the timeline of %s", rt.key)
        return status

    # -- status and events (I/O) -----------------------------------------------------------
    def _send(
        self, runtimes: list[JobRuntime], status: dict[str, Status | None], events: TickEvents
    ) -> None:
        """Every job's Events and status, on the act pool until the deadline (a job whose
        status write of an earlier tick is still running sends nothing this tick)."""
        sending = [
            rt
            for rt in runtimes
            if rt.writing is None and (events.of(rt.key) or status.get(rt.key) is not None)
        ]
        progress = self.progress
        results = run_all(
            sending,
            lambda rt: self._send_task(rt, status.get(rt.key), events.of(rt.key)),
            self.act_pool,
            self.settings.act_deadline_s,
            on_done=lambda f: progress and progress(),
        )
        for rt in sending:
            if results[rt][0] == "running":
                rt.writing = results[rt][1]
            self._after_send(rt, results[rt])

    def collect_late(self, runtimes: list[JobRuntime]) -> None:
        """Finish the status writes a previous tick left running (before measuring)."""
        for rt in runtimes:
            fut = rt.writing
            if fut is not None and fut.done():
                rt.writing = None
                exc = fut.exception()
                self._after_send(rt, ("error", exc) if exc is not None else ("ok", None))

    def _send_task(
        self, rt: JobRuntime, status: Status | None, events: list[Event]
    ) -> Callable[[], Any]:
        entry = rt.entry
        events = list(events)

        def send() -> Any:
            failed = 0
            for event in events:
                try:
                    self.event_sink.emit(
                        namespace=entry.namespace,
                        name=entry.name,
                        uid=entry.uid,
                        reason=event.reason,
                        message=event.message,
                        type=event.type,
                    )
                except Exception as exc:  # events are a courtesy
                    failed += 1
                    log.warning(
                        "event %s for %s failed: %s", event.reason, entry.key, safe_text(exc)
                    )
            if status is not None:
                self.status_sink.write_status(entry.namespace, entry.name, status)
            return failed

        return send

    def _after_send(self, rt: JobRuntime, result: IoResult) -> None:
        kind, value = result
        if kind == "ok":
            if value:
                self.metrics.errors.labels(kind="event").inc(value)
            return
        if kind == "running":
            return
        if isinstance(value, TargetGone):
            self.forget(rt.key, "its resource was deleted (404 on status)")
        elif isinstance(value, ActuatorError):
            self.metrics.errors.labels(kind="status").inc()
            log.warning("cannot write the status of %s: %s", rt.key, value)
        else:
            self.metrics.errors.labels(kind="status").inc()
            self.metrics.job_error(rt.key, "record", type(value).__name__)
            log.error("writing the status of %s: %s", rt.key, safe_text(value))


def _reason_changed(conditions: list[Condition], failure: JobFailure) -> bool:
    for c in conditions:
        if c.get("type") == "Ready":
            return failure.describe()[:60] not in str(c.get("message", ""))
    return True
