"""``kale simulate`` as a library call: load the job(s) and trace(s), run every policy, summarise.

The CLI maps its flags to a :class:`SimSettings` and calls :func:`simulate_single` or
:func:`simulate_multi`; a notebook or a benchmark can do the same. Each returns a
:class:`Study`: the JSON document ``--json`` prints, the report's sections, and the tables.

Several jobs sharing a GPU quota: each job file may name its own trace with the annotation
``kale.dev/trace`` (relative to the job file) and its own rescaling with
``kale.dev/scale-peak``; otherwise the settings' trace and ``scale_peak`` apply.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from autoscaler.job.loading import LoadedJob, load_job
from autoscaler.policy.types import JobSizing
from autoscaler.sim.engine import lower_bound_workers
from autoscaler.sim.flat import flat_trace_warning
from autoscaler.sim.optimal import OptimalProgress, OptimalSettings
from autoscaler.sim.report import ReportSection
from autoscaler.sim.runner import (
    compare,
    optimal_metrics,
    resample,
    scale_to_peak,
    warmup_steps_for,
)
from autoscaler.sim.traces import Trace, load_trace
from common.durations import format_duration
from common.errors import UserError
from common.numbers import format_number, format_rate

if TYPE_CHECKING:
    from autoscaler.sim.forecasting import OnFit

TRACE_ANNOTATION = "kale.dev/trace"
SCALE_ANNOTATION = "kale.dev/scale-peak"

Progress = Callable[[int], Callable[[int], None] | None]
"""Given the total number of steps to simulate, a callback advanced by steps done (or None)."""
TraceLoader = Callable[[str], Trace]


@dataclass(frozen=True)
class SimSettings:
    """What ``kale simulate`` runs; None means "the job's own value"."""

    policies: Sequence[str]
    warmup_days: float = 7.0
    """History every policy may see; metrics cover the rest."""
    scale_peak: float | None = None
    """Rescale each trace so its max is K × the model's peak throughput."""
    rescale_s: float | None = None
    """Resize downtime (default: the job's ``spec.rescale.duration``)."""
    slo_s: float | None = None
    """Max delay (default: the job's ``spec.slo.maxDelay``)."""
    resample_s: float | None = None
    """Simulate on this step (interpolating a coarser trace's rate)."""
    partitions: int | None = None
    """Topic partitions capping KEDA (default: maxWorkers)."""
    forecaster: str | None = None
    """Forecasting model of kale/madu (default: the job's ``spec.forecast.model``)."""
    refit_s: float | None = None
    """Refit period (default: the job's ``spec.forecast.refit``)."""
    predict_every: int = 10
    """Steps between forecasts; the planner slices the latest one in between."""
    fit_cache: str | None = None
    """Folder caching forecaster fits (default: ``$KALE_CACHE_DIR`` or ``~/.cache/kale``)."""
    violation_budget: float = 0.01
    """Share of steps the offline optimum may end above the SLO (its ``regret`` reference)."""
    placement: str | None = None
    """Also place each policy's workers on a shared cluster with this placement policy."""


@dataclass
class Study:
    """A finished ``kale simulate``: its JSON, the report's sections, and the printed tables."""

    document: dict[str, Any]
    sections: list[ReportSection]
    title: str
    tables: list[tuple[str, dict[str, dict[str, Any]], float]] = field(default_factory=list)
    """(heading, metrics per row, lower bound) for the text output."""
    notes: list[str] = field(default_factory=list)


# -- loading ----------------------------------------------------------------------------------
def _forecaster_factory(
    loaded: LoadedJob,
    start: pd.Timestamp,
    dt: float,
    settings: SimSettings,
    on_fit: OnFit | None = None,
) -> Any:
    """Forecast sources for kale/madu: the job's model, refitted on its schedule, fits cached."""
    from autoscaler.sim.forecasting import default_cache_dir, source_factory

    fc = loaded.job.spec.forecast
    return source_factory(
        settings.forecaster or fc.model,
        start=start,
        interval_s=dt,
        horizon_steps=max(1, round(fc.horizon / dt)),
        refit_s=settings.refit_s or fc.refit,
        quantile=float(fc.quantile),
        predict_every=settings.predict_every,
        cache_dir=Path(settings.fit_cache) if settings.fit_cache else default_cache_dir(),
        on_fit=on_fit,
    )


def _sizing(loaded: LoadedJob, settings: SimSettings, dt: float) -> JobSizing:
    from autoscaler.policy.sizing import sizing_for

    model = loaded.throughput_model()  # a file or inline coefficients (UserError otherwise)
    return sizing_for(
        loaded, model, rescale_s=settings.rescale_s, slo_s=settings.slo_s, interval_s=dt
    )


