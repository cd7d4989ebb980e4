"""``kale place``: the placement simulator's commands (thin wrappers over ``placement``).

Subcommands live in their own modules and are imported on first use, like the top-level
commands, so ``kale place --help`` stays fast.
"""

from __future__ import annotations

import importlib

import click

from common.errors import UserError

# name -> ("module:attribute", help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "simulate": (
        "kale.cli.place_simulate:simulate",
        "Inflation experiment: GPU allocation per node policy as demand grows.",
    ),
    "timed": (
        "kale.cli.place_timed:timed",
        "Queue (and node) policies over time: waits, slowdown, utilisation, faults.",
    ),
    "workloads": (
        "kale.cli.place_workloads:workloads",
        "Generate seeded workload families (openb variants, Lublin queues).",
    ),
    "train": (
        "kale.cli.place_train:train",
        "Train a learned scheduler (balance_dqn, tr_dqn) and save it as agent.pt.",
    ),
}


class _LazyPlaceGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = SUBCOMMANDS.get(cmd_name)
        if entry is None:
            return None
        module_name, attr = entry[0].split(":")
        command = getattr(importlib.import_module(module_name), attr)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, SUBCOMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=_LazyPlaceGroup)
def place() -> None:
    """Simulate GPU-cluster placement and queue scheduling on real traces."""


def placement_error(exc: Exception) -> UserError:
    """Turn a placement input error into the CLI's one-line exit-2 error."""
    return UserError(str(exc))
