"""The errors this package raises on purpose (callers map them; the CLI to exit code 2)."""

from __future__ import annotations


class ForecastError(Exception):
    """Root of the errors this package raises on purpose."""


class NotFittedError(ForecastError, RuntimeError):
    """``predict``/``update``/``save`` was called before ``fit``."""


class InsufficientHistoryError(ForecastError, ValueError):
    """The history is too short for this model (the fallback wrapper catches it)."""


class InvalidSeriesError(ForecastError, ValueError):
    """The input is not a regular series of finite, non-negative rates."""
