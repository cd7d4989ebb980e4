"""Seeded synthetic clusters and pod lists of the openb trace's shape.

Tests and examples need a realistic mix without shipping data files: heterogeneous GPU
nodes (2/4/8 GPUs of a few models, 1 on small boxes), and pods that are CPU-only, share one
GPU (a few common milli sizes), take one whole GPU, or take 2/4/8 — optionally restricted to
some GPU models. The default mix follows the openb default workload's proportions (about
13 % CPU-only, 40 % sharing, 46 % one whole GPU, 1 % multi-GPU). Same seed, same output.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from placement.cluster import NodeSpec
from placement.pod import MILLI, Pod


@dataclass(frozen=True)
class NodeKind:
    """A node type and its relative frequency."""

    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str
    weight: float


DEFAULT_NODE_KINDS: tuple[NodeKind, ...] = (
    NodeKind(96000, 393216, 8, "G2", 0.45),
    NodeKind(104000, 524288, 2, "T4", 0.32),
    NodeKind(16000, 122880, 2, "P100", 0.09),
    NodeKind(128000, 786432, 8, "G3", 0.03),
    NodeKind(32000, 131072, 4, "V100M16", 0.03),
    NodeKind(96000, 786432, 8, "V100M32", 0.02),
    NodeKind(96000, 393216, 4, "T4", 0.02),
    NodeKind(8000, 32768, 1, "V100M16", 0.02),
    NodeKind(128000, 1048576, 1, "A10", 0.02),
)


@dataclass(frozen=True)
class WorkloadShape:
    """The pod mix of :func:`generate_pods` (fractions need not sum to 1: normalised)."""

    cpu_only: float = 0.13
    sharing: float = 0.40
    one_gpu: float = 0.46
    multi_gpu: float = 0.01
    sharing_milli: tuple[int, ...] = (810, 470, 320, 650, 230, 460, 590, 160, 550, 220)
    multi_sizes: tuple[int, ...] = (2, 4, 8)
    cpu_choices: tuple[int, ...] = (3152, 4000, 6000, 8000, 11300, 11908, 12000, 12500, 32000)
    constrained: float = 0.0
    """Share of GPU pods that name allowed GPU models (1–2 of the cluster's models)."""
    models: tuple[str, ...] = field(default=("G2", "T4", "P100", "G3", "V100M16", "V100M32"))
    mean_interarrival_s: float = 600.0
    mean_duration_s: float = 36000.0


def generate_nodes(
    count: int, *, seed: int = 0, kinds: tuple[NodeKind, ...] = DEFAULT_NODE_KINDS
) -> list[NodeSpec]:
    """``count`` nodes named ``node-0000``… drawn from ``kinds`` by weight."""
    rng = np.random.default_rng(seed)
    weights = np.array([k.weight for k in kinds], float)
    picks = rng.choice(len(kinds), size=count, p=weights / weights.sum())
    return [
        NodeSpec(
            f"node-{i:04d}", kinds[j].cpu_milli, kinds[j].memory_mib, kinds[j].gpus, kinds[j].model
        )
        for i, j in enumerate(picks)
    ]


def generate_pods(count: int, *, seed: int = 0, shape: WorkloadShape | None = None) -> list[Pod]:
    """``count`` pods named ``pod-0000``… with creation/deletion/scheduled times."""
    shape = shape or WorkloadShape()
    rng = np.random.default_rng(seed)
    mix = np.array([shape.cpu_only, shape.sharing, shape.one_gpu, shape.multi_gpu], float)
    kinds = rng.choice(4, size=count, p=mix / mix.sum())
    created = np.cumsum(rng.exponential(shape.mean_interarrival_s, count)).round()
    durations = np.maximum(1.0, rng.exponential(shape.mean_duration_s, count).round())
    pods = []
    for i, kind in enumerate(kinds):
        cpu = int(rng.choice(shape.cpu_choices))
        memory = int(cpu * rng.choice([2, 4]) * 1024 // 1000)
        num_gpu, milli = 0, 0
        if kind == 1:
            num_gpu, milli = 1, int(rng.choice(shape.sharing_milli))
        elif kind == 2:
            num_gpu, milli = 1, MILLI
        elif kind == 3:
            num_gpu, milli = int(rng.choice(shape.multi_sizes)), MILLI
            cpu, memory = cpu * num_gpu, memory * num_gpu
        models: frozenset[str] = frozenset()
        if num_gpu and shape.constrained > 0 and rng.random() < shape.constrained:
            size = int(rng.integers(1, 3))
            models = frozenset(rng.choice(shape.models, size=size, replace=False).tolist())
        start = float(created[i])
        pods.append(
            Pod(
                f"pod-{i:04d}",
                cpu,
                memory,
                num_gpu,
                milli,
                models,
                start,
                start + float(durations[i]),
                start,
            )
        )
    return pods
