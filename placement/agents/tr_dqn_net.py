"""``tr_dqn``: the agent's settings and its network.

Each level's network is "a convolution layer, two fully connected layers and an output
layer", as the document says: :class:`LevelNet` reads a ``[rows, 3]`` grid of
``placement.env.queue_features`` (level 1: the window and the availability profile, one Q
value per slot; level 2: one candidate, one Q value). The agent that acts and learns with
them is ``placement.agents.tr_dqn``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from placement.agents.common import EpsilonSchedule, mlp
from placement.agents.tr_dqn_warm import ImitationSettings
from placement.env.queue_env import QueueEnvSettings
from placement.env.queue_features import PROPOSALS, ROW_WIDTH

NAME = "tr_dqn"


SHIPPED_PROPOSALS = tuple(PROPOSALS)
"""Level 1's slots in the shipped agent: every proposal of ``queue_features.PROPOSALS``."""


@dataclass(frozen=True)
class TRDQNSettings:
    """Every knob of the agent and its training (the seed included); the defaults are the
    shipped agent's training (docs/decisions/0171-agents-that-contain-their-rule.md)."""

    seed: int = 0
    channels: int = 8
    """Output channels of each network's convolution (kernel 1 over the rows)."""
    hidden: tuple[int, int] = (128, 64)
    """Widths of the two fully connected layers."""
    lr: float = 5e-4
    gamma: float = 0.9
    """Discount per decision."""
    batch: int = 64
    replay: int = 30_000
    warmup: int = 500
    train_every: int = 2
    target_sync: int = 500
    candidates: int = 16
    """Level-2 candidates stored per next state (a random subset when there are more)."""
    sequence_jobs: int = 512
    """Jobs per training episode (a window of the log outside the judged sequences)."""
    sequences: int = 128
    """Distinct training windows drawn from the log (episodes cycle through them)."""
    explore: EpsilonSchedule = field(default_factory=lambda: EpsilonSchedule(0.1, 0.02, 0.9995))
    env: QueueEnvSettings = field(
        default_factory=lambda: QueueEnvSettings(
            window=len(SHIPPED_PROPOSALS), proposals=SHIPPED_PROPOSALS
        )
    )
    n_step: int = 5
    """Rewards summed before bootstrapping (1: the document's one-step target)."""
    double: bool = True
    """Double-DQN targets: the online network picks the next action, the target values it."""
    imitation: ImitationSettings = field(
        default_factory=lambda: ImitationSettings(
            episodes=16, steps=3000, margin=0.05, weight=1.0, demo_batch=16
        )
    )
    """Warm start from demonstrations of the rule (``imitate``; episodes 0: none)."""
    synthetic_sequences: int = 128
    """Extra training sequences drawn from the Lublin model (``placement.workloads.lublin``)."""
    synthetic_load: tuple[float, float] = (0.85, 1.15)
    """Range of the synthetic sequences' arrival scale, relative to the log's training part
    (when ``synthetic_family`` is empty)."""
    validate_every: int = 5
    """Episodes between greedy runs on validation sequences; the best weights are kept
    (0: no validation, the last weights are kept)."""
    validation_sequences: int = 8
    synthetic_family: str = "train-lublin"
    """Draw the synthetic sequences from this workload family (``train-lublin``: loads and
    machine sizes vary) instead of the model at the log's load (empty)."""
    imitate: str = "sjf"
    """With proposals: the proposal a warm start follows at level 1 (level 2: EASY's own
    order); without, the warm start imitates ``shortest_first``."""


class LevelNet(nn.Module):
    """Conv (kernel 1 over rows) → FC → FC → output, on a ``[rows, 3]`` grid."""

    def __init__(self, rows: int, out: int, channels: int, hidden: tuple[int, int]) -> None:
        super().__init__()
        self.rows, self.out = rows, out
        self.conv = nn.Conv1d(ROW_WIDTH, channels, kernel_size=1)
        self.head = mlp([rows * channels, hidden[0], hidden[1], out])

    def forward(self, grid: torch.Tensor) -> torch.Tensor:
        lead = grid.shape[:-2]
        x = grid.reshape(-1, self.rows, ROW_WIDTH).transpose(1, 2)
        x = torch.relu(self.conv(x)).flatten(1)
        q: torch.Tensor = self.head(x)
        return q.reshape(*lead, self.out)
