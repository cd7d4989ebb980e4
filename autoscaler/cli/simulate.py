"""``kale simulate``: replay a trace against policies and compare them (DESIGN.md semantics).

Single job: ``--trace T.csv --job job.yaml``. Several jobs sharing a GPU quota:
``--jobs DIR --quota-gpus N``; each job file may name its own trace with the annotation
``kale.dev/trace`` (relative to the job file) and its own rescaling with
``kale.dev/scale-peak``; otherwise ``--trace`` and ``--scale-peak`` apply.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import numpy as np
import pandas as pd

from autoscaler.cli.output import emit_json, table
from autoscaler.cli.params import DURATION
from autoscaler.cli.trace import load_trace_cli
from autoscaler.config import LoadedJob, load_job
from autoscaler.durations import format_duration
from autoscaler.errors import UserError
from autoscaler.policy.types import JobSizing
from autoscaler.sim.policies import DEFAULT_POLICIES, NAMES, parse_names

TRACE_ANNOTATION = "kale.dev/trace"
SCALE_ANNOTATION = "kale.dev/scale-peak"
TABLE_COLUMNS = (
    ("slo_violation_rate", "violations"),
    ("cumulative_delay_min", "cum_delay_min"),
    ("downtime_min", "downtime_min"),
    ("rescale_count", "rescales"),
    ("gpu_hours", "gpu_hours"),
    ("lower_bound_ratio", "x_lower_bound"),
    ("mean_workers", "mean_workers"),
    ("max_delay_min", "max_delay_min"),
    ("p99_delay_min", "p99_delay_min"),
)


def _forecaster_factory(
    loaded: LoadedJob, start: pd.Timestamp, dt: float, opts: dict[str, Any]
) -> Any:
    """Forecast sources for kale/madu: the job's model, refitted on its schedule, fits cached."""
    from autoscaler.sim.forecasting import default_cache_dir, source_factory

    fc = loaded.job.spec.forecast
    cache = opts.get("cache")
    return source_factory(
        opts.get("model") or fc.model,
        start=start,
        interval_s=dt,
        horizon_steps=max(1, round(fc.horizon / dt)),
        refit_s=opts.get("refit") or fc.refit,
        predict_every=int(opts.get("predict_every") or 10),
        cache_dir=Path(cache) if cache else default_cache_dir(),
    )


def _load_model(loaded: LoadedJob) -> Any:
    from throughput.errors import ThroughputError
    from throughput.model import ThroughputModel

    try:
        return ThroughputModel.load(loaded.throughput_model_path)
    except ThroughputError as exc:
        raise UserError(f"{loaded.path}: spec.throughput.model: {exc}") from None


def _sizing(loaded: LoadedJob, rescale: float | None, slo: float | None, dt: float) -> JobSizing:
    from autoscaler.policy.sizing import sizing_for

    sizing = sizing_for(loaded, _load_model(loaded), rescale_s=rescale, slo_s=slo, interval_s=dt)
    return sizing


def _trace_values(path: str, resample_s: float | None) -> tuple[np.ndarray, float, pd.Timestamp]:
    from autoscaler.sim.runner import resample

    tr = load_trace_cli(path)
    values = tr.series.to_numpy(dtype=float)
    dt = tr.interval_s if resample_s is None else resample_s
    return resample(values, tr.interval_s, resample_s), float(dt), tr.series.index[0]


def _progress(total: int, label: str) -> tuple[Callable[[int], None] | None, Callable[[], None]]:
    if not sys.stderr.isatty():
        return None, lambda: None
    from tqdm import tqdm

    bar = tqdm(total=total, desc=label, unit="step", file=sys.stderr, leave=False)
    return bar.update, bar.close


def _times(start: pd.Timestamp, dt: float, first: int, n: int) -> list[str]:
    idx = start + pd.to_timedelta(np.arange(first, first + n) * dt, unit="s")
    return [t.isoformat() for t in idx]


def _print_table(
    metrics: dict[str, dict[str, Any]],
    lower_bound: float,
    first: str = "policy",
    bound_label: str = "lower_bound",
) -> None:
    rows = [[name, *(m.get(k) for k, _ in TABLE_COLUMNS)] for name, m in metrics.items()]
    rows.append([bound_label, "", "", "", "", lower_bound, 1.0, "", "", ""])
    click.echo(table(rows, [first, *(h for _, h in TABLE_COLUMNS)]))


