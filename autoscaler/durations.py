"""Durations as people write them in job files and flags: ``90s``, ``5m``, ``1h``, ``1h30m``.

A bare number is taken as seconds. Parsing is strict: anything else is a ``ValueError``
whose message says what is accepted, so config and CLI errors read the same everywhere.
"""

from __future__ import annotations

import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
ACCEPTED = "a duration such as 90s, 5m, 1h or 1h30m (units ms, s, m, h, d, w)"


def parse_duration(value: str | int | float) -> float:
    """Return the duration in seconds; raise ``ValueError`` naming the accepted forms."""
    if isinstance(value, bool):
        raise ValueError(f"expected {ACCEPTED}, got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"must not be negative, got {value}")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"expected {ACCEPTED}, got {type(value).__name__}")
    text = value.strip().lower()
    if not text:
        raise ValueError(f"expected {ACCEPTED}, got an empty string")
    try:
        seconds = float(text)
    except ValueError:
        pos = 0
        seconds = 0.0
        for match in _PART.finditer(text):
            if match.start() != pos:
                break
            seconds += float(match.group(1)) * _UNITS[match.group(2)]
            pos = match.end()
        if pos != len(text) or pos == 0:
            raise ValueError(f"expected {ACCEPTED}, got {value!r}") from None
    if seconds < 0:
        raise ValueError(f"must not be negative, got {value!r}")
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
