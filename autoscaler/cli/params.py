"""Click parameter types shared by the ``kale`` commands."""

from __future__ import annotations

from typing import Any

import click

from autoscaler.durations import parse_duration


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