@click.command("simulate")
@click.option(
    "--trace",
    "trace_path",
    type=click.Path(dir_okay=False),
    help="Arrival-rate CSV (timestamp,value in samples/s).",
)
@click.option(
    "--job",
    "job_path",
    type=click.Path(dir_okay=False),
    help="ElasticTrainingJob YAML (its throughput model sizes the job).",
)
@click.option(
    "--jobs",
    "jobs_dir",
    type=click.Path(file_okay=False),
    help="Folder of job YAMLs sharing --quota-gpus.",
)
@click.option("--quota-gpus", type=click.IntRange(min=0), help="GPU quota shared by --jobs.")
@click.option(
    "--policies",
    default=",".join(DEFAULT_POLICIES),
    show_default=True,
    help=f"Comma-separated, from: {', '.join(NAMES)}.",
)
@click.option(
    "--warmup-days",
    type=click.FloatRange(min=0),
    default=7.0,
    show_default=True,
    help="History every policy may see; metrics cover the rest.",
)
@click.option(
    "--scale-peak",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Rescale the trace so its max is K × the model's peak throughput.",
)
@click.option(
    "--rescale",
    type=DURATION,
    default=None,
    help="Resize downtime (default: the job's spec.rescale.duration).",
)
@click.option(
    "--slo", type=DURATION, default=None, help="Max delay (default: the job's spec.slo.maxDelay)."
)
@click.option(
    "--resample",
    "resample_s",
    type=DURATION,
    default=None,
    help="Simulate on this step (interpolating a coarser trace's rate).",
)
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    default=None,
    help="Topic partitions capping KEDA (default: maxWorkers).",
)
@click.option(
    "--forecaster",
    "forecaster",
    default=None,
    help="Forecasting model for kale/madu (default: the job's spec.forecast.model).",
)
@click.option(
    "--refit",
    type=DURATION,
    default=None,
    help="Refit the forecaster this often (default: the job's spec.forecast.refit).",
)
@click.option(
    "--predict-every",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Steps between forecasts (the planner slices the latest one in between).",
)
@click.option(
    "--fit-cache",
    type=click.Path(file_okay=False),
    default=None,
    help="Folder caching forecaster fits (default: $KALE_CACHE_DIR or ~/.cache/kale).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--report",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write a self-contained HTML report here.",
)
def simulate(
    trace_path: str | None,
    job_path: str | None,
    jobs_dir: str | None,
    quota_gpus: int | None,
    policies: str,
    warmup_days: float,
    scale_peak: float | None,
    rescale: float | None,
    slo: float | None,
    resample_s: float | None,
    partitions: int | None,
    forecaster: str | None,
    refit: float | None,
    predict_every: int,
    fit_cache: str | None,
    as_json: bool,
    report: str | None,
) -> None:
    """Replay a trace against autoscaling policies and compare SLO, downtime and GPU-hours."""
    names = parse_names(policies)
    forecast_opts = {
        "model": forecaster,
        "refit": refit,
        "predict_every": predict_every,
        "cache": fit_cache,
    }
    if forecaster is not None:
        from forecasting.registry import MODEL_NAMES

        if forecaster not in MODEL_NAMES:
            raise UserError(
                f"--forecaster: unknown model {forecaster!r}; valid names: {', '.join(MODEL_NAMES)}"
            )
    if resample_s is not None and resample_s <= 0:
        raise UserError("--resample: must be positive")
    if jobs_dir is not None:
        if job_path is not None:
            raise UserError("--job and --jobs cannot be used together")
        if quota_gpus is None:
            raise UserError("--jobs needs --quota-gpus")
        _simulate_multi(
            jobs_dir,
            trace_path,
            quota_gpus,
            names,
            warmup_days,
            scale_peak,
            rescale,
            slo,
            resample_s,
            partitions,
            as_json,
            report,
            forecast_opts,
        )
        return
    if quota_gpus is not None:
        raise UserError("--quota-gpus is only used with --jobs")
    if trace_path is None or job_path is None:
        raise UserError("need --trace and --job (or --jobs DIR --quota-gpus N)")
    _simulate_single(
        trace_path,
        job_path,
        names,
        warmup_days,
        scale_peak,
        rescale,
        slo,
        resample_s,
        partitions,
        as_json,
        report,
        forecast_opts,
    )


