"""Random, DotProduct (Tetris) and BestFit: scores from free CPU and total free GPU milli.

With ``c`` the node's free CPU milli, ``L`` its free GPU milli, ``p`` and ``mk`` the pod's
CPU milli and total GPU milli (normalisers 128000 and 8000):

* BestFit ``⌊100·(1 − ½(c−p)/128000 − ½(L−mk)/8000)⌋`` — the node left fullest wins;
* DotProduct ``⌊100·(1 − ½[(c/128000)(p/128000) + (L/8000)(mk/8000)])⌋`` — the node whose
  free vector is least aligned with the request wins (Tetris' packing heuristic);
* Random gives 100 to one feasible node drawn uniformly and 0 to the rest, and puts a
  sharing pod on a random fitting GPU (the authors' simulator runs Random with random GPU
  selection; the others use the tightest fitting GPU).

The float expressions are evaluated in the simulator's order so that the truncated integer
scores, and therefore the ties, are the same.
"""

from __future__ import annotations

import numpy as np

from placement.cluster import Cluster, free_gpus
from placement.pod import Pod
from placement.policies.base import (
    MAX_SCORE,
    MAX_SPEC_CPU,
    MAX_SPEC_GPU,
    PolicyContext,
    ScorePolicy,
)


class RandomPolicy(ScorePolicy):
    """A uniformly random feasible node (and GPU)."""

    name = "random"

    def __init__(self, context: PolicyContext) -> None:
        self.rng = context.rng

    def score(self, pod: Pod, cluster: Cluster, nodes: np.ndarray) -> np.ndarray:
        scores = np.zeros(len(nodes), np.int64)
        scores[self.rng.integers(len(nodes))] = MAX_SCORE
        return scores

    def choose_gpus(self, pod: Pod, cluster: Cluster, node: int) -> tuple[int, ...]:
        if not pod.is_sharing:
            return free_gpus(cluster.gpu_free[node], pod.num_gpu) if pod.num_gpu else ()
        fitting = np.flatnonzero(cluster.gpu_free[node] >= pod.gpu_milli)
        return (int(fitting[self.rng.integers(fitting.size)]),) if fitting.size else ()


class BestFitPolicy(ScorePolicy):
    """Least free CPU and GPU left after placing (equal weights)."""

    name = "bestfit"

    def __init__(self, context: PolicyContext | None = None) -> None:
        pass

    def score(self, pod: Pod, cluster: Cluster, nodes: np.ndarray) -> np.ndarray:
        cpu_left = (cluster.cpu_free[nodes] - pod.cpu_milli).astype(np.float64)
        gpu_left = (cluster.gpu_free_total[nodes] - pod.total_gpu_milli).astype(np.float64)
        waste = cpu_left / MAX_SPEC_CPU * 0.5 + gpu_left / MAX_SPEC_GPU * 0.5
        return ((1.0 - waste) * MAX_SCORE).astype(np.int64)


class DotProductPolicy(ScorePolicy):
    """Tetris: minimise the dot product of the free and requested (CPU, GPU) vectors."""

    name = "dotprod"

    def __init__(self, context: PolicyContext | None = None) -> None:
        pass

    def score(self, pod: Pod, cluster: Cluster, nodes: np.ndarray) -> np.ndarray:
        cpu = cluster.cpu_free[nodes].astype(np.float64) / MAX_SPEC_CPU
        gpu = cluster.gpu_free_total[nodes].astype(np.float64) / MAX_SPEC_GPU
        dot = cpu * (pod.cpu_milli / MAX_SPEC_CPU) + gpu * (pod.total_gpu_milli / MAX_SPEC_GPU)
        return (MAX_SCORE * (1 - dot / 2)).astype(np.int64)
