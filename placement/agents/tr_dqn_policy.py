"""``tr_dqn`` as a queue policy: level 1 orders the queue's head, level 2 picks backfills.

Kept apart from the agent's training code so that loading an agent to decide needs only
this and the networks (``agent:PATH`` in ``kale place timed --queue``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from placement.env.queue_env import QueueObservation
from placement.env.queue_features import backfill_input, head_input, rank
from placement.errors import PlacementInputError
from placement.queue.base import QueueView

if TYPE_CHECKING:
    from placement.agents.tr_dqn import TRDQN


class TRDQNPolicy:
    """The agent as a queue policy (``agent:PATH`` in ``kale place timed --queue``).

    ``keys`` puts level 1's pick first (then the rank); ``pick_backfill`` is level 2. Both
    need the simulator to pass the machine state in the view (``QueueView.machine``).
    """

    def __init__(self, agent: TRDQN, name: str = "tr_dqn") -> None:
        self.agent, self.name = agent, name
        self.env = agent.settings.env

    def _machine(self, view: QueueView) -> Any:
        if view.machine is None:
            raise PlacementInputError(
                f"{self.name}: this simulator does not give queue policies the machine state"
            )
        return view.machine

    def keys(self, view: QueueView) -> tuple[np.ndarray, ...]:
        machine = self._machine(view)
        grid, mask, positions = head_input(view, machine, self.env.rank, self.env.window)
        slot = self.agent.greedy(QueueObservation(1, grid, mask, positions))
        first = np.ones(len(view), np.int64)
        first[positions[slot]] = 0
        return (first, rank(view, self.env.rank))

    def pick_backfill(self, view: QueueView, candidates: np.ndarray, shadow_s: float) -> int:
        grid = backfill_input(
            view, candidates, self._machine(view), self.env.rank, shadow_s=shadow_s
        )
        mask = np.ones(len(candidates), bool)
        return self.agent.greedy(QueueObservation(2, grid, mask, candidates))
