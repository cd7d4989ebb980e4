"""What a pod asks for: CPU, memory, and either nothing, a share of one GPU, or whole GPUs.

The GPU request follows the openb trace and its authors' simulator: ``num_gpu`` GPUs with
``gpu_milli`` milli-GPU *on each* (1000 = a whole GPU). A pod with ``num_gpu == 1`` and
``gpu_milli < 1000`` *shares* one GPU with other pods; any other GPU pod takes ``num_gpu``
whole GPUs. ``gpu_models`` restricts the GPU models it may run on (the trace's ``gpu_spec``,
``"V100M16|V100M32"``); empty means any model. A CPU-only pod has no model constraint (the
trace drops ``gpu_spec`` for it, and the simulator's GPU filter ignores it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

MILLI = 1000
"""Milli-units in one GPU (and in one CPU core)."""


@dataclass(frozen=True, slots=True)
class Pod:
    """One pod's resource request (immutable; clones get their own name)."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int = 0
    gpu_milli: int = 0
    """Milli-GPU per requested GPU: 1..999 for a sharing pod, 1000 for whole GPUs."""
    gpu_models: frozenset[str] = field(default_factory=frozenset)
    """Allowed GPU models; empty = any."""
    creation_time: float | None = None
    deletion_time: float | None = None
    scheduled_time: float | None = None

    def __post_init__(self) -> None:
        if self.cpu_milli < 0 or self.memory_mib < 0:
            raise ValueError(f"pod {self.name}: negative cpu or memory request")
        if self.num_gpu < 0:
            raise ValueError(f"pod {self.name}: negative num_gpu")
        if self.num_gpu == 0 and self.gpu_milli != 0:
            raise ValueError(f"pod {self.name}: gpu_milli without num_gpu")
        if self.num_gpu > 0 and not 0 < self.gpu_milli <= MILLI:
            raise ValueError(f"pod {self.name}: gpu_milli must be 1..{MILLI} when num_gpu > 0")
        if self.num_gpu > 1 and self.gpu_milli != MILLI:
            raise ValueError(f"pod {self.name}: a multi-GPU pod must take whole GPUs")

    @property
    def is_gpu(self) -> bool:
        return self.num_gpu > 0

    @property
    def is_sharing(self) -> bool:
        """Shares one GPU (k=1, m<1000)."""
        return self.num_gpu == 1 and self.gpu_milli < MILLI

    @property
    def total_gpu_milli(self) -> int:
        """m·k: what the pod adds to the cluster's allocated GPU milli."""
        return self.num_gpu * self.gpu_milli

    @property
    def affinity(self) -> int:
        """GpuClustering's pod kind: -1 CPU-only, 0 sharing, k for k whole GPUs."""
        if self.num_gpu == 0:
            return -1
        return 0 if self.is_sharing else self.num_gpu

    def clone(self, name: str) -> Pod:
        """The same request under another name (inflation clones)."""
        return Pod(
            name,
            self.cpu_milli,
            self.memory_mib,
            self.num_gpu,
            self.gpu_milli,
            self.gpu_models,
            self.creation_time,
            self.deletion_time,
            self.scheduled_time,
        )
