"""The one interface every actuator offers the controller: read the size, set the size.

Why this module exists: the controller must not know whether a job runs as StatefulSets, a
Kubeflow TFJob or PyTorchJob, any object with a ``/scale``, local processes or nowhere
(dry run). Each actuator measures nothing and
decides nothing; it only reads and writes replica counts, level-triggered: ``apply`` with
the size already in place is a no-op, so a restarted controller converges instead of
repeating work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Size:
    """Replica counts of one job."""

    workers: int
    """Worker replicas (one GPU each, or ``gpusPerWorker``)."""
    ps: int
    """Parameter-server replicas."""

    def __str__(self) -> str:
        return f"{self.workers}w/{self.ps}ps"


class Actuator(Protocol):
    """Reads and sets a job's size. Raises :mod:`kube.errors` types only."""

    kind: str
    """``StatefulSet``, ``TFJob``, ``PyTorchJob``, ``Scale``, ``Local`` or ``DryRun``."""

    def current(self) -> Size:
        """The size the target is set to now (its desired replicas, not its ready ones)."""
        ...

    def apply(self, size: Size) -> Size:
        """Set the target to ``size``; returns the size in force afterwards."""
        ...

    def close(self) -> None:
        """Release what the actuator holds (connections, processes)."""
        ...


@runtime_checkable
class Fits(Protocol):
    """An actuator whose target accepts only some sizes: a PyTorchJob's ``elasticPolicy``
    bounds its workers, a target without parameter servers has 0 PS.

    The controller resizes to ``fit(size)``, never to a size the target would not take:
    otherwise a wish outside the bounds would be "resized" tick after tick without the
    target ever changing, and a resize-in-progress marker would never finish.
    """

    def fit(self, size: Size) -> Size:
        """The size the target takes for ``size`` (as of the last :meth:`Actuator.current`)."""
        ...


def fitted(actuator: object, size: Size) -> Size:
    """``size`` as ``actuator``'s target takes it (unchanged for targets without bounds)."""
    return actuator.fit(size) if isinstance(actuator, Fits) else size


def in_order(now: Size, size: Size, *, workers: T, ps: T) -> list[tuple[T, int]]:
    """The writes of a resize from ``now`` to ``size`` for targets whose workers and PS are
    two objects, in the order that keeps the w/p ratio safe while pods come and go: growing
    adds PS first (new workers need their shards), shrinking removes workers first."""
    steps = [(ps, size.ps), (workers, size.workers)]
    if size.workers < now.workers:
        steps.reverse()
    return steps
