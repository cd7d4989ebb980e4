"""GpuClustering and GpuPacking: rules that look at which GPUs and pods a node already has.

Both give every node 0 for a CPU-only pod, so the tie-break order places those.

GpuClustering keeps pods of one kind together (kinds: sharing, 1 whole GPU, 2, 4, 8…):
with ``b = ⌊25·(8000 − L)/8000⌋`` (fuller nodes a little higher), a node hosting only the
pod's kind scores ``75 + b``, one hosting that kind among others ``50 + b``, an empty node
``25 + b`` and a node hosting only other kinds ``b``.

GpuPacking fills partly used GPUs, then partly used nodes, then empty nodes:

1. a sharing pod that fits on a partly used GPU (the tightest, ``f`` free):
   ``100 − ⌊⌊100·f/1000⌋/10⌋``;
2. a node with some GPU in use but the pod needs ``u`` fully free GPUs: ``max(50 − u, 33)``;
3. a node with all ``n`` GPUs free: ``max(33 − n, n)``.
"""

from __future__ import annotations

import numpy as np

from placement.cluster import Cluster
from placement.pod import MILLI, Pod
from placement.policies.base import MAX_SCORE, MAX_SPEC_GPU, PolicyContext, ScorePolicy, go_div


class GpuClusteringPolicy(ScorePolicy):
    """Co-locate GPU pods of the same kind."""

    name = "clustering"

    def __init__(self, context: PolicyContext | None = None) -> None:
        pass

    def score(self, pod: Pod, cluster: Cluster, nodes: np.ndarray) -> np.ndarray:
        if not pod.is_gpu:
            return np.zeros(len(nodes), np.int64)
        fullness = go_div(
            (MAX_SCORE // 4) * (MAX_SPEC_GPU - cluster.gpu_free_total[nodes]), MAX_SPEC_GPU
        )
        kinds = cluster.affinity_count[nodes]
        present = (kinds > 0).sum(axis=1)
        same = kinds[:, pod.affinity] > 0
        bonus = np.where(
            same,
            np.where(present == 1, MAX_SCORE * 3 // 4, MAX_SCORE * 2 // 4),
            np.where(present == 0, MAX_SCORE // 4, 0),
        )
        return fullness + bonus


class GpuPackingPolicy(ScorePolicy):
    """Pack onto used GPUs, then used nodes, then empty nodes."""

    name = "packing"

    def __init__(self, context: PolicyContext | None = None) -> None:
        pass

    def score(self, pod: Pod, cluster: Cluster, nodes: np.ndarray) -> np.ndarray:
        if not pod.is_gpu:
            return np.zeros(len(nodes), np.int64)
        free = cluster.gpu_free[nodes]
        fully_free = (free == MILLI).sum(axis=1)
        all_free = fully_free == cluster.gpu_count[nodes]
        empty_node = np.maximum(MAX_SCORE // 3 - fully_free, fully_free)
        if pod.is_sharing:
            tightest = np.where(free >= pod.gpu_milli, free, MILLI + 1).min(axis=1)
            on_used_gpu = np.maximum(MAX_SCORE - (tightest * 100 // MILLI) // 10, MAX_SCORE // 2)
            used_node = np.where(
                tightest == MILLI, max(MAX_SCORE // 2 - 1, MAX_SCORE // 3), on_used_gpu
            )
        else:
            used_node = np.full(
                len(nodes), max(MAX_SCORE // 2 - pod.num_gpu, MAX_SCORE // 3), np.int64
            )
        return np.where(all_free, empty_node, used_node).astype(np.int64)
