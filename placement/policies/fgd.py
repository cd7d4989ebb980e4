"""FGD, Fragmentation Gradient Descent (Weng et al., "Beware of Fragmentation", ATC'23).

Score a node by how little the pod grows its fragmentation ``F`` (see ``placement.frag``):
``⌊100·σ((F(s) − F(s′))/1000)⌋`` with ``s′`` the node after the pod lands. A sharing pod is
tried on every GPU that fits and takes the best (the lowest index among equals); whole-GPU
pods take the first fully free GPUs; a CPU-only pod changes only the node's free CPU.

Cost: ``F(s)`` is memoised per node and recomputed only for nodes that changed; ``F(s′)``
is evaluated once per distinct node state among the feasible nodes (model, free CPU,
multiset of free GPU milli: equal states score equally) and, for a sharing pod, once per
distinct free-milli value of its fitting GPUs.
"""

from __future__ import annotations

import numpy as np

from placement.cluster import Cluster, free_gpus
from placement.frag import FragModel, TypicalPods, frag_model
from placement.pod import Pod
from placement.policies.base import MAX_SCORE, PolicyContext, ScorePolicy


def fgd_score(frag_before: np.ndarray, frag_after: np.ndarray) -> np.ndarray:
    """⌊100·σ(ΔF/1000)⌋ as the simulator computes it (float64, truncation)."""
    return squash(frag_before - frag_after)


def squash(gain: np.ndarray) -> np.ndarray:
    """⌊100·σ(gain/1000)⌋: a fragmentation gain (F(s) − F(s′), milli) as FGD's score."""
    x = gain / 1000
    scores: np.ndarray = (1.0 / (1.0 + np.exp(-x)) * MAX_SCORE).astype(np.int64)
    return scores


class FGDPolicy(ScorePolicy):
    """Place where the expected GPU fragmentation grows least."""

    name = "fgd"

    def __init__(self, context: PolicyContext) -> None:
        if context.typical is None:
            raise ValueError("FGD needs the workload's typical pods (PolicyContext.typical)")
        self.typical: TypicalPods = context.typical

    def _model(self, cluster: Cluster) -> FragModel:
        return frag_model(cluster, self.typical)

    def _share_candidates(
        self, pod: Pod, cluster: Cluster, nodes: np.ndarray, *, dedupe: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row into ``nodes``, GPU index, its free milli) for every GPU a sharing pod could
        take; with ``dedupe`` only the lowest-index GPU of each distinct free value."""
        free = cluster.gpu_free[nodes]
        ok = free >= pod.gpu_milli
        if dedupe:
            width = free.shape[1]
            earlier = np.tril(np.ones((width, width), bool), k=-1)  # [j, i]: i < j
            same_before = ((free[:, :, None] == free[:, None, :]) & ok[:, None, :] & earlier).any(
                axis=2
            )
            ok &= ~same_before
        rows, gpus = np.nonzero(ok)
        return rows, gpus, free[rows, gpus]

    def score(self, pod: Pod, cluster: Cluster, nodes: np.ndarray) -> np.ndarray:
        return squash(self.gains(pod, cluster, nodes))

    def gains(self, pod: Pod, cluster: Cluster, nodes: np.ndarray) -> np.ndarray:
        """F(s) − F(s′) per node (milli; a sharing pod on its best GPU): what ``score``
        squashes, for callers that need the unrounded value (learned agents' features).
        ``squash`` is monotone, so the best GPU by gain is the best by score."""
        model = self._model(cluster)
        _, first, inverse = np.unique(
            model.state_ids()[nodes], return_index=True, return_inverse=True
        )
        reps = nodes[first]  # one node per distinct state
        before = model.node_frag()[reps]
        if not pod.is_sharing:
            gain: np.ndarray = (before - model.after_whole(reps, pod))[inverse]
            return gain
        rows, _, values = self._share_candidates(pod, cluster, reps, dedupe=True)
        per_gpu = before[rows] - model.after_share(reps[rows], values, pod)
        best = np.full(len(reps), -np.inf)
        np.maximum.at(best, rows, per_gpu)
        out: np.ndarray = best[inverse]
        return out

    def choose_gpus(self, pod: Pod, cluster: Cluster, node: int) -> tuple[int, ...]:
        if not pod.is_sharing:
            return free_gpus(cluster.gpu_free[node], pod.num_gpu) if pod.num_gpu else ()
        model = self._model(cluster)
        one = np.array([node])
        rows, gpus, values = self._share_candidates(pod, cluster, one, dedupe=False)
        if gpus.size == 0:
            return ()
        before = model.node_frag()[one][rows]
        per_gpu = fgd_score(before, model.after_share(one[rows], values, pod))
        return (int(gpus[int(np.argmax(per_gpu))]),)
