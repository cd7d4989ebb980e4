"""Forecasters for ``kale forecast``: flags to models, fits with progress, errors as one line.

Kept apart from the commands so each stays a mapping of flags to these calls: model names
are checked against the registry, a too-short trace or a bad model file is the user's to
fix (exit 2), the fallback wrapper's reason is said once, and library log warnings become
``kale: warning:`` lines.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from common.errors import UserError
from kale.terminal.output import warn
from kale.terminal.progress import FitProgress

if TYPE_CHECKING:
    import pandas as pd

    from forecasting.base import Forecaster


def model_names(text: str, flag: str = "--models") -> list[str]:
    from forecasting.registry import ALL_NAMES

    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UserError(f"{flag}: give at least one model name")
    bad = [n for n in names if n not in ALL_NAMES]
    if bad:
        raise UserError(f"{flag}: unknown model {bad[0]!r} (choose from {', '.join(ALL_NAMES)})")
    return names


def one_model(name: str) -> str:
    if "," in name:
        raise UserError(f"--model: give one model, got {name!r}")
    return model_names(name, flag="--model")[0]


@dataclass(frozen=True)
class ModelOptions:
    """The flags every subcommand hands to the forecasters it builds."""

    horizon: int
    device: str
    seed: int
    epochs: int | None = None

    def kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"horizon": self.horizon, "device": self.device, "seed": self.seed}
        out["progress"] = sys.stderr.isatty()  # kale's epoch bar, only where someone watches
        if self.epochs is not None:
            out["epochs"] = self.epochs
        return out

    def build(self, model: str, *, fallback: bool) -> Forecaster:
        from forecasting.registry import make_forecaster

        if fallback and model != "fallback":
            return make_forecaster("fallback", primary=model, **self.kwargs())
        return make_forecaster(model, **self.kwargs())


@contextlib.contextmanager
def _fallback_log_quiet() -> Iterator[None]:
    """Mute the fallback wrapper's log while fitting: the CLI prints the same reason as one
    ``kale: warning:`` line, and the log's bare copy would say it twice."""
    logger = logging.getLogger("forecasting.fallback")
    old = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(old)


class _KaleWarningHandler(logging.Handler):
    """Library warnings (a primary that failed to predict) as ``kale: warning:`` lines."""

    def emit(self, record: logging.LogRecord) -> None:
        # The kale model's own messages start with its name; one "kale:" is enough.
        warn(record.getMessage().removeprefix("kale: "))


def route_library_warnings() -> None:
    """With a handler of its own the logger no longer falls back to logging's bare
    last-resort line; records still propagate, to whatever the caller configured."""
    logger = logging.getLogger("forecasting")
    if not any(isinstance(h, _KaleWarningHandler) for h in logger.handlers):
        logger.addHandler(_KaleWarningHandler(level=logging.WARNING))


def fit_model(history: pd.Series, model: str, opts: ModelOptions, *, fallback: bool) -> Forecaster:
    """Fit one model on ``history`` (with progress); a too-short trace is the user's to fix."""
    from forecasting.base import InsufficientHistoryError

    with FitProgress(1, label="forecast") as progress:
        fc = progress.watch(opts.build(model, fallback=fallback), model)
        try:
            with _fallback_log_quiet():
                fc.fit(history)
        except (InsufficientHistoryError, ValueError) as exc:
            raise UserError(f"--trace: {exc}") from None
    summary = fc.fit_summary
    if summary.get("fallback"):
        warn(f"using {summary.get('model')}: {summary.get('reason')}")
    return fc


def refit_model(history: pd.Series, model_file: str) -> Forecaster:
    """The model saved in ``model_file`` fitted again on ``history`` (with progress),
    starting from its last fit where the data allows (an incremental refit)."""
    from forecasting.base import InsufficientHistoryError

    fc = load_model(model_file)
    with FitProgress(1, label="forecast") as progress:
        watched = progress.watch(fc, fc.name)
        try:
            with _fallback_log_quiet():
                watched.fit(history, previous=fc)
        except (InsufficientHistoryError, ValueError) as exc:
            raise UserError(f"--trace: {exc}") from None
    summary = fc.fit_summary
    if summary.get("fallback"):
        warn(f"using {summary.get('model')}: {summary.get('reason')}")
    return fc


def load_model(model_file: str) -> Forecaster:
    from forecasting.base import Forecaster, ForecastError

    try:
        return Forecaster.load(model_file)
    except (OSError, ForecastError) as exc:
        raise UserError(f"--model-file: {exc}") from None
