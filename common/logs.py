"""Structured logs: one JSON object per line, so decisions can be queried, not grepped.

Every record has ``time`` (RFC 3339 UTC), ``level``, ``logger`` and ``msg``; fields passed
with ``extra={"fields": {...}}`` are merged in (the loop logs each decision this way with
``event="decision"``, the job, sizes and the planner's reason).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any, TextIO


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=_default, separators=(",", ":"))


def _default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def setup_logging(
    fmt: str = "json", level: int = logging.INFO, stream: TextIO | None = None
) -> None:
    """Route the root logger to ``stream`` (stderr) as JSON lines or plain text."""
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level)
    for noisy in ("kafka", "urllib3", "kubernetes"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
