"""Stage 2 of the tick: read each job's current size and measure its Kafka traffic.

Why a module of its own: measuring is the slow, unreliable part of a tick (a broker that
hangs, an actuator that does not answer), so it runs on bounded pools with a deadline and
hands results back to the loop's thread (:meth:`ObservingStages._absorb`); a job whose
measurement is still running holds its size and never holds up the others. Mixed into
:class:`~autoscaler.controller.loop.Controller`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import Any

from autoscaler.controller.isolation import MAX_HISTORY_STEPS, safe_text
from autoscaler.controller.metering import (
    ArrivalHistory,
    Backfilling,
    MeasurementTimedOut,
    WarmingUp,
)
from autoscaler.controller.metrics import ControllerMetrics
from autoscaler.controller.runtime import JobRuntime, Observed
from autoscaler.controller.settings import ControllerSettings
from autoscaler.controller.workers import DaemonPool, wait_until
from common.errors import MetricUnavailable
from kube.errors import ActuatorError

# One logger for the whole tick, whatever module a stage lives in.
log = logging.getLogger("autoscaler.controller.loop")

_QUIET_METRIC_ERRORS: tuple[type[MetricUnavailable], ...] = (WarmingUp, Backfilling)
"""Not failures: a new topic's first snapshot, and its history being rebuilt."""


class ObservingStages:
    """Mixed into :class:`~autoscaler.controller.loop.Controller` (its attributes are used)."""

    metrics: ControllerMetrics
    settings: ControllerSettings
    on_progress: Callable[[], None] | None
    _meter_pool: DaemonPool | None
    _act_pool: DaemonPool | None
    _fail: Callable[..., None]
    _guarded: Callable[..., Any]

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
