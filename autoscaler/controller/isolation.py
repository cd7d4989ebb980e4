"""Per-job isolation: whatever one job's handling raises stays with that job.

Why this module exists: the controller serves every tenant's jobs from one process. A job
that validates can still drive the stack into ``OverflowError`` (an infinite SLO),
``MemoryError`` (a horizon of 10¹¹ weeks), ``RecursionError`` or a plain bug's ``KeyError``;
if the loop let any of those out, ``kale controller`` would exit and every other job — in
cluster mode, other namespaces' jobs — would stop being served. So each stage of a tick runs
each job under a guard: an ``Exception`` of any type marks *that job* (a ``Ready=False``
condition with reason ``ControllerError``, a Warning Event on the transition, and
``kale_job_errors_total{namespace, etj, stage, error}``), the job holds its size, and the
tick goes on. ``BaseException``\\ s that are not ``Exception`` (``KeyboardInterrupt``,
``SystemExit``) are not caught: they stop the process, as they should.

A second line of defence keeps a job's work bounded before it can cost much: the planner and
the history never handle more than :data:`MAX_PLAN_STEPS` / :data:`MAX_HISTORY_STEPS`
intervals, whatever the spec's durations say (``kale validate`` bounds them too; this is the
controller not trusting that every job came through it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from common.errors import KaleError

#: Most intervals the planner looks ahead or back (7 days of 10 s steps is 60,480).
MAX_PLAN_STEPS = 100_000
#: Most intervals of arrival history handed to a job's forecaster.
MAX_HISTORY_STEPS = 300_000

STAGES = ("build", "observe", "plan", "approve", "act", "record", "save")
"""The tick's stages, as the ``stage`` label of ``kale_job_errors_total`` names them."""


class JobLimitError(KaleError):
    """A job asks for more work per tick than the controller does for any one job."""


def safe_text(exc: BaseException, limit: int = 300) -> str:
    """``str(exc)``, bounded, even when ``__str__`` itself misbehaves (hostile objects)."""
    try:
        text = str(exc)
    except Exception:  # a broken __str__ must not escape the guard that reports it
        text = "<unprintable>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class JobFailure:
    """An unexpected exception while handling one job in one tick."""

    stage: str
    """Where it happened (one of :data:`STAGES`)."""
    error: str
    """The exception's class name (``OverflowError``)."""
    message: str

    @classmethod
    def of(cls, stage: str, exc: BaseException) -> JobFailure:
        return cls(stage, type(exc).__name__, safe_text(exc))

    def describe(self) -> str:
        text = f"{self.stage}: {self.error}"
        return f"{text}: {self.message}" if self.message else text


def steps(seconds: float, interval_s: float, *, what: str, limit: int = MAX_PLAN_STEPS) -> int:
    """``seconds / interval_s`` as a whole number of intervals, refusing absurd values.

    Raises :class:`JobLimitError` (one line, naming ``what``) for non-finite or non-positive
    inputs and for more than ``limit`` intervals.
    """
    if not (math.isfinite(seconds) and math.isfinite(interval_s)) or interval_s <= 0:
        raise JobLimitError(f"{what}: {seconds:g}s over {interval_s:g}s intervals is not finite")
    n = seconds / interval_s
    if n > limit:
        raise JobLimitError(
            f"{what} is {n:.3g} intervals of {interval_s:g}s; the controller handles at most "
            f"{limit} per job"
        )
    return max(1, round(n))
