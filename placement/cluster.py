"""The GPU cluster: static node specs plus numpy state arrays over all nodes.

API overview (everything the simulators, policies, agents and the Kubernetes scheduler use):

* :class:`NodeSpec` — one node: ``cpu_milli``, ``memory_mib``, ``gpus`` (each 1000 milli),
  GPU ``model`` and ``pod_limit``.
* :class:`Cluster` — built from ``NodeSpec``\\ s. Read-only state arrays, one row per node
  (index ``i`` is ``cluster.names[i]``)::

      cpu_free[N], mem_free[N], pod_count[N]       int64
      gpu_free[N, G]  free milli per GPU; a missing or failed GPU reads 0
      gpu_free_total[N]                            the row sums of gpu_free
      affinity_count[N, G+1]  GPU pods per kind (0 sharing, k = k whole GPUs)
      node_version[N]  bumped on every change of that node (memo key for costly scores)

  ``feasible(pod)`` is the vectorised filter (a boolean mask over nodes);
  ``allocate(pod, node, gpus)`` binds a pod to exactly those GPUs and returns an
  :class:`Allocation`; ``release(allocation)`` gives it all back; ``disable_gpu`` /
  ``enable_gpu`` take a (fully free) GPU out of service and back (faults).
* Free functions :func:`tightest_gpu` and :func:`free_gpus` are the default GPU choices.

The arrays are views into the live state: read them, never write them (use ``allocate`` /
``release``), and ``copy()`` for a what-if. Nothing here does I/O or draws random numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from placement.errors import PlacementError
from placement.pod import MILLI, Pod

DEFAULT_POD_LIMIT = 1001
"""Pods a node may hold (a node with this many is full); the trace's nodes never bind on it."""


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node's capacity."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int = 0
    model: str = ""
    """GPU model of all its GPUs; "" for a CPU-only node."""
    pod_limit: int = DEFAULT_POD_LIMIT

    def __post_init__(self) -> None:
        if self.cpu_milli < 0 or self.memory_mib < 0 or self.gpus < 0:
            raise ValueError(f"node {self.name}: negative capacity")
        if self.pod_limit < 0:
            raise ValueError(f"node {self.name}: negative pod limit")


@dataclass(frozen=True, slots=True)
class Allocation:
    """A pod bound to a node and to exactly these GPUs (each holding ``gpu_milli``)."""

    id: int
    pod: Pod
    node: int
    gpus: tuple[int, ...]

    @property
    def gpu_milli(self) -> int:
        return self.pod.gpu_milli if self.gpus else 0


