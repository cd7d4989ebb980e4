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
from placement.env.queue_features import ROW_WIDTH

NAME = "tr_dqn"


@dataclass(frozen=True)
class TRDQNSettings:
    """Every knob of the agent and its training (the seed included)."""

    seed: int = 0
    channels: int = 8
    """Output channels of each network's convolution (kernel 1 over the rows)."""
    hidden: tuple[int, int] = (128, 64)
    """Widths of the two fully connected layers."""
    lr: float = 5e-4
    gamma: float = 0.7
    """Discount per decision (docs/decisions/0125-training-and-judging-apart.md)."""
    batch: int = 64
    replay: int = 30_000
    warmup: int = 500
    train_every: int = 2
    target_sync: int = 500
    candidates: int = 16
    """Level-2 candidates stored per next state (a random subset when there are more)."""
    sequence_jobs: int = 512
    """Jobs per training episode (a window of the log outside the judged sequences)."""
    sequences: int = 256
    """Distinct training windows drawn from the log (episodes cycle through them)."""
    explore: EpsilonSchedule = field(default_factory=lambda: EpsilonSchedule(1.0, 0.05, 0.99985))
    env: QueueEnvSettings = field(default_factory=lambda: QueueEnvSettings(window=8))
    n_step: int = 1
    """Rewards summed before bootstrapping (1: the document's one-step target)."""
    double: bool = False
    """Double-DQN targets: the online network picks the next action, the target values it."""
    imitation: ImitationSettings = field(default_factory=ImitationSettings)
    """Warm start from demonstrations of the shortest-first rule (off by default)."""
    synthetic_sequences: int = 0
    """Extra training sequences drawn from the Lublin model (``placement.workloads.lublin``)."""
    synthetic_load: tuple[float, float] = (0.85, 1.15)
    """Range of the synthetic sequences' arrival scale, relative to the log's training part."""
    validate_every: int = 0
    """Episodes between greedy runs on validation sequences; the best weights are kept
    (0: no validation, the last weights are kept)."""
    validation_sequences: int = 4


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
