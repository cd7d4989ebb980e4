"""DLinear (Zeng et al., AAAI 2023): a moving average splits the lookback window into trend
and remainder, and one linear layer each maps it to the horizon.

Both layers are linear, so they are fitted jointly in closed form (ridge least squares, the
penalty picked on a time-ordered holdout) instead of by SGD — no torch needed, which keeps
torch inside ``forecasting/transformer/``. As in the paper's normalised variant, each window
is taken relative to its last value, so level shifts do not need retraining. Quantiles come
from the model's in-sample errors per horizon step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from forecasting.base import Forecaster, InsufficientHistoryError, Payload
from forecasting.intervals import HorizonErrors, offset_for
from forecasting.seasonality import candidate_periods

MAX_WINDOWS = 6000
RIDGE_GRID = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)


def moving_average_matrix(length: int, kernel: int) -> np.ndarray:
    """A (length × length) matrix: centred moving average, edge-padded like DLinear."""
    half = (kernel - 1) // 2
    mat = np.zeros((length, length))
    for i in range(length):
        for j in range(i - half, i + half + 1):
            mat[i, min(max(j, 0), length - 1)] += 1.0 / kernel
    return mat


def choose_lookback(interval_s: float, n: int, horizon: int) -> int:
    """A week of steps when it fits (≤ 1440), else a day, never below 2·horizon.

    The lookback shrinks until at least max(lookback, 100) training windows remain.
    """
    periods = candidate_periods(interval_s)
    want = [p for p in (periods.get("weekly"), periods.get("daily")) if p and p <= 1440]
    lookback = max(want[0] if want else 1440, 2 * horizon)
    lookback = min(lookback, 1440)
    while lookback > 8 and n - lookback - horizon < max(lookback, 100):
        lookback //= 2
    return max(lookback, 2)


class DLinear(Forecaster):
    """Trend + remainder linear maps from a lookback window to ``horizon`` steps."""

    name = "dlinear"

    def __init__(
        self, *, horizon: int = 60, lookback: int | None = None, kernel: int = 25, **kw: Any
    ) -> None:
        super().__init__(horizon=horizon, lookback=lookback, kernel=kernel, **kw)
        self.horizon = horizon
        self.lookback = lookback or 0
        self.kernel = kernel
        self.weights: np.ndarray | None = None  # (2·lookback + 1, horizon)
        self.errors: HorizonErrors | None = None
        self._ma: np.ndarray | None = None

    def min_history_steps_for(self, interval_s: float) -> int:
        return max(3 * self.horizon + 16, super().min_history_steps_for(interval_s))

    def _features(self, windows: np.ndarray) -> np.ndarray:
        last = windows[:, -1:]
        x = windows - last
        if self._ma is None or self._ma.shape[0] != self.lookback:
            k = min(self.kernel | 1, self.lookback | 1)
            self._ma = moving_average_matrix(self.lookback, k).T
        trend = x @ self._ma
        return np.hstack([trend, x - trend, np.ones((len(x), 1))])

    def _fit(self, series: pd.Series) -> None:
        values = series.to_numpy()
        n = len(values)
        if not self.lookback:
            self.lookback = choose_lookback(float(self.interval_s or 60), n, self.horizon)
        count = n - self.lookback - self.horizon + 1
        if count < 20:
            raise InsufficientHistoryError(f"dlinear: {n} steps leave only {count} windows")
        starts = np.unique(np.linspace(0, count - 1, min(count, MAX_WINDOWS)).round().astype(int))
        idx = starts[:, None] + np.arange(self.lookback)[None, :]
        windows = values[idx]
        targets = values[idx[:, -1:] + 1 + np.arange(self.horizon)[None, :]] - windows[:, -1:]
        feats = self._features(windows)
        cut = int(len(feats) * 0.8)
        head = (feats[:cut].T @ feats[:cut], feats[:cut].T @ targets[:cut])
        full = (head[0] + feats[cut:].T @ feats[cut:], head[1] + feats[cut:].T @ targets[cut:])

        def holdout_error(lam: float) -> float:
            w = _ridge(*head, lam)
            return float(np.mean(np.abs(feats[cut:] @ w - targets[cut:])))

        best = min(RIDGE_GRID, key=holdout_error)
        self.weights = _ridge(*full, best)
        preds = feats @ self.weights + windows[:, -1:]
        tail = slice(cut, None)  # in-sample, but the latest windows
        self.errors = HorizonErrors.fit(
            preds[tail], (targets + windows[:, -1:])[tail], offset_for(values)
        )
        self.fit_summary.update(
            lookback=self.lookback, kernel=self.kernel, ridge=best, windows=len(feats)
        )

    def _predict(
        self, context: pd.Series, horizon: int
    ) -> tuple[np.ndarray, dict[float, np.ndarray]]:
        values = context.to_numpy()
        if len(values) < self.lookback:
            values = np.concatenate([np.full(self.lookback - len(values), values[0]), values])
        out: list[np.ndarray] = []
        window = values[-self.lookback :]
        while sum(len(o) for o in out) < horizon:  # iterate past the trained horizon
            step = (self._features(window[None, :]) @ self.weights)[0] + window[-1]
            step = np.clip(step, 0.0, None)
            out.append(step)
            window = np.concatenate([window, step])[-self.lookback :]
        point = np.concatenate(out)[:horizon]
        assert self.errors is not None
        return point, self.errors.apply(point)

    def _dump(self) -> Payload:
        assert self.weights is not None and self.errors is not None
        p = Payload(meta={"lookback": self.lookback}, arrays={"weights": self.weights})
        self.errors.dump("err_", p)
        return p

    def _restore(self, payload: Payload) -> None:
        self.lookback = int(payload.meta["lookback"])
        self.weights = payload.arrays["weights"]
        self.errors = HorizonErrors.restore("err_", payload)


def _ridge(gram: np.ndarray, xty: np.ndarray, lam: float) -> np.ndarray:
    """Solve (G + λ·mean(diag G)·I) w = Xᵀy, leaving the intercept (last column) unpenalised."""
    scale = np.trace(gram) / gram.shape[0]
    reg = lam * scale * np.eye(gram.shape[0])
    reg[-1, -1] = 0.0  # never shrink the intercept
    return np.linalg.solve(gram + reg, xty)
