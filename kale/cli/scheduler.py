"""``kale scheduler``: a thin command over :mod:`scheduler` (a secondary scheduler)."""

from __future__ import annotations

import logging

import click

from common.errors import UserError


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
def scheduler(config_path: str, log_level: str) -> None:
    """Bind pods whose spec.schedulerName matches to the node the placement policy picks."""
    from common.logs import setup_logging
    from placement.errors import PlacementError
    from scheduler.app import build
    from scheduler.config import load_scheduler_config

    cfg = load_scheduler_config(config_path)
    setup_logging(cfg.log_format, getattr(logging, log_level.upper()))
    try:
        app = build(cfg)
    except (PlacementError, ValueError) as exc:
        raise UserError(f"{config_path}: policy: {exc}") from None
    app.install_signal_handlers()
    app.run()
