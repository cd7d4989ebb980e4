"""``async_transformer``: the agent's settings and its network.

* **Network** — two stacked standard transformer encoders and a linear head. Its input is
  the small observation vector of ``placement.env.locality_features`` (eight features) for
  each slot of the preset action set (candidate nodes); the encoders attend across the
  candidates and the head gives each one a Q value (the document's output layer, one
  neuron per action). The document's width is 512 with 4 heads; the default here is 64
  with 4 heads (docs/decisions/0156-async-transformer-network-and-action-slots.md).

The agent that acts and learns with it is ``placement.agents.async_transformer``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from placement.env.locality_env import SequenceSettings
from placement.env.locality_features import TOKEN_FEATURES
from placement.env.proposals import CANDIDATE_RULE_FEATURES

NAME = "async_transformer"
F = len(TOKEN_FEATURES)
PROPOSAL_TOKEN_FEATURES = (*TOKEN_FEATURES, *CANDIDATE_RULE_FEATURES)
"""A slot's token when the slots are the rules' proposals: the eight, then the rules'."""
LOSSES = ("critical", "mse")


@dataclass(frozen=True)
class AsyncTransformerSettings:
    """Every knob of the agent and its training (the seed included)."""

    seed: int = 0
    d_model: int = 64
    heads: int = 4
    layers: int = 2
    ffn: int = 128
    dropout: float = 0.25
    slots: int = 8
    """Size of the preset action set (candidate nodes per decision;
    docs/decisions/0158-async-transformer-action-slots-and-training.md)."""
    gamma: float = 0.9
    lr: float = 1e-3
    epsilon: float = 0.05
    buffer: int = 1024
    batch: int = 128
    batches_per_step: int = 8
    warmup: int = 1024
    """Experiences in the buffer before the first training step."""
    train_every: int = 512
    """Decisions between training steps."""
    copy_every: int = 1024
    """Decisions between weight copies into the inference network."""
    loss: str = "critical"
    rho: float = 0.1
    """Weight of the utilisation term of the reward."""
    latency_norm_s: float = 100.0
    synchronous: bool = True
    """Train inline at fixed decision counts (repeatable); False: the training thread."""
    proposals: int = 2
    """Top nodes of each rule (BestFit, FGD, GpuPacking) among the slots, beside the
    tightest node caching the data and the tightest on its rack (0: the slots of
    docs/decisions/0158-async-transformer-action-slots-and-training.md)."""
    imitate: str = "bestfit"
    """With proposals: the rule whose picks warm-start the network ("" for none)."""
    imitation_windows: int = 6
    imitation_steps: int = 600
    margin: float = 0.05
    """How much the rule's pick must out-value the others in the warm start."""
    demo_batch: int = 32
    """Demonstrations in each later training batch (with the margin term)."""
    validate_every: int = 5
    """Training windows between validation runs (0: keep the last weights)."""
    validation_windows: int = 3
    env: SequenceSettings = field(default_factory=SequenceSettings)

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            from placement.errors import PlacementInputError

            raise PlacementInputError(f"loss must be one of {LOSSES}, not {self.loss!r}")


class QNet(nn.Module):
    """Two stacked transformer encoders over the candidate slots, a linear head per slot."""

    def __init__(self, s: AsyncTransformerSettings) -> None:
        super().__init__()
        self.embed = nn.Linear(token_width(s), s.d_model)
        layer = nn.TransformerEncoderLayer(
            s.d_model, s.heads, s.ffn, s.dropout, batch_first=True, norm_first=False
        )
        self.encoder = nn.TransformerEncoder(layer, s.layers, enable_nested_tensor=False)
        self.head = nn.Linear(s.d_model, 1)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = self.encoder(self.embed(tokens), src_key_padding_mask=~mask)
        q: torch.Tensor = self.head(h)
        return q.squeeze(-1).masked_fill(~mask, -1e9)


def token_width(s: AsyncTransformerSettings) -> int:
    """Features per slot token."""
    return len(PROPOSAL_TOKEN_FEATURES) if s.proposals else F
