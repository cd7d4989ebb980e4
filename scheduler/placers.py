"""The decision "which node and GPUs" behind one small interface, loaded by name.

The scheduler owns the Kubernetes side (what is eligible, what is free, binding); a
:class:`Placer` only chooses among eligible nodes. ``first-fit`` lives here as the
simplest correct choice; every policy of ``placement/`` (the simulator's own code) and a
saved agent (``agent:PATH``) come through :mod:`scheduler.adapter`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from scheduler.faults import FaultCounts
from scheduler.objects import PodInfo
from scheduler.view import ClusterView, fits


@dataclass(frozen=True, slots=True)
class Choice:
    """A node and the GPU indices on it."""

    node: str
    gpus: tuple[int, ...]
    fallback: str | None = None
    """Why a guarded agent's rule made this choice instead of the agent (None: it did not)."""


class Placer(Protocol):
    """Chooses a node for a pod; must not change the view (the scheduler holds the choice)."""

    name: str

    def attach(self, view: ClusterView) -> None:
        """Called once: the view the placer reads (it may listen to its changes)."""

    def place(self, pod: PodInfo, eligible: Sequence[str], faults: FaultCounts) -> Choice | None:
        """A node among ``eligible`` (names, in the view's order) with room, or None."""


class FirstFit:
    """The first eligible node (in name order) with room; GPUs by :func:`choose_gpus`."""

    name = "first-fit"

    def __init__(self) -> None:
        self.view = ClusterView()

    def attach(self, view: ClusterView) -> None:
        self.view = view

    def place(self, pod: PodInfo, eligible: Sequence[str], faults: FaultCounts) -> Choice | None:
        for name in eligible:
            gpus = fits(self.view.nodes[name], pod.demand)
            if gpus is not None:
                return Choice(name, gpus)
        return None
