"""A GPU cluster as the timed simulator's resource pool, placed by a node policy.

This is where the queue level meets the node level: the timed simulator asks "can job j
start now?", and :class:`NodePool` answers by running the node policy's scheduling cycle
(:func:`placement.placer.place`: filter, score, seeded tie-break, GPU choice) for each pod of
the job. A job is a *gang* of one or more pods placed all-or-nothing: if one member fits
nowhere, the members already placed are released and the job stays queued. Units are the
individual GPUs (what fails); a failed GPU is taken out of service through the cluster's
own ``disable_gpu``. A fault-aware policy (``fault-bestfit``, ``agent:`` fault_aware) sees
what the Kubernetes scheduler would show it: every GPU's and node's failures within
``fault_window_s`` before now (a unit counts when it goes down, or when the simulator reports
a failure from before the run through :meth:`NodePool.note_fault`; the clock arrives through
:meth:`NodePool.note_time`), handed over before each placement.

openb pods become jobs by :func:`openb_jobs`: arrival = creation time, run = deletion −
scheduled time, estimate = the run time (the trace has no user estimates; like Lublin's
logs, the schedulers see exact ones), size = GPUs (k · m / 1000; 0 for CPU-only pods). Pods
the real cluster never scheduled (``Pending``: no scheduled time) never ran, have no run
time, and are left out (counted).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from placement.cluster import Allocation, Cluster, NodeSpec, default_gpus
from placement.frag import TypicalPods, frag_model
from placement.placer import place
from placement.pod import MILLI, Pod
from placement.policies.base import ScorePolicy
from placement.policies.capabilities import FaultAware
from placement.workloads.batch import BatchJobs


class NodePool:
    """Gangs of pods on GPU nodes (see the module docstring)."""

    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        gangs: Sequence[Sequence[Pod]],
        policy: ScorePolicy,
        *,
        rank: np.ndarray,
        typical: TypicalPods | None = None,
        fault_window_s: float = 86_400.0,
    ) -> None:
        self.cluster = Cluster(nodes)
        self.empty = Cluster(nodes)
        self.gangs = [tuple(g) for g in gangs]
        self.policy, self.rank, self.typical = policy, rank, typical
        self.held: dict[int, list[Allocation]] = {}
        # per running job: (node, cpu, memory) per pod and (node, gpu, milli) per GPU held
        self.footprint: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.offset = np.concatenate([[0], np.cumsum(self.cluster.gpu_count)])
        counts = self.cluster.gpu_count.tolist()
        self.unit_names = [
            (name, g) for name, count in zip(self.cluster.names, counts, strict=True)
            for g in range(count)
        ]  # fmt: skip
        self.unit_node = np.repeat(np.arange(len(self.cluster)), self.cluster.gpu_count)
        self.holders: dict[int, set[int]] = {}
        self.gpu_milli = np.array([sum(p.total_gpu_milli for p in g) for g in self.gangs], float)
        self.cpu_milli = np.array([sum(p.cpu_milli for p in g) for g in self.gangs], float)
        self._ever: dict[object, bool] = {}
        self._frag_model = frag_model(self.cluster, typical) if typical is not None else None
        self._version = 0  # bumped on every change; usage and fragmentation are cached on it
        self._cached: dict[str, tuple[int, object]] = {}
        self.unit_failures = np.zeros(len(self.unit_node), np.int64)
        """Failures of each unit within the window (what fault-aware policies see)."""
        self.fault_window_s = fault_window_s
        self.fault_log: deque[tuple[float, int]] = deque()
        self._now = 0.0
        self._fault_policy = policy if isinstance(policy, FaultAware) else None
        self._fault_version = 0
        self._faults_seen = -1  # the version the policy last saw

    # --- fault history (fault-aware policies) --------------------------------------------
    def note_fault(self, unit: int, time_s: float) -> None:
        """``unit`` failed at ``time_s`` (the simulator's history from before the run)."""
        self.fault_log.append((time_s, unit))
        self.unit_failures[unit] += 1
        self._fault_version += 1

    def note_time(self, now: float) -> None:
        """The clock moved on: failures older than the window are forgotten."""
        self._now = now
        while self.fault_log and self.fault_log[0][0] < now - self.fault_window_s:
            self.unit_failures[self.fault_log.popleft()[1]] -= 1
            self._fault_version += 1

    def fault_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """``(node_faults[N], gpu_faults[N, G])`` within the window, in the cluster's order."""
        c = self.cluster
        gpu_faults = np.zeros((len(c), max(c.max_gpus, 1)), np.int64)
        gpu_index = np.arange(len(self.unit_node)) - self.offset[self.unit_node]
        gpu_faults[self.unit_node, gpu_index] = self.unit_failures
        return gpu_faults.sum(axis=1), gpu_faults

    def _show_faults(self, policy: FaultAware) -> None:
        """Hand the failure counts to the fault-aware policy when they changed."""
        if self._fault_version == self._faults_seen:
            return
        self._faults_seen = self._fault_version
        policy.observe_faults(*self.fault_counts())

    # --- the ResourcePool interface ------------------------------------------------------
    def fit_mask(self, jobs: np.ndarray) -> np.ndarray:
        c = self.cluster
        mask: np.ndarray = (self.gpu_milli[jobs] <= c.gpu_free_total.sum()) & (
            self.cpu_milli[jobs] <= c.cpu_free.sum()
        )
        return mask

    def try_start(self, job: int) -> bool:
        if self._fault_policy is not None and self._fault_policy.uses_faults:
            self._show_faults(self._fault_policy)
        placed: list[Allocation] = []
        for pod in self.gangs[job]:
            alloc = place(pod, self.cluster, self.policy, rank=self.rank)
            if alloc is None:
                for done in placed:
                    self.cluster.release(done)
                return False
            placed.append(alloc)
        self.held[job] = placed
        self.footprint[job] = (
            np.array([(a.node, a.pod.cpu_milli, a.pod.memory_mib) for a in placed], np.int64),
            np.array(
                [(a.node, g, a.pod.gpu_milli) for a in placed for g in a.gpus], np.int64
            ).reshape(-1, 3),
        )
        self._version += 1
        for unit in self.units_of(job).tolist():
            self.holders.setdefault(unit, set()).add(job)
        return True

    def stop(self, job: int) -> None:
        for unit in self.units_of(job).tolist():
            self.holders[unit].discard(job)
        for alloc in self.held.pop(job):
            self.cluster.release(alloc)
        del self.footprint[job]
        self._version += 1

    def could_start_after(self, job: int, released: Sequence[int]) -> bool:
        pods, gpus = self._footprints(released)
        return self._fits_with(job, pods, gpus)

    def fits_after_prefix(self, job: int, ordered: Sequence[int]) -> int | None:
        pods, gpus = self._footprints(ordered)
        pod_end = np.cumsum([len(self.footprint[j][0]) for j in ordered])
        gpu_end = np.cumsum([len(self.footprint[j][1]) for j in ordered])
        if not self._fits_with(job, pods, gpus):
            return None
        lo, hi = 1, len(ordered)
        while lo < hi:  # the smallest prefix that frees enough (fitting is monotone)
            mid = (lo + hi) // 2
            if self._fits_with(job, pods[: pod_end[mid - 1]], gpus[: gpu_end[mid - 1]]):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _footprints(self, jobs: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        if not len(jobs):
            return np.zeros((0, 3), np.int64), np.zeros((0, 3), np.int64)
        pods = np.concatenate([self.footprint[j][0] for j in jobs])
        return pods, np.concatenate([self.footprint[j][1] for j in jobs])

    def _fits_with(self, job: int, pods: np.ndarray, gpus: np.ndarray) -> bool:
        """Whether ``job`` fits once the given footprints are free again. The what-if adds
        them to a private copy's free arrays in one vectorised pass (releasing thousands of
        allocations one by one made EASY's reservation dominate a run); only feasibility is
        asked of the copy."""
        what_if = self.cluster.copy()
        np.add.at(what_if.cpu_free, pods[:, 0], pods[:, 1])
        np.add.at(what_if.mem_free, pods[:, 0], pods[:, 2])
        np.add.at(what_if.pod_count, pods[:, 0], -1)
        np.add.at(what_if.gpu_free, (gpus[:, 0], gpus[:, 1]), gpus[:, 2])
        np.add.at(what_if.gpu_free_total, gpus[:, 0], gpus[:, 2])
        return _gang_fits(what_if, self.gangs[job])

    def kind(self, job: int) -> object:
        """Jobs of equal kind ask for exactly the same resources."""
        return tuple(_request(p) for p in self.gangs[job])

    def ever_fits(self, job: int) -> bool:
        key = self.kind(job)  # equal requests, equal answers
        if key not in self._ever:
            self._ever[key] = _gang_fits(self.empty.copy(), self.gangs[job])
        return self._ever[key]

    def units_of(self, job: int) -> np.ndarray:
        units = [int(self.offset[a.node]) + g for a in self.held[job] for g in a.gpus]
        return np.asarray(units, dtype=np.int64)

    def jobs_on(self, unit: int) -> list[int]:
        return sorted(self.holders.get(unit, ()))

    def set_down(self, unit: int, down: bool) -> None:
        node = int(self.unit_node[unit])
        gpu = unit - int(self.offset[node])
        if down:
            self.cluster.disable_gpu(node, gpu)
            self.note_fault(unit, self._now)
        else:
            self.cluster.enable_gpu(node, gpu)
        self._version += 1

    def usage(self) -> dict[str, float]:
        hit = self._cached.get("usage")
        if hit is not None and hit[0] == self._version:
            return hit[1]  # type: ignore[return-value]
        c = self.cluster
        gpu = c.allocated_gpu_milli / c.total_gpu_milli if c.total_gpu_milli else 0.0
        cpu = 1.0 - float(c.cpu_free.sum()) / c.total_cpu_milli if c.total_cpu_milli else 0.0
        value = {"gpu": gpu, "cpu": cpu}
        self._cached["usage"] = (self._version, value)
        return value

    def fragmentation(self) -> float | None:
        """Fragmented share of the free GPU milli against the typical pods (FGD's measure,
        as :func:`placement.frag.cluster_fragmentation` computes it)."""
        if self._frag_model is None:
            return None
        hit = self._cached.get("frag")
        if hit is not None and hit[0] == self._version:
            return hit[1]  # type: ignore[return-value]
        free = float(self.cluster.gpu_free_total.sum())
        value = float(self._frag_model.node_frag().sum()) / free if free > 0 else 0.0
        self._cached["frag"] = (self._version, value)
        return value


def _request(pod: Pod) -> tuple[object, ...]:
    return (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli, pod.gpu_models)


def _gang_fits(cluster: Cluster, gang: Sequence[Pod]) -> bool:
    """Whether every pod of ``gang`` fits ``cluster`` together (placed first-feasible on it;
    exact for one pod, a fair what-if for gangs). Mutates ``cluster``: pass a copy."""
    for pod in gang:
        nodes = np.flatnonzero(cluster.feasible(pod))
        if nodes.size == 0:
            return False
        node = int(nodes[0])
        cluster.allocate(pod, node, default_gpus(cluster, pod, node))
    return True


def openb_jobs(pods: Sequence[Pod]) -> tuple[BatchJobs, list[Pod], int]:
    """(jobs, the pod of each job, pods left out) for a timed run of an openb pod list."""
    kept: list[Pod] = []
    submit: list[float] = []
    runs: list[float] = []
    for p in pods:
        if p.creation_time is None or p.scheduled_time is None or p.deletion_time is None:
            continue
        kept.append(p)
        submit.append(p.creation_time)
        runs.append(max(p.deletion_time - p.scheduled_time, 0.0))
    run = np.array(runs, np.float64)
    jobs = BatchJobs(
        job_id=np.arange(len(kept), dtype=np.int64),
        submit_s=np.array(submit, np.float64),
        run_s=run,
        estimate_s=run.copy(),
        size=np.array([p.total_gpu_milli / MILLI for p in kept], np.float64),
        dropped=len(pods) - len(kept),
    )
    return jobs, kept, len(pods) - len(kept)
