"""What a node-level agent sees: one feature row per candidate node, the pod, the cluster.

The encoding never depends on how many nodes the cluster has: an agent scores each
candidate row with one shared network (as learned placement systems do), so a network
trained on a few hundred sampled nodes runs unchanged on openb's 1,213 or any other cluster.

Each row describes the node *before* and *after* the pod would land there (with the
default GPU choice: a sharing pod on its tightest GPU, whole-GPU pods on the first free
GPUs), because what a placement leaves behind is what decides whether later pods fit:

* free CPU, memory, total GPU milli — before and after (normalised by the largest node);
* the node's GPU count and its GPUs' free milli after, sorted (8 slots);
* fully free and partly used GPUs after;
* *stranded* GPU milli before and after: free milli no typical pod can use — all of it
  when the node's free CPU is below the tolerance ``τ_cpu``, else the free milli of GPUs
  with less than ``τ_gpu`` free (``balance_dqn``'s "saturation" with its tolerance ``τ_m``);
* the change of the node's resource *uniformity* if the pod lands there (``balance_dqn``'s ``φ =
  avg(μ ⊙ 1/(σ + ξ))`` with μ, σ the vectors over nodes of each node's mean and spread of
  its CPU, memory and GPU utilisation: a node scores high when it is well used and used
  evenly across its resources; only the chosen node's term changes).

Every function is vectorised over the candidate nodes; nothing here mutates the cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from placement.cluster import Cluster
from placement.frag import TypicalPods
from placement.pod import MILLI, Pod

CPU_NORM = 128_000.0
MEM_NORM = 1_048_576.0
GPU_NORM = 8_000.0
GPU_SLOTS = 8
UNIFORMITY_XI = 0.1
"""ξ of the uniformity μ/(σ + ξ): keeps a perfectly even node finite."""

NODE_FEATURES: tuple[str, ...] = (
    "cpu_free",
    "cpu_after",
    "mem_free",
    "mem_after",
    "gpu_free",
    "gpu_after",
    "gpu_count",
    *(f"gpu_after_{i}" for i in range(GPU_SLOTS)),
    "idle_gpus_after",
    "partial_gpus_after",
    "stranded",
    "stranded_after",
    "node_unused",
    "uniformity_gain",
)
POD_FEATURES: tuple[str, ...] = (
    "cpu",
    "mem",
    "num_gpu",
    "gpu_milli",
    "sharing",
    "cpu_only",
    "total_gpu",
)
CLUSTER_FEATURES: tuple[str, ...] = ("cpu_used", "mem_used", "gpu_used", "uniformity")


@dataclass(frozen=True)
class Tolerance:
    """``balance_dqn``'s ``τ_m``: the least a node must keep free to host a typical pod."""

    cpu_milli: float = 4_000.0
    gpu_milli: float = 500.0

    @classmethod
    def of(cls, typical: TypicalPods) -> Tolerance:
        """Weighted medians of the typical GPU pods' CPU and of the sharing pods' GPU milli."""
        gpu = [(t, w) for t, w in zip(typical.types, typical.weights, strict=True) if t.num_gpu]
        sharing = [(t.gpu_milli, w) for t, w in gpu if t.num_gpu == 1 and t.gpu_milli < MILLI]
        cpu = _weighted_median([(t.cpu_milli, w) for t, w in gpu], cls.cpu_milli)
        return cls(cpu_milli=cpu, gpu_milli=_weighted_median(sharing, cls.gpu_milli))


def _weighted_median(pairs: Sequence[tuple[float, float]], default: float) -> float:
    if not pairs:
        return default
    values = np.array([v for v, _ in pairs], float)
    weights = np.array([w for _, w in pairs], float)
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cum, cum[-1] / 2)])


def gpus_after(cluster: Cluster, pod: Pod, nodes: np.ndarray) -> np.ndarray:
    """Free milli per GPU on each candidate node once ``pod`` takes its default GPUs."""
    free: np.ndarray = cluster.gpu_free[nodes].copy()
    if not pod.num_gpu or free.size == 0:
        return free
    rows = np.arange(len(nodes))
    if pod.is_sharing:
        fitting = np.where(free >= pod.gpu_milli, free, np.iinfo(np.int64).max)
        free[rows, fitting.argmin(axis=1)] -= pod.gpu_milli
        return free
    idle = free == MILLI
    take = idle & (np.cumsum(idle, axis=1) <= pod.num_gpu)
    free[take] = 0
    return free


def stranded_milli(free: np.ndarray, cpu_free: np.ndarray, tolerance: Tolerance) -> np.ndarray:
    """Free GPU milli per node that no typical pod can use (see the module docstring)."""
    total = free.sum(axis=1)
    small = np.where(free < tolerance.gpu_milli, free, 0).sum(axis=1)
    stranded: np.ndarray = np.where(cpu_free < tolerance.cpu_milli, total, small)
    return stranded.astype(np.float64)


