"""Fault-aware placement: a policy that also reads each node's and GPU's recent fault count.

A GPU that failed recently (an Xid error, a node condition) is likelier to fail again, and a
distributed job loses every worker's progress since its last checkpoint when one of its GPUs dies.
The learned ``fault_aware`` agent (``placement.agents``) learns to avoid such units;
``fault-bestfit`` is the heuristic a user would pick: nodes with fewer recent faults first, BestFit
among equals (the penalty per fault exceeds BestFit's whole range, so a node with a recent fault is
used only when no node with fewer faults fits), and on the chosen node the GPUs with the fewest
recent faults.

The capability is explicit: a policy with ``uses_faults = True`` gets ``observe_faults``
before it scores (:class:`~placement.policies.capabilities.FaultAware`); the simulator and
the Kubernetes scheduler feed it the same arrays. Pure: no I/O, no clock; the counts are an input.
"""

from __future__ import annotations

import numpy as np

from placement.cluster import Cluster
from placement.pod import MILLI, Pod
from placement.policies.base import MAX_SCORE, PolicyContext
from placement.policies.simple import BestFitPolicy

FAULT_PENALTY = MAX_SCORE + 1
"""Score points lost per recent node fault: more than BestFit's range (0–100), so fewer
faults always win and BestFit only orders nodes with as many faults."""
FAULT_CAP = 10
"""Faults beyond this many cost no more (a broken node is already last)."""


class FaultAwareBestFitPolicy(BestFitPolicy):
    """BestFit, penalised by recent faults; fault-free GPUs first on the chosen node."""

    name = "fault-bestfit"
    uses_faults = True

    def __init__(self, context: PolicyContext | None = None, *, penalty: int = FAULT_PENALTY):
        super().__init__(context)
        self.penalty = penalty
        self.node_faults: np.ndarray | None = None
        self.gpu_faults: np.ndarray | None = None

    def observe_faults(self, node_faults: np.ndarray, gpu_faults: np.ndarray) -> None:
        self.node_faults = np.asarray(node_faults, np.int64)
        self.gpu_faults = np.asarray(gpu_faults, np.int64)

    def score(self, pod: Pod, cluster: Cluster, nodes: np.ndarray) -> np.ndarray:
        base = super().score(pod, cluster, nodes)
        if self.node_faults is None or self.node_faults.shape[0] != len(cluster):
            return base
        penalised: np.ndarray = base - self.penalty * np.minimum(self.node_faults[nodes], FAULT_CAP)
        return penalised

    def choose_gpus(self, pod: Pod, cluster: Cluster, node: int) -> tuple[int, ...]:
        if not pod.num_gpu:
            return ()
        free = cluster.gpu_free[node, : cluster.gpu_count[node]]
        faults = np.zeros(free.shape[0], np.int64)
        if self.gpu_faults is not None and self.gpu_faults.shape[0] == len(cluster):
            faults = self.gpu_faults[node, : free.shape[0]]
        if pod.is_sharing:
            fitting = np.flatnonzero(free >= pod.gpu_milli)
            if fitting.size == 0:
                return ()
            # fewest faults, then the tightest fit, then the lowest index
            order = np.lexsort((fitting, free[fitting], faults[fitting]))
            return (int(fitting[order[0]]),)
        idle = np.flatnonzero(free == MILLI)
        if idle.size < pod.num_gpu:
            return ()
        order = np.lexsort((idle, faults[idle]))
        return tuple(sorted(int(g) for g in idle[order[: pod.num_gpu]]))
