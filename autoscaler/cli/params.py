"""Kept for ``cli/simulate.py``'s imports: the flag types now live in
:mod:`autoscaler.terminal.flags`."""

from autoscaler.terminal.flags import DURATION, Duration

__all__ = ["DURATION", "Duration"]
