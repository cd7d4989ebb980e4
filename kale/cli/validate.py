"""``kale validate``: check job files before they reach a cluster."""

from __future__ import annotations

import dataclasses
import functools

import click

from autoscaler.job.loading import validate_file
from common.errors import UserError


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option(
    "--no-file-checks",
    is_flag=True,
    help="Skip checking that referenced files (throughput model) exist.",
)
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on success.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(),
    default=None,
    help="A controller.yaml: also apply its platform policy (in cluster mode: allowed target "
    "kinds, Kafka hosts, models directory, limits).",
)
def validate(
    files: tuple[str, ...], no_file_checks: bool, quiet: bool, config_path: str | None
) -> None:
    """Validate ElasticTrainingJob YAML FILES.

    Exit 0 when all are valid; otherwise exit 2 with one line per problem on stderr:
    ``FILE: dotted.field.path: reason`` (``FILE:LINE: reason`` for the document itself).
    """
    check = functools.partial(validate_file, check_files=not no_file_checks)
    if config_path is not None:
        from autoscaler.controller.config import load_controller_config
        from autoscaler.job.admission import check_file

        cfg = load_controller_config(config_path)
        policy = dataclasses.replace(cfg.admission_policy(), check_files=not no_file_checks)
        models = cfg.jobs.models_dir if cfg.cluster_mode else None
        check = functools.partial(check_file, policy=policy, models_dir=models)
    all_errors: list[str] = []
    for file in files:
        job, errors, warnings = check(file)
        for line in warnings:
            click.echo(line, err=True)
        all_errors += errors
        if job is not None and not quiet:
            click.echo(f"{file}: ok ({job.job.kind} {job.job.metadata.namespace}/{job.name})")
    if all_errors:
        raise UserError(all_errors[0], problems=all_errors)