def _simulate_single(
    trace_path: str,
    job_path: str,
    names: list[str],
    warmup_days: float,
    scale_peak: float | None,
    rescale: float | None,
    slo: float | None,
    resample_s: float | None,
    partitions: int | None,
    as_json: bool,
    report: str | None,
    forecast_opts: dict[str, Any],
) -> None:
    from autoscaler.sim.engine import lower_bound_workers
    from autoscaler.sim.runner import compare, scale_to_peak, warmup_steps_for

    loaded = load_job(job_path)
    values, dt, start = _trace_values(trace_path, resample_s)
    sizing = _sizing(loaded, rescale, slo, dt)
    values, scale = scale_to_peak(values, scale_peak, sizing.peak_throughput)
    warm = warmup_steps_for(warmup_days, dt, len(values))
    steps = len(values) - warm
    update, close = _progress(steps * len(names), "simulate")
    try:
        comp = compare(
            sizing,
            values,
            names,
            warmup_steps=warm,
            job=loaded.job,
            partitions=partitions,
            trace_start=start,
            progress=update,
            forecaster_factory=_forecaster_factory(loaded, start, dt, forecast_opts),
        )
    finally:
        close()
    out = {
        "policies": comp.metrics,
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
    }
    if report:
        from autoscaler.sim.report import ReportSection, write_report

        section = ReportSection(
            heading=f"{loaded.name} on {Path(trace_path).name}",
            results=comp.results,
            metrics=comp.metrics,
            lower_bound_gpu_hours=comp.lower_bound_gpu_hours,
            lower_bound_workers=lower_bound_workers(sizing, values[warm:]),
            times=_times(start, dt, warm, steps),
            notes=_notes(sizing, dt, warm, steps, scale),
        )
        try:
            write_report(report, [section], title=f"kale simulate: {loaded.name}")
        except OSError as exc:
            raise UserError(f"--report: cannot write {report}: {exc}") from None
        out["report"] = report
    if as_json:
        emit_json(out)
    else:
        _print_table(comp.metrics, comp.lower_bound_gpu_hours)


def _notes(sizing: JobSizing, dt: float, warm: int, steps: int, scale: float) -> list[str]:
    return [
        f"{steps} steps of {format_duration(dt)} evaluated after {warm} warm-up steps",
        f"rescale {format_duration(sizing.rescale_s)}, SLO {format_duration(sizing.slo_s)}, "
        f"workers {sizing.min_workers}–{sizing.max_workers}, peak {sizing.peak_workers} "
        f"workers = {sizing.peak_throughput:.6g} samples/s, trace scaled ×{scale:.6g}",
    ]


def _job_files(jobs_dir: str) -> list[Path]:
    folder = Path(jobs_dir)
    if not folder.is_dir():
        raise UserError(f"--jobs: {jobs_dir}: not a folder")
    files = sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")])
    if not files:
        raise UserError(f"--jobs: {jobs_dir}: no *.yaml job files")
    return files


