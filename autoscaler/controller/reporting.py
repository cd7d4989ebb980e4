"""The tick's report stage: conditions, status, the decision log, Events — and sending them.

Why a module of its own: what the controller *says* about a job (conditions a person reads
with ``kubectl describe``, one JSON log line per decision, Warning Events on transitions,
metrics, the timeline) is separate from what it *does* to the job (:mod:`acting`, the
resize and its marker). Status writes and Events of all jobs go out together on the act
pool; a 404 on the status means the job was deleted and is forgotten.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autoscaler.actuators.base import Size
from autoscaler.controller.isolation import JobFailure, safe_text
from autoscaler.controller.job_metrics import job_gauges
from autoscaler.controller.metering import Backfilling, WarmingUp
from autoscaler.controller.runtime import JobRuntime
from autoscaler.controller.state import Condition
from autoscaler.controller.status import (
    Conditions,
    JobReport,
    build_status,
    iso,
    jsonable,
    selector_of,
)
from kube.errors import ActuatorError, TargetGone

if TYPE_CHECKING:  # the loop imports this module (through acting)
    from autoscaler.controller.metrics import ControllerMetrics
    from autoscaler.controller.settings import ControllerSettings
    from autoscaler.controller.sinks import EventSink, StatusSink
    from autoscaler.controller.timeline import TimelineStore

log = logging.getLogger("autoscaler.controller.loop")

Outcome = tuple[str, Any]
"""How one job's pooled I/O ended: ``("ok", result)``, ``("error", exception)`` or
``("running", future)``."""


@dataclass
class Acting:
    """One job's act stage in one tick (the loop's scratch, kept off :class:`JobRuntime`)."""

    cond: Conditions
    action: str
    reason: dict[str, Any]
    planned: Size | None
    desired: Size | None
    error: str | None = None
    write: Size | None = None
    """The size to write this tick (None: nothing to write)."""
    resized: bool = False
    status: dict[str, Any] | None = None
    """The status document to write (None: none)."""


class ReportingStages:
    """Mixed into :class:`~autoscaler.controller.loop.Controller` through
    :class:`~autoscaler.controller.acting.ActingStages` (its attributes are used)."""

    clock: Callable[[], float]
    metrics: ControllerMetrics
    settings: ControllerSettings
    status_sink: StatusSink
    event_sink: EventSink
    timeline: TimelineStore | None
    _writes_status: bool
    forget: Callable[..., None]

    # -- reporting -----------------------------------------------------------------------
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
            err = rt.metric_error
            why, action = "KafkaUnavailable", "hold_metrics_unavailable"
            if isinstance(err, WarmingUp):
                why, action = "WarmingUp", "hold_warming_up"
            elif isinstance(err, Backfilling):
                why, action = "Backfilling", "hold_backfilling"
            cond.set("MetricsAvailable", False, why, f"{err}; holding the current size")
            return action
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

    def _report(self, rt: JobRuntime, act: Acting | None, now: float) -> JobReport:
        if act is None:  # a write of an earlier tick is still running
            return self._busy_report(rt, now)
        state = rt.state
        self._summarise(rt, act, now)
        state.conditions = act.cond.to_list()
        desired, cur = act.desired, rt.current
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
            forecast=jsonable(rt.forecast.summary()),
            sample=rt.sample,
            resized=act.resized,
            error=act.error,
        )
        act.status = self._record(rt, report, now)
        return report

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

    def _summarise(self, rt: JobRuntime, act: Acting, now: float) -> None:
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
        if rt.current is None:
            cond.set("Ready", False, "TargetUnavailable", str(error or ""))
        elif rt.sample is None and not act.resized:
            cond.set("Ready", False, "MetricsUnavailable", str(rt.metric_error or ""))
        elif error:
            cond.set("Ready", False, "ResizeFailed", error)
        else:
            cond.set("Ready", True, "Reconciled", f"{act.action}: {act.reason.get('why', '')}")
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

    def _failure_report(
        self, rt: JobRuntime, act: Acting | None, now: float
    ) -> tuple[JobReport, dict[str, Any] | None]:
        """The report (and status) of a job whose handling raised: it holds; say so."""
        failure = rt.failure or JobFailure("record", "Unknown", "")
        state = rt.state
        resized = act is not None and act.resized
        if rt.saved_policy is not None and not resized:
            state.policy = rt.saved_policy  # the decision did not happen
        why = f"controller error in {failure.describe()}; holding the current size"
        try:
            cond = Conditions(rt.tick_conditions, now)
            cond.set("Ready", False, "ControllerError", why)
            if cond.became("Ready", False) or _reason_changed(rt.tick_conditions, failure):
                self._event(rt, "ControllerError", why, "Warning")
            state.conditions = cond.to_list()
            state.last_decision = {"time": iso(now), "action": "error", "reason": why}
        except Exception:  # hostile state: keep only what we can say
            log.exception("conditions of %s", rt.key)
            state.conditions = []
        self.metrics.decided(rt.key, "error")
        report = JobReport(
            job=rt.key,
            time=now,
            current=rt.current,
            planned=None,
            desired=None,
            action="error",
            reason={"action": "error", "why": why, "stage": failure.stage},
            sample=rt.sample,
            resized=resized,
            error=failure.describe(),
        )
        status: dict[str, Any] | None = None
        if self._writes_status:
            try:
                status = build_status(
                    report, state, generation=rt.entry.generation, identity=self.settings.identity
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

    def _record(self, rt: JobRuntime, rep: JobReport, now: float) -> dict[str, Any] | None:
        """Metrics, the decision log line, the timeline; returns the status to write."""
        st = rt.state
        m = self.metrics
        m.decided(rt.key, rep.action)
        s = rep.sample
        m.set_job(rt.key, **job_gauges(rt, rep))
        st.saved_at = now
        status = None
        if self._writes_status:
            status = build_status(
                rep,
                st,
                generation=rt.entry.generation,
                identity=self.settings.identity,
                selector=selector_of(rt.actuator),
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
                self.timeline.record(rt, rep, now)
            except Exception:  # the history is for people; it must not stop a tick
                m.errors.labels(kind="timeline").inc()
                log.exception("recording the timeline of %s", rt.key)
        return status

    # -- status and events (I/O) -----------------------------------------------------------
    def _event(self, rt: JobRuntime, reason: str, message: str, type_: str = "Normal") -> None:
        rt.events.append((reason, message, type_))

    def _send_task(
        self, rt: JobRuntime, status: dict[str, Any] | None, events: list[tuple[str, str, str]]
    ) -> Callable[[], Any]:
        entry = rt.entry
        events = list(events)

        def send() -> Any:
            failed = 0
            for reason, message, type_ in events:
                try:
                    self.event_sink.emit(
                        namespace=entry.namespace,
                        name=entry.name,
                        uid=entry.uid,
                        reason=reason,
                        message=message,
                        type=type_,
                    )
                except Exception as exc:  # events are a courtesy
                    failed += 1
                    log.warning("event %s for %s failed: %s", reason, entry.key, safe_text(exc))
            if status is not None:
                self.status_sink.write_status(entry.namespace, entry.name, status)
            return failed

        return send

    def _after_send(self, rt: JobRuntime, outcome: Outcome) -> None:
        kind, value = outcome
        if kind == "ok":
            if value:
                self.metrics.errors.labels(kind="event").inc(value)
            return
        if kind == "running":
            return
        if isinstance(value, TargetGone):
            self.forget(rt.key, why="its resource was deleted (404 on status)")
        elif isinstance(value, ActuatorError):
            self.metrics.errors.labels(kind="status").inc()
            log.warning("cannot write the status of %s: %s", rt.key, value)
        else:
            self.metrics.errors.labels(kind="status").inc()
            self.metrics.job_error(rt.key, "record", type(value).__name__)
            log.error("writing the status of %s: %s", rt.key, safe_text(value))


def size_text(v: Any) -> str:
    """A ``[workers, ps]`` pair as a size (``?`` when it is not one: a damaged marker)."""
    return str(Size(*v)) if isinstance(v, list | tuple) and len(v) == 2 else "?"


def _reason_changed(conditions: list[Condition], failure: JobFailure) -> bool:
    for c in conditions:
        if c.get("type") == "Ready":
            return failure.describe()[:60] not in str(c.get("message", ""))
    return True
