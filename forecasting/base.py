"""The one forecaster interface that backtests, the simulator and the controller share.

A model only implements ``_fit``, ``_predict`` and (to be saved) ``_dump``/``_restore``; this
base class does everything else once: input checks (a regular, tz-aware grid of finite,
non-negative rates), the interval, the context that ``predict``/``update`` extend, timestamps
that continue the history's grid, ordered non-negative quantiles, the fit summary, scheduled
refits and atomic save/load. That keeps a baseline down to a few dozen lines and makes every
model behave the same at the edges.
"""

from __future__ import annotations

import io
import json
import logging
import os
import tempfile
import time
import zipfile
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd

log = logging.getLogger(__name__)

QUANTILES: tuple[float, ...] = (0.1, 0.5, 0.9)
"""Quantile levels every forecaster produces (at least)."""

FORMAT = "kale-forecaster"
FORMAT_VERSION = 1


class ForecastError(Exception):
    """Root of the errors this package raises on purpose."""


class NotFittedError(ForecastError, RuntimeError):
    """``predict``/``update``/``save`` was called before ``fit``."""


class InsufficientHistoryError(ForecastError, ValueError):
    """The history is too short for this model (the fallback wrapper catches it)."""


class InvalidSeriesError(ForecastError, ValueError):
    """The input is not a regular series of finite, non-negative rates."""


# --------------------------------------------------------------------------- forecasts


