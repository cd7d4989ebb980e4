"""``kale controller``, ``kale plan`` and ``kale crd``: thin flags over the controller library."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import click

from autoscaler.errors import UserError


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
def controller(config_path: str, dry_run: bool, once: bool, log_level: str) -> None:
    """Run the autoscaler: every interval, measure, forecast, plan, approve and resize."""
    from autoscaler.controller.app import build
    from autoscaler.controller.config import load_controller_config
    from autoscaler.controller.logs import setup_logging

    cfg = load_controller_config(config_path)
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
@click.option("--json", "as_json", is_flag=True, help="Print the decision as JSON.")
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
    help="Read the current size from the job's StatefulSets/TFJob (read-only).",
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
    from autoscaler.actuators.base import Size
    from autoscaler.actuators.dryrun import DryRunActuator
    from autoscaler.cli.output import emit_json
    from autoscaler.config import load_job
    from autoscaler.controller.app import LazyKube, actuator_factory
    from autoscaler.controller.config import ControllerConfig
    from autoscaler.controller.factories import forecaster_factory
    from autoscaler.controller.jobs import StaticJobs
    from autoscaler.controller.loop import Controller, ControllerSettings

    if not dry_run:
        raise UserError("kale plan only plans (--dry-run); run `kale controller` to resize")
    loaded = load_job(job_path)
    job = loaded.job
    cfg = ControllerConfig.model_validate(
        {
            "jobs": {"directory": str(Path(job_path).parent)},
            "stateDir": state_dir,
            "meter": {"window": window},
        }
    )
    kube = LazyKube(kubeconfig=kubeconfig, context=None)
    read_target = kubeconfig is not None and job.spec.target.kind in ("StatefulSet", "TFJob")

    def make_actuator(entry):  # type: ignore[no-untyped-def]
        if read_target and current_workers is None:
            return DryRunActuator(reader=actuator_factory(kube)(entry), label=entry.key)
        w = job.spec.training.min_workers if current_workers is None else current_workers
        ratio = job.spec.training.workers_per_ps
        return DryRunActuator(Size(w, -(-w // ratio) if w else 0), label=entry.key)

    from autoscaler.controller.app import meter_factory

    ctl = Controller(
        jobs_source=StaticJobs([loaded]),
        meter_factory=meter_factory(cfg, block_first=True),
        forecaster_factory=forecaster_factory(forecast_model),
        actuator_factory=make_actuator,
        settings=ControllerSettings(
            interval_s=float(job.spec.forecast.interval),
            dry_run=True,
            forecast_model=forecast_model,
        ),
    )
    try:
        while True:
            reports = ctl.tick()
            if not reports:
                problems = [p for lines in ctl.invalid.values() for p in lines]
                raise UserError(f"{job_path}: the job could not be planned: " + "; ".join(problems))
            out = reports[0].plan_json()
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
                if reports[0].action == "hold_metrics_unavailable":
                    raise UserError(f"{out['job']}: {out['reason'].get('why')}")
                return
            interval = float(job.spec.forecast.interval)
            time.sleep(interval - time.time() % interval)
    finally:
        ctl.close()
        kube.close()


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
    from autoscaler.controller.crd import render_crd

    text = render_crd()
    if output:
        Path(output).write_text(text, encoding="utf-8")
    else:
        click.echo(text, nl=False)
