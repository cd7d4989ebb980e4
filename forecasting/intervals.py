"""Quantiles for point forecasters, from their own in-sample h-step errors.

A baseline replays itself over its fit history: from many origins it forecasts up to
``horizon`` steps with the fitted state only, and the errors are kept per horizon step as
*relative* errors, ``(actual - forecast) / (forecast + offset)``. Traffic noise grows with
the level, so a band built this way is narrow at night and wide at the evening peak rather
than one constant width. Beyond the horizon that was replayed, the last step's quantiles are
widened by the square root of the ratio.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from forecasting.persistence import Payload
from forecasting.series import QUANTILES

MIN_ORIGINS = 8


def offset_for(values: np.ndarray) -> float:
    """The additive part of the scale: a tenth of the mean, so zeros do not explode errors."""
    mean = float(np.mean(values)) if len(values) else 0.0
    return max(0.1 * mean, 1e-6)


def replay_horizon(interval_s: float, n: int) -> int:
    """How many steps ahead in-sample errors are collected: a day, at least 192 steps."""
    day = round(86400 / interval_s)
    return int(max(1, min(max(day, 192), 1440, n // 3)))


def replay_origins(n: int, horizon: int, start: int, count: int = 300) -> np.ndarray:
    """Up to ``count`` origins evenly spread over [start, n - 1]; forecasts may run off the end."""
    start = max(1, min(start, n - 1))
    return np.unique(np.linspace(start, n - 1, num=min(count, n - start)).round().astype(int))


def actual_paths(values: np.ndarray, origins: np.ndarray, horizon: int) -> np.ndarray:
    """values[o : o + horizon] per origin, NaN past the end."""
    idx = origins[:, None] + np.arange(horizon)[None, :]
    out = np.full(idx.shape, np.nan)
    ok = idx < len(values)
    out[ok] = values[idx[ok]]
    return out


@dataclass
class HorizonErrors:
    """Per-step quantiles of relative errors; ``apply`` turns a point forecast into quantiles."""

    levels: tuple[float, ...]
    table: np.ndarray  # (horizon, levels)
    offset: float

    @classmethod
    def fit(
        cls,
        preds: np.ndarray,
        actual: np.ndarray,
        offset: float,
        levels: tuple[float, ...] = QUANTILES,
    ) -> HorizonErrors:
        rel = (actual - preds) / (np.clip(preds, 0.0, None) + offset)
        horizon = rel.shape[1]
        table = np.zeros((horizon, len(levels)))
        last = np.zeros(len(levels))
        for h in range(horizon):
            col = rel[:, h]
            col = col[np.isfinite(col)]
            if len(col) >= MIN_ORIGINS:
                last = np.quantile(col, levels)
            table[h] = last
        return cls(levels=tuple(levels), table=table, offset=offset)

    def apply(self, point: np.ndarray) -> dict[float, np.ndarray]:
        h = len(point)
        fitted = self.table.shape[0]
        rows = np.minimum(np.arange(h), fitted - 1)
        widen = np.sqrt(np.maximum(1.0, (np.arange(h) + 1) / fitted))
        scale = np.clip(point, 0.0, None) + self.offset
        out: dict[float, np.ndarray] = {}
        for i, q in enumerate(self.levels):
            out[q] = point + self.table[rows, i] * widen * scale
        return out

    def dump(self, prefix: str, payload: Payload) -> None:
        payload.arrays[f"{prefix}table"] = self.table
        payload.meta[f"{prefix}levels"] = list(self.levels)
        payload.meta[f"{prefix}offset"] = self.offset

    @classmethod
    def restore(cls, prefix: str, payload: Payload) -> HorizonErrors:
        return cls(
            levels=tuple(payload.meta[f"{prefix}levels"]),
            table=payload.arrays[f"{prefix}table"],
            offset=payload.meta[f"{prefix}offset"],
        )
