"""What the controller reports about a job: conditions, the status document, the decision.

Kept apart from the loop so the shapes the outside world sees (the custom resource's status,
``kale plan``'s JSON, Kubernetes-style conditions) live in one small module, next to the
pydantic model the CRD is generated from
(:class:`autoscaler.job.status.JobStatus`; a test validates every status the loop
writes against it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autoscaler.actuators.base import Size
from autoscaler.controller.forecast import ForecastSummary
from autoscaler.controller.metering import Sample
from autoscaler.controller.state import Condition, JobState
from autoscaler.controller.timefmt import iso

_PLAIN = (str, int, bool, type(None))


def jsonable(value: Any) -> Any:
    """Numpy scalars to Python, NaN/inf to None, tuples to lists (for status and JSON)."""
    kind = type(value)
    if kind in _PLAIN:  # the common case first: most values need no conversion
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    # Plain items and finite floats inline (x - x is 0.0 only for a finite x): a call each
    # would cost more.
    if isinstance(value, dict):
        return {
            k if type(k) is str else str(k): v
            if type(v) in _PLAIN or (type(v) is float and v - v == 0.0)
            else jsonable(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple | np.ndarray):
        return [
            v if type(v) in _PLAIN or (type(v) is float and v - v == 0.0) else jsonable(v)
            for v in value
        ]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@dataclass
class JobReport:
    """What happened to one job in one tick (``kale plan`` prints :meth:`plan_json`)."""

    job: str
    time: float
    current: Size | None
    planned: Size | None
    desired: Size | None
    action: str
    reason: dict[str, Any]
    forecast: ForecastSummary = field(default_factory=lambda: ForecastSummary())
    sample: Sample | None = None
    resized: bool = False
    error: str | None = None

    def plan_json(self) -> dict[str, Any]:
        cur = self.current
        want = self.desired or cur
        return jsonable(
            {
                "job": self.job,
                "time": iso(self.time),
                "current_workers": cur.workers if cur else None,
                "desired_workers": want.workers if want else None,
                "desired_ps": want.ps if want else None,
                "forecast": self.forecast,
                "lead_s": self.reason.get("lead_s"),
                "backlog": self.sample.lag if self.sample else None,
                "reason": self.reason,
            }
        )


class Conditions:
    """Kubernetes-style conditions whose ``lastTransitionTime`` moves only on change."""

    def __init__(self, existing: list[Condition], now: float) -> None:
        # Shared, not copied: :meth:`set` replaces a condition, never changes one in place.
        self.by_type: dict[str, Condition] = {
            c["type"]: c for c in existing if isinstance(c, dict) and "type" in c
        }
        self.now = now
        self.changed: list[tuple[str, bool]] = []
        self.entered_reasons: list[tuple[str, str]] = []

    def set(self, type_: str, ok: bool, reason: str, message: str = "") -> None:
        status = "True" if ok else "False"
        old = self.by_type.get(type_)
        message = message[:512]
        if (
            old is not None
            and old.get("status") == status
            and old.get("reason") == reason
            and old.get("message") == message
            and "lastTransitionTime" in old
        ):
            return  # unchanged (the usual case): keep the condition as it is
        since = old["lastTransitionTime"] if old and old.get("status") == status else iso(self.now)
        if not old or old.get("status") != status:
            self.changed.append((type_, ok))
        if not old or old.get("status") != status or old.get("reason") != reason:
            self.entered_reasons.append((type_, reason))
        self.by_type[type_] = {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message[:512],
            "lastTransitionTime": since,
        }

    def get(self, type_: str) -> bool | None:
        c = self.by_type.get(type_)
        return None if c is None else c["status"] == "True"

    def became(self, type_: str, ok: bool) -> bool:
        return (type_, ok) in self.changed

    def entered(self, type_: str, reason: str) -> bool:
        """The condition took ``reason`` in this round (a new status or a new cause: a job
        that was backfilling and now cannot reach Kafka stays False but changes reason)."""
        return (type_, reason) in self.entered_reasons

    def to_list(self) -> list[Condition]:
        return [self.by_type[k] for k in sorted(self.by_type)]


def resize_message(
    cur: Size, new: Size, reason: dict[str, Any], forecast_peak: float | None
) -> str:
    """The Event message of a resize: sizes, why, forecast peak, lead time, quota."""
    parts = [f"{cur.workers} -> {new.workers} workers ({new.ps} PS)"]
    if reason.get("why"):
        parts.append(str(reason["why"]))
    if forecast_peak is not None:
        parts.append(f"forecast peak {forecast_peak:.4g}/s")
    if reason.get("lead_s") is not None:
        parts.append(f"lead {float(reason['lead_s']):.0f}s")
    if reason.get("quota"):
        parts.append(str(reason["quota"]))
    return "; ".join(parts)


def size_text(v: Any) -> str:
    """A ``[workers, ps]`` pair as a size (``?`` when it is not one: a damaged marker)."""
    return str(Size(*v)) if isinstance(v, list | tuple) and len(v) == 2 else "?"


def selector_of(actuator: Any) -> str | None:
    """The worker pods' label selector an actuator knows (a dry run asks its reader)."""
    for part in (actuator, getattr(actuator, "reader", None)):
        value = getattr(part, "selector", None)
        if isinstance(value, str) and value:
            return value
    return None


def build_status(
    rep: JobReport,
    state: JobState,
    *,
    generation: int | None,
    identity: str,
    selector: str | None = None,
    shard: int | None = None,
) -> dict[str, Any]:
    """The job's ``.status`` (keys with no value are left out).

    ``replicas`` and ``labelSelector`` serve the job's ``scale`` subresource; every condition
    carries the ``observedGeneration`` it was computed for (API conventions).
    """
    s = rep.sample
    conditions = state.conditions
    if generation is not None:
        conditions = [{**c, "observedGeneration": generation} for c in conditions]
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "replicas": rep.current.workers if rep.current else None,
        "labelSelector": selector,
        "currentWorkers": rep.current.workers if rep.current else None,
        "currentPS": rep.current.ps if rep.current else None,
        "desiredWorkers": rep.desired.workers if rep.desired else None,
        "desiredPS": rep.desired.ps if rep.desired else None,
        "plannedWorkers": rep.planned.workers if rep.planned else None,
        "lastDecision": {**(state.last_decision or {}), "details": rep.reason},
        "lastResizeTime": iso(state.resize_started) if state.resize_started else None,
        "forecast": rep.forecast,
        "metrics": jsonable(
            {
                "arrivalRate": s.arrival_rate,
                "consumptionRate": s.consumption_rate,
                "lag": s.lag,
                "oldestAgeSeconds": s.oldest_age_s,
            }
        )
        if s
        else None,
        "conditions": conditions,
        "plannerState": jsonable(state.to_dict() | {"conditions": []}),
        "controller": identity or None,
        "shard": shard,
    }
    return {k: v for k, v in status.items() if v is not None}
