"""Where the simulated job's workers land: replay a size series on a placement cluster.

``kale simulate --placement POLICY`` shows both of Kale's decisions on one trace: the
autoscaling policy decides *how many* workers per step (the simulator), and here the
placement policy decides *where* each new worker goes — the same ``placement`` cycle that
``kale scheduler`` runs. The job shares a seeded cluster of the openb trace's shape with
other work (placed first, by the same policy, up to ``background`` of the GPU capacity);
a scale-up places the new workers one by one (a worker that fits nowhere stays pending and
is retried every step: ``pending_worker_steps`` sums them), a scale-down releases the
highest-index workers, as a StatefulSet does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from placement.cluster import Allocation, Cluster
from placement.frag import cluster_fragmentation, typical_pods
from placement.placer import place, tie_order
from placement.pod import MILLI, Pod
from placement.policies import PolicyContext, make_policy
from placement.workloads.generate import generate_nodes, generate_pods


@dataclass(frozen=True)
class PlacementSettings:
    """The cluster the job shares (defaults: small and quick)."""

    policy: str = "fgd"
    nodes: int = 64
    background: float = 0.6
    """Share of the GPU capacity other pods hold before the job starts."""
    seed: int = 0
    worker_cpu_milli: int = 4000
    worker_memory_mib: int = 16384


def replay_workers(
    workers: np.ndarray, gpus_per_worker: int, settings: PlacementSettings
) -> dict[str, Any]:
    """Place the workers of each step; JSON-ready counts of where they went."""
    nodes = generate_nodes(settings.nodes, seed=settings.seed)
    cluster = Cluster(nodes)
    others = generate_pods(4 * settings.nodes * 8, seed=settings.seed + 1)
    worker = Pod(
        "worker",
        settings.worker_cpu_milli,
        settings.worker_memory_mib,
        gpus_per_worker,
        MILLI if gpus_per_worker else 0,
    )
    typical = typical_pods([*others, worker])
    rng = np.random.default_rng(settings.seed)
    rank = tie_order(len(cluster), rng)
    scorer = make_policy(settings.policy, PolicyContext(rng=rng, typical=typical))
    target = settings.background * cluster.total_gpu_milli
    for pod in others:
        if cluster.allocated_gpu_milli + pod.total_gpu_milli > target:
            break
        place(pod, cluster, scorer, rank=rank)
    background_share = cluster.allocated_gpu_milli / cluster.total_gpu_milli

    held: list[Allocation] = []
    pending = 0
    nodes_used: list[int] = []
    sizes = np.asarray(workers, dtype=int)
    resizes = int(np.count_nonzero(np.diff(sizes))) if sizes.size else 0
    for want in sizes:
        while len(held) > want:
            cluster.release(held.pop())
        while len(held) < want:
            alloc = place(worker.clone(f"worker-{len(held)}"), cluster, scorer, rank=rank)
            if alloc is None:
                break
            held.append(alloc)
        pending += int(want) - len(held)
        nodes_used.append(len({a.node for a in held}))
    _, frag_share = cluster_fragmentation(cluster, typical)
    return {
        "policy": settings.policy,
        "nodes": settings.nodes,
        "background_gpu_share": round(background_share, 4),
        "resizes": resizes,
        "pending_worker_steps": pending,
        "mean_nodes_used": round(float(np.mean(nodes_used)), 2) if nodes_used else 0.0,
        "max_nodes_used": max(nodes_used, default=0),
        "final_gpu_allocation_share": round(
            cluster.allocated_gpu_milli / cluster.total_gpu_milli, 4
        ),
        "final_fragmentation_share_of_free": round(frag_share, 4),
    }
