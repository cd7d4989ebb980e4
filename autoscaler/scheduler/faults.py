"""GPU fault history per node and GPU over a sliding window, for fault-aware policies.

Sources, all read from the Node object the scheduler already watches (no extra requests):
the ``kale.dev/gpu-faults`` annotation — a JSON list of ``{"gpu": 3, "time": "…Z",
"reason": "Xid 79"}`` records that a node agent (an NVIDIA DCGM / node-problem-detector
exporter, say) appends to — and node conditions named in ``Conventions.fault_conditions``
while they are ``True`` (a node-wide fault, ``gpu`` = None).

A policy sees counts, not records: ``per_gpu[node][g]`` faults of GPU ``g`` and
``per_node[node]`` faults of any kind within ``window_s`` before ``now``. Records leave the
window with time alone, so the scheduler re-reads the counts whenever it asks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autoscaler.scheduler.view import ClusterView


@dataclass(frozen=True)
class FaultCounts:
    """Recent faults: per node (any kind) and per GPU; nodes without faults are absent."""

    window_s: float
    per_node: dict[str, int] = field(default_factory=dict)
    per_gpu: dict[str, dict[int, int]] = field(default_factory=dict)

    def node(self, name: str) -> int:
        return self.per_node.get(name, 0)

    def gpu(self, name: str, index: int) -> int:
        return self.per_gpu.get(name, {}).get(index, 0)


def count_faults(view: ClusterView, *, now: float, window_s: float) -> FaultCounts:
    """Faults within ``window_s`` before ``now`` on every node of ``view``."""
    per_node: dict[str, int] = {}
    per_gpu: dict[str, dict[int, int]] = {}
    since = now - window_s
    for name, state in view.nodes.items():
        recent = [f for f in state.info.faults if since <= f.time <= now]
        if not recent:
            continue
        per_node[name] = len(recent)
        for f in recent:
            if f.gpu is not None:
                gpus = per_gpu.setdefault(name, {})
                gpus[f.gpu] = gpus.get(f.gpu, 0) + 1
    return FaultCounts(window_s, per_node, per_gpu)


def next_expiry(view: ClusterView, *, now: float, window_s: float) -> float | None:
    """When the next recent fault leaves the window (a node may become attractive again)."""
    times = [
        f.time + window_s
        for state in view.nodes.values()
        for f in state.info.faults
        if f.time + window_s > now
    ]
    return min(times, default=None)
