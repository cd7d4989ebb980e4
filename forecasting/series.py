"""What goes into and comes out of a forecaster: a checked series and a :class:`Forecast`.

Every model gets the same input checks (a regular, tz-aware grid of finite, non-negative
rates) and returns the same shape (timestamps continuing the grid, ordered non-negative
quantiles), so backtests, the simulator and the controller never special-case a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from forecasting.errors import InvalidSeriesError

QUANTILES: tuple[float, ...] = (0.1, 0.5, 0.9)
"""Quantile levels every forecaster produces (at least)."""


def iso_utc(ts: pd.Timestamp) -> str:
    """``ts`` in UTC, ISO 8601 with a Z."""
    return str(ts.tz_convert("UTC").isoformat()).replace("+00:00", "Z")


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
            "timestamps": [iso_utc(t) for t in self.timestamps],
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
            "(fill gaps first; autoscaler.sim.traces.load_trace does)"
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
