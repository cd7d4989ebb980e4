"""``kale dashboard``: serve the read-only operator dashboard over a controller's state dir.

Binds 127.0.0.1 by default (the dashboard has no authentication: expose it with care), serves
everything itself (plotly.js from the installed wheel, no CDN) and runs until Ctrl-C.
"""

from __future__ import annotations

from pathlib import Path

import click

from common.errors import UserError
from kale.terminal.output import warn


@click.command("dashboard")
@click.option(
    "--state",
    "state_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".kale-state"),
    show_default=True,
    help="The controller's stateDir (its timeline.sqlite and status files).",
)
@click.option(
    "--simulation",
    "simulations",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A `kale simulate --json` result to compare policies (repeatable).",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind (0.0.0.0 exposes the dashboard to the network).",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    help="Another Host name the dashboard answers to (repeatable; loopback names and the "
    "--host address always work; others get 421, against DNS rebinding).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8080,
    show_default=True,
    help="Port (0 picks a free one).",
)
@click.option(
    "--refresh",
    "refresh_s",
    type=click.FloatRange(min=0.5),
    default=5.0,
    show_default=True,
    help="Seconds between page refreshes.",
)
def dashboard(
    state_dir: Path,
    simulations: tuple[Path, ...],
    host: str,
    allow_hosts: tuple[str, ...],
    port: int,
    refresh_s: float,
) -> None:
    """Serve the dashboard: jobs, forecasts, resizes, backlog vs SLO, quota, simulations."""
    import threading

    from kale.dashboard.app import create_app
    from kale.dashboard.hosts import allowed_hosts
    from kale.dashboard.server import DashboardServer

    for sim in simulations:
        if not sim.is_file():
            raise UserError(f"--simulation: {sim}: file not found")
    if not state_dir.exists() and not simulations:
        warn(f"{state_dir} does not exist yet; the page fills in once a controller writes there")
    app = create_app(
        state_dir=state_dir,
        sim_results=list(simulations),
        refresh_s=refresh_s,
        hosts=allowed_hosts(host, allow_hosts),
    )
    server = DashboardServer(app, host=host, port=port).start()
    click.echo(f"dashboard: {server.url}  (API: {server.url}docs; Ctrl-C stops)", err=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
