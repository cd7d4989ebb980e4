"""Data locality on a GPU cluster: a hybrid memory pool (``async_transformer``'s setting),
mapped onto nodes and racks.

The ``async_transformer`` document schedules tasks on a multi-engine system over a *hybrid memory
pool*: each node has fast local memory, memory on other nodes of its rack is slower, memory
elsewhere slower still, and a task served from fast memory finishes sooner. Reading a task's data
into a node's fast memory may *evict* other data (written back to the pool), which costs time too.
Its reward is the access latency (and the eviction penalty).

On this cluster the same structure is the *data a job reads*:

* **Datasets.** Jobs that ask for exactly the same resources (CPU, memory, GPUs, GPU models)
  are taken to be runs of the same recurring workload and to read the same dataset — the
  trace names no datasets, and its recurring request shapes are its clearest workload
  identity (the 20 most common shapes cover 76 % of openb's pods). A dataset's size is the
  pod's memory request × ``data_share`` (the data a training job holds in memory).
* **Tiers.** Each node caches datasets in ``cache_share`` of its memory (its fast memory,
  least recently used out first). A job starting on node ``v`` reads its dataset from
  ``v``'s cache (local), else from a cache on ``v``'s rack (rack), else from remote storage
  (remote), at that tier's bandwidth; then it is cached on ``v``, evicting what it must
  (written back at ``evict_mib_s``). Racks are ``rack_size`` consecutive nodes of the node
  list (openb gives no topology).
* **Access latency** = read time + eviction time: the seconds between a job's start and its
  first step. The job holds its GPUs meanwhile (the timed simulator's ``start_delay_s``).

:class:`LocalityNodePool` is the timed simulator's GPU pool with this model switched on, so
every node policy — BestFit, FGD, a learned agent — is judged under the same physics. A
policy that wants to see the caches sets ``uses_locality`` and gets :meth:`observe_locality`
(the :class:`DataCaches`) once, and :meth:`observe_access` after each placement.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from placement.cluster import Cluster, NodeSpec
from placement.errors import PlacementInputError
from placement.frag import TypicalPods
from placement.node_pool import NodePool
from placement.pod import Pod
from placement.policies.base import ScorePolicy
from placement.policies.capabilities import wants_locality

TIERS = ("local", "rack", "remote")


@dataclass(frozen=True)
class LocalitySettings:
    """The memory hierarchy's shape and speeds (module docstring)."""

    rack_size: int = 16
    cache_share: float = 0.25
    """Share of each node's memory that caches datasets (its fast memory)."""
    bandwidth_mib_s: tuple[float, float, float] = (10_000.0, 2_000.0, 500.0)
    """Read bandwidth from the local cache, a cache on the same rack, remote storage."""
    evict_mib_s: float = 2_000.0
    """Write-back bandwidth of evicted data."""
    data_share: float = 1.0
    """Dataset size as a share of the pod's memory request."""

    def __post_init__(self) -> None:
        if self.rack_size < 1:
            raise PlacementInputError(f"rack_size must be ≥ 1, got {self.rack_size}")
        if not 0 <= self.cache_share <= 1 or not self.data_share > 0:
            raise PlacementInputError("cache_share must be in [0, 1] and data_share > 0")
        if len(self.bandwidth_mib_s) != 3 or min(self.bandwidth_mib_s) <= 0:
            raise PlacementInputError("bandwidth_mib_s: three positive bandwidths")
        if not self.evict_mib_s > 0:
            raise PlacementInputError(f"evict_mib_s must be > 0, got {self.evict_mib_s}")


@dataclass(frozen=True)
class Access:
    """One job's data access at its start."""

    tier: int
    """0 local, 1 rack, 2 remote (:data:`TIERS`)."""
    read_s: float
    evict_s: float
    evicted_mib: float

    @property
    def latency_s(self) -> float:
        return self.read_s + self.evict_s


def dataset_key(pod: Pod) -> tuple[object, ...]:
    """The dataset a pod reads: its request shape (module docstring)."""
    return (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli, pod.gpu_models)


