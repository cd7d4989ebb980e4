"""``kale validate``: check job files before they reach a cluster."""

from __future__ import annotations

import click

from autoscaler.config import validate_file
from autoscaler.errors import UserError


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option(
    "--no-file-checks",
    is_flag=True,
    help="Skip checking that referenced files (throughput model) exist.",
)
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on success.")
def validate(files: tuple[str, ...], no_file_checks: bool, quiet: bool) -> None:
    """Validate ElasticTrainingJob YAML FILES.

    Exit 0 when all are valid; otherwise exit 2 with one line per problem on stderr:
    ``FILE: dotted.field.path: reason``.
    """
    all_errors: list[str] = []
    for file in files:
        job, errors, warnings = validate_file(file, check_files=not no_file_checks)
        for line in warnings:
            click.echo(line, err=True)
        all_errors += errors
        if job is not None and not quiet:
            click.echo(f"{file}: ok ({job.job.kind} {job.job.metadata.namespace}/{job.name})")
    if all_errors:
        raise UserError(all_errors[0], problems=all_errors)
