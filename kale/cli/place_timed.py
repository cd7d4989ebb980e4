"""``kale place timed``: queue policies (and node policies) over time on SWF or openb traces."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click

from kale.cli.place import placement_error
from kale.terminal.output import emit_json, table

COLUMNS = (
    "bsld",
    "mean_wait_s",
    "mean_jct_s",
    "makespan_s",
    "util",
    "restarts",
    "gpu_hours_lost",
    "failed",
)


def _progress(label: str, total: int) -> Callable[[int], None]:
    if not sys.stderr.isatty():
        return lambda n: None
    from tqdm import tqdm

    return tqdm(total=total, desc=f"timed {label}", unit="job", file=sys.stderr, leave=False).update


@click.command(name="timed")
@click.option("--swf", type=click.Path(dir_okay=False), help="An SWF log (rigid batch jobs).")
@click.option("--nodes", type=click.Path(dir_okay=False), help="openb node CSV.")
@click.option("--pods", type=click.Path(dir_okay=False), help="openb pod CSV.")
@click.option(
    "--queue", default="fcfs", show_default=True, help="Queue policies: fcfs,sjf,wfp3,unicep,f1."
)
@click.option("--backfill", is_flag=True, help="EASY backfilling around the head job.")
@click.option("--placement", default=None, help="Node policies for openb (default bestfit).")
@click.option(
    "--faults",
    default=None,
    help="'default' (heterogeneous GPU failures) or a CSV node,gpu,rate_per_hour.",
)
@click.option("--seed", default=0, show_default=True, type=int, help="Seed (faults, tie-breaks).")
@click.option(
    "--protocol",
    type=click.Choice(["rlscheduler", "kale"]),
    default=None,
    help="SWF only: RLScheduler's 10 test sequences, with its rules or Kale's.",
)
@click.option(
    "--processors", type=int, default=None, help="SWF machine size (default: from the log)."
)
@click.option(
    "--checkpoint-s", default=3600.0, show_default=True, help="Checkpoint interval (faults)."
)
@click.option(
    "--restart-s", default=600.0, show_default=True, help="Delay before a killed job re-queues."
)
@click.option("--repair-s", default=7200.0, show_default=True, help="How long a failed GPU is out.")
@click.option(
    "--fault-history-s",
    default=0.0,
    show_default=True,
    help="Failures drawn this long before the first submit, seen by fault-aware policies.",
)
@click.option(
    "--fault-window-s",
    default=86400.0,
    show_default=True,
    help="Fault-aware policies count failures this far back.",
)
@click.option(
    "--arrival-speedup",
    default=1.0,
    show_default=True,
    help="Divide inter-arrival gaps by this (×load; run times unchanged).",
)
@click.option(
    "--node-share",
    default=1.0,
    show_default=True,
    help="openb: keep this seeded share of the nodes (a smaller cluster).",
)
@click.option(
    "--locality",
    is_flag=True,
    help="openb: jobs read their data through node caches (start delay by data locality).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option(
    "--plot",
    type=click.Path(dir_okay=False),
    default=None,
    help="PNG of queue and utilisation over time.",
)
def timed(
    as_json: bool,
    plot: str | None,
    checkpoint_s: float,
    restart_s: float,
    repair_s: float,
    fault_history_s: float,
    fault_window_s: float,
    **flags: object,
) -> None:
    """Run queue policies over time: makespan, JCT, wait, bounded slowdown, utilisation, faults."""
    from placement.errors import PlacementError
    from placement.faults import FaultSettings
    from placement.timed_experiment import TimedConfig, run_timed

    if plot is not None and flags.get("protocol"):
        raise placement_error(
            ValueError("--plot draws a timed run; it does not apply to --protocol")
        )
    try:
        settings = FaultSettings(
            checkpoint_s=checkpoint_s,
            restart_s=restart_s,
            repair_s=repair_s,
            history_s=fault_history_s,
            window_s=fault_window_s,
        )
        report = run_timed(TimedConfig(**flags, fault_settings=settings), progress=_progress)  # type: ignore[arg-type]
    except PlacementError as exc:
        raise placement_error(exc) from None
    if plot is not None:
        _plot(report, Path(plot))
    if as_json:
        emit_json({"policies": report.policies, "settings": report.settings})
        return
    rows = [[name, *(m.get(c) for c in COLUMNS)] for name, m in report.policies.items()]
    click.echo(table(rows, ["policy", *COLUMNS]))


def _plot(report: object, path: Path) -> None:
    from common.atomic import atomic_path
    from placement.timed_plot import plot_timelines

    timelines = getattr(report, "timelines", {})
    with atomic_path(path, suffix=path.suffix or ".png") as tmp:
        plot_timelines(timelines, tmp, title="kale place timed")
