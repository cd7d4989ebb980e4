"""The one interface every node-level policy implements: a score plugin.

Like a Volcano or FGD-simulator score plugin, a policy is a function of (pod, cluster
snapshot): ``score`` returns one integer per candidate node (higher is better; the caller
has already filtered the candidates to feasible nodes and breaks ties), and
``choose_gpus`` picks the exact GPUs on the node that won. Neither mutates the cluster or
does I/O. The only state a policy may keep is a random generator (Random) or a memo keyed
on ``cluster.node_version`` (FGD), so the same snapshot always scores the same.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from placement.cluster import Cluster, default_gpus
from placement.frag import TypicalPods
from placement.pod import Pod

MAX_SCORE = 100
MAX_SPEC_CPU = 128_000
"""CPU milli of the largest node: BestFit/DotProduct's CPU normaliser."""
MAX_SPEC_GPU = 8_000
"""GPU milli of the largest node: BestFit/DotProduct/GpuClustering's GPU normaliser."""


@dataclass(frozen=True)
class PolicyContext:
    """What some policies need beyond the snapshot: randomness, the workload's typical pods."""

    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    typical: TypicalPods | None = None


class ScorePolicy(ABC):
    """A node-level placement policy (see the module docstring)."""

    name: ClassVar[str]

    @abstractmethod
    def score(self, pod: Pod, cluster: Cluster, nodes: np.ndarray) -> np.ndarray:
        """Integer scores (int64), one per node index in ``nodes`` (all feasible)."""

    def choose_gpus(self, pod: Pod, cluster: Cluster, node: int) -> tuple[int, ...]:
        """The GPUs ``pod`` takes on ``node``: by default the tightest-fitting GPU for a
        sharing pod and the first fully free GPUs for whole-GPU pods."""
        return default_gpus(cluster, pod, node)


def go_div(a: np.ndarray, b: int) -> np.ndarray:
    """Integer division truncating toward zero (Go's ``/`` on integers)."""
    a = np.asarray(a, np.int64)
    return np.sign(a) * (np.abs(a) // b)
