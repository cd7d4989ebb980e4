"""``tr_dqn``'s warm start and multi-step targets: learning from a rule before learning alone.

DQN alone does not find what a fixed rule of its own action space does
(docs/decisions/0125-training-and-judging-apart.md): the per-decision differences between
actions are small beside the noise of bootstrapped targets. Two standard remedies, both
keeping the document's TD loss as the learning rule:

* **warm start by demonstration** (DQfD, Hester et al., AAAI'18): episodes of the rule
  fill a demonstration buffer; the networks first train on it alone with the TD loss plus a
  large-margin term ``max_a [Q(s, a) + m·(a ≠ a_E)] − Q(s, a_E)`` (the rule's action must
  beat every other by ``m``), then keep a few demonstrations in every later batch;
* **n-step returns**: ``r_t + γ r_{t+1} + … + γ^{n−1} r_{t+n−1} + γ^n max Q(s_{t+n}, ·)``,
  so a decision's consequences reach its value through n observed rewards rather than
  through n bootstrapped guesses.

The rule here is :func:`shortest_first` — the first slot of the ranked window at level 1
(with the default rank, the shortest estimate: SJF) and the shortest candidate at level 2.
The agent (:meth:`placement.agents.tr_dqn.TRDQN.demonstrate`) runs the demonstrations with
these pieces.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from placement.agents.common import ReplayBuffer
from placement.env.queue_env import QueueObservation

LOG_ESTIMATE = (0, 1)
"""Where a job block keeps its log estimate: first row, second column."""


@dataclass(frozen=True)
class ImitationSettings:
    """The warm start (``episodes = 0``: none, the agent learns from scratch)."""

    episodes: int = 0
    """Episodes of the rule stored as demonstrations."""
    steps: int = 0
    """Updates on demonstrations alone before the agent acts."""
    margin: float = 0.02
    """m: how much the rule's action must out-value the others (in Q units)."""
    weight: float = 1.0
    """Weight of the margin term beside the TD loss."""
    demo_batch: int = 16
    """Demonstrations mixed into each later update (0: pure DQN after the warm start)."""


def demonstrator(proposals: tuple[str, ...], follow: str) -> Callable[[QueueObservation], int]:
    """The rule a warm start imitates: with proposals, the slot of proposal ``follow`` at
    level 1 and the first candidate (in submit order: EASY's own backfill order) at level 2
    — with ``follow = "sjf"`` that is SJF + EASY exactly; without, :func:`shortest_first`."""
    if not proposals:
        return shortest_first
    slot = proposals.index(follow)

    def rule(obs: QueueObservation) -> int:
        return slot if obs.level == 1 else 0

    return rule


def shortest_first(obs: QueueObservation) -> int:
    """The rule: level 1 → the first-ranked slot; level 2 → the shortest estimate (ties:
    the earliest submitted, the candidates' order)."""
    if obs.level == 1:
        return int(np.flatnonzero(obs.mask)[0])
    r, c = LOG_ESTIMATE
    return int(np.argmin(obs.grid[:, r, c]))


def demo_fields(
    obs: QueueObservation,
    action: int,
    *,
    window: int,
    candidates: int,
    rows2: int,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """What the margin term needs beyond a transition: level 1's slot mask; level 2's
    candidates (at most ``candidates``, the chosen one always among them) and the chosen
    index. The other level's fields are zeros."""
    k, width = candidates, obs.grid.shape[-1]
    out: dict[str, Any] = {
        "mask1": np.zeros(window, bool),
        "c2": np.zeros((k, rows2, width), np.float32),
        "c2_mask": np.zeros(k, bool),
        "a2": 0,
    }
    if obs.level == 1:
        out["mask1"] = obs.mask
        return out
    others = np.delete(np.arange(len(obs.grid)), action)
    if len(others) > k - 1:
        others = np.sort(rng.choice(others, k - 1, replace=False))
    pick = np.sort(np.append(others, action))
    out["c2"][: len(pick)] = obs.grid[pick]
    out["c2_mask"][: len(pick)] = True
    out["a2"] = int(np.searchsorted(pick, action))
    return out


class NStepWriter:
    """Turns one-step experience into n-step transitions as it arrives.

    ``add`` takes a decision's own fields, its reward, and the next state's fields; once
    ``n`` decisions are pending (or the episode ends) the oldest is written with the
    discounted sum of its n rewards, ``discount = γ^n`` and the state n steps later."""

    def __init__(self, buffer: ReplayBuffer, n: int, gamma: float) -> None:
        if n < 1:
            raise ValueError("n-step returns need n ≥ 1")
        self.buffer, self.n, self.gamma = buffer, n, gamma
        self.pending: deque[tuple[dict[str, Any], float]] = deque()

    def add(
        self, fields: dict[str, Any], reward: float, next_fields: dict[str, Any], done: bool
    ) -> None:
        self.pending.append((fields, reward))
        if done:
            while self.pending:
                self._emit(next_fields, done=True)
        elif len(self.pending) == self.n:
            self._emit(next_fields, done=False)

    def _emit(self, next_fields: dict[str, Any], *, done: bool) -> None:
        rewards = np.array([r for _, r in self.pending])
        discounted = float(np.sum(rewards * self.gamma ** np.arange(len(rewards))))
        fields, _ = self.pending.popleft()
        self.buffer.add(
            **fields,
            reward=discounted,
            discount=self.gamma ** len(rewards),
            done=float(done),
            **next_fields,
        )


def margin_loss(
    level: torch.Tensor,
    q1: torch.Tensor,
    mask1: torch.Tensor,
    a1: torch.Tensor,
    q2: torch.Tensor,
    mask2: torch.Tensor,
    a2: torch.Tensor,
    margin: float,
) -> torch.Tensor:
    """Mean large-margin term over a batch: level-1 rows use the slot values ``q1``
    ``[B, w]``, level-2 rows the candidate values ``q2`` ``[B, k]``."""

    def term(q: torch.Tensor, mask: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        penalty = torch.full_like(q, margin).scatter(1, action.unsqueeze(1), 0.0)
        best = (q + penalty).masked_fill(~mask, -1e9).max(dim=1).values
        return best - q.gather(1, action.unsqueeze(1)).squeeze(1)

    return torch.where(level == 1, term(q1, mask1, a1), term(q2, mask2, a2)).mean()
