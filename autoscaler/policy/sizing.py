"""From a job file and its throughput model to the :class:`JobSizing` every policy uses.

Kept apart from the engine so the engine needs no job files (tests build sizings by hand),
and here in ``policy`` so the simulator and the controller share the same translation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autoscaler.policy.types import JobSizing
from common.errors import UserError


def _spec(job: Any) -> Any:
    """Accept a :class:`LoadedJob` or an :class:`ElasticTrainingJob`."""
    return getattr(job, "job", job).spec


def sizing_for(
    job: Any,
    model: Any,
    *,
    rescale_s: float | None = None,
    slo_s: float | None = None,
    interval_s: float = 60.0,
) -> JobSizing:
    """The capacity table f(w) for w = 0 … maxWorkers, with p = ceil(w / workersPerPS).

    ``model`` is a throughput model (``throughput(workers, ps, warn=False)``). ``rescale_s``
    and ``slo_s`` override the job's ``spec.rescale.duration`` and ``spec.slo.maxDelay``;
    a job with ``duration: auto`` needs ``rescale_s`` here.
    """
    spec = _spec(job)
    tr = spec.training
    ratio = int(tr.workers_per_ps)
    family = getattr(model, "family_spec", None)
    model_ratio = getattr(model, "ratio", ratio)
    if family is not None and not family.uses_ps and model_ratio != ratio:
        raise UserError(
            f"spec.training.workersPerPS ({ratio}) differs from the throughput model's ratio "
            f"({model_ratio}), and its family ({model.family}) cannot take another p"
        )
    if rescale_s is None:
        duration = spec.rescale.duration
        if duration == "auto":
            if not hasattr(job, "rescale_seconds"):
                raise UserError(
                    "spec.rescale.duration is auto: pass --rescale with the measured duration"
                )
            duration = job.rescale_seconds()  # the measurement file next to the job
        rescale_s = float(duration)
    if slo_s is None:
        slo_s = float(spec.slo.max_delay)
    w = np.arange(1, tr.max_workers + 1)
    p = -(-w // ratio)
    f = np.asarray(model.throughput(w, p, warn=False), dtype=float)
    if not np.all(np.isfinite(f)) or np.any(f < 0):
        raise UserError("the throughput model gives non-finite or negative throughput")
    return JobSizing(
        capacity=np.concatenate([[0.0], f]),
        min_workers=int(tr.min_workers),
        max_workers=int(tr.max_workers),
        ratio=ratio,
        interval_s=float(interval_s),
        rescale_s=float(rescale_s),
        slo_s=float(slo_s),
        gpus_per_worker=int(tr.gpus_per_worker),
        max_resizes_per_hour=float(spec.rescale.max_per_hour),
    )
