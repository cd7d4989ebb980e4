"""``kale profile`` as a library call: profile one job's (workers, ps) grid and save it.

Why this module exists: between the job file and :func:`trainer.profiler.run_profile` sit
decisions a command should not make — which shapes the model can run, where the rescale
measurement goes (the job's ``spec.rescale.measurement``, else next to the profile), and an
embedded broker when no Kafka is given — and the files written at the end. Keeping them here
lets a script profile a job exactly as the command does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.config import Mode, validate_shape
from trainer.profiler import ProfileResult, ProfileSettings, run_profile
from trainer.spec import ModelSpec

if TYPE_CHECKING:
    from autoscaler.job.loading import LoadedJob


@dataclass(frozen=True)
class ProfileJob:
    """What one profiling run measures and where it writes."""

    name: str
    """Topic and consumer group of the run (``kale-profile-<job name>``)."""
    mode: Mode
    global_batch: int
    output: Path
    """The profile CSV (``workers,ps,throughput,mode``)."""
    rescale_out: Path
    """The ``kale.rescale/v1`` JSON."""
    spec: ModelSpec


def plan_profile(
    loaded: LoadedJob, settings: ProfileSettings, *, output: Path, rescale_out: Path | None = None
) -> ProfileJob:
    """Check every shape of the grid against the model and decide the output files.

    A shape the model cannot split raises the same error ``kale train`` gives for it.
    """
    job = loaded.job
    mode, batch = job.spec.training.mode, job.spec.training.global_batch_size
    spec = ModelSpec()
    for w in settings.workers:
        for p in settings.ps:
            validate_shape(spec, mode, batch, w, p)
    if rescale_out is None:
        measurement = job.spec.rescale.measurement
        rescale_out = (
            loaded.resolve(measurement)
            if measurement is not None
            else output.with_name(output.stem + ".rescale.json")
        )
    name = f"kale-profile-{job.metadata.name}"
    return ProfileJob(name, mode, batch, output, Path(rescale_out), spec)


def profile(
    plan: ProfileJob,
    settings: ProfileSettings,
    *,
    bootstrap: str | None = None,
    on_progress: Callable[[str, dict[str, Any]], None] | None = None,
) -> ProfileResult:
    """Run the grid against ``bootstrap`` (default: an embedded broker started for the run).

    Raises ``BrokerStartError`` when the embedded broker cannot start and
    ``MetricUnavailable`` when Kafka cannot be reached.
    """
    with contextlib.ExitStack() as stack:
        if bootstrap is None:
            from autoscaler.kafka.local.broker import EmbeddedBroker

            bootstrap = stack.enter_context(EmbeddedBroker()).bootstrap
        return run_profile(
            bootstrap=bootstrap,
            topic=plan.name,
            group=plan.name,
            mode=plan.mode,
            global_batch=plan.global_batch,
            settings=settings,
            spec=plan.spec,
            on_progress=on_progress,
        )


def save(plan: ProfileJob, result: ProfileResult) -> None:
    """Write the profile CSV and, when resizes were timed, the rescale JSON (atomically)."""
    from throughput.profile import save_profile
    from trainer.rescale import save_rescale_measurement

    save_profile(result.profile(), plan.output)
    if result.rescale is not None:
        save_rescale_measurement(result.rescale, plan.rescale_out)


def as_json(plan: ProfileJob, result: ProfileResult) -> dict[str, Any]:
    """``kale profile --json`` (a contract)."""
    return {
        "profile": str(plan.output),
        "rescale_file": str(plan.rescale_out) if result.rescale is not None else None,
        "mode": plan.mode,
        "global_batch": plan.global_batch,
        "rows": [r.as_dict() for r in result.rows],
        "rescale": result.rescale.as_dict() if result.rescale is not None else None,
        "notes": result.notes,
    }