def _iso(ts: pd.Timestamp) -> str:
    return ts.tz_convert("UTC").isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Forecast:
    """H future steps: timestamps, a point forecast (``mean``) and quantiles.

    Build it with :meth:`build`, which sorts the quantiles across levels (so p10 ≤ p50 ≤ p90
    at every step) and clips everything at zero (rates cannot be negative).
    """

    timestamps: pd.DatetimeIndex
    mean: np.ndarray
    quantiles: dict[float, np.ndarray]
    model: str = ""

    @classmethod
    def build(
        cls,
        timestamps: pd.DatetimeIndex,
        mean: np.ndarray,
        quantiles: dict[float, np.ndarray],
        model: str = "",
    ) -> Forecast:
        h = len(timestamps)
        point = np.clip(np.asarray(mean, dtype=float).reshape(-1), 0.0, None)
        if point.shape != (h,):
            raise ValueError(f"mean has {point.size} values for {h} timestamps")
        levels = sorted(float(q) for q in quantiles)
        missing = [q for q in QUANTILES if not any(abs(q - lv) < 1e-9 for lv in levels)]
        if missing:
            raise ValueError(f"quantiles {missing} are missing")
        stack = np.stack([np.asarray(quantiles[q], dtype=float).reshape(-1) for q in levels])
        if stack.shape != (len(levels), h):
            raise ValueError(f"quantiles must each have {h} values")
        if not (np.isfinite(stack).all() and np.isfinite(point).all()):
            raise ValueError("the forecast has non-finite values")
        stack = np.clip(np.sort(stack, axis=0), 0.0, None)
        qs = {round(lv, 6): stack[i] for i, lv in enumerate(levels)}
        return cls(timestamps=timestamps, mean=point, quantiles=qs, model=model)

    @property
    def horizon(self) -> int:
        return len(self.timestamps)

    def quantile(self, level: float) -> np.ndarray:
        for q, values in self.quantiles.items():
            if abs(q - level) < 1e-9:
                return values
        raise KeyError(f"no {level} quantile (have {sorted(self.quantiles)})")

    @property
    def p10(self) -> np.ndarray:
        return self.quantile(0.1)

    @property
    def p50(self) -> np.ndarray:
        return self.quantile(0.5)

    @property
    def p90(self) -> np.ndarray:
        return self.quantile(0.9)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``kale forecast predict --json``."""
        return {
            "timestamps": [_iso(t) for t in self.timestamps],
            "mean": self.mean.tolist(),
            "p10": self.p10.tolist(),
            "p50": self.p50.tolist(),
            "p90": self.p90.tolist(),
        }

    def to_frame(self) -> pd.DataFrame:
        data = {"mean": self.mean}
        for q in sorted(self.quantiles):
            data[f"p{round(q * 100):d}"] = self.quantiles[q]
        return pd.DataFrame(data, index=self.timestamps)


# --------------------------------------------------------------------------- input checks


def validate_series(history: pd.Series, *, what: str = "history") -> tuple[pd.Series, float]:
    """Return (a float copy on a UTC grid, interval in seconds) or raise InvalidSeriesError."""
    if not isinstance(history, pd.Series):
        raise InvalidSeriesError(f"{what}: expected a pandas Series, got {type(history).__name__}")
    if not isinstance(history.index, pd.DatetimeIndex):
        raise InvalidSeriesError(f"{what}: the index must be a DatetimeIndex")
    if len(history) < 2:
        raise InvalidSeriesError(f"{what}: needs at least 2 points, got {len(history)}")
    idx = history.index
    idx = idx.tz_localize("UTC") if idx.tz is None else idx.tz_convert("UTC")
    secs = np.asarray((idx - idx[0]).total_seconds(), dtype=float)
    steps = np.diff(secs)
    interval = float(steps[0])
    if interval <= 0 or np.any(np.abs(steps - interval) > 1e-6 * max(interval, 1.0)):
        raise InvalidSeriesError(
            f"{what}: timestamps must be strictly increasing on a regular grid "
            "(fill gaps first; autoscaler.traces.load_trace does)"
        )
    values = history.to_numpy(dtype=float, na_value=np.nan)
    if not np.isfinite(values).all():
        raise InvalidSeriesError(f"{what}: values must be finite (found NaN or inf)")
    if (values < 0).any():
        raise InvalidSeriesError(f"{what}: values are rates and must be ≥ 0")
    out = pd.Series(values, index=idx, name=history.name or "value")
    out.index.freq = pd.Timedelta(seconds=interval)
    return out, interval


def future_index(last: pd.Timestamp, interval_s: float, horizon: int) -> pd.DatetimeIndex:
    """The next ``horizon`` timestamps after ``last`` on the same grid."""
    step = pd.Timedelta(seconds=interval_s)
    return pd.date_range(last + step, periods=horizon, freq=step)


# --------------------------------------------------------------------------- the interface


@dataclass
class Payload:
    """What a model saves: JSON-safe metadata, numpy arrays and opaque blobs (torch weights)."""

    meta: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)


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
    def fit(self, history: pd.Series) -> Forecaster:
        series, interval = validate_series(history)
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
        self._fit(series)
        self.fit_summary.setdefault("model", self.name)
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
                f"new_points: first new timestamp {_iso(pts.index[0])} does not continue the "
                f"context (expected {_iso(expected)})"
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

    def refit(self) -> Forecaster:
        """Fit again on the current context (what a refit schedule calls)."""
        return self.fit(self.context)

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
            "t0": _iso(self._t0),
            "context_start": _iso(self._context.index[0]),
            "steps_since_fit": self._steps_since_fit,
            "fit_summary": self.fit_summary,
            "state": own.meta,
        }
        arrays = {"context": self._context.to_numpy(dtype=float), **own.arrays}
        return Payload(meta=meta, arrays=arrays, blobs=dict(own.blobs))

    @classmethod
    def from_payload(cls, payload: Payload) -> Forecaster:
        from forecasting.registry import forecaster_class

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
        payload = self.to_payload()
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as zf:
                manifest = {"format": FORMAT, "version": FORMAT_VERSION, **payload.meta}
                zf.writestr("manifest.json", json.dumps(manifest, indent=2, default=_json_default))
                buf = io.BytesIO()
                np.savez(buf, **payload.arrays)
                zf.writestr("arrays.npz", buf.getvalue())
                for name, blob in payload.blobs.items():
                    zf.writestr(f"blobs/{name}", blob)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Forecaster:
        """Read a file written by :meth:`save` (any model: the manifest names it)."""
        try:
            with zipfile.ZipFile(path) as zf:
                manifest = json.loads(zf.read("manifest.json"))
                with np.load(io.BytesIO(zf.read("arrays.npz")), allow_pickle=False) as npz:
                    arrays = {k: npz[k] for k in npz.files}
                blobs = {
                    n[len("blobs/") :]: zf.read(n) for n in zf.namelist() if n.startswith("blobs/")
                }
        except (zipfile.BadZipFile, KeyError, json.JSONDecodeError) as exc:
            raise ForecastError(f"{path}: not a saved forecaster ({exc})") from None
        if manifest.get("format") != FORMAT:
            raise ForecastError(
                f"{path}: not a saved forecaster (format {manifest.get('format')!r})"
            )
        if int(manifest.get("version", 0)) > FORMAT_VERSION:
            raise ForecastError(f"{path}: saved by a newer version (format {manifest['version']})")
        model = Forecaster.from_payload(Payload(meta=manifest, arrays=arrays, blobs=blobs))
        if cls is not Forecaster and not isinstance(model, cls):
            raise ForecastError(f"{path}: holds a {model.name} model, not {cls.name}")
        return model


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, pd.Timestamp):
        return _iso(value)
    raise TypeError(f"cannot save {type(value).__name__} in a manifest")
