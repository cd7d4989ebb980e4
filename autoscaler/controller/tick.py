"""The values one tick hands from stage to stage.

A tick is a pipeline (:mod:`autoscaler.controller.loop`): observe → :class:`Observation` per
job, plan → :class:`Plan` per job, approve → approved sizes, act → :class:`Outcome` per job,
report → :class:`~autoscaler.controller.status.JobReport` per job. Each stage takes the
values of the stages before it and returns its own; nothing a stage learns about a job in
one tick is left on the job's long-lived :class:`~autoscaler.controller.runtime.JobRuntime`
for another stage to find. This module holds only those values, so every stage can import
it and none imports another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autoscaler.actuators.base import Size
from autoscaler.controller.metering import ArrivalHistory, Sample
from autoscaler.controller.status import Conditions
from autoscaler.job.overrides import Override
from autoscaler.policy.forecasts import ForecastWindow
from autoscaler.policy.types import Decision
from common.errors import MetricUnavailable
from common.frozen import quick_init
from kube.errors import ActuatorError


@quick_init
@dataclass(frozen=True)
class Tick:
    """One reconcile round: its number since the controller started, and its time."""

    number: int
    now: float
    """Epoch seconds, read once from the controller's clock when the tick starts."""


@quick_init
@dataclass(frozen=True)
class Observation:
    """What the observe stage learned about one job this tick (nothing: every field None).

    Exactly one of ``current`` and ``target_error`` is set once the target was read, and
    one of ``sample`` and ``metric_error`` once Kafka was measured.
    """

    current: Size | None = None
    target_error: ActuatorError | None = None
    sample: Sample | None = None
    metric_error: MetricUnavailable | None = None
    history: ArrivalHistory | None = None
    """The arrival history up to (never including) the step being decided."""


NOTHING_OBSERVED = Observation()
"""A job not observed this tick (it failed earlier in the tick, or a write is running)."""


@quick_init
@dataclass(frozen=True)
class Plan:
    """The plan stage's result for one job: the planner's wish and what it was based on."""

    decision: Decision | None = None
    """The wish before the quota (None: nothing known about the target, nothing planned)."""
    window: ForecastWindow | None = None
    """The forecast the decision was made on (None: none this tick)."""
    override: Override | None = None
    """A pause or pin in force (:mod:`autoscaler.job.overrides`): the planner was bypassed."""
    saved_policy: dict[str, Any] | None = None
    """The planner state before the decision, put back if the decision is not carried out."""


NO_PLAN = Plan()
"""A job with nothing to plan (its size is unknown, or a write of its is still running)."""

Approvals = dict[str, Size]
"""The approve stage's result: the size each job may have (absent: hold)."""


@quick_init
@dataclass(frozen=True)
class Event:
    """A Kubernetes Event about a job, sent with its status at the end of the tick."""

    reason: str
    message: str
    type: str = "Normal"


class TickEvents:
    """The Events one tick raises, per job, in the order they were raised."""

    def __init__(self) -> None:
        self._by_job: dict[str, list[Event]] = {}

    def add(self, job: str, reason: str, message: str, type_: str = "Normal") -> None:
        self._by_job.setdefault(job, []).append(Event(reason, message, type_))

    def of(self, job: str) -> list[Event]:
        return self._by_job.get(job, [])


@dataclass
class Outcome:
    """What the act stage did to one job, and the conditions it found on the way.

    Built step by step inside the act stage (a resize write finishing or failing changes
    the action and the conditions); the report stage completes ``cond`` and reads the rest.
    """

    cond: Conditions
    action: str
    reason: dict[str, Any]
    planned: Size | None
    desired: Size | None
    error: str | None = None
    write: Size | None = None
    """The size written this tick (None: nothing to write)."""
    resized: bool = False
