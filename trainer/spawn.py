"""What the supervisor hands a child process (torch-free).

Why this module exists: the supervisor pickles a :class:`NodeConfig` to the forkserver and
the child (:mod:`trainer.node`) reads it; were it in :mod:`trainer.node`, the supervisor would
have to import torch just to name it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class NodeConfig:
    """Everything one child process needs (picklable; sent through the forkserver)."""

    role: str
    """Either ``ps`` or ``worker``."""
    index: int
    """Index within the role (PS 0..p-1, worker 0..w-1)."""
    ps: int
    workers: int
    port: int
    """TCP port of the gloo rendezvous (the store runs in PS 0)."""
    mode: str
    batch: int
    """Samples per step of this worker (sync: its share of the global batch)."""
    spec: dict[str, Any]
    bootstrap: str
    security: Any
    """The job's Kafka SASL/TLS (:class:`autoscaler.kafka.security.KafkaSecurity`) or None."""
    topic: str
    group: str
    shard_path: str
    """Where a PS writes its shard on exit."""
    plan: dict[int, str] = field(default_factory=dict)
    """Block index -> shard file to restore it from (empty: fresh parameters)."""
    batch_wait_s: float = 0.25
    session_timeout_ms: int = 6_000
    heartbeat_interval_ms: int = 2_000
    check_crcs: bool = False
    gloo_timeout_s: float = 120.0
    device: str = "auto"
    generation: int = 0

    @property
    def rank(self) -> int:
        return self.index if self.role == "ps" else self.ps + self.index

    @property
    def world(self) -> int:
        return self.ps + self.workers
