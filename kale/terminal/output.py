"""JSON for scripts, aligned tables and one-line warnings for people.

JSON goes to stdout as one document whose fields are a contract (``--json`` outputs are
read by scripts and tests): values are exact, NaN/infinity become ``null``. Tables go
through :func:`~common.numbers.format_number`, so the same quantity never
reads ``6.139e+04`` in one place and ``61.4k`` in another.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Collection, Sequence
from typing import Any

import click

from common.numbers import MISSING, format_number, format_percent


def json_safe(value: Any) -> Any:
    """Make numpy scalars, NaN and infinities JSON-safe (NaN/inf become null)."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def emit_json(obj: Any) -> None:
    """Print ``obj`` as JSON on stdout (one document, stable key order)."""
    click.echo(json.dumps(json_safe(obj), indent=2))


def warn(message: str) -> None:
    """One ``kale: warning:`` line on stderr (stdout stays the result)."""
    click.echo(f"kale: warning: {message}", err=True)


def cell_text(value: Any, *, percent: bool = False) -> str:
    """How one table cell reads: text as is, numbers through the one formatter."""
    if isinstance(value, str):
        return value
    if value is None:
        return MISSING
    return format_percent(value) if percent else format_number(value)


def table(
    rows: Sequence[Sequence[Any]],
    headers: Sequence[str],
    *,
    percent: Collection[str] = (),
) -> str:
    """A plain aligned text table; numbers are right-aligned and formatted one way.

    ``percent`` names the columns whose values are fractions to show as percentages.
    """
    cells = [
        [cell_text(v, percent=h in percent) for h, v in zip(headers, row, strict=True)]
        for row in rows
    ]
    numeric = [
        any(not isinstance(row[i], str) and row[i] is not None for row in rows)
        for i in range(len(headers))
    ]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    out = [line(list(headers)), "  ".join("-" * w for w in widths)]
    out += [line(row) for row in cells]
    return "\n".join(out)
