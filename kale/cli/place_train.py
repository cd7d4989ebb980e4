"""``kale place train``: train a learned scheduler and save it as one ``.pt`` file.

A saved agent then runs wherever a policy name goes: ``kale place simulate --policies
bestfit,agent:PATH`` (node agents) and ``kale place timed --queue sjf,agent:PATH`` (queue
agents). ``--json`` prints ``{"agent", "output", "episodes", "seconds", "final", "curve",
"settings"}``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from common.errors import UserError
from kale.cli.place import placement_error
from kale.terminal.output import emit_json

AGENT_NAMES = ("balance_dqn", "tr_dqn", "fault_aware", "async_transformer")
File = click.Path(dir_okay=False)


@click.command("train")
@click.option("--agent", "name", required=True, type=click.Choice(AGENT_NAMES))
@click.option("--nodes", "nodes_path", type=File, help="Node list CSV (node-level agents).")
@click.option("--pods", "pods_path", type=File, help="Pod list CSV (node-level agents).")
@click.option("--swf", "swf_path", type=File, help="SWF job log (queue-level agents).")
@click.option("--processors", type=click.IntRange(min=1), help="SWF machine size (default: log).")
@click.option("--episodes", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("-o", "--output", "out_path", required=True, type=File, help="Where to save it.")
@click.option("--reward", type=click.Choice(["wait", "util"]), help="tr_dqn's reward function.")
@click.option(
    "--set",
    "assignments",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override one agent setting (VALUE as JSON, else text; env.KEY for the environment's).",
)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--plot", "plot_path", type=File, help="Save the training curve to this image.")
def train(
    name: str,
    nodes_path: str | None,
    pods_path: str | None,
    swf_path: str | None,
    processors: int | None,
    episodes: int,
    out_path: str,
    reward: str | None,
    assignments: tuple[str, ...],
    device: str,
    seed: int,
    as_json: bool,
    plot_path: str | None,
) -> None:
    """Train agent NAME on the given workload and save it to OUTPUT."""
    from tqdm import tqdm

    from placement.agents.training import (
        load_training_data,
        parse_assignments,
        train_agent,
        training_summary,
    )
    from placement.errors import PlacementInputError

    for path in (out_path, plot_path):
        if path and not Path(path).resolve().parent.is_dir():
            raise UserError(f"{path}: cannot write here: no such folder")
    try:
        data = load_training_data(nodes_path, pods_path, swf_path, processors)
        overrides = {"env.reward": reward} if reward else {}
        overrides.update(parse_assignments(assignments))
        with tqdm(total=episodes, desc=name, unit="episode", file=sys.stderr, disable=None) as bar:
            agent = train_agent(
                name,
                episodes=episodes,
                seed=seed,
                device=device,
                overrides=overrides,
                on_episode=lambda _: bar.update(1),
                **data,
            )
        agent.save(out_path)
        summary = training_summary(agent, out_path, plot_path)
    except PlacementInputError as exc:
        raise placement_error(exc) from None
    except OSError as exc:
        raise UserError(f"{exc.filename or out_path}: cannot write: {exc.strerror}") from None
    if as_json:
        emit_json(summary)
    else:
        final = summary["final"]
        click.echo(f"{name}: {episodes} episodes in {summary['seconds']:.1f} s, last {final}")
        click.echo(f"saved {out_path}")
