"""A forecaster that sees a time-compressed run in the time of the traffic it replays.

Why this module exists: the demo's controller lives in wall time (a 20-minute interval lasts
one second), but forecasters find daily and weekly seasonality from their input's calendar:
a history stamped in compressed wall seconds has neither. :class:`WarpedForecaster` maps the
controller's measured history back to trace time, puts the trace's own past (the days before
the live part: what a production controller would have in its 28-day history) in front of it,
and hands that to the real model. Forecast values are per step, so they need no mapping back.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd


class WarpedForecaster:
    """Wraps ``inner`` (any :class:`forecasting.base.Forecaster`) for a compressed run.

    ``seed``: the trace before the live part, on the trace-time grid of ``interval_s``;
    ``wall_origin`` (epoch s) is when the live part started and ``trace_origin`` the trace
    time it stands for; ``speedup`` trace seconds pass per wall second.
    """

    def __init__(
        self,
        inner: Any,
        *,
        seed: pd.Series,
        wall_origin: float,
        trace_origin: float,
        speedup: float,
        interval_s: float,
    ) -> None:
        self.inner = inner
        self.seed = seed
        self.wall_origin = wall_origin
        self.trace_origin = trace_origin
        self.speedup = speedup
        self.interval_s = interval_s

    def warp(self, history: pd.Series) -> pd.Series:
        """The measured history in trace time, after the seed, on one regular grid."""
        wall = pd.DatetimeIndex(history.index).as_unit("ns").asi8 / 1e9
        trace = self.trace_origin + (wall - self.wall_origin) * self.speedup
        steps = np.round((trace - self.trace_origin) / self.interval_s).astype(np.int64)
        live = pd.Series(history.to_numpy(dtype=float), index=steps)
        live = live[live.index >= 0].groupby(level=0).mean()
        n_seed = len(self.seed)
        last = int(live.index.max()) if len(live) else -1
        values = np.full(n_seed + last + 1, np.nan)
        values[:n_seed] = self.seed.to_numpy(dtype=float)
        if len(live):
            values[n_seed + live.index.to_numpy()] = live.to_numpy()
        filled = pd.Series(values).ffill().bfill().clip(lower=0.0).to_numpy()
        index = pd.date_range(
            self.seed.index[0], periods=len(filled), freq=pd.Timedelta(seconds=self.interval_s)
        )
        return pd.Series(filled, index=index, name="arrival_rate")

    def fit(self, history: pd.Series) -> WarpedForecaster:
        self.inner.fit(self.warp(history))
        return self

    def predict(self, horizon: int, history: pd.Series | None = None) -> Any:
        return self.inner.predict(
            horizon, history=self.warp(history) if history is not None else None
        )

    def __getattr__(self, name: str) -> Any:  # fit_summary, name, … of the real model
        return getattr(self.inner, name)
