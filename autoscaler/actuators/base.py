"""The one interface every actuator offers the controller: read the size, set the size.

Why this module exists: the controller must not know whether a job runs as StatefulSets, a
Kubeflow TFJob, local processes or nowhere (dry run). Each actuator measures nothing and
decides nothing; it only reads and writes replica counts, level-triggered: ``apply`` with
the size already in place is a no-op, so a restarted controller converges instead of
repeating work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


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
    """``StatefulSet``, ``TFJob``, ``Local`` or ``DryRun``."""

    def current(self) -> Size:
        """The size the target is set to now (its desired replicas, not its ready ones)."""
        ...

    def apply(self, size: Size) -> Size:
        """Set the target to ``size``; returns the size in force afterwards."""
        ...

    def close(self) -> None:
        """Release what the actuator holds (connections, processes)."""
        ...
