"""Durations as people write them in job files and flags: ``90s``, ``5m``, ``1h``, ``1h30m``.

A bare number is taken as seconds. Parsing is strict, because a duration reaches arithmetic
(steps = horizon / interval, sleeps, array sizes): only ASCII digits (``"５m"`` is refused, though
Python's ``float`` and ``\\d`` accept it), no exponents, ``inf`` or ``nan`` (``1e400`` would be
infinite), and never more than :data:`MAX_SECONDS`. Anything else is a ``ValueError`` whose
message says what is accepted, so config and CLI errors read the same everywhere.

:data:`GRAMMAR` is the same rule as one anchored regular expression; the CRD's ``pattern``
for duration strings is built from it, so the API server refuses what this module refuses.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from common.yamldoc import kind_of

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_NUMBER = r"[0-9]{1,12}(?:\.[0-9]{1,9})?"
_PART = re.compile(rf"({_NUMBER})(ms|s|m|h|d|w)")
GRAMMAR = rf"(?:{_NUMBER}|(?:{_NUMBER}(?:ms|s|m|h|d|w)){{1,6}})"
"""A duration string: a bare number of seconds, or 1–6 ``<number><unit>`` parts."""
_FULL = re.compile(GRAMMAR)
MAX_LENGTH = 64
"""Longest duration string accepted (``1h30m`` is 5 characters)."""
MAX_SECONDS = 10 * 365 * 86400.0
"""No duration anywhere is longer than ten years: larger values are typos or attacks, and
every product of a duration with a rate or a count stays far from overflow."""
ACCEPTED = "a duration such as 90s, 5m, 1h or 1h30m (units ms, s, m, h, d, w)"


def parse_duration(value: str | int | float) -> float:
    """Return the duration in seconds; raise ``ValueError`` naming the accepted forms."""
    if isinstance(value, bool):
        raise ValueError(f"expected {ACCEPTED}, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"must not be negative, got {value}")
        if value > MAX_SECONDS:  # compare as int: float(10**400) would overflow
            raise ValueError(f"must be at most 10 years ({MAX_SECONDS:g}s), got {value}")
        return float(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number of seconds, got {value!r}")
        if value < 0:
            raise ValueError(f"must not be negative, got {value:g}")
        if value > MAX_SECONDS:
            raise ValueError(f"must be at most 10 years ({MAX_SECONDS:g}s), got {value:g}")
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected {ACCEPTED}, got {type(value).__name__}")
    if len(value) > MAX_LENGTH:
        raise ValueError(f"expected {ACCEPTED}, got a {len(value)}-character string")
    if not value.isascii():
        raise ValueError(f"expected {ACCEPTED} in ASCII digits and letters, got {value!r}")
    text = value.strip().lower()
    if not text:
        raise ValueError(f"expected {ACCEPTED}, got an empty string")
    if text.startswith("-") and _FULL.fullmatch(text[1:]):
        raise ValueError(f"must not be negative, got {value!r}")
    if not _FULL.fullmatch(text):
        hint = ""
        if re.search(r"inf|nan", text):
            hint = " (infinite and NaN durations are refused)"
        elif re.search(r"[0-9]e[-+0-9]", text):
            hint = " (no exponents: write 90s, not 9e1)"
        raise ValueError(f"expected {ACCEPTED}, got {value!r}{hint}")
    if text[-1].isdigit():
        seconds = float(text)
    else:
        seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(text))
    if seconds > MAX_SECONDS:
        raise ValueError(f"must be at most 10 years ({MAX_SECONDS:g}s), got {value!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """Shortest exact form of ``seconds`` (``300`` → ``5m``); inverse of :func:`parse_duration`."""
    if seconds == int(seconds):
        s = int(seconds)
        for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
            if s and s % size == 0:
                return f"{s // size}{unit}"
        return f"{s}s"
    return f"{seconds:g}s"


def duration_value(value: Any) -> float:
    """A settings field's duration in seconds; a mapping or list is named as such."""
    if isinstance(value, dict | list):
        raise ValueError(f"expected a duration such as 90s, 5m or 1h, got a {kind_of(value)}")
    return parse_duration(value)


Duration = Annotated[float, BeforeValidator(duration_value)]
"""A pydantic field holding a duration (``90s``, ``5m``…) as seconds."""
PositiveDuration = Annotated[float, BeforeValidator(duration_value), Field(gt=0)]
"""A duration that must be more than zero."""
