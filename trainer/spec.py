"""The CTR model's shape and its cut into parameter blocks (torch-free).

Why this module exists: the supervisor plans shards, batch sizes and checkpoints without
importing torch (``kale train`` starts in well under a second); the PS and worker processes
use the same spec through :mod:`trainer.model`.

A block is one unit of ownership: a whole embedding table or a whole dense layer. Block
``i`` (tables first, then dense layers) lives on PS ``i mod p`` (round-robin), so adding PS
spreads both pull traffic and optimizer work; p can be at most the number of blocks.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Any, Literal


@dataclass(frozen=True, slots=True)
class Block:
    """One unit of ownership: an embedding table or a dense layer (weight + bias, flat)."""

    index: int
    name: str
    kind: Literal["embedding", "dense"]
    shape: tuple[int, ...]
    """(rows, dim) for a table; (out, in) of the weight for a dense layer."""

    @property
    def numel(self) -> int:
        if self.kind == "embedding":
            return self.shape[0] * self.shape[1]
        out, inp = self.shape
        return out * inp + out


@dataclass(frozen=True)
class ModelSpec:
    """Shape and optimizer of the CTR model (identical on every PS and worker)."""

    fields: int = 8
    """Categorical fields per sample (must match the records on the topic)."""
    rows: int = 10_000
    """Rows per embedding table; feature ids are hashed into them (id mod rows)."""
    dim: int = 16
    """Embedding dimension."""
    hidden: tuple[int, ...] = (128, 64)
    """Hidden layer widths of the MLP (the output layer has one unit)."""
    lr: float = 0.05
    """Adagrad learning rate (embeddings and dense layers)."""
    eps: float = 1e-8
    """Adagrad epsilon."""
    init_std: float = 0.01
    """Standard deviation of the initial embeddings."""
    seed: int = 0
    """Seed of the initial parameters."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        if min(self.fields, self.rows, self.dim) < 1 or any(h < 1 for h in self.hidden):
            raise ValueError(f"model sizes must be positive: {self}")
        if self.lr <= 0:
            raise ValueError(f"lr must be positive, got {self.lr}")

    def blocks(self) -> list[Block]:
        out = [Block(f, f"emb.{f}", "embedding", (self.rows, self.dim)) for f in range(self.fields)]
        widths = [self.fields * self.dim, *self.hidden, 1]
        for i, (inp, width) in enumerate(itertools.pairwise(widths)):
            out.append(Block(self.fields + i, f"fc.{i}", "dense", (width, inp)))
        return out

    @property
    def n_blocks(self) -> int:
        return self.fields + len(self.hidden) + 1

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["hidden"] = list(self.hidden)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelSpec:
        return cls(**{**data, "hidden": tuple(data.get("hidden", ()))})


def owner(block_index: int, ps: int) -> int:
    """The PS (0-based) that owns ``block_index`` among ``ps`` servers."""
    return block_index % ps


def owned_blocks(spec: ModelSpec, ps_index: int, ps: int) -> list[Block]:
    """Blocks held by PS ``ps_index`` of ``ps`` (round-robin over tables, then layers)."""
    return [b for b in spec.blocks() if owner(b.index, ps) == ps_index]
