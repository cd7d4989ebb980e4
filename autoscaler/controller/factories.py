"""Default ways to turn a job entry into what the loop needs: a sizing and a forecaster.

Kept apart from the loop so tests and the benchmark pass their own factories, while the CLI
uses these. The capacity table comes from the job's throughput model through the same
translation the simulator uses (:func:`autoscaler.policy.sizing.sizing_for`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoscaler.policy.types import JobSizing
from common.errors import UserError

if TYPE_CHECKING:
    from autoscaler.controller.jobs import JobEntry
    from autoscaler.job.loading import LoadedJob
    from forecasting.base import Forecaster
    from throughput.model import ThroughputModel


class ModelCache:
    """Throughput models by path, reloaded when the file changes."""

    def __init__(self) -> None:
        self._models: dict[Path, tuple[int, ThroughputModel]] = {}

    def __call__(self, path: Path) -> ThroughputModel:
        from throughput.model import ThroughputModel

        try:
            stamp = path.stat().st_mtime_ns
        except OSError as exc:
            raise UserError(f"spec.throughput.model: cannot read {path}: {exc}") from exc
        hit = self._models.get(path)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        try:
            model = ThroughputModel.load(path)
        except Exception as exc:  # the file's problem, said in one line
            raise UserError(f"spec.throughput.model: {path}: {exc}") from exc
        self._models[path] = (stamp, model)
        return model


def rescale_seconds(loaded: LoadedJob) -> float:
    """``spec.rescale.duration``, or the measured one when it is ``auto``."""
    return float(loaded.rescale_seconds())


def job_sizing(
    loaded: LoadedJob,
    model_loader: Callable[[Path], ThroughputModel],
    *,
    model_data: Any = None,
) -> JobSizing:
    """The planner's view of the job: capacity table, bounds, interval, rescale, SLO.

    The model is the job's file (through ``model_loader``, which caches), its inline
    coefficients, or ``model_data`` (the JSON its ConfigMap holds, cluster mode)."""
    from autoscaler.policy.sizing import sizing_for

    ref = loaded.job.spec.throughput
    if ref.model is not None:
        model = model_loader(loaded.throughput_model_path)
    else:
        model = loaded.throughput_model(model_data)
    return sizing_for(
        loaded,
        model,
        rescale_s=rescale_seconds(loaded),
        interval_s=float(loaded.job.spec.forecast.interval),
    )


def forecaster_factory(
    override: str | None = None, **options: Any
) -> Callable[[JobEntry], Forecaster]:
    """Fresh forecasters for a job: ``spec.forecast.model`` (or ``override``) behind the
    fallback wrapper, which switches to seasonal naive while the history is short."""

    def make(entry: JobEntry) -> Forecaster:
        from forecasting.registry import make_forecaster

        fc = entry.job.spec.forecast
        name = override or fc.model
        horizon = max(1, round(fc.horizon / fc.interval))
        if name == "seasonal_naive":
            return make_forecaster(name, **options)
        return make_forecaster(
            "fallback", primary=name, secondary="seasonal_naive", horizon=horizon, **options
        )

    return make