def _simulate_multi(
    jobs_dir: str,
    trace_path: str | None,
    quota_gpus: int,
    names: list[str],
    warmup_days: float,
    scale_peak: float | None,
    rescale: float | None,
    slo: float | None,
    resample_s: float | None,
    partitions: int | None,
    as_json: bool,
    report: str | None,
    forecast_opts: dict[str, Any],
) -> None:
    from autoscaler.sim.engine import lower_bound_gpu_hours, lower_bound_workers
    from autoscaler.sim.runner import (
        MultiJob,
        compare_multi,
        multi_summary,
        scale_to_peak,
        warmup_steps_for,
    )

    prepared: list[tuple[LoadedJob, np.ndarray, float, str, float, pd.Timestamp]] = []
    for path in _job_files(jobs_dir):
        loaded = load_job(path)
        notes = loaded.job.metadata.annotations
        tpath = notes.get(TRACE_ANNOTATION)
        tpath = str(loaded.resolve(tpath)) if tpath else trace_path
        if tpath is None:
            raise UserError(f"{path}: no {TRACE_ANNOTATION} annotation and no --trace given")
        k = scale_peak
        if SCALE_ANNOTATION in notes:
            try:
                k = float(notes[SCALE_ANNOTATION])
            except ValueError:
                raise UserError(
                    f"{path}: metadata.annotations.{SCALE_ANNOTATION}: not a number"
                ) from None
        values, dt, start = _trace_values(tpath, resample_s)
        prepared.append((loaded, values, dt, tpath, k if k is not None else 0.0, start))
    dts = {p[2] for p in prepared}
    if len(dts) != 1:
        raise UserError("--jobs: the traces have different intervals; use --resample")
    dt = dts.pop()
    n = min(len(p[1]) for p in prepared)
    jobs: list[MultiJob] = []
    info: dict[str, Any] = {}
    for loaded, values, _, tpath, k, start in prepared:
        if loaded.name in info:
            raise UserError(f"--jobs: two job files are named {loaded.name!r}")
        sizing = _sizing(loaded, rescale, slo, dt)
        scaled, scale = scale_to_peak(values[:n], k or None, sizing.peak_throughput)
        jobs.append(
            MultiJob(
                loaded.name,
                sizing,
                scaled,
                loaded.job.spec.priority,
                loaded.job,
                forecaster_factory=_forecaster_factory(loaded, start, dt, forecast_opts),
                trace_start=start,
            )
        )
        info[loaded.name] = {
            "file": str(loaded.path),
            "trace": tpath,
            "priority": loaded.job.spec.priority,
            "scale": scale,
            "peak_workers": sizing.peak_workers,
            "peak_throughput": sizing.peak_throughput,
            "min_gpus": sizing.min_workers * sizing.gpus_per_worker,
        }
    warm = warmup_steps_for(warmup_days, dt, n)
    steps = n - warm
    lbs = {j.name: lower_bound_gpu_hours(j.sizing, j.arrivals[warm:]) for j in jobs}
    for j in jobs:
        info[j.name]["lower_bound_gpu_hours"] = lbs[j.name]
    update, close = _progress(steps * len(names), "simulate")
    try:
        runs = compare_multi(
            jobs,
            names,
            quota_gpus=quota_gpus,
            warmup_steps=warm,
            partitions=partitions,
            progress=update,
        )
    finally:
        close()
    summaries = {name: multi_summary(r, lbs) for name, r in runs.items()}
    out: dict[str, Any] = {
        "quota_gpus": quota_gpus,
        "jobs": info,
        "policies": summaries,
        "lower_bound_gpu_hours": sum(lbs.values()),
        "interval_s": dt,
        "warmup_steps": warm,
        "steps": steps,
    }
    if report:
        from autoscaler.sim.report import ReportSection, write_report

        start = prepared[0][5]
        sections = [
            ReportSection(
                heading=f"{j.name} (priority {j.priority})",
                results={p: runs[p].results[j.name] for p in names},
                metrics={p: summaries[p]["jobs"][j.name] for p in names},
                lower_bound_gpu_hours=lbs[j.name],
                lower_bound_workers=lower_bound_workers(j.sizing, j.arrivals[warm:]),
                times=_times(start, dt, warm, steps),
            )
            for j in jobs
        ]
        quota_note = ", ".join(
            f"{p}: max {summaries[p]['max_gpus_in_use']} GPUs in use" for p in names
        )
        try:
            write_report(
                report,
                sections,
                title=f"kale simulate: {len(jobs)} jobs",
                notes=[f"quota {quota_gpus} GPUs; {quota_note}"],
            )
        except OSError as exc:
            raise UserError(f"--report: cannot write {report}: {exc}") from None
        out["report"] = report
    if as_json:
        emit_json(out)
        return
    for name, s in summaries.items():
        click.echo(
            f"{name}: {s['gpu_hours']:.4g} GPU-hours, max {s['max_gpus_in_use']} of "
            f"{quota_gpus} GPUs in use"
        )
        _print_table(
            s["jobs"], sum(lbs.values()), first="job", bound_label="lower_bound (all jobs)"
        )
