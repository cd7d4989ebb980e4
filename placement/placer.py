"""One scheduling cycle: filter the feasible nodes, score them, break ties, pick the GPUs.

This is the loop a Kubernetes scheduler framework runs per pod, with the authors'
simulator's tie-break: among the nodes with the highest score, the one first in a fixed
(seeded, random) node order wins. A lone feasible node is taken without scoring.

``allowed`` narrows the filter to the nodes the caller may use for reasons the cluster model
does not hold (a Kubernetes scheduler's cordon, readiness, taints, selectors, affinity): the
simulators pass nothing, ``kale scheduler`` its eligibility mask — one cycle for both.

A policy that weighs other policies' choices (a learned agent choosing among the rules'
proposals) must know where each rule's ties would go: one with ``uses_rank = True`` is shown
the tie order (``observe_rank``) before it scores.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placement.cluster import Allocation, Cluster
from placement.pod import Pod
from placement.policies.base import ScorePolicy
from placement.policies.capabilities import wants_rank


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a pod goes: node index, the exact GPUs, and the winning score (None if the
    node was the only feasible one)."""

    node: int
    gpus: tuple[int, ...]
    score: int | None


def tie_order(count: int, rng: np.random.Generator) -> np.ndarray:
    """A random node ranking (rank[i] = position of node i): lower rank wins ties."""
    return rng.permutation(count).astype(np.int64)


def choose(
    pod: Pod,
    cluster: Cluster,
    policy: ScorePolicy,
    *,
    rank: np.ndarray,
    allowed: np.ndarray | None = None,
) -> Placement | None:
    """Where ``pod`` would go under ``policy`` (None: fits nowhere). Changes nothing.

    ``allowed``: a boolean mask over the nodes (None: every node)."""
    feasible = cluster.feasible(pod)
    if allowed is not None:
        feasible &= allowed
    nodes = np.flatnonzero(feasible)
    if nodes.size == 0:
        return None
    if nodes.size == 1:
        node, score = int(nodes[0]), None
    else:
        if wants_rank(policy):
            policy.observe_rank(rank)
        scores = policy.score(pod, cluster, nodes)
        best = scores.max()
        tied = nodes[scores == best]
        node, score = int(tied[np.argmin(rank[tied])]), int(best)
    return Placement(node, policy.choose_gpus(pod, cluster, node), score)


def place(
    pod: Pod,
    cluster: Cluster,
    policy: ScorePolicy,
    *,
    rank: np.ndarray,
    allowed: np.ndarray | None = None,
) -> Allocation | None:
    """``choose`` and allocate: the :class:`~placement.cluster.Allocation`, or None."""
    decision = choose(pod, cluster, policy, rank=rank, allowed=allowed)
    if decision is None:
        return None
    return cluster.allocate(pod, decision.node, decision.gpus)
