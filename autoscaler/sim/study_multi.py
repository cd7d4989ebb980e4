"""``kale simulate --jobs DIR --quota-gpus N``: several jobs, one GPU quota.

Each job file brings its trace (its ``kale.dev/trace`` annotation, else the shared one) and
its scaling; every policy is run by all the jobs together under the quota. The one-job study
and the pieces both share live in :mod:`autoscaler.sim.study`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from autoscaler.job.loading import LoadedJob, load_job
from autoscaler.sim.engine import lower_bound_gpu_hours, lower_bound_workers
from autoscaler.sim.flat import flat_trace_warning
from autoscaler.sim.optimal import OptimalProgress, OptimalSettings, optimal
from autoscaler.sim.report import ReportSection
from autoscaler.sim.runner import (
    MultiJob,
    compare_multi,
    multi_summary,
    optimal_metrics,
    scale_to_peak,
    warmup_steps_for,
)
from autoscaler.sim.study import (
    SCALE_ANNOTATION,
    TRACE_ANNOTATION,
    Progress,
    SimSettings,
    Study,
    TraceLoader,
    _check,
    _forecaster_factory,
    _sizing,
    _times,
    _trace_values,
)
from autoscaler.sim.traces import load_trace
from common.errors import UserError
from common.numbers import format_number

if TYPE_CHECKING:
    from autoscaler.sim.forecasting import OnFit


# -- several jobs, one quota ------------------------------------------------------------------
def _job_files(jobs_dir: str) -> list[Path]:
    folder = Path(jobs_dir)
    if not folder.is_dir():
        raise UserError(f"--jobs: {jobs_dir}: not a folder")
    files = sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")])
    if not files:
        raise UserError(f"--jobs: {jobs_dir}: no *.yaml job files")
    return files


@dataclass
class _Prepared:
    loaded: LoadedJob
    values: np.ndarray
    dt: float
    trace: str
    scale_peak: float | None
    start: pd.Timestamp


def _prepare(
    path: Path, trace_path: str | None, settings: SimSettings, loader: TraceLoader
) -> _Prepared:
    """One job file with its trace (the annotation's, else the shared one) and its scaling."""
    loaded = load_job(path)
    notes = loaded.job.metadata.annotations
    tpath = notes.get(TRACE_ANNOTATION)
    tpath = str(loaded.resolve(tpath)) if tpath else trace_path
    if tpath is None:
        raise UserError(f"{path}: no {TRACE_ANNOTATION} annotation and no --trace given")
    k = settings.scale_peak
    if SCALE_ANNOTATION in notes:
        try:
            k = float(notes[SCALE_ANNOTATION])
        except ValueError:
            raise UserError(
                f"{path}: metadata.annotations.{SCALE_ANNOTATION}: not a number"
            ) from None
    values, dt, start = _trace_values(tpath, settings.resample_s, loader)
    return _Prepared(loaded, values, dt, tpath, k, start)


def simulate_multi(
    jobs_dir: str,
    trace_path: str | None,
    quota_gpus: int,
    settings: SimSettings,
    *,
    progress: Progress | None = None,
    trace_loader: TraceLoader = load_trace,
    warn: Callable[[str], None] | None = None,
    on_fit: OnFit | None = None,
    optimal_progress: OptimalProgress | None = None,
) -> Study:
    """Every policy of ``settings``, each run by all the jobs of ``jobs_dir`` under one quota."""
    _check(settings)
    prepared = [_prepare(p, trace_path, settings, trace_loader) for p in _job_files(jobs_dir)]
    dts = {p.dt for p in prepared}
    if len(dts) != 1:
        raise UserError("--jobs: the traces have different intervals; use --resample")
    dt = dts.pop()
    n = min(len(p.values) for p in prepared)
    jobs: list[MultiJob] = []
    info: dict[str, Any] = {}
    for p in prepared:
        if p.loaded.name in info:
            raise UserError(f"--jobs: two job files are named {p.loaded.name!r}")
        sizing = _sizing(p.loaded, settings, dt)
        scaled, scale = scale_to_peak(p.values[:n], p.scale_peak, sizing.peak_throughput)
        spec = p.loaded.job.spec
        jobs.append(
            MultiJob(
                p.loaded.name,
                sizing,
                scaled,
                spec.priority,
                p.loaded.job,
                forecaster_factory=_forecaster_factory(p.loaded, p.start, dt, settings, on_fit),
                trace_start=p.start,
            )
        )
        info[p.loaded.name] = {
            "file": str(p.loaded.path),
            "trace": p.trace,
            "priority": spec.priority,
            "scale": scale,
            "peak_workers": sizing.peak_workers,
            "peak_throughput": sizing.peak_throughput,
            "min_gpus": sizing.min_workers * sizing.gpus_per_worker,
        }
    warm = warmup_steps_for(settings.warmup_days, dt, n)
    steps = n - warm
    warnings = [w for j in jobs if (w := flat_trace_warning(j.name, j.sizing, j.arrivals[warm:]))]
    for w in warnings:
        if warn is not None:
            warn(w)
    lbs = {j.name: lower_bound_gpu_hours(j.sizing, j.arrivals[warm:]) for j in jobs}
    for j in jobs:
        info[j.name]["lower_bound_gpu_hours"] = lbs[j.name]
    names = [n for n in settings.policies if n != "optimal"]
    budget = OptimalSettings(violation_budget=settings.violation_budget)
    best = {}
    for k, j in enumerate(jobs):  # progress counts the recursions of every job's optimum
        report = None
        if optimal_progress is not None:
            report = partial(_overall, optimal_progress, k, len(jobs))
        best[j.name] = optimal(
            j.sizing, j.arrivals, warmup_steps=warm, settings=budget, on_progress=report
        )
    for j in jobs:  # each job's optimum alone (the quota is not part of it)
        info[j.name]["optimal"] = optimal_metrics(best[j.name], lbs[j.name])
    runs = compare_multi(
        jobs,
        names,
        quota_gpus=quota_gpus,
        warmup_steps=warm,
        partitions=settings.partitions,
        progress=progress(steps * len(names)) if progress else None,
    )
    reference = {name: b.result.gpu_hours for name, b in best.items()}
    summaries = {name: multi_summary(r, lbs, reference) for name, r in runs.items()}
    document: dict[str, Any] = {
        "quota_gpus": quota_gpus,
        "jobs": info,
        "policies": summaries,
        "lower_bound_gpu_hours": sum(lbs.values()),
        "interval_s": dt,
        "warmup_steps": warm,
        "steps": steps,
        "warnings": warnings,
    }
    times = _times(prepared[0].start, dt, warm, steps)
    sections = [
        ReportSection(
            heading=f"{j.name} (priority {j.priority})",
            results={p: runs[p].results[j.name] for p in names},
            metrics={p: summaries[p]["jobs"][j.name] for p in names},
            lower_bound_gpu_hours=lbs[j.name],
            lower_bound_workers=lower_bound_workers(j.sizing, j.arrivals[warm:]),
            times=times,
        )
        for j in jobs
    ]
    quota_note = ", ".join(f"{p}: max {summaries[p]['max_gpus_in_use']} GPUs in use" for p in names)
    tables = [
        (
            f"{name}: {format_number(s['gpu_hours'])} GPU-hours, max {s['max_gpus_in_use']} of "
            f"{quota_gpus} GPUs in use",
            s["jobs"],
            sum(lbs.values()),
        )
        for name, s in summaries.items()
    ]
    return Study(
        document,
        sections,
        title=f"kale simulate: {len(jobs)} jobs",
        tables=tables,
        notes=[f"quota {quota_gpus} GPUs; {quota_note}"],
    )


def _overall(report: OptimalProgress, k: int, jobs: int, done: int, total: int) -> None:
    """One job's optimum progress as a share of every job's."""
    report(k * total + done, jobs * total)
