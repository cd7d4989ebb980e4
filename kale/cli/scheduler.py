"""``kale scheduler``: a thin command over :mod:`scheduler` (a secondary scheduler)."""

from __future__ import annotations

import logging
from collections import Counter

import click

from common.errors import UserError

RESULTS = ("bound", "would bind", "nominated", "would preempt", "unschedulable", "error")
"""The order ``--once`` counts its outcomes in."""


@click.command()
@click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="scheduler.yaml (see examples/scheduler.yaml).",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Decide and log where each pod would go (and whom it would preempt); bind, "
    "annotate, evict and write nothing, and take no Lease.",
)
@click.option(
    "--once",
    is_flag=True,
    help="One scheduling pass over the pending pods, then print what became of each and "
    "exit 0 (with leader election: only if the Lease can be taken).",
)
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    metavar="NS",
    help="Place pods of this namespace only (repeatable; replaces `namespaces:` of the "
    "file). Bound pods of every namespace are still accounted.",
)
def scheduler(
    config_path: str, log_level: str, dry_run: bool, once: bool, namespaces: tuple[str, ...]
) -> None:
    """Bind pods whose spec.schedulerName matches to the node the placement policy picks."""
    from common.logs import setup_logging
    from placement.errors import PlacementError
    from scheduler.app import build
    from scheduler.config import load_scheduler_config, with_namespaces

    cfg = with_namespaces(load_scheduler_config(config_path), list(namespaces))
    setup_logging(cfg.log_format, getattr(logging, log_level.upper()))
    try:
        app = build(cfg, dry_run=dry_run)
    except (PlacementError, ValueError) as exc:
        raise UserError(f"{config_path}: policy: {exc}") from None
    if once:
        outcomes = app.run_once()
        counts = Counter(o.result for o in outcomes)
        scope = ", ".join(cfg.namespaces) or "all namespaces"
        totals = ", ".join(f"{counts[r]} {r}" for r in RESULTS if counts[r])
        mode = " (dry run: nothing written)" if dry_run else ""
        click.echo(
            f"kale scheduler --once{mode}: {len(outcomes)} pending pod(s) in {scope}"
            + (f": {totals}" if totals else "")
        )
        for o in sorted(outcomes, key=lambda o: o.pod):
            click.echo(f"  {o.pod}  {o.result}: {o.detail}")
        return
    app.install_signal_handlers()
    app.run()
