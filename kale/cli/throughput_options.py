"""The flags ``kale throughput`` commands share, and how the throughput package's errors surface.

Why a module of its own: five subcommands take the same ``--profile``, ``--model``,
``--mode``, ``--ratio``, ``--global-batch`` and fold flags; declared once here, they read and
validate the same everywhere, and the command module stays a list of thin commands.
:func:`library_errors` maps ``throughput``'s own errors (it never imports ``autoscaler``) to
:class:`UserError` and prints its extrapolation warnings as ``kale: warning:`` lines.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click

from common.errors import UserError
from kale.terminal.flags import positive
from kale.terminal.output import warn

_F = TypeVar("_F", bound=Callable[..., Any])

MODE = click.Choice(["sync", "async"])
FAMILY = click.Choice(["auto", "general", "fixed-ratio", "linear", "optimus"])
FILE_IN = click.Path(dir_okay=False, path_type=Path)
FILE_OUT = click.Path(dir_okay=False, writable=True, path_type=Path)


@contextlib.contextmanager
def library_errors(writing: Path | None = None) -> Iterator[None]:
    """Map the throughput package's errors to UserError (and a failed write of ``writing``);
    print its extrapolation warnings as one line each."""
    from throughput.errors import ExtrapolationWarning, ThroughputError

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        except ThroughputError as exc:
            raise UserError(str(exc)) from None
        except (OSError, ValueError) as exc:
            if writing is None:
                raise
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise UserError(f"{writing}: cannot write ({reason})") from None
        finally:
            seen: set[str] = set()
            for w in caught:
                text = str(w.message)
                if text not in seen and issubclass(w.category, ExtrapolationWarning):
                    seen.add(text)
                    warn(text)


def ordered(lo: int, hi: int) -> None:
    """Reject --min-workers above --max-workers (naming both flags)."""
    if lo > hi:
        raise UserError(f"--min-workers ({lo}) is above --max-workers ({hi})")


# Options that several commands take, declared once.
PROFILE = click.option(
    "--profile",
    "profile_path",
    type=FILE_IN,
    required=True,
    help="Profile CSV: workers,ps,throughput[,mode].",
)
MODEL = click.option("--model", "model_path", type=FILE_IN, required=True, help="Model JSON.")
MODE_OPTION = click.option("--mode", type=MODE, required=True, help="Training mode of the job.")
RATIO = click.option(
    "--ratio",
    type=int,
    default=4,
    show_default=True,
    callback=positive,
    help="Workers per PS; the planner uses ps = ceil(workers / ratio).",
)
GLOBAL_BATCH = click.option(
    "--global-batch",
    type=float,
    default=4096,
    show_default=True,
    callback=positive,
    help="Global batch M (samples per synchronous step).",
)
FOLDS = click.option(
    "--folds",
    type=click.IntRange(2, 50),
    default=5,
    show_default=True,
    help="Cross-validation folds (by configuration).",
)
FOLD_SEED = click.option(
    "--seed", type=int, default=0, show_default=True, help="Fold shuffling seed."
)


def workers_option(flag: str, help: str, default: int | None = None) -> Callable[[_F], _F]:
    """A positive worker-count flag (``--min-workers``/``--max-workers``)."""
    return click.option(
        flag,
        type=int,
        default=default,
        show_default=default is not None,
        callback=positive,
        help=help,
    )
