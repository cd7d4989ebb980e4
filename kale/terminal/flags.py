"""Click parameter types and flag validators shared by every command.

Validation happens at the boundary and reads the same everywhere: a bad flag is one
``kale: error: Invalid value for '--x': ...`` line and exit code 2. The callbacks are plain
functions so a command declares ``callback=positive`` instead of writing its own check: one
copy, so every command words a refusal alike and treats NaN alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import click

from common.durations import parse_duration


class Duration(click.ParamType):
    """A duration flag (``10``, ``90s``, ``5m``, ``1h``; a bare number means seconds),
    converted to seconds."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_duration(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DURATION = Duration()


def _kind(param: click.Parameter) -> str:
    if isinstance(param.type, Duration):
        return "duration"
    if isinstance(param.type, click.types.IntParamType):
        return "integer"
    return "number"


_F = TypeVar("_F", bound=Callable[..., Any])


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def positive(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """A number or duration > 0 and finite (``None`` passes: the flag was not given)."""
    if value is None:
        return value
    if not (_is_number(value) and math.isfinite(value) and value > 0):
        raise click.BadParameter(f"must be a positive {_kind(param)}, got {value}")
    return value


def non_negative(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """A number or duration ≥ 0 and finite (``None`` passes)."""
    if value is None:
        return value
    if not (_is_number(value) and math.isfinite(value) and value >= 0):
        raise click.BadParameter(f"must be a {_kind(param)} ≥ 0, got {value}")
    return value


def int_list(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[int, ...] | None:
    """``1,2,4`` → ``(1, 2, 4)``: positive integers, duplicates dropped, order kept."""
    if value is None:
        return None
    out: list[int] = []
    for part in value.split(","):
        text = part.strip()
        if not text.isdigit() or int(text) < 1:
            raise click.BadParameter(
                f"expected comma-separated positive integers such as 1,2,4; got {text!r}"
            )
        if int(text) not in out:
            out.append(int(text))
    return tuple(out)


def bootstrap_servers(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``HOST:PORT[,HOST:PORT...]`` with ports 1-65535 (``None`` passes)."""
    if value is None:
        return value
    for server in value.split(","):
        host, _, port = server.strip().rpartition(":")
        if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise click.BadParameter(f"expected HOST:PORT (e.g. 127.0.0.1:9092), got {server!r}")
    return value


def json_option(help: str = "Print the result as JSON.") -> Callable[[_F], _F]:
    """The ``--json`` flag every command takes (the output is a contract)."""
    return click.option("--json", "as_json", is_flag=True, help=help)
