"""A training job's settings and the shapes it can run: what ``kale train`` reads.

Why a module of its own: the CLI, the profiler and the supervisor all need the settings
and the shape check (PS count against parameter blocks, sync batch against workers), and
none of them should have to import the process supervisor to get them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from autoscaler.kafka.credentials import LocalSecrets, SecretMissing, security_for
from autoscaler.kafka.security import KafkaSecurity
from common.errors import UserError
from trainer.spec import ModelSpec

Mode = Literal["sync", "async"]


def batch_sizes(mode: Mode, global_batch: int, workers: int) -> list[int]:
    """Per-worker batch: sync splits M exactly (m = M/w, remainders to the first workers);
    async gives every worker its own batch of M samples."""
    if mode == "async":
        return [global_batch] * workers
    base, extra = divmod(global_batch, workers)
    return [base + (1 if j < extra else 0) for j in range(workers)]


def validate_shape(spec: ModelSpec, mode: Mode, global_batch: int, workers: int, ps: int) -> None:
    """Raise UserError for a configuration the trainer cannot run."""
    if workers < 1 or ps < 1:
        raise UserError(f"workers and ps must be at least 1, got workers={workers}, ps={ps}")
    if ps > spec.n_blocks:
        raise UserError(
            f"ps={ps} is more than the model's {spec.n_blocks} parameter blocks "
            f"({spec.fields} embedding tables + {spec.n_blocks - spec.fields} dense layers)"
        )
    if mode == "sync" and global_batch < workers:
        raise UserError(
            f"global batch {global_batch} is smaller than workers={workers}: in sync mode each "
            "worker needs at least one sample per step"
        )


@dataclass(frozen=True)
class TrainerConfig:
    """A job's training settings (what ``kale train`` reads from the job file and flags)."""

    bootstrap: str
    topic: str
    group: str
    mode: Mode
    global_batch: int
    checkpoint_dir: Path
    spec: ModelSpec = field(default_factory=ModelSpec)
    batch_wait_s: float = 0.25
    """How long a worker waits to fill its batch before stepping with fewer samples."""
    session_timeout_ms: int = 6_000
    heartbeat_interval_ms: int = 2_000
    check_crcs: bool = False
    """Verify Kafka record-batch CRCs (pure Python in kafka-python: halves the read rate)."""
    start_timeout_s: float = 120.0
    """Bound on each wait while starting (processes up, PS loaded, stream consuming)."""
    stop_timeout_s: float = 60.0
    """Bound on each wait while stopping (drain, checkpoint, exit)."""
    device: str = "auto"
    """Worker compute device: auto (CUDA when present), cpu or cuda."""
    history: int = 200_000
    """Step records kept for throughput and loss queries."""
    security: KafkaSecurity | None = None
    """The job's Kafka SASL/TLS, its Secrets read from the environment or files
    (:class:`autoscaler.kafka.credentials.LocalSecrets`: a pod mounts them); None: plaintext."""

    @classmethod
    def from_job(
        cls,
        loaded: Any,
        *,
        bootstrap: str | None = None,
        checkpoint_dir: str | Path | None = None,
        secrets_dir: str | Path | None = None,
        **overrides: Any,
    ) -> TrainerConfig:
        """Settings of a loaded job (:class:`autoscaler.job.loading.LoadedJob`); ``--bootstrap``
        overrides the job's."""
        job = loaded.job
        kafka = job.spec.source.kafka
        directory = (
            Path(checkpoint_dir)
            if checkpoint_dir is not None
            else Path(".kale") / "checkpoints" / job.metadata.name
        )
        if "security" not in overrides:
            try:
                overrides["security"] = security_for(
                    kafka, job.metadata.namespace, LocalSecrets(secrets_dir).read
                )
            except SecretMissing as exc:
                raise UserError(f"{loaded.path or job.metadata.name}: {exc}") from None
        topics = kafka.topic_names
        if len(topics) != 1:
            raise UserError(
                f"{loaded.path or job.metadata.name}: spec.source.kafka.topics lists "
                f"{len(topics)} topics; the reference trainer reads one (spec.source.kafka.topic)"
            )
        return cls(
            bootstrap=bootstrap or ",".join(kafka.bootstrap_servers),
            topic=topics[0],
            group=kafka.consumer_group,
            mode=job.spec.training.mode,
            global_batch=job.spec.training.global_batch_size,
            checkpoint_dir=directory,
            **overrides,
        )


_CTX: Any = None
