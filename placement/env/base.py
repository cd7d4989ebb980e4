"""The environment contract every agent trains against: gymnasium's, without the dependency.

``reset(seed=..., options=...) -> (observation, info)`` and ``step(action) -> (observation,
reward, terminated, truncated, info)`` follow gymnasium 1.x exactly, so a gymnasium wrapper
is a few lines if a library ever needs one. The package itself is not used because nothing
here needs it: no algorithm library consumes the environments, and their observations are
not fixed-shape spaces — a node-level observation has one row per node of *this* cluster
(1,213 for openb, any other count elsewhere) and a queue-level one a variable number of
backfill candidates — which gymnasium can only describe loosely
(docs/decisions/0120-agent-environments-without-gymnasium.md).

Every observation carries its own feasibility ``mask``: an agent may only pick an index
where it is true, and ``step`` refuses anything else with :class:`InvalidActionError`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from placement.errors import PlacementError

Obs = TypeVar("Obs")


class InvalidActionError(PlacementError):
    """An action outside the observation's mask (a bug in the agent, never user input)."""


@dataclass(frozen=True)
class FeatureSpec:
    """The widths an agent's networks are built for; they never depend on the cluster size."""

    row: int
    """Features per row (node, job or node-summary row)."""
    context: int
    """Features shared by all rows (the pod or the machine)."""


class Env(ABC, Generic[Obs]):
    """A gymnasium-style environment (see the module docstring)."""

    spec: FeatureSpec

    @abstractmethod
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Obs, dict[str, Any]]:
        """Start an episode (seeded: the same seed replays the same episode)."""

    @abstractmethod
    def step(self, action: int) -> tuple[Obs, float, bool, bool, dict[str, Any]]:
        """Apply ``action`` (an index where the observation's mask is true)."""


def check_action(mask: np.ndarray, action: int) -> int:
    """``action`` as an int if the mask allows it, else :class:`InvalidActionError`."""
    index = int(action)
    if not 0 <= index < len(mask) or not mask[index]:
        raise InvalidActionError(f"action {index} is not allowed by the observation's mask")
    return index