def _trace_values(
    path: str, resample_s: float | None, loader: TraceLoader
) -> tuple[np.ndarray, float, pd.Timestamp]:
    tr = loader(path)
    values = tr.series.to_numpy(dtype=float)
    dt = tr.interval_s if resample_s is None else resample_s
    return resample(values, tr.interval_s, resample_s), float(dt), tr.series.index[0]


def _times(start: pd.Timestamp, dt: float, first: int, n: int) -> list[str]:
    idx = start + pd.to_timedelta(np.arange(first, first + n) * dt, unit="s")
    return [t.isoformat() for t in idx]


def _notes(sizing: JobSizing, dt: float, warm: int, steps: int, scale: float) -> list[str]:
    return [
        f"{steps} steps of {format_duration(dt)} evaluated after {warm} warm-up steps",
        f"rescale {format_duration(sizing.rescale_s)}, SLO {format_duration(sizing.slo_s)}, "
        f"workers {sizing.min_workers}–{sizing.max_workers}, peak {sizing.peak_workers} "
        f"workers = {format_rate(sizing.peak_throughput)}, trace scaled ×{format_number(scale)}",
    ]


def _check(settings: SimSettings) -> None:
    if settings.resample_s is not None and settings.resample_s <= 0:
        raise UserError("--resample: must be positive")
    if settings.forecaster is not None:
        from forecasting.registry import MODEL_NAMES

        if settings.forecaster not in MODEL_NAMES:
            raise UserError(
                f"--forecaster: unknown model {settings.forecaster!r}; "
                f"valid names: {', '.join(MODEL_NAMES)}"
            )


# -- one job ----------------------------------------------------------------------------------
def simulate_single(
    trace_path: str,
    job_path: str,
    settings: SimSettings,
    *,
    progress: Progress | None = None,
    trace_loader: TraceLoader = load_trace,
    warn: Callable[[str], None] | None = None,
    on_fit: OnFit | None = None,
    optimal_progress: OptimalProgress | None = None,
) -> Study:
    """Every policy of ``settings`` on one job and trace; ``warn`` hears of a flat comparison
    before the (long) simulation starts."""
    _check(settings)
    loaded = load_job(job_path)
    values, dt, start = _trace_values(trace_path, settings.resample_s, trace_loader)
    sizing = _sizing(loaded, settings, dt)
    values, scale = scale_to_peak(values, settings.scale_peak, sizing.peak_throughput)
    warm = warmup_steps_for(settings.warmup_days, dt, len(values))
    steps = len(values) - warm
    warnings = [w for w in [flat_trace_warning(loaded.name, sizing, values[warm:])] if w]
    for w in warnings:
        if warn is not None:
            warn(w)
    comp = compare(
        sizing,
        values,
        list(settings.policies),
        warmup_steps=warm,
        job=loaded.job,
        partitions=settings.partitions,
        trace_start=start,
        progress=progress(steps * len(settings.policies)) if progress else None,
        forecaster_factory=_forecaster_factory(loaded, start, dt, settings, on_fit),
        optimal_settings=OptimalSettings(violation_budget=settings.violation_budget),
        optimal_progress=optimal_progress,
    )
    document: dict[str, Any] = {
        "policies": comp.metrics,
        "optimal": (
            optimal_metrics(comp.optimal, comp.lower_bound_gpu_hours) if comp.optimal else None
        ),
        **_placement(comp.results, sizing, settings),
        "lower_bound_gpu_hours": comp.lower_bound_gpu_hours,
        "trace": trace_path,
        "job": loaded.name,
        "interval_s": dt,
        "warmup_steps": warm,
        "steps": steps,
        "peak_workers": sizing.peak_workers,
        "peak_throughput": sizing.peak_throughput,
        "scale": scale,
        "rescale_s": sizing.rescale_s,
        "slo_s": sizing.slo_s,
        "warnings": warnings,
    }
    section = ReportSection(
        heading=f"{loaded.name} on {Path(trace_path).name}",
        results=comp.results,
        metrics=comp.metrics,
        lower_bound_gpu_hours=comp.lower_bound_gpu_hours,
        lower_bound_workers=lower_bound_workers(sizing, values[warm:]),
        times=_times(start, dt, warm, steps),
        notes=[*_notes(sizing, dt, warm, steps, scale), *warnings],
    )
    return Study(
        document,
        [section],
        title=f"kale simulate: {loaded.name}",
        tables=[("", comp.metrics, comp.lower_bound_gpu_hours)],
    )


def _placement(results: dict[str, Any], sizing: JobSizing, settings: SimSettings) -> dict:
    """``{"placement": {policy: where its workers went}}`` with ``--placement``, else {}."""
    if settings.placement is None:
        return {}
    from autoscaler.sim.placement_replay import PlacementSettings, replay_workers

    where = PlacementSettings(policy=settings.placement)
    return {
        "placement": {
            name: replay_workers(r.workers, sizing.gpus_per_worker, where)
            for name, r in results.items()
        }
    }