def utilisation(cluster: Cluster, nodes: np.ndarray | None = None) -> np.ndarray:
    """Per-node used share of CPU, memory and GPU milli: an [n, 3] array (all nodes by
    default)."""
    idx = np.arange(len(cluster)) if nodes is None else nodes
    gpus = cluster.gpu_count[idx]
    return np.stack(
        [
            1.0 - cluster.cpu_free[idx] / np.maximum(cluster.cpu_capacity[idx], 1),
            1.0 - cluster.mem_free[idx] / np.maximum(cluster.mem_capacity[idx], 1),
            np.where(
                gpus > 0, 1.0 - cluster.gpu_free_total[idx] / np.maximum(gpus * MILLI, 1), 0.0
            ),
        ],
        axis=1,
    )


def node_uniformity(util: np.ndarray) -> np.ndarray:
    """``balance_dqn``'s per-node term μ_i/(σ_i + ξ) over each row of an [n, 3] utilisation."""
    a, b, c = util[:, 0], util[:, 1], util[:, 2]
    mean = (a + b + c) / 3.0
    spread = np.sqrt(((a - mean) ** 2 + (b - mean) ** 2 + (c - mean) ** 2) / 3.0)
    per_node: np.ndarray = mean / (spread + UNIFORMITY_XI)
    return per_node


def uniformity(util: np.ndarray) -> float:
    """``balance_dqn``'s φ: the mean over nodes of :func:`node_uniformity`."""
    return float(node_uniformity(util).mean())


def utilisation_after(
    cluster: Cluster, pod: Pod, nodes: np.ndarray, util: np.ndarray
) -> np.ndarray:
    """The candidates' [n, 3] utilisation rows if ``pod`` landed on each."""
    gpu_cap = np.maximum(cluster.gpu_count[nodes] * MILLI, 1)
    delta = np.stack(
        [
            pod.cpu_milli / np.maximum(cluster.cpu_capacity[nodes], 1),
            pod.memory_mib / np.maximum(cluster.mem_capacity[nodes], 1),
            np.where(cluster.gpu_count[nodes] > 0, pod.total_gpu_milli / gpu_cap, 0.0),
        ],
        axis=1,
    )
    after: np.ndarray = util[nodes] + delta
    return after


def node_features(
    cluster: Cluster,
    pod: Pod,
    nodes: np.ndarray,
    tolerance: Tolerance,
    *,
    util: np.ndarray | None = None,
) -> np.ndarray:
    """The [len(nodes), len(NODE_FEATURES)] float32 rows (see the module docstring);
    ``util`` is :func:`utilisation` of the cluster if the caller already has it."""
    util = utilisation(cluster) if util is None else util
    free = cluster.gpu_free[nodes]
    after = gpus_after(cluster, pod, nodes)
    cpu, mem = cluster.cpu_free[nodes], cluster.mem_free[nodes]
    gpu_total = free.sum(axis=1)
    slots = -np.sort(-after, axis=1)[:, :GPU_SLOTS]
    if slots.shape[1] < GPU_SLOTS:
        slots = np.pad(slots, ((0, 0), (0, GPU_SLOTS - slots.shape[1])))
    exists = cluster.gpu_exists[nodes] & ~cluster.gpu_down[nodes]
    idle_after = ((after == MILLI) & exists).sum(axis=1)
    partial_after = ((after > 0) & (after < MILLI) & exists).sum(axis=1)
    cpu_after = cpu - pod.cpu_milli
    unused = (cluster.pod_count[nodes] == 0).astype(np.float64)
    gain = node_uniformity(utilisation_after(cluster, pod, nodes, util)) - node_uniformity(
        util[nodes]
    )
    columns = [
        cpu / CPU_NORM,
        cpu_after / CPU_NORM,
        mem / MEM_NORM,
        (mem - pod.memory_mib) / MEM_NORM,
        gpu_total / GPU_NORM,
        (gpu_total - pod.total_gpu_milli) / GPU_NORM,
        cluster.gpu_count[nodes] / GPU_SLOTS,
        *(slots[:, i] / MILLI for i in range(GPU_SLOTS)),
        idle_after / GPU_SLOTS,
        partial_after / GPU_SLOTS,
        stranded_milli(free, cpu, tolerance) / GPU_NORM,
        stranded_milli(after, cpu_after, tolerance) / GPU_NORM,
        unused,
        gain,
    ]
    out = np.empty((len(nodes), len(columns)), np.float32)
    for i, column in enumerate(columns):
        out[:, i] = column
    return out


def pod_features(pod: Pod) -> np.ndarray:
    """The pod's request, normalised like the node rows."""
    return np.array(
        [
            pod.cpu_milli / CPU_NORM,
            pod.memory_mib / MEM_NORM,
            pod.num_gpu / GPU_SLOTS,
            pod.gpu_milli / MILLI,
            float(pod.is_sharing),
            float(not pod.is_gpu),
            pod.total_gpu_milli / GPU_NORM,
        ],
        np.float32,
    )


def cluster_features(cluster: Cluster, *, util: np.ndarray | None = None) -> np.ndarray:
    """Mean used share of CPU, memory, GPU, and the uniformity φ (scaled to about 0…1)."""
    util = utilisation(cluster) if util is None else util
    return np.array([*util.mean(axis=0), uniformity(util) / 10.0], np.float32)
