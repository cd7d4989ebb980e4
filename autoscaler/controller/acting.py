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
from typing import TYPE_CHECKING, Any

import numpy as np

from autoscaler.actuators.base import Size
from autoscaler.controller import overrides
from autoscaler.controller.reporting import Acting, Outcome, ReportingStages, size_text
from autoscaler.controller.runtime import JobRuntime
from autoscaler.controller.status import (
    Conditions,
    JobReport,
    iso,
    resize_message,
)
from autoscaler.controller.workers import DaemonPool, wait_until
from autoscaler.policy.types import Decision
from kube.errors import ActuatorError, TargetGone, TargetRejected

if TYPE_CHECKING:  # the loop imports this module
    from autoscaler.controller.metrics import ControllerMetrics
    from autoscaler.controller.settings import ControllerSettings
    from autoscaler.controller.sinks import EventSink, StatusSink
    from autoscaler.controller.state import StateStore
    from autoscaler.controller.timeline import TimelineStore

log = logging.getLogger("autoscaler.controller.loop")


class ActingStages(ReportingStages):
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
            self._event(
                rt, "ResizeFailed", f"resize {size_text(frm)} -> {size_text(to)} failed: {exc}"
            )
        if rt.state.pending is not None:
            act.reason["resize"] = (
                f"resize to {size_text(to)} unfinished after {pending.get('attempts', 1)} tries; "
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
