"""What ``async_transformer`` sees: a small observation vector per candidate node.

The document's observation has six features (eight inputs): system utilisation, the task's
arithmetic work, its data size, its data type, the free fast memory of each node, and the
similarity of the task's data to what each node holds. On a GPU cluster with data caches
(``placement.locality``) they become, per candidate node:

1. ``cluster_util`` — GPU share in use (the document's utilisation);
2. ``pod_gpu`` — the pod's GPUs, k·m/1000 ÷ 8 (its arithmetic work);
3. ``pod_data`` — its dataset size, log-scaled (data size);
4. ``pod_kind`` — 0 CPU-only, ½ a shared GPU, 1 whole GPUs (data type);
5. ``cache_free`` — free share of the node's data cache (free fast memory);
6. ``data_near`` — 1 if the node caches the pod's dataset, ½ if its rack does, else 0
   (similarity of the task's data to the node's);
7. ``gpu_left`` and 8. ``cpu_left`` — what the pod would leave free on the node (what a
   placement costs later pods: the document's utilisation goal, per node).

Without a locality model (plain ``kale place timed``, ``kale scheduler``) features 5–6 read
"nothing cached anywhere". The *preset action set* is a fixed number of candidate slots:
the feasible nodes, nodes with equal observations merged (the first in node order stands for
them), ordered by tier then by how full the pod would leave them, each tier given an equal
share of the slots before the rest are filled in that order.

With the rules' proposals (:func:`proposal_tokens`) the slots are instead the top nodes of
BestFit, FGD and GpuPacking (``placement.env.proposals``) and the tightest node that caches
the pod's data and the tightest on its rack, each token the eight features above followed by
what the rules say of the node (scores, FGD's gain, picks, places).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from placement.cluster import Cluster
from placement.env.proposals import Proposer
from placement.locality import DataCaches
from placement.pod import MILLI, Pod

TOKEN_FEATURES: tuple[str, ...] = (
    "cluster_util",
    "pod_gpu",
    "pod_data",
    "pod_kind",
    "cache_free",
    "data_near",
    "gpu_left",
    "cpu_left",
)
_PROJECTION = np.random.default_rng(0x3A7E).standard_normal(len(TOKEN_FEATURES)) * math.pi


@dataclass(frozen=True)
class Candidates:
    """One decision's action slots."""

    tokens: np.ndarray
    """``[slots, len(TOKEN_FEATURES)]`` float32 (zero rows past ``count``)."""
    mask: np.ndarray
    """``[slots]``: True for a real candidate."""
    nodes: np.ndarray
    """Node index of each real candidate (``count`` long)."""
    latency_s: np.ndarray | None = None
    """Each candidate's access latency if chosen (known to the simulator, for tests)."""
    picks: dict[str, int] = field(default_factory=dict)
    """With proposals: rule name → slot of the node that rule would take."""


def _base_rows(
    pod: Pod, cluster: Cluster, nodes: np.ndarray, caches: DataCaches | None
) -> tuple[np.ndarray, np.ndarray]:
    """The eight features of every node in ``nodes`` and its tier (0 local, 1 rack,
    2 remote)."""
    n = len(nodes)
    if caches is not None:
        tier = caches.tiers(pod, nodes)
        cache_free = caches.free_share(nodes)
        data_mib = caches.size_mib(pod)
    else:
        tier, cache_free, data_mib = np.full(n, 2), np.ones(n), float(pod.memory_mib)
    gpus = cluster.gpu_count[nodes].astype(np.float64)
    gpu_left = (cluster.gpu_free_total[nodes] - pod.total_gpu_milli) / np.maximum(gpus * MILLI, 1)
    gpu_left = np.where(gpus > 0, gpu_left, 0.0)
    cpu_left = (cluster.cpu_free[nodes] - pod.cpu_milli) / np.maximum(
        cluster.cpu_capacity[nodes], 1
    )
    kind = 0.0 if not pod.num_gpu else (0.5 if pod.is_sharing else 1.0)
    util = cluster.allocated_gpu_milli / max(cluster.total_gpu_milli, 1)
    rows = np.empty((n, len(TOKEN_FEATURES)), np.float64)
    rows[:, 0] = util
    rows[:, 1] = pod.total_gpu_milli / MILLI / 8.0
    rows[:, 2] = math.log1p(data_mib / 1024.0) / math.log1p(512.0)
    rows[:, 3] = kind
    rows[:, 4] = cache_free
    rows[:, 5] = np.choose(np.clip(tier, 0, 2), [1.0, 0.5, 0.0])
    rows[:, 6] = gpu_left
    rows[:, 7] = cpu_left
    return rows, np.asarray(tier)


def candidate_tokens(
    pod: Pod, cluster: Cluster, nodes: np.ndarray, caches: DataCaches | None, *, slots: int
) -> Candidates:
    """The action slots of ``pod`` among the feasible ``nodes`` (module docstring)."""
    nodes = np.asarray(nodes, np.int64)
    rows, tier = _base_rows(pod, cluster, nodes, caches)
    _, first = np.unique(rows @ _PROJECTION, return_index=True)
    first = np.sort(first)  # equal rows: the first in node order stands for them
    order = first[np.lexsort((rows[first, 7], rows[first, 6], tier[first]))]
    keep = _share_slots(order, tier, slots)
    tokens = np.zeros((slots, len(TOKEN_FEATURES)), np.float32)
    mask = np.zeros(slots, bool)
    tokens[: len(keep)], mask[: len(keep)] = rows[keep], True
    return Candidates(tokens, mask, nodes[keep])


def proposal_tokens(
    pod: Pod,
    cluster: Cluster,
    nodes: np.ndarray,
    caches: DataCaches | None,
    proposer: Proposer,
    rank: np.ndarray,
    *,
    slots: int,
) -> Candidates:
    """The action slots when they are the rules' proposals plus the tightest node of the
    local and of the rack tier (module docstring); tokens are the eight features then the
    rules' (``slots`` ≥ the rules' proposals + 2)."""
    nodes = np.asarray(nodes, np.int64)
    rows, tier = _base_rows(pod, cluster, nodes, caches)
    near = []
    for t in (0, 1):
        at = np.flatnonzero(tier == t)
        if at.size:
            near.append(int(at[np.lexsort((rows[at, 7], rows[at, 6]))[0]]))
    proposals = proposer.propose(pod, cluster, nodes, rank, also=np.array(near, np.int64))
    position = np.searchsorted(nodes, proposals.nodes)
    count = min(len(position), slots)
    width = len(TOKEN_FEATURES) + proposals.features.shape[1]
    tokens = np.zeros((slots, width), np.float32)
    mask = np.zeros(slots, bool)
    tokens[:count, : len(TOKEN_FEATURES)] = rows[position[:count]]
    tokens[:count, len(TOKEN_FEATURES) :] = proposals.features[:count]
    mask[:count] = True
    picks = {k: v for k, v in proposals.picks.items() if v < count}
    return Candidates(tokens, mask, proposals.nodes[:count], picks=picks)


def _share_slots(order: np.ndarray, tier: np.ndarray, slots: int) -> np.ndarray:
    """Up to ``slots`` of ``order``: each tier's first ``slots // 3`` first, then the rest
    in order (so a cached node is always among the actions when one is feasible)."""
    if len(order) <= slots:
        return order
    share = max(slots // 3, 1)
    chosen = np.zeros(len(order), bool)
    for t in range(3):
        chosen[np.flatnonzero(tier[order] == t)[:share]] = True
    rest = np.flatnonzero(~chosen)[: slots - int(chosen.sum())]
    chosen[rest] = True
    return order[np.flatnonzero(chosen)]
