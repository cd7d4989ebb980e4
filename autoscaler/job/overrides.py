"""Manual control of one job: pause it, or pin its worker count (annotations, ``spec.replicas``).

Why this module exists: an operator must be able to take a job away from the planner without
deleting it — during an incident, a migration, or to let another autoscaler (HPA, KEDA) drive
it for a comparison. The knobs follow what Kubernetes users already know:

* ``kale.dev/paused: "true"`` — the job is never resized (KEDA's ``autoscaling.keda.sh/paused``);
* ``kale.dev/paused-replicas: "N"`` — the job is held at N workers and not planned (KEDA's
  ``autoscaling.keda.sh/paused-replicas``);
* ``spec.replicas`` — written by ``kubectl scale etj NAME --replicas=N`` (or an HPA/KEDA
  through the ``scale`` subresource): the job is held at N workers until the field is removed.

Precedence, strongest first: paused, paused-replicas, spec.replicas, the planner. A pin is
clamped to ``[minWorkers, maxWorkers]`` (the clamp is said in the status); PS follow the
job's ``workersPerPS``. This module is pure: it reads a validated job and says what holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autoscaler.job.schema import ElasticTrainingJob

PAUSED = "kale.dev/paused"
PAUSED_REPLICAS = "kale.dev/paused-replicas"
_TRUE = ("true", "false")
_WHOLE = re.compile(r"[0-9]{1,5}")


@dataclass(frozen=True)
class Override:
    """What takes a job away from the planner this tick."""

    kind: str
    """``paused`` (no resize at all) or ``pinned`` (held at :attr:`workers`)."""
    source: str
    """Where it comes from: the annotation's name, or ``spec.replicas``."""
    workers: int | None = None
    """The pinned worker count after clamping (None when paused)."""
    asked: int | None = None
    """The pinned count as written (before clamping)."""

    @property
    def why(self) -> str:
        if self.kind == "paused":
            return f"paused by the {self.source} annotation: the size is left as it is"
        where = "annotation" if self.source.startswith("kale.dev/") else "field"
        text = f"pinned at {self.workers} workers by the {self.source} {where}"
        if self.asked is not None and self.asked != self.workers:
            text += f" ({self.asked} asked, clamped to minWorkers..maxWorkers)"
        return text

    @property
    def reason(self) -> str:
        """CamelCase reason for the ``Paused`` condition."""
        if self.kind == "paused":
            return "PausedByAnnotation"
        return "PinnedByAnnotation" if self.source == PAUSED_REPLICAS else "PinnedBySpecReplicas"


def problems(annotations: dict[str, str]) -> list[tuple[str, str]]:
    """Malformed override annotations, as ``(field path, reason)`` (``kale validate``)."""
    out = []
    paused = annotations.get(PAUSED)
    if paused is not None and paused.strip().lower() not in _TRUE:
        out.append((f"metadata.annotations.{PAUSED}", f'must be "true" or "false", got {paused!r}'))
    pinned = annotations.get(PAUSED_REPLICAS)
    if pinned is not None and not _WHOLE.fullmatch(pinned.strip()):
        out.append(
            (
                f"metadata.annotations.{PAUSED_REPLICAS}",
                f"must be a whole number of workers (0-99999), got {pinned!r}",
            )
        )
    return out


def override_of(job: ElasticTrainingJob) -> Override | None:
    """The override in force for ``job`` (None: the planner decides)."""
    notes = job.metadata.annotations
    tr = job.spec.training
    if notes.get(PAUSED, "").strip().lower() == "true":
        return Override("paused", PAUSED)
    pinned = notes.get(PAUSED_REPLICAS)
    if pinned is not None:
        if not _WHOLE.fullmatch(pinned.strip()):  # validated before; never guess a size
            return Override("paused", PAUSED_REPLICAS)
        asked = int(pinned.strip())
        return Override("pinned", PAUSED_REPLICAS, _clamp(asked, tr), asked)
    replicas = job.spec.replicas
    if replicas is not None:
        return Override("pinned", "spec.replicas", _clamp(replicas, tr), replicas)
    return None


def _clamp(n: int, training: object) -> int:
    low = int(training.min_workers)  # type: ignore[attr-defined]
    high = int(training.max_workers)  # type: ignore[attr-defined]
    return max(low, min(high, n))
