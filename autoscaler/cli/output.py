"""Kept for ``cli/simulate.py``'s imports: the output helpers live in :mod:`autoscaler.terminal`
(outside the CLI package, so ``trainer`` and ``autoscaler.demo`` can use them without a cycle)."""

from autoscaler.terminal.output import emit_json, json_safe, table, warn

__all__ = ["emit_json", "json_safe", "table", "warn"]
