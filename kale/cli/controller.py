"""``kale controller``, ``kale plan`` and ``kale crd``: thin flags over the controller library."""

from __future__ import annotations

import logging
import sys

import click

from common.errors import UserError
from kale.terminal.flags import json_option
from kale.terminal.output import emit_json


def _namespaces(values: tuple[str, ...]) -> tuple[str, ...]:
    import re

    from autoscaler.job.types import DNS_LABEL

    for v in values:
        if not re.fullmatch(DNS_LABEL, v):
            raise click.BadParameter(f"{v!r} is not a namespace name (a DNS-1123 label)")
    return values


@click.command()
@click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="controller.yaml (see examples/controller.yaml).",
)
@click.option("--dry-run", is_flag=True, help="Read sizes and plan, change nothing.")
@click.option("--once", is_flag=True, help="Run one tick and exit (leader election skipped).")
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
@click.option(
    "--watch-namespace",
    "watch_namespaces",
    multiple=True,
    callback=lambda ctx, param, value: _namespaces(value),
    help="Cluster mode: manage jobs in this namespace only (repeatable; overrides "
    "jobs.namespaces).",
)
@click.option(
    "--leader-election/--no-leader-election",
    default=None,
    help="Override leaderElection.enabled.",
)
def controller(
    config_path: str,
    dry_run: bool,
    once: bool,
    log_level: str,
    watch_namespaces: tuple[str, ...],
    leader_election: bool | None,
) -> None:
    """Run the autoscaler: every interval, measure, forecast, plan, approve and resize."""
    from autoscaler.controller.app import build
    from autoscaler.controller.config import load_controller_config, with_overrides
    from common.logs import setup_logging

    cfg = with_overrides(
        load_controller_config(config_path),
        watch_namespaces=list(watch_namespaces),
        leader_election=leader_election,
    )
    setup_logging(cfg.log_format, getattr(logging, log_level.upper()))
    app = build(cfg, dry_run=dry_run, once=once)
    if once:
        try:
            app.controller.tick()
        finally:
            app.close()
        return
    app.install_signal_handlers()
    app.run()


@click.command()
@click.option(
    "--job",
    "job_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="ElasticTrainingJob YAML file.",
)
@click.option("--once", is_flag=True, help="One tick, then exit (default: every interval).")
@click.option(
    "--dry-run/--no-dry-run",
    default=True,
    show_default=True,
    help="kale plan never changes anything; --no-dry-run is refused.",
)
@json_option("Print the decision as JSON.")
@click.option(
    "--state-dir",
    default=".kale-state",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where the arrival history is kept.",
)
@click.option(
    "--current-workers",
    type=click.IntRange(min=0),
    default=None,
    help="Current size (default: read from the target with --kubeconfig, else "
    "spec.training.minWorkers).",
)
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False),
    default=None,
    help="Read the current size from the job's target in the cluster (read-only).",
)
@click.option(
    "--forecast-model",
    default=None,
    type=click.Choice(["kale", "seasonal_naive", "ets", "stl_ets", "dlinear"]),
    help="Use this model instead of spec.forecast.model.",
)
@click.option(
    "--window",
    default=5.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="Seconds between the two Kafka snapshots of a first measurement.",
)
def plan(
    job_path: str,
    once: bool,
    dry_run: bool,
    as_json: bool,
    state_dir: str,
    current_workers: int | None,
    kubeconfig: str | None,
    forecast_model: str | None,
    window: float,
) -> None:
    """Run the planner against live Kafka and print the decision with its reason."""
    from autoscaler.controller.plan_job import JobPlanner, PlanSettings
    from autoscaler.job.loading import load_job

    if not dry_run:
        raise UserError("kale plan only plans (--dry-run); run `kale controller` to resize")
    settings = PlanSettings(
        state_dir=state_dir,
        window_s=window,
        current_workers=current_workers,
        kubeconfig=kubeconfig,
        forecast_model=forecast_model,
    )
    with JobPlanner(load_job(job_path), settings) as planner:
        while True:
            report = planner.tick()
            out = report.plan_json()
            if as_json:
                emit_json(out)
            else:
                click.echo(
                    f"{out['time']} {out['job']}: {out['current_workers']} -> "
                    f"{out['desired_workers']} workers ({out['desired_ps']} PS): "
                    f"{out['reason'].get('action')}: {out['reason'].get('why', '')}"
                )
            sys.stdout.flush()
            if once:
                if report.action == "hold_metrics_unavailable":
                    raise UserError(f"{out['job']}: {out['reason'].get('why')}")
                return
            planner.wait_for_next_tick()


@click.command()
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write here instead of stdout.",
)
def crd(output: str | None) -> None:
    """Print the ElasticTrainingJob CustomResourceDefinition (generated from the schema)."""
    from autoscaler.job.crd import render_crd
    from common.atomic import atomic_write_text

    text = render_crd()
    if output:
        atomic_write_text(output, text)
    else:
        click.echo(text, nl=False)
