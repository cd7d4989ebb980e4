"""``kale simulate``: replay a trace against policies and compare them (docs/design.md semantics).

Single job: ``--trace T.csv --job job.yaml``. Several jobs sharing a GPU quota:
``--jobs DIR --quota-gpus N``; each job file may name its own trace with the annotation
``kale.dev/trace`` (relative to the job file) and its own rescaling with
``kale.dev/scale-peak``; otherwise ``--trace`` and ``--scale-peak`` apply. Everything is
computed by :mod:`autoscaler.sim.study`; this module maps flags and prints.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import click

from autoscaler.sim.policies import DEFAULT_POLICIES, NAMES, parse_names
from common.errors import UserError
from kale.cli.trace import load_trace_cli
from kale.terminal.flags import DURATION
from kale.terminal.output import emit_json, table, warn
from kale.terminal.progress import FitProgress

TABLE_COLUMNS = (
    ("slo_violation_rate", "violations"),
    ("cumulative_delay_min", "cum_delay_min"),
    ("downtime_min", "downtime_min"),
    ("rescale_count", "rescales"),
    ("rescales_per_day", "rescales_per_day"),
    ("gpu_hours", "gpu_hours"),
    ("lower_bound_ratio", "x_lower_bound"),
    ("regret", "regret"),
    ("mean_workers", "mean_workers"),
    ("max_delay_min", "max_delay_min"),
    ("p99_delay_min", "p99_delay_min"),
)


class _Outage(click.ParamType):
    """``START+DURATION`` (two durations, e.g. ``2h+30m``) → seconds."""

    name = "START+DURATION"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[float, float]:
        if isinstance(value, tuple):
            return value
        start, plus, duration = str(value).partition("+")
        if not plus:
            self.fail(f"{value!r} is not START+DURATION (e.g. 2h+30m)", param, ctx)
        return (
            DURATION.convert(start, param, ctx),
            DURATION.convert(duration, param, ctx),
        )


OUTAGE = _Outage()


class _Bar:
    """A tqdm bar on stderr (only on a terminal), created once the total is known."""

    def __init__(self) -> None:
        self.bar: Any = None

    def __call__(self, total: int) -> Callable[[int], None] | None:
        if not sys.stderr.isatty():
            return None
        from tqdm import tqdm

        self.bar = tqdm(total=total, desc="simulate", unit="step", file=sys.stderr, leave=False)
        update: Callable[[int], None] = self.bar.update
        return update

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class _OptimalProgress:
    """The offline optimum's progress on stderr: a bar on a terminal, else a line at start and
    one at the end (it takes seconds with nothing else moving)."""

    def __init__(self) -> None:
        self.bar: Any = None
        self.began = 0.0

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None and self.began == 0.0:
            self.began = time.monotonic()
            if sys.stderr.isatty():
                from tqdm import tqdm

                self.bar = tqdm(
                    total=total, desc="optimal", unit="solve", file=sys.stderr, leave=False
                )
            else:
                click.echo(f"simulate: computing the offline optimum ({total} solves)", err=True)
        if self.bar is not None:
            self.bar.update(done - self.bar.n)
        elif done == total:
            took = time.monotonic() - self.began
            click.echo(f"simulate: offline optimum done in {took:.1f} s", err=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _print_table(metrics: dict[str, dict[str, Any]], lower_bound: float, multi: bool) -> None:
    first, bound_label = ("job", "lower_bound (all jobs)") if multi else ("policy", "lower_bound")
    rows = [[name, *(m.get(k) for k, _ in TABLE_COLUMNS)] for name, m in metrics.items()]
    rows.append([bound_label, "", "", "", "", "", lower_bound, 1.0, "", "", "", ""])
    headers = [first, *(h for _, h in TABLE_COLUMNS)]
    click.echo(table(rows, headers, percent={"violations"}))  # JSON keeps the fraction


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
    "rescale_s",
    type=DURATION,
    default=None,
    help="Resize downtime (default: the job's spec.rescale.duration).",
)
@click.option(
    "--slo",
    "slo_s",
    type=DURATION,
    default=None,
    help="Max delay (default: the job's spec.slo.maxDelay).",
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
    "refit_s",
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
@click.option(
    "--violation-budget",
    type=click.FloatRange(0, 1),
    default=0.01,
    show_default=True,
    help="Share of steps the offline optimum may violate (the regret reference).",
)
@click.option(
    "--placement",
    default=None,
    help="Also place each policy's workers on a shared 64-node cluster with this placement "
    "policy (fgd, bestfit, ...; one job only) and report where they went.",
)
@click.option(
    "--metrics-outage",
    "metrics_outages",
    type=OUTAGE,
    multiple=True,
    help="START+DURATION after the warm-up (e.g. 2h+30m) during which the job cannot be "
    "measured: every policy holds, or falls back to spec.fallback (repeatable).",
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
    as_json: bool,
    report: str | None,
    **options: Any,
) -> None:
    """Replay a trace against autoscaling policies and compare SLO, downtime and GPU-hours."""
    from autoscaler.sim.report import write_report
    from autoscaler.sim.study import SimSettings, simulate_single
    from autoscaler.sim.study_multi import simulate_multi

    if options.get("placement") is not None:
        from placement.errors import PlacementInputError
        from placement.policies import parse_policy_names

        try:
            parse_policy_names(options["placement"])
        except PlacementInputError as exc:
            raise UserError(f"--placement: {exc}") from None
        if jobs_dir is not None:
            raise UserError("--placement works with --job (one job), not --jobs")
    if jobs_dir is not None and options.get("metrics_outages"):
        raise UserError("--metrics-outage works with --job (one job), not --jobs")
    settings = SimSettings(policies=parse_names(policies), **options)
    bar = _Bar()
    solves = _OptimalProgress()
    fits = FitProgress(None, label="simulate: forecaster fits")

    def on_fit(model: str, steps: int) -> AbstractContextManager[None]:
        return fits.fit(model, steps=steps)

    try:
        if jobs_dir is not None:
            if job_path is not None:
                raise UserError("--job and --jobs cannot be used together")
            if quota_gpus is None:
                raise UserError("--jobs needs --quota-gpus")
            study = simulate_multi(
                jobs_dir,
                trace_path,
                quota_gpus,
                settings,
                progress=bar,
                trace_loader=load_trace_cli,
                warn=warn,
                on_fit=on_fit,
                optimal_progress=solves,
            )
        else:
            if quota_gpus is not None:
                raise UserError("--quota-gpus is only used with --jobs")
            if trace_path is None or job_path is None:
                raise UserError("need --trace and --job (or --jobs DIR --quota-gpus N)")
            study = simulate_single(
                trace_path,
                job_path,
                settings,
                progress=bar,
                trace_loader=load_trace_cli,
                warn=warn,
                on_fit=on_fit,
                optimal_progress=solves,
            )
    finally:
        fits.close()
        solves.close()
        bar.close()
    if report:
        try:
            write_report(report, study.sections, title=study.title, notes=study.notes)
        except OSError as exc:
            raise UserError(f"--report: cannot write {report}: {exc}") from None
        study.document["report"] = report
    if as_json:
        emit_json(study.document)
        return
    for heading, metrics, lower_bound in study.tables:
        if heading:
            click.echo(heading)
        _print_table(metrics, lower_bound, multi=jobs_dir is not None)
    if "placement" in study.document:
        rows = [
            [
                name,
                p["pending_worker_steps"],
                p["mean_nodes_used"],
                p["max_nodes_used"],
                p["final_fragmentation_share_of_free"],
            ]
            for name, p in study.document["placement"].items()
        ]
        click.echo(f"where (placement: {settings.placement}):")
        click.echo(table(rows, ["policy", "pending", "mean_nodes", "max_nodes", "frag_free"]))
