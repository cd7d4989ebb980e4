"""The one forecaster interface that backtests, the simulator and the controller share.

A model only implements ``_fit``, ``_predict`` and (to be saved) ``_dump``/``_restore``; this
base class does everything else once: input checks (a regular, tz-aware grid of finite,
non-negative rates), the interval, the context that ``predict``/``update`` extend, timestamps
that continue the history's grid, ordered non-negative quantiles, the fit summary, scheduled
refits (which start from the last fit where the model can: ``fit(history, previous=...)``)
and atomic save/load. That keeps a baseline down to a few dozen lines and makes every
model behave the same at the edges.
"""

from __future__ import annotations

import importlib
import logging
import os
import time
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from forecasting.errors import (
    ForecastError,
    InsufficientHistoryError,
    InvalidSeriesError,
    NotFittedError,
)
from forecasting.persistence import Payload, read_model_file, write_model_file
from forecasting.series import Forecast, future_index, iso_utc, validate_series

__all__ = [
    "Forecast",
    "ForecastError",
    "Forecaster",
    "InsufficientHistoryError",
    "InvalidSeriesError",
    "NotFittedError",
    "Payload",
    "validate_series",
]

log = logging.getLogger(__name__)


class Forecaster(ABC):
    """Fit on a history, predict H steps with quantiles, extend the context, save and load.

    Subclasses set ``name`` and implement ``_fit(series)`` and
    ``_predict(context, horizon) -> (mean, {level: values})``; ``_dump``/``_restore`` add
    their fitted state to the saved file. Constructor keyword arguments are kept in
    ``self.params`` so that ``load`` can rebuild the same model.
    """

    name: ClassVar[str] = "forecaster"

    def __init__(
        self, *, refit_every: float | None = None, max_context_days: float = 60.0, **params: Any
    ) -> None:
        self.params: dict[str, Any] = dict(params)
        self.refit_every = refit_every
        """Seconds of new data after which :attr:`refit_due` turns true (None: never)."""
        self.max_context_days = max_context_days
        """How much history :meth:`update` keeps (older points are dropped)."""
        self.interval_s: float | None = None
        self.fit_summary: dict[str, Any] = {}
        self._context: pd.Series | None = None
        self._fitted = False
        self._steps_since_fit = 0
        self._t0: pd.Timestamp | None = None

    # ---- capabilities (properties, not isinstance checks)
    @property
    def supports_probabilistic(self) -> bool:
        """Quantiles carry information (not just a constant band)."""
        return True

    @property
    def requires_seasonality(self) -> bool:
        """The model needs a detected season to be any good."""
        return False

    @property
    def supports_gpu(self) -> bool:
        return False

    @property
    def min_history(self) -> pd.Timedelta:
        """The shortest history this model fits on."""
        return pd.Timedelta(0)

    def min_history_steps_for(self, interval_s: float) -> int:
        return max(2, int(np.ceil(self.min_history.total_seconds() / interval_s)))

    @property
    def min_history_steps(self) -> int | None:
        """Steps of history needed at the fitted interval (None before the interval is known)."""
        return None if self.interval_s is None else self.min_history_steps_for(self.interval_s)

    @property
    def is_fitted(self) -> bool:
        return self._fitted

    @property
    def context(self) -> pd.Series:
        self._require_fitted("context")
        assert self._context is not None
        return self._context

    # ---- the work
    def fit(self, history: pd.Series, *, previous: Forecaster | None = None) -> Forecaster:
        """Fit on ``history``; with ``previous`` (an earlier fit), start from its state where
        the model can and the data allows (an incremental refit), else fit in full.

        ``previous`` is only read, never changed (it may be this model itself: see
        :meth:`refit`), and must be the same model with the same settings; the data's rules
        are :func:`forecasting.refit.decide_refit`'s. ``fit_summary["refit"]`` says which
        kind of fit ran and why (only when ``previous`` is given).
        """
        series, interval = validate_series(history)
        # Taken before anything here changes: ``previous`` may be ``self``.
        state, why_not = self._start_from(previous)
        need = self.min_history_steps_for(interval)
        if len(series) < need:
            raise InsufficientHistoryError(
                f"{self.name} needs at least {need} steps "
                f"({need * interval / 86400:.3g} days) of history, got {len(series)} "
                f"({len(series) * interval / 86400:.3g} days)"
            )
        self.interval_s = interval
        self._t0 = series.index[0]
        started = time.perf_counter()
        self.fit_summary = {"model": self.name}
        refit: dict[str, Any] | None = None
        if state is not None:
            refit = self._refit(series, state)
        else:
            self._fit(series)
            if previous is not None:
                refit = {"mode": "full", "reason": why_not}
        self.fit_summary.setdefault("model", self.name)
        if refit is not None:
            self.fit_summary["refit"] = refit
        self.fit_summary["fit_seconds"] = time.perf_counter() - started
        self.fit_summary["history_steps"] = len(series)
        self.fit_summary["interval_s"] = interval
        self._context = series
        self._fitted = True
        self._steps_since_fit = 0
        return self

    def predict(self, horizon: int, history: pd.Series | None = None) -> Forecast:
        """Forecast ``horizon`` steps after the end of ``history`` (default: the context)."""
        self._require_fitted("predict")
        if isinstance(horizon, bool) or not isinstance(horizon, int | np.integer) or horizon < 1:
            raise ValueError(f"horizon must be a positive integer, got {horizon!r}")
        horizon = int(horizon)
        if history is None:
            context = self.context
        else:
            context, interval = validate_series(history)
            if abs(interval - float(self.interval_s or 0)) > 1e-6:
                raise InvalidSeriesError(
                    f"history: interval {interval:g} s differs from the "
                    f"fitted {self.interval_s:g} s"
                )
        mean, quantiles = self._predict(context, horizon)
        timestamps = future_index(context.index[-1], float(self.interval_s or 0), horizon)
        return Forecast.build(timestamps, mean, quantiles, model=self.active_model)

    def update(self, new_points: pd.Series) -> Forecaster:
        """Extend the context with new observations (no refit); overlapping points are ignored."""
        self._require_fitted("update")
        ctx = self.context
        if len(new_points) == 0:
            return self
        if len(new_points) == 1:
            idx = new_points.index
            idx = idx.tz_localize("UTC") if idx.tz is None else idx.tz_convert("UTC")
            joined = pd.Series(new_points.to_numpy(dtype=float), index=idx)
            new_points = pd.concat([ctx.iloc[-1:], joined])
        pts, interval = validate_series(new_points, what="new_points")
        if abs(interval - float(self.interval_s or 0)) > 1e-6:
            raise InvalidSeriesError(
                f"new_points: interval {interval:g} s differs from the fitted {self.interval_s:g} s"
            )
        pts = pts[pts.index > ctx.index[-1]]
        if pts.empty:
            return self
        expected = ctx.index[-1] + pd.Timedelta(seconds=interval)
        if pts.index[0] != expected:
            raise InvalidSeriesError(
                f"new_points: first new timestamp {iso_utc(pts.index[0])} does not continue the "
                f"context (expected {iso_utc(expected)})"
            )
        merged = pd.concat([ctx, pts])
        keep = int(self.max_context_days * 86400 / interval)
        merged = merged.iloc[-max(keep, self.min_history_steps_for(interval)) :]
        merged.index.freq = pd.Timedelta(seconds=interval)
        self._context = merged
        self._steps_since_fit += len(pts)
        self._on_update(pts)
        return self

    @property
    def refit_due(self) -> bool:
        """True when ``refit_every`` seconds of new data arrived since the last fit."""
        if not self._fitted or self.refit_every is None or self.interval_s is None:
            return False
        return self._steps_since_fit * self.interval_s >= self.refit_every

    def refit(self, history: pd.Series | None = None) -> Forecaster:
        """Fit again on ``history`` (default: the current context), in place, starting from
        this fit where the model can (what a refit schedule calls)."""
        return self.fit(self.context if history is None else history, previous=self)

    def _start_from(self, previous: Forecaster | None) -> tuple[Any, str]:
        """(the state a refit starts from, or None; why not when None)."""
        if previous is None:
            return None, "no previous fit"
        if not previous.is_fitted:
            return None, "the previous model is not fitted"
        if type(previous) is not type(self) or previous.params != self.params:
            return None, f"the previous fit is a {previous.name} model with other settings"
        state = previous._refit_state()
        if state is None:
            return None, f"the previous {previous.name} fit kept no state to start from"
        return state, ""

    @property
    def active_model(self) -> str:
        """The model that actually produces forecasts (differs in the fallback wrapper)."""
        return str(self.fit_summary.get("model", self.name))

    # ---- hooks
    @abstractmethod
    def _fit(self, series: pd.Series) -> None: ...

    @abstractmethod
    def _predict(
        self, context: pd.Series, horizon: int
    ) -> tuple[np.ndarray, dict[float, np.ndarray]]: ...

    def _refit_state(self) -> Any:
        """What an incremental refit starts from: a snapshot the refit may keep and change
        without touching this model (None: this model always fits in full)."""
        return None

    def _refit(self, series: pd.Series, state: Any) -> dict[str, Any]:
        """Fit on ``series`` starting from ``state`` (from :meth:`_refit_state`) where the
        data allows; returns ``{"mode": "full" | "incremental", "reason": ...}``."""
        self._fit(series)
        return {"mode": "full", "reason": f"{self.name} fits in full every time"}

    def _on_update(self, new_points: pd.Series) -> None:  # noqa: B027 - optional hook
        """Models with running state (ETS level, trend) advance it here; default: nothing."""

    def _dump(self) -> Payload:
        return Payload()

    def _restore(self, payload: Payload) -> None:  # noqa: B027 - optional hook
        """Set the fitted state from what ``_dump`` wrote."""

    # ---- helpers for subclasses
    def _require_fitted(self, what: str) -> None:
        if not self._fitted:
            raise NotFittedError(f"{self.name}: call fit() before {what}()")

    def step_index(self, index: pd.DatetimeIndex) -> np.ndarray:
        """Integer step numbers of ``index`` counted from the first fitted timestamp."""
        assert self._t0 is not None and self.interval_s is not None
        secs = np.asarray((index - self._t0).total_seconds(), dtype=float)
        return np.round(secs / self.interval_s).astype(np.int64)

    # ---- persistence
    def to_payload(self) -> Payload:
        """The complete saved form (base state + the model's own)."""
        self._require_fitted("save")
        own = self._dump()
        assert self._context is not None and self._t0 is not None
        meta = {
            "model": self.name,
            "params": self.params,
            "refit_every": self.refit_every,
            "max_context_days": self.max_context_days,
            "interval_s": self.interval_s,
            "t0": iso_utc(self._t0),
            "context_start": iso_utc(self._context.index[0]),
            "steps_since_fit": self._steps_since_fit,
            "fit_summary": self.fit_summary,
            "state": own.meta,
        }
        arrays = {"context": self._context.to_numpy(dtype=float), **own.arrays}
        return Payload(meta=meta, arrays=arrays, blobs=dict(own.blobs))

    @classmethod
    def from_payload(cls, payload: Payload) -> Forecaster:
        meta = payload.meta
        model_cls = forecaster_class(meta["model"])
        model = model_cls(
            refit_every=meta.get("refit_every"),
            max_context_days=meta.get("max_context_days", 60.0),
            **meta.get("params", {}),
        )
        model.interval_s = float(meta["interval_s"])
        model._t0 = pd.Timestamp(meta["t0"])
        values = payload.arrays["context"]
        index = future_index(
            pd.Timestamp(meta["context_start"]) - pd.Timedelta(seconds=model.interval_s),
            model.interval_s,
            len(values),
        )
        model._context = pd.Series(values, index=index, name="value")
        model._context.index.freq = pd.Timedelta(seconds=model.interval_s)
        model.fit_summary = meta.get("fit_summary", {})
        model._steps_since_fit = int(meta.get("steps_since_fit", 0))
        own = Payload(
            meta=meta.get("state", {}),
            arrays={k: v for k, v in payload.arrays.items() if k != "context"},
            blobs=payload.blobs,
        )
        model._restore(own)
        model._fitted = True
        return model

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write one file (a zip: manifest.json, arrays.npz, blobs) atomically."""
        write_model_file(path, self.to_payload())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Forecaster:
        """Read a file written by :meth:`save` (any model: the manifest names it)."""
        model = Forecaster.from_payload(read_model_file(path))
        if cls is not Forecaster and not isinstance(model, cls):
            raise ForecastError(f"{path}: holds a {model.name} model, not {cls.name}")
        return model


IMPLEMENTATIONS: dict[str, str] = {
    "kale": "forecasting.transformer.forecaster:KaleForecaster",
    "seasonal_naive": "forecasting.naive:SeasonalNaive",
    "ets": "forecasting.ets:ETS",
    "stl_ets": "forecasting.ets:STLETS",
    "dlinear": "forecasting.dlinear:DLinear",
    "fallback": "forecasting.fallback:FallbackForecaster",
}
"""Every model's name → ``module:class``, imported on first use.

A saved file names its model, so loading one needs this table; the classes are named, not
imported, because they build on this module and because ``kale`` needs torch, which the
baselines (and everything that only uses them) must not pay for.
"""


def forecaster_class(name: str) -> type[Forecaster]:
    """The class of model ``name`` (its module imported now)."""
    try:
        target = IMPLEMENTATIONS[name]
    except KeyError:
        known = ", ".join(IMPLEMENTATIONS)
        raise ValueError(f"unknown model {name!r} (choose from {known})") from None
    module, attr = target.split(":")
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        root = (exc.name or "").split(".")[0]
        if root != "torch":
            raise
        # The core install has no torch; say which install brings it, in one line.
        raise ModuleNotFoundError(
            f"torch is not installed; the {name!r} forecaster needs it: run "
            "`pip install 'kale-autoscaler[transformer]'` (or pick seasonal_naive, ets, "
            "stl_ets or dlinear)",
            name=exc.name,
        ) from None
    cls: type[Forecaster] = getattr(loaded, attr)
    return cls
