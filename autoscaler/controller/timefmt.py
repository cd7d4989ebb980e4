"""RFC 3339 time stamps, cached: a tick stamps every job's status with the same few times."""

from __future__ import annotations

import datetime as dt
from functools import lru_cache


@lru_cache(maxsize=4096)
def iso(t: float) -> str:
    """``2026-01-01T00:00:00Z`` for epoch seconds ``t`` (UTC, whole seconds)."""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
