"""The observe stage: read each job's current size and measure its Kafka traffic.

Why a stage of its own: measuring is the slow, unreliable part of a tick (a broker that
hangs, an actuator that does not answer), so it runs on bounded pools with a deadline and
hands results back to the loop's thread (:meth:`Observe._absorb`); a job whose measurement
is still running holds its size and never holds up the others. Its result is one
:class:`~autoscaler.controller.tick.Observation` per job.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Any

from autoscaler.actuators.base import Size
from autoscaler.controller.guard import Guard
from autoscaler.controller.isolation import MAX_HISTORY_STEPS, safe_text
from autoscaler.controller.metering import (
    ArrivalHistory,
    Backfilling,
    MeasurementTimedOut,
    Sample,
    WarmingUp,
)
from autoscaler.controller.metrics import ControllerMetrics
from autoscaler.controller.runtime import JobRuntime
from autoscaler.controller.settings import ControllerSettings
from autoscaler.controller.tick import Observation, Tick
from autoscaler.controller.workers import DaemonPool, wait_until
from common.errors import MetricUnavailable
from kube.errors import ActuatorError

# One logger for the whole tick, whatever module a stage lives in.
log = logging.getLogger("autoscaler.controller.loop")

_QUIET_METRIC_ERRORS: tuple[type[MetricUnavailable], ...] = (WarmingUp, Backfilling)
"""Not failures: a new topic's first snapshot, and its history being rebuilt."""


@dataclass
class _Reading:
    """What one target read or measurement found (built on a pool thread, absorbed by the
    loop's thread)."""

    current: Size | None = None
    target_error: ActuatorError | None = None
    sample: Sample | None = None
    metric_error: MetricUnavailable | None = None
    history: ArrivalHistory | None = None
    unexpected: list[tuple[str, BaseException]] | None = None
    """Exceptions of unexpected types, turned into the errors above (counted per job)."""


@dataclass
class _Seen:
    """One job's observation while the stage gathers it (frozen once the stage is done)."""

    current: Size | None = None
    target_error: ActuatorError | None = None
    sample: Sample | None = None
    metric_error: MetricUnavailable | None = None
    history: ArrivalHistory | None = None

    def freeze(self) -> Observation:
        return Observation(
            self.current, self.target_error, self.sample, self.metric_error, self.history
        )


@dataclass
class Observe:
    """The observe stage: every job's size and Kafka sample, within the tick's deadline."""

    settings: ControllerSettings
    metrics: ControllerMetrics
    meter_pool: DaemonPool | None
    act_pool: DaemonPool | None
    """Target reads share the pool of the act stage's writes (both are API calls)."""
    progress: Callable[[], None] | None = None
    """Called as each pooled call finishes (the runner's liveness beat)."""

    def __call__(
        self, runtimes: list[JobRuntime], tick: Tick, guard: Guard
    ) -> dict[str, Observation]:
        """One observation per job (nothing observed for a job that failed earlier in the
        tick, or whose resize write is still running: the write owns the target)."""
        now = tick.now
        seen = {rt.key: _Seen() for rt in runtimes}
        active = [rt for rt in runtimes if not guard.failed(rt) and rt.applying is None]
        for rt in active:  # without a pool, inline: one job after another
            if self.act_pool is None:
                guard.run(rt, "observe", self._absorb, rt, seen[rt.key], _read_target(rt), now)
            if self.meter_pool is None:
                reading = self._measure(rt, now)
                guard.run(rt, "observe", self._absorb, rt, seen[rt.key], reading, now)
        if self.meter_pool is not None or self.act_pool is not None:
            self._pooled(active, seen, now, guard)
        return {key: job.freeze() for key, job in seen.items()}

    def _pooled(
        self, active: list[JobRuntime], seen: dict[str, _Seen], now: float, guard: Guard
    ) -> None:
        started = time.monotonic()
        futures: list[Future[Any]] = []
        # The jobs measured longest ago go first: a backlog of slow jobs cannot starve one.
        order = sorted(active, key=lambda rt: rt.measured_at or -math.inf)
        kinds: list[tuple[str, DaemonPool, Callable[[JobRuntime], _Reading]]] = []
        if self.act_pool is not None:
            kinds.append(("reading", self.act_pool, _read_target))
        if self.meter_pool is not None:
            kinds.append(("measuring", self.meter_pool, lambda rt: self._measure(rt, now)))
        for rt in order:
            for attr, pool, fn in kinds:
                fut = getattr(rt, attr)
                if fut is None or fut.done():  # a result a tick late is dropped: measure anew
                    fut = pool.submit(partial(fn, rt))
                    setattr(rt, attr, fut)
                    if attr == "measuring":
                        rt.measuring_since = started
                futures.append(fut)
        progress = self.progress
        wait_until(
            futures, self.settings.observe_deadline_s, on_done=lambda f: progress and progress()
        )
        for rt in order:
            job = seen[rt.key]
            for attr, _, _ in kinds:
                fut = getattr(rt, attr)
                if fut.done():
                    setattr(rt, attr, None)
                    exc = fut.exception()
                    if exc is not None:
                        guard.fail(rt, "observe", exc)
                    else:
                        guard.run(rt, "observe", self._absorb, rt, job, fut.result(), now)
                    continue
                if attr == "measuring":
                    running = time.monotonic() - rt.measuring_since
                    job.metric_error = MeasurementTimedOut(
                        f"the measurement has been running for {running:.0f}s, past the "
                        f"tick's deadline of {self.settings.observe_deadline_s:g}s"
                    )
                    self.metrics.errors.labels(kind="metrics").inc()
                else:
                    job.target_error = ActuatorError(
                        f"reading the target took longer than the tick's deadline "
                        f"of {self.settings.observe_deadline_s:g}s"
                    )
                    self.metrics.errors.labels(kind="actuator").inc()

    def _measure(self, rt: JobRuntime, now: float) -> _Reading:
        """The job's sample and arrival history (on a pool thread: touches no loop state)."""
        out = _Reading()
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

    def _absorb(self, rt: JobRuntime, seen: _Seen, got: _Reading, now: float) -> None:
        """Take a pooled call's result into the job's observation (on the loop's thread)."""
        for stage, exc in got.unexpected or ():
            self.metrics.job_error(rt.key, stage, type(exc).__name__)
        if got.current is not None or got.target_error is not None:
            seen.current, seen.target_error = got.current, got.target_error
            if got.target_error is not None:
                self.metrics.errors.labels(kind="actuator").inc()
                if got.unexpected:
                    log.error("reading the size of %s: %s", rt.key, got.target_error)
            else:
                rt.state.last_current = [got.current.workers, got.current.ps]  # type: ignore[union-attr]
        if got.sample is None and got.metric_error is None:
            return  # a target read only
        seen.sample, seen.metric_error = got.sample, got.metric_error
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
        seen.history = hist


def _read_target(rt: JobRuntime) -> _Reading:
    out = _Reading()
    try:
        out.current = rt.actuator.current()
    except ActuatorError as exc:
        out.target_error = exc
    except Exception as exc:  # an actuator bug must not stop the tick
        out.target_error = ActuatorError(f"{type(exc).__name__}: {safe_text(exc)}")
        out.unexpected = [("observe", exc)]
    return out
