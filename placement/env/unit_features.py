"""What ``fault_aware`` sees: one feature row per GPU it could pick, and the job.

The document's state is ``(n, t, s)``: the GPUs the job needs, its error-free run time, and
the use state of every computing unit. One row per *unit* (GPU) instead of one input per
unit keeps the encoding independent of the cluster's size: a shared network scores every
row, so the agent trained on 16-node clusters runs on openb's 6,212 GPUs unchanged. A row
says what a placement needs to know about that GPU and its node:

* the unit: its free share, whether it is idle, its recent failures (the fault history a
  fault-aware scheduler sees: ``placement.node_pool`` in the simulator, the node
  annotations in ``kale scheduler``) and whether it has any;
* its node: recent failures, share of its GPUs that failed recently or are down now, its
  GPU count, and what the job would leave free there (GPU share, idle GPUs, CPU share);
* the pick in progress: how many of the job's GPUs are already on this node (a job of n
  GPUs is placed one unit at a time, all on one node as a pod's GPUs must be).

The job row (shared by all unit rows): n/8, log run time (capped at a day), whether the run
time is known, sharing or whole GPUs, and the cluster's used, down and recently-failed GPU
shares.

Occupied and faulty units are never rows: a row exists only for a GPU with enough free milli
(a down GPU reads 0 free) on a node where the whole pod fits — the document's mask.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from placement.cluster import Cluster
from placement.pod import MILLI, Pod

UNIT_FEATURES: tuple[str, ...] = (
    "unit_free",
    "unit_idle",
    "unit_faults",
    "unit_faulted",
    "node_faults",
    "node_faulted_share",
    "node_down_share",
    "node_gpus",
    "node_gpu_left",
    "node_idle_left",
    "node_cpu_left",
    "node_picked",
)
JOB_FEATURES: tuple[str, ...] = (
    "units",
    "run_log",
    "run_known",
    "sharing",
    "cluster_used",
    "cluster_down",
    "cluster_faulted",
)
DEFAULT_RUN_S = 3600.0
"""Run time assumed when the pod carries none (a pod in ``kale scheduler``)."""
RUN_LOG_CAP = math.log1p(24.0)
"""Run times say "a day or more" beyond this (log hours): training batches clip runs at a
day, so longer jobs read like the longest it saw instead of leaving its input range."""


@dataclass(frozen=True)
class UnitRows:
    """The candidate units of one pick: features and where each unit is."""

    rows: np.ndarray
    """``[U, len(UNIT_FEATURES)]`` float32."""
    job: np.ndarray
    """``[len(JOB_FEATURES)]`` float32."""
    node: np.ndarray
    """Node index of each row."""
    gpu: np.ndarray
    """GPU index (on its node) of each row."""


def run_estimate_s(pod: Pod) -> float | None:
    """The pod's error-free run time if it carries one (deletion − scheduled)."""
    if pod.deletion_time is None or pod.scheduled_time is None:
        return None
    return max(float(pod.deletion_time - pod.scheduled_time), 0.0)


def job_row(pod: Pod, cluster: Cluster, gpu_faults: np.ndarray | None) -> np.ndarray:
    """The job features of ``pod`` on ``cluster``."""
    run = run_estimate_s(pod)
    total = max(int(cluster.gpu_count.sum()), 1)
    faulted = int((gpu_faults > 0).sum()) if gpu_faults is not None else 0
    return np.array(
        [
            pod.num_gpu * pod.gpu_milli / MILLI / 8.0,
            min(math.log1p((run if run is not None else DEFAULT_RUN_S) / 3600.0), RUN_LOG_CAP)
            / RUN_LOG_CAP,
            float(run is not None),
            float(pod.is_sharing),
            cluster.allocated_gpu_milli / max(cluster.total_gpu_milli, 1),
            float(cluster.gpu_down.sum()) / total,
            faulted / total,
        ],
        np.float32,
    )


def unit_rows(
    pod: Pod,
    cluster: Cluster,
    nodes: np.ndarray,
    *,
    gpu_faults: np.ndarray | None = None,
    picked: tuple[int, ...] = (),
) -> UnitRows:
    """Rows of every unit ``pod`` may take on ``nodes`` (feasible nodes), minus ``picked``
    GPUs (already chosen for this pod; then ``nodes`` is the one node they are on)."""
    nodes = np.asarray(nodes, np.int64)
    m = pod.gpu_milli if pod.is_sharing else MILLI
    free = cluster.gpu_free[nodes]
    ok = (free >= m) & cluster.gpu_exists[nodes]
    if picked:
        ok[:, list(picked)] = False
    ni, gi = np.nonzero(ok)
    node = nodes[ni]
    count = cluster.gpu_count[node].astype(np.float32)
    width = cluster.gpu_free.shape[1]
    faults = (
        gpu_faults[nodes, :width]
        if gpu_faults is not None and gpu_faults.shape[0] == len(cluster)
        else np.zeros((len(nodes), width), np.int64)
    )
    if faults.shape[1] < width:
        faults = np.pad(faults, ((0, 0), (0, width - faults.shape[1])))
    unit_f = faults[ni, gi].astype(np.float32)
    node_f = faults.sum(axis=1).astype(np.float32)[ni]
    node_faulted = (faults > 0).sum(axis=1).astype(np.float32)[ni]
    down = cluster.gpu_down[node].sum(axis=1).astype(np.float32)
    rest = pod.num_gpu - len(picked)  # GPUs still to place, this one included
    gpu_left = (cluster.gpu_free_total[node] - rest * pod.gpu_milli).astype(np.float32)
    idle = (cluster.gpu_free[node] == MILLI).sum(axis=1).astype(np.float32)
    idle_left = idle - (0 if pod.is_sharing else rest)
    cpu_left = (cluster.cpu_free[node] - (0 if picked else pod.cpu_milli)).astype(np.float32)
    unit_free = free[ni, gi].astype(np.float32) / MILLI
    rows = np.stack(
        [
            unit_free,
            (unit_free >= 1.0).astype(np.float32),
            np.log1p(unit_f),
            (unit_f > 0).astype(np.float32),
            np.log1p(node_f),
            node_faulted / count,
            down / count,
            count / 8.0,
            gpu_left / (count * MILLI),
            idle_left / count,
            cpu_left / np.maximum(cluster.cpu_capacity[node], 1).astype(np.float32),
            np.full(len(ni), len(picked) / max(pod.num_gpu, 1), np.float32),
        ],
        axis=1,
    ).astype(np.float32)
    return UnitRows(rows, job_row(pod, cluster, gpu_faults), node, gi.astype(np.int64))
