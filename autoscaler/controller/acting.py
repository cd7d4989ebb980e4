"""The tick's last stages: resize where needed, then report — per job, isolated, in parallel.

Why this module exists (split from the loop, which measures and plans): acting is where the
controller changes the world, so it carries the two guarantees that make a resize safe to
interrupt:

* **a resize-in-progress marker.** Before the first write, the resize (``from``, ``to``,
  ``since``, ``attempts``) is stored in the job's state — the SQLite store, and in cluster
  mode the job's ``status.plannerState.pending`` — and it is cleared only once every write
  is done. A partial failure (PS written, the worker write failed) or a kill -9 between the
  two writes leaves the marker, and the next tick, in this process or the next one, *rolls
  forward*: it re-applies ``to`` (actuators are level-triggered: what is already in place is
  not written again) instead of planning afresh on a half-resized job. One marker is one
  resize: its Event and ``kale_resizes_total`` count once, when it completes.
* **bounded, concurrent I/O.** The resize writes of different jobs, and then the status
  writes and Events of all jobs, run on a pool of ``act_threads`` threads, and the tick waits
  for them at most ``act_deadline_s``. A write still running at the deadline stays with its
  job (``resize_in_progress``); the job is neither measured nor planned until it is done.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from autoscaler.actuators.base import Size
from autoscaler.actuators.errors import ActuatorError, TargetGone, TargetRejected
from autoscaler.controller import overrides
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
    resize_message,
    selector_of,
)
from autoscaler.controller.workers import DaemonPool, wait_until
from autoscaler.policy.types import Decision

if TYPE_CHECKING:  # the loop imports this module
    from autoscaler.controller.loop import ControllerSettings
    from autoscaler.controller.metrics import ControllerMetrics
    from autoscaler.controller.sinks import EventSink, StatusSink
    from autoscaler.controller.state import StateStore
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


class ActingStages:
    """Mixed into :class:`~autoscaler.controller.loop.Controller` (its attributes are used)."""

    clock: Callable[[], float]
    metrics: ControllerMetrics
    settings: ControllerSettings
    store: StateStore
    status_sink: StatusSink
    event_sink: EventSink
    timeline: TimelineStore | None
    _act_pool: DaemonPool | None
    _writes_status: bool
    on_progress: Callable[[], None] | None
    _fail: Callable[..., None]
    _guarded: Callable[..., Any]
    forget: Callable[..., None]

    # -- driving the stage ---------------------------------------------------------------
    def _act_all(
        self,
        runtimes: list[JobRuntime],
        plans: dict[str, Decision | None],
        approved: dict[str, Size],
        now: float,
    ) -> list[JobReport]:
        acts: dict[str, Acting] = {}
        for rt in runtimes:
            if rt.failure is None and rt.applying is None:
                act = self._guarded(
                    rt, "act", self._prepare, rt, plans.get(rt.key), approved.get(rt.key), now
                )
                if act is not None:
                    acts[rt.key] = act
        writing = [rt for rt in runtimes if rt.key in acts and acts[rt.key].write is not None]
        outcomes = self._run_io(
            writing, "applying", lambda rt: self._write_size_task(rt, acts[rt.key].write)
        )
        for rt in writing:
            self._guarded(rt, "act", self._after_write, rt, acts[rt.key], outcomes[rt.key], now)
        reports = []
        status: dict[str, dict[str, Any] | None] = {}
        for rt in runtimes:
            act = acts.get(rt.key)
            rep = None
            if rt.failure is None:
                rep = self._guarded(rt, "record", self._report, rt, act, now)
                status[rt.key] = act.status if act is not None else None
            if rep is None:
                rep, status[rt.key] = self._failure_report(rt, act, now)
            reports.append(rep)
        sending = [
            rt
            for rt in runtimes
            if rt.writing is None and (rt.events or status.get(rt.key) is not None)
        ]
        results = self._run_io(
            sending, "writing", lambda rt: self._send_task(rt, status.get(rt.key), rt.events)
        )
        for rt in sending:
            self._after_send(rt, results[rt.key])
        return reports

    def _run_io(
        self, runtimes: list[JobRuntime], attr: str, task: Callable[[JobRuntime], Callable[[], Any]]
    ) -> dict[str, Outcome]:
        """Run each job's task: inline without a pool, else on the pool until the deadline.

        Returns per job ``("ok", value)``, ``("error", exc)`` or ``("running", future)``; a
        running future is left on ``rt.<attr>`` for a later tick to collect.
        """
        out: dict[str, Outcome] = {}
        if self._act_pool is None:
            for rt in runtimes:
                try:
                    out[rt.key] = ("ok", task(rt)())
                except Exception as exc:
                    out[rt.key] = ("error", exc)
            return out
        futures: dict[Future[Any], JobRuntime] = {}
        for rt in runtimes:
            try:
                futures[self._act_pool.submit(task(rt))] = rt
            except Exception as exc:
                out[rt.key] = ("error", exc)
        progress = self.on_progress
        wait_until(futures, self.settings.act_deadline_s, on_done=lambda f: progress and progress())
        for fut, rt in futures.items():
            if not fut.done():
                setattr(rt, attr, fut)
                out[rt.key] = ("running", fut)
            elif fut.exception() is not None:
                out[rt.key] = ("error", fut.exception())
            else:
                out[rt.key] = ("ok", fut.result())
        return out

    def _collect_late_io(self, runtimes: list[JobRuntime], now: float) -> None:
        """Finish what a previous tick's writes left running (called before measuring)."""
        for rt in runtimes:
            fut = rt.applying
            if fut is not None and fut.done():
                rt.applying = None
                exc = fut.exception()
                cond = Conditions(rt.state.conditions, now)
                act = Acting(cond, "resize_in_progress", {}, None, None)
                self._guarded(
                    rt,
                    "act",
                    self._after_write,
                    rt,
                    act,
                    ("error", exc) if exc is not None else ("ok", None),
                    now,
                )
                rt.state.conditions = cond.to_list()
            fut = rt.writing
            if fut is not None and fut.done():
                rt.writing = None
                exc = fut.exception()
                self._after_send(rt, ("error", exc) if exc is not None else ("ok", None))

    # -- deciding what to write ----------------------------------------------------------
    def _prepare(
        self, rt: JobRuntime, plan: Decision | None, approved: Size | None, now: float
    ) -> Acting:
        state = rt.state
        cond = Conditions(state.conditions, now)
        cur = rt.current
        reason: dict[str, Any] = dict(plan.reason) if plan is not None else {}
        action = str(reason.get("action", "hold"))
        error: str | None = None
        if cur is None:
            error = str(rt.target_error or rt.problem)
            action, reason = "hold", {"action": "hold", "why": f"cannot read the target: {error}"}
            if isinstance(rt.target_error, TargetGone) and state.pending is not None:
                log.info("%s: the target is gone; dropping the unfinished resize", rt.key)
                state.pending = None
        action = self._observed_conditions(rt, cond) or action
        ov = rt.override
        overrides.mark(cond, ov)
        if ov is not None and cur is not None:
            action = str(reason.get("action", ov.kind))  # paused/pinned, metrics or not
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
        act = Acting(cond, action, reason, planned, desired, error)
        pending = state.pending
        if cur is None or desired is None:
            return act
        if overrides.is_paused(ov):
            return act  # never resized; an unfinished resize waits for the unpause
        if pending is not None:
            act.action = "resize_resumed"
            if desired == cur:  # the writes had all landed (an earlier tick, or a crash)
                self._finish_resize(rt, act, cur, now)
            else:
                act.write = desired
                pending["to"] = [desired.workers, desired.ps]  # what the quota allows now
                pending["attempts"] = int(pending.get("attempts", 0)) + 1
                self._save_marker(rt)
        elif (rt.sample is not None or overrides.is_pinned(ov)) and desired != cur:
            state.pending = {
                "from": [cur.workers, cur.ps],
                "to": [desired.workers, desired.ps],
                "since": now,
                "attempts": 1,
                "why": str(reason.get("why", ""))[:200],
            }
            act.write = desired
            self._save_marker(rt)
        elif planned is not None and planned != cur and rt.saved_policy is not None:
            state.policy = rt.saved_policy  # nothing was applied: plan afresh next tick
        return act

    def _save_marker(self, rt: JobRuntime) -> None:
        """Store the marker before the first write (a crash after it must find it)."""
        rt.state.saved_at = self.clock()
        self.store.save_many({rt.key: rt.state.to_dict()})

    def _write_size_task(self, rt: JobRuntime, size: Size | None) -> Callable[[], Any]:
        assert size is not None
        pending = dict(rt.state.pending or {})
        mark = getattr(self.status_sink, "mark_resize", None) if self._writes_status else None
        ns, name, saved_at = rt.entry.namespace, rt.entry.name, rt.state.saved_at

        def write() -> Any:
            if mark is not None:  # cluster mode: the marker lives on the job too
                mark(ns, name, {"pending": pending, "saved_at": saved_at})
            return rt.actuator.apply(size)

        return write

    def _after_write(self, rt: JobRuntime, act: Acting, outcome: Outcome, now: float) -> None:
        kind, value = outcome
        if kind == "ok":
            cur = rt.current or Size(*(rt.state.pending or {}).get("from", [0, 0]))
            self._finish_resize(rt, act, cur, now)
            return
        if kind == "running":
            act.action = "resize_in_progress"
            act.reason["resize"] = "the resize write is still running; it is collected next tick"
            return
        exc = value
        if not isinstance(exc, ActuatorError):
            self._fail(rt, "act", exc)  # the marker stays: the next tick finishes the resize
            return
        self.metrics.errors.labels(kind="actuator").inc()
        pending = rt.state.pending or {}
        if isinstance(exc, TargetGone):
            rt.state.pending = None
        act.cond.set(
            "TargetAvailable",
            False,
            "TargetNotFound"
            if isinstance(exc, TargetGone)
            else "ResizeRejected"
            if isinstance(exc, TargetRejected)
            else "ResizeFailed",
            str(exc),
        )
        frm, to = pending.get("from"), pending.get("to")
        if int(pending.get("attempts", 1)) <= 1:  # one Warning per resize, not per retry
            self._event(rt, "ResizeFailed", f"resize {_size(frm)} -> {_size(to)} failed: {exc}")
        if rt.state.pending is not None:
            act.reason["resize"] = (
                f"resize to {_size(to)} unfinished after {pending.get('attempts', 1)} tries; "
                "the next tick finishes it"
            )
        log.warning("resizing %s failed: %s", rt.key, exc)
        act.error, act.action = str(exc), "resize_failed"

    def _finish_resize(self, rt: JobRuntime, act: Acting, cur: Size, now: float) -> None:
        """The marker's resize is done: record it once (metric, Event, rescale window)."""
        state = rt.state
        pending = state.pending or {}
        frm = Size(*pending.get("from", [cur.workers, cur.ps]))
        to = Size(*pending.get("to", [cur.workers, cur.ps]))
        state.pending = None
        state.resize_started = now
        state.resize_from = [frm.workers, frm.ps]
        state.resize_to = [to.workers, to.ps]
        act.resized = True
        up = to.workers > frm.workers or (to.workers == frm.workers and to.ps > frm.ps)
        self.metrics.resizes.labels(job=rt.key, direction="up" if up else "down").inc()
        peak = float(np.max(rt.window.high)) if rt.window is not None else None
        tries = int(pending.get("attempts", 1))
        reason = act.reason
        if act.action in ("resize_resumed", "resize_in_progress"):
            act.action = "resize_completed"
            reason = {
                "action": "resize_completed",
                "why": f"finished the resize started at {iso(float(pending.get('since', now)))}"
                f" ({pending.get('why') or 'no reason kept'}) after {tries} tries",
            }
            act.reason.update(reason)
        act.desired = to
        self._event(rt, "ScaledUp" if up else "ScaledDown", resize_message(frm, to, reason, peak))

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
            "why": f"the write of the resize to {_size(to)} is still running",
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
                f"to {_size(state.pending.get('to'))}; the next tick finishes it",
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


def _size(v: Any) -> str:
    return str(Size(*v)) if isinstance(v, list | tuple) and len(v) == 2 else "?"


def _reason_changed(conditions: list[Condition], failure: JobFailure) -> bool:
    for c in conditions:
        if c.get("type") == "Ready":
            return failure.describe()[:60] not in str(c.get("message", ""))
    return True