class Cluster:
    """Mutable placement state over a fixed set of nodes (see the module docstring)."""

    def __init__(self, nodes: Sequence[NodeSpec]) -> None:
        if not nodes:
            raise ValueError("a cluster needs at least one node")
        self.specs: tuple[NodeSpec, ...] = tuple(nodes)
        n = len(self.specs)
        self.names: tuple[str, ...] = tuple(s.name for s in self.specs)
        self.models: tuple[str, ...] = tuple(sorted({s.model for s in self.specs if s.model}))
        model_index = {m: i for i, m in enumerate(self.models)}
        self.model_id = np.array([model_index.get(s.model, -1) for s in self.specs], np.int64)
        self.cpu_capacity = np.array([s.cpu_milli for s in self.specs], np.int64)
        self.mem_capacity = np.array([s.memory_mib for s in self.specs], np.int64)
        self.gpu_count = np.array([s.gpus for s in self.specs], np.int64)
        self.pod_limit = np.array([s.pod_limit for s in self.specs], np.int64)
        self.max_gpus = int(self.gpu_count.max()) if n else 0
        g = max(self.max_gpus, 1)
        self.gpu_exists = np.arange(g)[None, :] < self.gpu_count[:, None]
        self.total_gpu_milli = int(self.gpu_count.sum()) * MILLI
        self.total_cpu_milli = int(self.cpu_capacity.sum())

        self.cpu_free = self.cpu_capacity.copy()
        self.mem_free = self.mem_capacity.copy()
        self.pod_count = np.zeros(n, np.int64)
        self.gpu_free = np.where(self.gpu_exists, MILLI, 0).astype(np.int64)
        self.gpu_free_total = self.gpu_free.sum(axis=1)
        self.gpu_down = np.zeros_like(self.gpu_exists)
        self.affinity_count = np.zeros((n, g + 1), np.int64)
        self.node_version = np.zeros(n, np.int64)
        self._allocations: dict[int, Allocation] = {}
        self._next_id = 0
        self._model_masks: dict[frozenset[str], np.ndarray] = {}

    # -- read-only queries -------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.specs)

    @property
    def allocated_gpu_milli(self) -> int:
        """GPU milli held by pods (failed GPUs are not counted as allocated)."""
        up = self.gpu_exists & ~self.gpu_down
        return int(np.where(up, MILLI - self.gpu_free, 0).sum())

    @property
    def allocations(self) -> tuple[Allocation, ...]:
        return tuple(self._allocations.values())

    def model_mask(self, models: frozenset[str]) -> np.ndarray:
        """Nodes whose GPU model is in ``models`` (all nodes when ``models`` is empty)."""
        mask = self._model_masks.get(models)
        if mask is None:
            if models:
                ids = [i for i, m in enumerate(self.models) if m in models]
                mask = np.isin(self.model_id, ids) if ids else np.zeros(len(self), bool)
            else:
                mask = np.ones(len(self), bool)
            mask.setflags(write=False)
            self._model_masks[models] = mask
        return mask

    def feasible(self, pod: Pod) -> np.ndarray:
        """Boolean mask of nodes that can host ``pod`` now.

        Enough free CPU and memory, fewer pods than the node's limit, and for a GPU pod an
        allowed model and at least ``num_gpu`` GPUs each with ``gpu_milli`` free.
        """
        mask = (
            (self.cpu_free >= pod.cpu_milli)
            & (self.mem_free >= pod.memory_mib)
            & (self.pod_count < self.pod_limit)
        )
        if pod.num_gpu:
            mask &= self.model_mask(pod.gpu_models)
            fitting = (self.gpu_free >= pod.gpu_milli).sum(axis=1)
            mask &= fitting >= pod.num_gpu
        return mask

    def fits(self, pod: Pod, node: int) -> bool:
        """``feasible(pod)[node]`` for one node, without touching the others."""
        if (
            self.cpu_free[node] < pod.cpu_milli
            or self.mem_free[node] < pod.memory_mib
            or self.pod_count[node] >= self.pod_limit[node]
        ):
            return False
        if not pod.num_gpu:
            return True
        if pod.gpu_models and not self.model_mask(pod.gpu_models)[node]:
            return False
        return int((self.gpu_free[node] >= pod.gpu_milli).sum()) >= pod.num_gpu

    # -- mutation ----------------------------------------------------------------------
    def allocate(self, pod: Pod, node: int, gpus: Sequence[int] = ()) -> Allocation:
        """Bind ``pod`` to ``node`` holding ``gpu_milli`` on each GPU in ``gpus``.

        Raises :class:`PlacementError` (and changes nothing) when the pod does not fit
        there or ``gpus`` is not ``num_gpu`` distinct GPUs with enough free milli.
        """
        gpus = tuple(int(g) for g in gpus)
        if not self.fits(pod, node):
            raise PlacementError(f"pod {pod.name} does not fit on node {self.names[node]}")
        if len(gpus) != pod.num_gpu or len(set(gpus)) != len(gpus):
            raise PlacementError(f"pod {pod.name} needs {pod.num_gpu} distinct GPUs, got {gpus}")
        for g in gpus:
            if not 0 <= g < self.gpu_count[node] or self.gpu_free[node, g] < pod.gpu_milli:
                raise PlacementError(
                    f"pod {pod.name}: GPU {g} of node {self.names[node]} lacks "
                    f"{pod.gpu_milli} free milli"
                )
        self.cpu_free[node] -= pod.cpu_milli
        self.mem_free[node] -= pod.memory_mib
        self.pod_count[node] += 1
        for g in gpus:
            self.gpu_free[node, g] -= pod.gpu_milli
        self.gpu_free_total[node] -= pod.gpu_milli * len(gpus)
        if pod.affinity >= 0:
            self.affinity_count[node, pod.affinity] += 1
        self.node_version[node] += 1
        alloc = Allocation(self._next_id, pod, int(node), gpus)
        self._next_id += 1
        self._allocations[alloc.id] = alloc
        return alloc

    def release(self, alloc: Allocation) -> None:
        """Give back everything ``alloc`` holds (raises if it is not live here)."""
        if self._allocations.pop(alloc.id, None) is None:
            raise PlacementError(f"allocation {alloc.id} ({alloc.pod.name}) is not live")
        node, pod = alloc.node, alloc.pod
        self.cpu_free[node] += pod.cpu_milli
        self.mem_free[node] += pod.memory_mib
        self.pod_count[node] -= 1
        for g in alloc.gpus:
            self.gpu_free[node, g] += pod.gpu_milli
        self.gpu_free_total[node] += pod.gpu_milli * len(alloc.gpus)
        if pod.affinity >= 0:
            self.affinity_count[node, pod.affinity] -= 1
        self.node_version[node] += 1

    def allocations_on_gpu(self, node: int, gpu: int) -> list[Allocation]:
        """Live allocations holding part of GPU ``gpu`` of ``node`` (what a fault kills)."""
        return [a for a in self._allocations.values() if a.node == node and gpu in a.gpus]

    def disable_gpu(self, node: int, gpu: int) -> None:
        """Take a fully free GPU out of service: it reads 0 free until ``enable_gpu``.

        Release the allocations on it first (``allocations_on_gpu``).
        """
        if not 0 <= gpu < self.gpu_count[node]:
            raise PlacementError(f"node {self.names[node]} has no GPU {gpu}")
        if self.gpu_down[node, gpu]:
            return
        if self.gpu_free[node, gpu] != MILLI:
            raise PlacementError(f"GPU {gpu} of node {self.names[node]} still holds pods")
        self.gpu_down[node, gpu] = True
        self.gpu_free[node, gpu] = 0
        self.gpu_free_total[node] -= MILLI
        self.node_version[node] += 1

    def enable_gpu(self, node: int, gpu: int) -> None:
        """Return a repaired GPU to service (fully free)."""
        if not self.gpu_down[node, gpu]:
            return
        self.gpu_down[node, gpu] = False
        self.gpu_free[node, gpu] = MILLI
        self.gpu_free_total[node] += MILLI
        self.node_version[node] += 1

    def copy(self) -> Cluster:
        """An independent cluster in the same state (allocations keep their ids)."""
        other = Cluster.__new__(Cluster)
        other.__dict__.update(self.__dict__)
        for name in (
            "cpu_free",
            "mem_free",
            "pod_count",
            "gpu_free",
            "gpu_free_total",
            "gpu_down",
            "affinity_count",
            "node_version",
        ):
            setattr(other, name, getattr(self, name).copy())
        other._allocations = dict(self._allocations)
        other._model_masks = dict(self._model_masks)
        return other


def tightest_gpu(free: np.ndarray, milli: int) -> int:
    """Index of the GPU with the least free milli that still fits ``milli`` (lowest index on
    ties), or -1: where a sharing pod packs best."""
    fitting = np.flatnonzero(free >= milli)
    if fitting.size == 0:
        return -1
    return int(fitting[np.argmin(free[fitting])])


def free_gpus(free: np.ndarray, count: int) -> tuple[int, ...]:
    """The first ``count`` fully free GPUs in index order (whole-GPU pods), or ``()``."""
    idle = np.flatnonzero(free == MILLI)
    if idle.size < count:
        return ()
    return tuple(int(g) for g in idle[:count])


def default_gpus(cluster: Cluster, pod: Pod, node: int) -> tuple[int, ...]:
    """The usual GPU choice: a sharing pod on its tightest GPU, k whole GPUs first-free."""
    if not pod.num_gpu:
        return ()
    free = cluster.gpu_free[node]
    if pod.is_sharing:
        g = tightest_gpu(free, pod.gpu_milli)
        return () if g < 0 else (g,)
    return free_gpus(free, pod.num_gpu)
