"""One tick's guard: each stage runs each job under it, and a job that raised sits out.

The policy is :mod:`autoscaler.controller.isolation`'s: an exception of any type marks that
job for the rest of the tick (it holds its size and its report says why) and is counted and
logged once per kind with its traceback; the tick goes on with the other jobs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from autoscaler.controller.isolation import JobFailure
from autoscaler.controller.metrics import ControllerMetrics
from autoscaler.controller.runtime import JobRuntime

# One logger for the whole tick, whatever module a stage lives in.
log = logging.getLogger("autoscaler.controller.loop")

T = TypeVar("T")


class Guard:
    """The jobs that failed in this tick (the first failure of each), and the guard itself."""

    def __init__(self, metrics: ControllerMetrics) -> None:
        self.metrics = metrics
        self.failures: dict[str, JobFailure] = {}

    def failed(self, rt: JobRuntime) -> bool:
        return rt.key in self.failures

    def run(self, rt: JobRuntime, stage: str, fn: Callable[..., T], *args: Any) -> T | None:
        """``fn(*args)`` unless the job already failed this tick; an exception of any type
        marks the job (and returns None) instead of leaving the tick."""
        if rt.key in self.failures:
            return None
        try:
            return fn(*args)
        except Exception as exc:
            self.fail(rt, stage, exc)
            return None

    def fail(self, rt: JobRuntime, stage: str, exc: BaseException) -> None:
        failure = JobFailure.of(stage, exc)
        self.failures.setdefault(rt.key, failure)
        self.metrics.job_error(rt.key, stage, failure.error)
        seen = rt.logged_failures
        known = (stage, failure.error) in seen
        seen.add((stage, failure.error))
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
