"""The CTR model, cut into parameter blocks that parameter servers own.

Why this module exists: PS training needs the model as *data*, not as an ``nn.Module``: a
PS holds some blocks (whole embedding tables, whole dense layers), a worker pulls only the
embedding rows its batch touches plus the dense layers, runs the forward/backward pass on
those tensors and pushes gradients back to each block's owner. So the model here is a spec
(:class:`ModelSpec`), a list of blocks, a deterministic initialiser and a functional
forward pass.

Architecture: F categorical fields, each hashed into its own table of ``rows`` × ``dim``
embeddings; the F embeddings are concatenated and fed to an MLP (ReLU) ending in one logit;
loss is binary cross-entropy. The spec and the block layout are in :mod:`trainer.spec`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as fn

from trainer.spec import Block, ModelSpec, owned_blocks, owner

__all__ = ["Block", "ModelSpec", "batch_loss", "forward", "init_block", "owned_blocks", "owner"]


def init_block(spec: ModelSpec, block: Block) -> torch.Tensor:
    """Deterministic initial value of ``block`` (a table, or a flat weight+bias vector)."""
    gen = torch.Generator().manual_seed(spec.seed * 1_000_003 + block.index)
    if block.kind == "embedding":
        return torch.randn(block.shape, generator=gen) * spec.init_std
    out, inp = block.shape
    bound = 1.0 / inp**0.5  # nn.Linear's default range
    return (torch.rand(out * inp + out, generator=gen) * 2 - 1) * bound


def split_dense(block: Block, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight, bias) views of a dense block's flat vector."""
    out, inp = block.shape
    return flat[: out * inp].view(out, inp), flat[out * inp :]


def forward(
    spec: ModelSpec,
    rows: list[torch.Tensor],
    inverse: torch.Tensor,
    dense: list[torch.Tensor],
) -> torch.Tensor:
    """Logits of a batch.

    ``rows[f]`` holds the pulled embedding rows of field ``f`` (unique ids of the batch, in
    the order of ``torch.unique``), ``inverse`` (m × F) maps each sample to its row in
    ``rows[f]``, ``dense`` holds the flat vectors of the dense blocks in order.
    """
    x = torch.cat([rows[f][inverse[:, f]] for f in range(spec.fields)], dim=1)
    dense_blocks = spec.blocks()[spec.fields :]
    for i, (block, flat) in enumerate(zip(dense_blocks, dense, strict=True)):
        weight, bias = split_dense(block, flat)
        x = fn.linear(x, weight, bias)
        if i < len(dense_blocks) - 1:
            x = torch.relu(x)
    return x.squeeze(1)


def batch_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Summed binary cross-entropy (the PS divides by the samples of the step)."""
    return fn.binary_cross_entropy_with_logits(logits, labels, reduction="sum")