class DataCaches:
    """Every node's cache of datasets (least recently used first out)."""

    def __init__(self, cluster: Cluster, settings: LocalitySettings) -> None:
        self.settings = settings
        n = len(cluster)
        self.capacity = cluster.mem_capacity.astype(np.float64) * settings.cache_share
        self.used = np.zeros(n)
        self.rack = np.arange(n) // settings.rack_size
        self.cache: list[OrderedDict[tuple[object, ...], float]] = [OrderedDict() for _ in range(n)]
        self.holders: dict[tuple[object, ...], set[int]] = {}

    def size_mib(self, pod: Pod) -> float:
        return float(pod.memory_mib) * self.settings.data_share

    def tiers(self, pod: Pod, nodes: np.ndarray) -> np.ndarray:
        """The tier each of ``nodes`` would read ``pod``'s dataset from (0, 1 or 2)."""
        held = self.holders.get(dataset_key(pod))
        tier = np.full(len(nodes), 2, np.int64)
        if not held:
            return tier
        holders = np.fromiter(held, np.int64, len(held))
        tier[np.isin(self.rack[nodes], self.rack[holders])] = 1
        tier[np.isin(nodes, holders)] = 0
        return tier

    def free_share(self, nodes: np.ndarray) -> np.ndarray:
        """Free share of each node's cache."""
        cap = self.capacity[nodes]
        return np.where(cap > 0, 1.0 - self.used[nodes] / np.maximum(cap, 1e-9), 0.0)

    def access(self, pod: Pod, node: int) -> Access:
        """Read ``pod``'s dataset on ``node`` (tier by where it is cached) and cache it there."""
        s = self.settings
        key, size = dataset_key(pod), self.size_mib(pod)
        tier = int(self.tiers(pod, np.array([node]))[0])
        read_s = size / s.bandwidth_mib_s[tier]
        cache = self.cache[node]
        if key in cache:
            cache.move_to_end(key)
            return Access(tier, read_s, 0.0, 0.0)
        if size > self.capacity[node]:
            return Access(tier, read_s, 0.0, 0.0)  # too big to cache: streamed
        evicted = 0.0
        while self.used[node] + size > self.capacity[node] and cache:
            old, old_size = cache.popitem(last=False)
            self.used[node] -= old_size
            self.holders[old].discard(node)
            evicted += old_size
        cache[key] = size
        self.used[node] += size
        self.holders.setdefault(key, set()).add(node)
        return Access(tier, read_s, evicted / s.evict_mib_s, evicted)


class LocalityNodePool(NodePool):
    """:class:`~placement.node_pool.NodePool` with data locality (module docstring)."""

    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        gangs: Sequence[Sequence[Pod]],
        policy: ScorePolicy,
        *,
        rank: np.ndarray,
        locality: LocalitySettings,
        typical: TypicalPods | None = None,
        fault_window_s: float = 86_400.0,
    ) -> None:
        super().__init__(
            nodes, gangs, policy, rank=rank, typical=typical, fault_window_s=fault_window_s
        )
        self.caches = DataCaches(self.cluster, locality)
        self.delay: dict[int, float] = {}
        self.accesses: list[Access] = []
        """Every access in order (the run's locality record)."""
        if wants_locality(policy):
            policy.observe_locality(self.caches)

    def try_start(self, job: int) -> bool:
        if not super().try_start(job):
            return False
        hook = getattr(self.policy, "observe_access", None)
        delay = 0.0
        for alloc in self.held[job]:
            access = self.caches.access(alloc.pod, alloc.node)
            self.accesses.append(access)
            delay = max(delay, access.latency_s)
            if hook is not None:
                hook(alloc.pod, alloc.node, access)
        self.delay[job] = delay
        return True

    def start_delay_s(self, job: int) -> float:
        """The job's data access latency at its latest start (the slowest of its pods)."""
        return self.delay.get(job, 0.0)

    def locality_summary(self) -> dict[str, float]:
        """Mean access latency and the share of accesses per tier."""
        if not self.accesses:
            return {"mean_access_s": 0.0, **{f"share_{t}": 0.0 for t in TIERS}}
        tiers = np.array([a.tier for a in self.accesses])
        out = {"mean_access_s": float(np.mean([a.latency_s for a in self.accesses]))}
        out.update({f"share_{t}": float(np.mean(tiers == i)) for i, t in enumerate(TIERS)})
        return out
