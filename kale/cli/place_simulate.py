"""``kale place simulate``: the inflation experiment of "Beware of Fragmentation" (ATC'23).

Every policy on every seed over the openb node and pod CSVs; the JSON contract is
``{"policies": {NAME: {"final", "at100", "curve": {"0": …, "130": …}, "failed_pods",
"per_seed": [...]}}}`` (means over seeds, in percent), plus fragmentation and timings.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, cast

import click

from common.errors import UserError
from kale.cli.place import placement_error
from kale.terminal.output import emit_json, table

ALL_POLICIES = "random,dotprod,clustering,packing,bestfit,fgd"


def _print_table(summary: dict[str, Any]) -> None:
    rows = [
        [n, s["final"], s["at100"], s["failed_pods"], s["frag_final_pct"], s["seconds_per_run"]]
        for n, s in summary.items()
    ]
    click.echo(table(rows, ["policy", "final_%", "at100_%", "failed_pods", "frag_%", "s_per_run"]))


@click.command("simulate")
@click.option(
    "--nodes",
    "nodes_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="Node list CSV (sn,cpu_milli,memory_mib,gpu,model).",
)
@click.option(
    "--pods",
    "pods_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="Pod list CSV (name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,…).",
)
@click.option(
    "--policies", default=ALL_POLICIES, show_default=True, help="Comma-separated node policies."
)
@click.option(
    "--tune",
    type=click.FloatRange(min=0, min_open=True),
    default=1.3,
    show_default=True,
    help="Arrived GPU demand to reach, × cluster GPU capacity.",
)
@click.option("--seeds", default="42-51", show_default=True, help="Seeds: 42-51 or 1,3,5-7.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False),
    help="Save the allocation curves to this image.",
)
def simulate(
    nodes_path: str,
    pods_path: str,
    policies: str,
    tune: float,
    seeds: str,
    as_json: bool,
    plot_path: str | None,
) -> None:
    """Replay the inflation experiment: allocation as demand grows to TUNE × capacity."""
    from tqdm import tqdm

    from placement.errors import PlacementInputError
    from placement.inflation import InflationSettings, parse_seeds, run_experiment
    from placement.policies import parse_policy_names
    from placement.workloads.openb import load_nodes, load_pods

    if plot_path and not Path(plot_path).resolve().parent.is_dir():
        raise UserError(f"{plot_path}: cannot write the plot: no such folder")
    try:
        names, seed_list = parse_policy_names(policies), parse_seeds(seeds)
        nodes, pods = load_nodes(nodes_path), load_pods(pods_path)
        runs = len(names) * len(seed_list)
        with tqdm(total=runs, desc="inflation", unit="run", file=sys.stderr, disable=None) as bar:
            settings = InflationSettings(tune=tune)
            result = run_experiment(
                nodes, pods, names, seed_list, settings, on_run=lambda _: bar.update(1)
            )
    except PlacementInputError as exc:
        raise placement_error(exc) from None
    summary = cast(dict[str, Any], result["policies"])
    if plot_path:
        from placement.plots import plot_allocation

        try:
            plot_allocation(summary, plot_path)
        except OSError as exc:
            raise UserError(f"{plot_path}: cannot write the plot: {exc.strerror}") from None
    if as_json:
        emit_json(result)
    else:
        _print_table(summary)
