"""The sync stage: keep the set of managed jobs in step with the listing.

Why a stage of its own: building a job (sizing, forecast cache, meter, actuator, the state
resumed from the store or from the job's status) and forgetting it is where a bad or
changed spec meets the controller, so it carries its own failure policy — an expected error
marks the job invalid, an unexpected one backs off exponentially up to
:data:`MAX_BUILD_BACKOFF_S` instead of rebuilding every tick.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from autoscaler.actuators.base import Actuator
from autoscaler.actuators.dryrun import DryRunActuator
from autoscaler.controller.forecast import FitPool, ForecastCache
from autoscaler.controller.isolation import JobFailure, safe_text, steps
from autoscaler.controller.jobs import InvalidJob, JobEntry, Listing
from autoscaler.controller.metering import MetricSource
from autoscaler.controller.metrics import ControllerMetrics
from autoscaler.controller.runtime import JobRuntime
from autoscaler.controller.settings import ControllerSettings
from autoscaler.controller.sharding import shard_of
from autoscaler.controller.sinks import EventSink, StatusSink
from autoscaler.controller.state import JobState, StateStore
from autoscaler.controller.status import Conditions
from autoscaler.policy.quota import ResourceManager
from autoscaler.policy.types import JobSizing
from common.errors import KaleError
from kube.errors import ActuatorError

# One logger for the whole tick, whatever module a stage lives in.
log = logging.getLogger("autoscaler.controller.loop")


#: Longest pause before retrying a job whose build raised an unexpected exception.
MAX_BUILD_BACKOFF_S = 3600.0


@dataclass
class BuildFailure:
    """A job whose build raised unexpectedly: not rebuilt before ``retry_at`` unless its spec
    (``fingerprint``) changes."""

    fingerprint: str
    retry_at: float
    tries: int
    problems: list[str]


@dataclass
class JobSync:
    """The sync stage, over the controller's set of managed jobs.

    ``runtimes`` (the jobs managed now) and ``build_failures`` are the controller's
    long-lived dicts, which this stage keeps in step with the listing; ``invalid`` (the
    problems of the jobs that cannot be managed) is replaced by :meth:`sync`, for the
    controller to keep. The rest is what building and forgetting a job needs.
    """

    runtimes: dict[str, JobRuntime]
    invalid: dict[str, list[str]]
    build_failures: dict[str, BuildFailure]
    meter_factory: Callable[[JobEntry], MetricSource]
    forecaster_factory: Callable[[JobEntry], Any]
    actuator_factory: Callable[[JobEntry], Actuator]
    sizing_factory: Callable[[JobEntry], JobSizing]
    resources: ResourceManager | None
    metrics: ControllerMetrics
    store: StateStore
    settings: ControllerSettings
    status_sink: StatusSink
    event_sink: EventSink
    fits: FitPool | None

    def sync(self, listing: Listing, now: float, elsewhere: set[str] | None = None) -> None:
        """Build the jobs listed (anew when their spec changed), forget the others;
        ``elsewhere``: jobs listed but in shards another replica holds."""
        valid = {e.key: e for e in listing.jobs}
        invalid = {i.key: i for i in listing.invalid if i.key not in valid}
        for key in list(self.runtimes):
            if key not in valid:
                why = "its spec became invalid" if key in invalid else "no longer listed"
                if elsewhere and key in elsewhere:
                    why = "its shard is held by another replica"
                self.forget(key, why=why)
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
        for key in list(self.build_failures):
            if key not in valid:
                del self.build_failures[key]
        for key, entry in valid.items():
            rt = self.runtimes.get(key)
            if rt is not None and rt.entry.fingerprint == entry.fingerprint:
                rt.entry = self._new_credentials(rt, entry)
                self._adopt_newer_state(rt, entry)
                continue
            held = self.build_failures.get(key)
            if held is not None and held.fingerprint == entry.fingerprint and now < held.retry_at:
                self.invalid[key] = held.problems  # not retried yet: it raised last time
                continue
            try:
                self.runtimes[key] = self._build(entry, rt)
                self.build_failures.pop(key, None)
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
        held = self.build_failures.get(key)
        tries = held.tries + 1 if held is not None and held.fingerprint == entry.fingerprint else 1
        backoff = min(MAX_BUILD_BACKOFF_S, self.settings.interval_s * 2 ** (tries - 1))
        self.build_failures[key] = BuildFailure(
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
        make = self.forecaster_factory  # the cache outlives this stage: keep the factory only
        cache = ForecastCache(
            lambda: make(entry),
            name=self.settings.forecast_model or fc.model,
            interval_s=float(fc.interval),
            horizon_steps=horizon,
            refit_s=float(fc.refit),
            quantile=float(fc.quantile),
            reforecast_s=self.settings.reforecast_s,
            pool=self.fits,
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
        if self.settings.shards > 1:
            rt.shard = shard_of(entry.key, self.settings.shards)
            if old is None:
                self._owned_event(entry, rt.shard)
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

    def _owned_event(self, entry: JobEntry, shard: int) -> None:
        """An Event saying which replica plans the job now, and which did before."""
        before = entry.status.get("controller") if isinstance(entry.status, dict) else None
        me = self.settings.identity
        message = f"planned by replica {me} (shard {shard} of {self.settings.shards})"
        if isinstance(before, str) and before and before != me:
            message += f", taken over from {before}"
        try:
            self.event_sink.emit(
                namespace=entry.namespace,
                name=entry.name,
                uid=entry.uid,
                reason="ShardOwned",
                message=message,
            )
        except Exception as err:  # events are a courtesy
            self.metrics.errors.labels(kind="event").inc()
            log.warning("event for %s failed: %s", entry.key, safe_text(err))

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

    def forget(self, key: str, why: str = "") -> None:
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


def _saved_at(state: dict[str, Any]) -> float:
    v = state.get("saved_at")
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else -math.inf


def _interim_model() -> Any:
    """Serves while a job's first background fit runs: seasonal naive needs no training."""
    from forecasting.registry import make_forecaster

    return make_forecaster("seasonal_naive")
