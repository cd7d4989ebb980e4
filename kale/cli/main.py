"""The ``kale`` command: one entry point, thin subcommands over library functions.

Exit codes are a contract: 0 success, 2 user error (bad file, bad flag, invalid config; a
one-line message, never a traceback), 1 internal error. Subcommands live in their own
modules and are imported only when invoked, so ``kale validate`` never pays for torch.
Every option can also be set from an environment variable ``KALE_<COMMAND>_<OPTION>``.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback

import click

from common.errors import UserError
from common.version import __version__

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USER = 2

# name -> "module:attribute"; the attribute is a click.Command or click.Group.
COMMANDS: dict[str, tuple[str, str]] = {
    "validate": ("kale.cli.validate:validate", "Check ElasticTrainingJob YAML files."),
    "trace": ("kale.cli.trace:trace", "Generate and inspect arrival-rate traces."),
    "broker": ("kale.cli.kafka:broker", "Run the embedded Kafka broker (tansu)."),
    "replay": ("kale.cli.kafka:replay", "Produce records to Kafka at a trace's rate."),
    "meter": ("kale.cli.kafka:meter", "Measure a topic's arrival rate, lag and age."),
    "throughput": ("kale.cli.throughput:throughput", "Fit and use throughput models."),
    "forecast": ("kale.cli.forecast:forecast", "Forecast, backtest and plot traffic."),
    "simulate": ("kale.cli.simulate:simulate", "Replay a trace against policies."),
    "demo": (
        "kale.cli.demo:demo",
        "Run the live end-to-end demo (broker, controller, workers, dashboard).",
    ),
    "dashboard": ("kale.cli.dashboard:dashboard", "Serve the read-only operator dashboard."),
    "controller": ("kale.cli.controller:controller", "Run the autoscaling controller."),
    "plan": ("kale.cli.controller:plan", "Plan one job against live Kafka (dry run)."),
    "crd": ("kale.cli.controller:crd", "Print the ElasticTrainingJob CRD."),
    "place": ("kale.cli.place:place", "Simulate GPU placement and queue scheduling."),
    "scheduler": (
        "kale.cli.scheduler:scheduler",
        "Place pods on Kubernetes with a placement policy (a secondary scheduler).",
    ),
    "train": (
        "kale.cli.trainer:train",
        "Train the job's CTR model (PS architecture) on its topic.",
    ),
    "profile": ("kale.cli.trainer:profile", "Measure throughput per (w, p) and the rescale time."),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        # Every command here is built in: if its module fails to import, that is a bug, and
        # it surfaces as one (exit 1, "internal error"), never as "not available".
        module_name, attr = entry[0].split(":")
        command: click.Command = getattr(importlib.import_module(module_name), attr)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kale")
def cli() -> None:
    """Kale: forecast-driven elastic GPU autoscaling for online training on Kafka."""


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return the documented exit code (the console script exits with it)."""
    args = sys.argv[1:] if argv is None else argv
    try:
        rv = cli.main(args=args, prog_name="kale", standalone_mode=False, auto_envvar_prefix="KALE")
        # Without standalone mode, click hands a command's `Exit(code)` back as the return
        # value instead of raising it; commands themselves return None.
        if isinstance(rv, int) and not isinstance(rv, bool):
            return rv
    except UserError as err:
        if len(err.problems) > 1 or err.bare:
            for line in err.problems:  # one line per problem, as `FILE: path: reason`
                click.echo(line, err=True)
        else:
            click.echo(f"kale: error: {err.problems[0]}", err=True)
        return EXIT_USER
    except click.exceptions.Exit as ex:
        return ex.exit_code
    except click.Abort:
        click.echo("kale: aborted", err=True)
        return 130
    except click.ClickException as err:
        hint = ""
        ctx = getattr(err, "ctx", None)
        if ctx is not None:
            hint = f" (see '{ctx.command_path} --help')"
        click.echo(f"kale: error: {err.format_message()}{hint}", err=True)
        return EXIT_USER if err.exit_code == 2 else err.exit_code or EXIT_USER
    except KeyboardInterrupt:
        click.echo("kale: interrupted", err=True)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except ModuleNotFoundError as exc:
        from kale.cli.extras import missing_extra

        extra = missing_extra(exc)
        if extra is None:
            return _internal(exc)  # a built-in module that fails to import is a bug
        click.echo(f"kale: error: {extra}", err=True)  # an optional install is missing
        return EXIT_USER
    except Exception as exc:
        return _internal(exc)
    return EXIT_OK


def _internal(exc: BaseException) -> int:
    """A bug: one line, the traceback only with KALE_DEBUG=1."""
    if os.environ.get("KALE_DEBUG"):
        traceback.print_exc()
    click.echo(
        f"kale: internal error: {type(exc).__name__}: {exc} (set KALE_DEBUG=1 for a traceback)",
        err=True,
    )
    return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
