"""The act stage: resize where the approved size differs from the current one.

Why a stage of its own: acting is where the controller changes the world, so it carries the
two guarantees that make a resize safe to interrupt:

* **a resize-in-progress marker.** Before the first write, the resize (``from``, ``to``,
  ``since``, ``attempts``) is stored in the job's state — the SQLite store, and in cluster
  mode the job's ``status.plannerState.pending`` — and it is cleared only once every write
  is done. A partial failure (PS written, the worker write failed) or a kill -9 between the
  two writes leaves the marker, and the next tick, in this process or the next one, *rolls
  forward*: it re-applies ``to`` (actuators are level-triggered: what is already in place is
  not written again) instead of planning afresh on a half-resized job. One marker is one
  resize: its Event and ``kale_resizes_total`` count once, when it completes.
* **bounded, concurrent I/O.** The resize writes of different jobs run on a pool of
  ``act_threads`` threads, and the tick waits for them at most ``act_deadline_s``. A write
  still running at the deadline stays with its job (``resize_in_progress``); the job is
  neither measured nor planned until it is done (:meth:`Act.collect_late` picks it up).

Its result is one :class:`~autoscaler.controller.tick.Outcome` per job it acted on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from autoscaler.actuators.base import Size, fitted
from autoscaler.controller import overrides
from autoscaler.controller.guard import Guard
from autoscaler.controller.metering import Backfilling, WarmingUp
from autoscaler.controller.metrics import ControllerMetrics
from autoscaler.controller.runtime import JobRuntime
from autoscaler.controller.settings import Clock, ControllerSettings
from autoscaler.controller.sinks import StatusSink
from autoscaler.controller.state import StateStore
from autoscaler.controller.status import Conditions, iso, resize_message, size_text
from autoscaler.controller.tick import (
    NO_PLAN,
    Approvals,
    Observation,
    Outcome,
    Plan,
    Tick,
    TickEvents,
)
from autoscaler.controller.workers import DaemonPool, IoResult, run_all
from autoscaler.policy.forecasts import ForecastWindow
from kube.errors import ActuatorError, TargetGone, TargetRejected

log = logging.getLogger("autoscaler.controller.loop")


@dataclass
class Act:
    """The act stage: decide each job's action, write the resizes, record them."""

    settings: ControllerSettings
    metrics: ControllerMetrics
    store: StateStore
    status_sink: StatusSink
    writes_status: bool
    """Cluster mode's status sink: the marker is written on the job too."""
    clock: Clock
    act_pool: DaemonPool | None
    progress: Callable[[], None] | None = None
    """Called as each pooled write finishes (the runner's liveness beat)."""

    def __call__(
        self,
        runtimes: list[JobRuntime],
        observations: dict[str, Observation],
        plans: dict[str, Plan],
        approvals: Approvals,
        tick: Tick,
        guard: Guard,
        events: TickEvents,
    ) -> dict[str, Outcome]:
        """The outcome of every job that neither failed nor has a write still running."""
        now = tick.now
        acts: dict[str, Outcome] = {}
        for rt in runtimes:
            if not guard.failed(rt) and rt.applying is None:
                act = guard.run(
                    rt,
                    "act",
                    self._prepare,
                    rt,
                    observations[rt.key],
                    plans.get(rt.key, NO_PLAN),
                    approvals.get(rt.key),
                    now,
                    events,
                )
                if act is not None:
                    acts[rt.key] = act
        writing = [rt for rt in runtimes if rt.key in acts and acts[rt.key].write is not None]
        outcomes = self._run(writing, lambda rt: self._write_size_task(rt, acts[rt.key].write))
        for rt in writing:
            if outcomes[rt][0] == "running":
                rt.applying = outcomes[rt][1]
            guard.run(
                rt,
                "act",
                self._after_write,
                rt,
                acts[rt.key],
                outcomes[rt],
                now,
                observations[rt.key].current,
                plans.get(rt.key, NO_PLAN).window,
                guard,
                events,
            )
        return acts

    def collect_late(
        self, runtimes: list[JobRuntime], tick: Tick, guard: Guard, events: TickEvents
    ) -> None:
        """Finish the resize writes a previous tick left running (before measuring)."""
        now = tick.now
        for rt in runtimes:
            fut = rt.applying
            if fut is not None and fut.done():
                rt.applying = None
                exc = fut.exception()
                cond = Conditions(rt.state.conditions, now)
                act = Outcome(cond, "resize_in_progress", {}, None, None)
                guard.run(
                    rt,
                    "act",
                    self._after_write,
                    rt,
                    act,
                    ("error", exc) if exc is not None else ("ok", None),
                    now,
                    None,
                    None,
                    guard,
                    events,
                )
                rt.state.conditions = cond.to_list()

    def _run(
        self, runtimes: list[JobRuntime], task: Callable[[JobRuntime], Callable[[], Any]]
    ) -> dict[JobRuntime, IoResult]:
        progress = self.progress
        return run_all(
            runtimes,
            task,
            self.act_pool,
            self.settings.act_deadline_s,
            on_done=lambda f: progress and progress(),
        )

    # -- deciding what to write ----------------------------------------------------------
    def _prepare(
        self,
        rt: JobRuntime,
        seen: Observation,
        plan: Plan,
        approved: Size | None,
        now: float,
        events: TickEvents,
    ) -> Outcome:
        state = rt.state
        cond = Conditions(state.conditions, now)
        cur = seen.current
        wish = plan.decision
        reason: dict[str, Any] = dict(wish.reason) if wish is not None else {}
        action = str(reason.get("action", "hold"))
        error: str | None = None
        if cur is None:
            error = str(seen.target_error)
            action, reason = "hold", {"action": "hold", "why": f"cannot read the target: {error}"}
            if isinstance(seen.target_error, TargetGone) and state.pending is not None:
                log.info("%s: the target is gone; dropping the unfinished resize", rt.key)
                state.pending = None
        action = observed_conditions(rt, seen, plan.window, cond) or action
        ov = plan.override
        overrides.mark(cond, ov)
        if ov is not None and cur is not None:
            action = str(reason.get("action", ov.kind))  # paused/pinned, metrics or not
        planned = Size(wish.workers, wish.ps) if wish is not None else None
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
        if desired is not None:  # a size the target takes (its bounds; no PS where it has none)
            taken = fitted(rt.actuator, desired)
            if taken.workers != desired.workers:
                reason["target"] = (
                    f"the {rt.actuator.kind} takes {taken.workers} workers, not {desired.workers}"
                )
                if ov is None and cur is not None and taken.workers == cur.workers:
                    action = "hold_target_bounds"
            desired = taken
        act = Outcome(cond, action, reason, planned, desired, error)
        pending = state.pending
        if cur is None or desired is None:
            return act
        if overrides.is_paused(ov):
            return act  # never resized; an unfinished resize waits for the unpause
        if pending is not None:
            act.action = "resize_resumed"
            if desired == cur:  # the writes had all landed (an earlier tick, or a crash)
                self._finish_resize(rt, act, cur, now, plan.window, events)
            else:
                act.write = desired
                pending["to"] = [desired.workers, desired.ps]  # what the quota allows now
                pending["attempts"] = int(pending.get("attempts", 0)) + 1
                self._save_marker(rt)
        elif (seen.sample is not None or overrides.is_pinned(ov)) and desired != cur:
            state.pending = {
                "from": [cur.workers, cur.ps],
                "to": [desired.workers, desired.ps],
                "since": now,
                "attempts": 1,
                "why": str(reason.get("why", ""))[:200],
            }
            act.write = desired
            self._save_marker(rt)
        elif planned is not None and planned != cur and plan.saved_policy is not None:
            state.policy = plan.saved_policy  # nothing was applied: plan afresh next tick
        return act

    def _save_marker(self, rt: JobRuntime) -> None:
        """Store the marker before the first write (a crash after it must find it)."""
        rt.state.saved_at = self.clock()
        self.store.save_many({rt.key: rt.state.to_dict()})

    def _write_size_task(self, rt: JobRuntime, size: Size | None) -> Callable[[], Any]:
        assert size is not None
        pending = dict(rt.state.pending or {})
        mark = getattr(self.status_sink, "mark_resize", None) if self.writes_status else None
        ns, name, saved_at = rt.entry.namespace, rt.entry.name, rt.state.saved_at

        def write() -> Any:
            if mark is not None:  # cluster mode: the marker lives on the job too
                mark(ns, name, {"pending": pending, "saved_at": saved_at})
            return rt.actuator.apply(size)

        return write

    def _after_write(
        self,
        rt: JobRuntime,
        act: Outcome,
        result: IoResult,
        now: float,
        current: Size | None,
        window: ForecastWindow | None,
        guard: Guard,
        events: TickEvents,
    ) -> None:
        kind, value = result
        if kind == "ok":
            cur = current or Size(*(rt.state.pending or {}).get("from", [0, 0]))
            self._finish_resize(rt, act, cur, now, window, events)
            return
        if kind == "running":
            act.action = "resize_in_progress"
            act.reason["resize"] = "the resize write is still running; it is collected next tick"
            return
        exc = value
        if not isinstance(exc, ActuatorError):
            guard.fail(rt, "act", exc)  # the marker stays: the next tick finishes the resize
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
            events.add(
                rt.key, "ResizeFailed", f"resize {size_text(frm)} -> {size_text(to)} failed: {exc}"
            )
        if rt.state.pending is not None:
            act.reason["resize"] = (
                f"resize to {size_text(to)} unfinished after {pending.get('attempts', 1)} tries; "
                "the next tick finishes it"
            )
        log.warning("resizing %s failed: %s", rt.key, exc)
        act.error, act.action = str(exc), "resize_failed"

    def _finish_resize(
        self,
        rt: JobRuntime,
        act: Outcome,
        cur: Size,
        now: float,
        window: ForecastWindow | None,
        events: TickEvents,
    ) -> None:
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
        peak = float(np.max(window.high)) if window is not None else None
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
        events.add(
            rt.key, "ScaledUp" if up else "ScaledDown", resize_message(frm, to, reason, peak)
        )


def observed_conditions(
    rt: JobRuntime, seen: Observation, window: ForecastWindow | None, cond: Conditions
) -> str | None:
    """Target, metrics and forecast conditions; returns the action a hold forces."""
    cur, sample = seen.current, seen.sample
    if cur is None:
        gone = isinstance(seen.target_error, TargetGone)
        cond.set(
            "TargetAvailable",
            False,
            "TargetNotFound" if gone else "TargetUnavailable",
            str(seen.target_error or ""),
        )
        return None
    cond.set("TargetAvailable", True, "TargetFound", f"{rt.actuator.kind} at {cur}")
    if sample is None:
        err = seen.metric_error
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
    if window is not None:
        cond.set("ForecastAvailable", True, "Forecasting", rt.forecast.name)
    else:
        cond.set(
            "ForecastAvailable",
            False,
            "NoForecast",
            f"{rt.forecast.reason or 'no forecast'}; sizing for the recent peak",
        )
    return None
