"""Holt-Winters (``ets``) and STL + ETS (``stl_ets``) baselines on statsmodels.

statsmodels estimates the smoothing parameters and initial states; the recursion itself is
re-run here (the same additive damped-trend equations as
``statsmodels.tsa.holtwinters.ExponentialSmoothing``) so that a fitted model can advance its
state over new points — ``update`` and ``predict(history=…)`` — without refitting, and replay
itself in-sample for its quantiles.

Limitation, on purpose: Holt-Winters keeps one seasonal state per step of one period. ``ets``
uses the daily period (1440 states on 1-minute data, fitted with the heuristic
initialisation because optimising 1440 initial states is slow and unstable) and cannot also
carry the weekly one; ``stl_ets`` removes daily and weekly seasons with MSTL first and fits a
damped-trend ETS to what is left.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from forecasting.base import Forecaster, Payload
from forecasting.decomposition import SeasonalProfile, decompose
from forecasting.intervals import (
    HorizonErrors,
    actual_paths,
    offset_for,
    replay_horizon,
    replay_origins,
)
from forecasting.seasonality import clip_spikes, detect_seasonality


@dataclass
class HWState:
    """Additive damped Holt-Winters state after consuming steps [0, next_step)."""

    alpha: float
    beta: float
    gamma: float
    phi: float
    level: float
    trend: float
    season: np.ndarray  # season[k % m] is the seasonal state of absolute step k
    next_step: int

    @property
    def m(self) -> int:
        return len(self.season)

    def copy(self) -> HWState:
        return HWState(
            self.alpha,
            self.beta,
            self.gamma,
            self.phi,
            self.level,
            self.trend,
            self.season.copy(),
            self.next_step,
        )

    def advance(
        self, y: np.ndarray, origins: np.ndarray | None = None, horizon: int = 0
    ) -> np.ndarray | None:
        """Consume ``y`` (steps next_step, next_step+1, …); optionally forecast at origins.

        ``origins`` are positions in ``y``: the forecast from origin o uses y[:o] only.
        """
        a, b_, g, phi = self.alpha, self.beta, self.gamma, self.phi
        lvl, tr = self.level, self.trend
        m = self.m
        season = self.season.tolist() if m else []
        paths = None
        want: dict[int, int] = {}
        if origins is not None and horizon > 0:
            paths = np.full((len(origins), horizon), np.nan)
            want = {int(o): i for i, o in enumerate(origins)}
        k0 = self.next_step
        for i, yi in enumerate(np.asarray(y, dtype=float).tolist()):
            if i in want:
                self.level, self.trend, self.next_step = lvl, tr, k0 + i
                self.season = np.asarray(season)
                paths[want[i]] = self.forecast(horizon)  # type: ignore[index]
            s_old = season[(k0 + i) % m] if m else 0.0
            damped = lvl + phi * tr
            new_lvl = a * (yi - s_old) + (1 - a) * damped
            tr = b_ * (new_lvl - lvl) + (1 - b_) * phi * tr
            if m:
                season[(k0 + i) % m] = g * (yi - damped) + (1 - g) * s_old
            lvl = new_lvl
        self.level, self.trend, self.next_step = lvl, tr, k0 + len(y)
        self.season = np.asarray(season, dtype=float)
        if paths is not None and len(y) in want:
            paths[want[len(y)]] = self.forecast(horizon)
        return paths

    def forecast(self, horizon: int) -> np.ndarray:
        h = np.arange(1, horizon + 1)
        damp = np.cumsum(self.phi**h) if self.phi != 1 else h.astype(float)
        out = self.level + damp * self.trend
        if self.m:
            out = out + self.season[(self.next_step + h - 1) % self.m]
        return out

    def to_meta(self) -> dict[str, Any]:
        return {
            k: float(getattr(self, k)) for k in ("alpha", "beta", "gamma", "phi", "level", "trend")
        } | {"next_step": self.next_step}

    @classmethod
    def from_meta(cls, meta: dict[str, Any], season: np.ndarray) -> HWState:
        return cls(
            meta["alpha"],
            meta["beta"],
            meta["gamma"],
            meta["phi"],
            meta["level"],
            meta["trend"],
            np.asarray(season, dtype=float),
            int(meta["next_step"]),
        )


def fit_holt_winters(y: np.ndarray, period: int, damped: bool = True) -> HWState:
    """Estimate with statsmodels; return the *initial* state (before step 0)."""
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    seasonal = period >= 2 and len(y) >= 2 * period
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence chatter on flat or short series
        model = ExponentialSmoothing(
            np.asarray(y, dtype=float),
            trend="add",
            damped_trend=damped,
            seasonal="add" if seasonal else None,
            seasonal_periods=period if seasonal else None,
            initialization_method="heuristic" if seasonal else "estimated",
        )
        res = model.fit()
    p = res.params

    def val(key: str, default: float) -> float:
        v = p.get(key, default)
        return default if v is None or not np.isfinite(v) else float(v)

    season = np.asarray(p["initial_seasons"], dtype=float) if seasonal else np.zeros(0)
    return HWState(
        alpha=val("smoothing_level", 0.5),
        beta=val("smoothing_trend", 0.0),
        gamma=val("smoothing_seasonal", 0.0),
        phi=val("damping_trend", 1.0),
        level=val("initial_level", float(y[0])),
        trend=val("initial_trend", 0.0),
        season=season,
        next_step=0,
    )


class _StateForecaster(Forecaster):
    """Shared plumbing: a Holt-Winters state over an (optionally deseasonalised) series."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.state: HWState | None = None
        self.initial: HWState | None = None
        self.profile = SeasonalProfile(np.zeros(0))
        self.errors: HorizonErrors | None = None

    def min_history_steps_for(self, interval_s: float) -> int:
        return max(10, super().min_history_steps_for(interval_s))

    def _adjust(self, values: np.ndarray, steps: np.ndarray) -> np.ndarray:
        return values - self.profile.at(steps)

    def _finish_fit(
        self,
        values: np.ndarray,
        adjusted: np.ndarray,
        future_seasonal: Callable[[np.ndarray, int], np.ndarray],
    ) -> None:
        """Run the recursion over the history, replay it for quantiles, keep the end state."""
        assert self.initial is not None
        n = len(values)
        horizon = replay_horizon(float(self.interval_s or 60), n)
        origins = replay_origins(n, horizon, start=n // 4)
        state = self.initial.copy()
        paths = state.advance(adjusted, origins=origins, horizon=horizon)
        assert paths is not None
        paths = paths + future_seasonal(origins, horizon)
        self.errors = HorizonErrors.fit(
            paths, actual_paths(values, origins, horizon), offset_for(values)
        )
        self.state = state

    def _state_for(self, context: pd.Series) -> HWState:
        assert self.state is not None and self.initial is not None
        steps = self.step_index(context.index)
        end = int(steps[-1]) + 1
        if end == self.state.next_step:
            return self.state
        values = context.to_numpy()
        if end > self.state.next_step and steps[0] <= self.state.next_step:
            start = self.state.next_step - int(steps[0])
            state = self.state.copy()
            state.advance(self._adjust(values[start:], steps[start:]))
            return state
        # In-sample or detached histories: replay from the start when it is there, else
        # approximately from the latest state (levels re-adapt within a few 1/alpha steps).
        state = (self.initial if steps[0] == 0 else self.state).copy()
        state.next_step = int(steps[0])
        state.advance(self._adjust(values, steps))
        return state

    def _on_update(self, new_points: pd.Series) -> None:
        assert self.state is not None
        steps = self.step_index(new_points.index)
        keep = steps >= self.state.next_step
        self.state.advance(self._adjust(new_points.to_numpy()[keep], steps[keep]))

    def _predict(
        self, context: pd.Series, horizon: int
    ) -> tuple[np.ndarray, dict[float, np.ndarray]]:
        state = self._state_for(context)
        last = int(self.step_index(context.index[-1:])[0])
        point = state.forecast(horizon) + self.profile.at(last + 1 + np.arange(horizon))
        assert self.errors is not None
        return point, self.errors.apply(point)

    def _dump(self) -> Payload:
        assert self.state is not None and self.initial is not None and self.errors is not None
        p = Payload(
            meta={
                "state": self.state.to_meta(),
                "initial": self.initial.to_meta(),
                "profile_anchor": self.profile.anchor,
            },
            arrays={
                "season": self.state.season,
                "initial_season": self.initial.season,
                "profile": self.profile.table,
            },
        )
        self.errors.dump("err_", p)
        return p

    def _restore(self, payload: Payload) -> None:
        self.state = HWState.from_meta(payload.meta["state"], payload.arrays["season"])
        self.initial = HWState.from_meta(payload.meta["initial"], payload.arrays["initial_season"])
        self.profile = SeasonalProfile(payload.arrays["profile"], payload.meta["profile_anchor"])
        self.errors = HorizonErrors.restore("err_", payload)


class ETS(_StateForecaster):
    """Holt-Winters: additive damped trend + additive season (daily, else weekly, else none)."""

    name = "ets"

    def _fit(self, series: pd.Series) -> None:
        values = series.to_numpy()
        report = detect_seasonality(values, float(self.interval_s or 60))
        period = report.detected.get("daily") or report.detected.get("weekly") or 0
        self.initial = fit_holt_winters(values, period)
        self.fit_summary.update(
            seasonality=report.to_dict(), period_steps=self.initial.m, params=self.initial.to_meta()
        )

        def seasonal(origins: np.ndarray, horizon: int) -> np.ndarray:
            return np.zeros((len(origins), horizon))  # the state carries the season

        self._finish_fit(values, values, seasonal)


class STLETS(_StateForecaster):
    """STL/MSTL deseasonalise → damped-trend ETS → add the last seasonal cycle back."""

    name = "stl_ets"

    def _fit(self, series: pd.Series) -> None:
        values = series.to_numpy()
        n = len(values)
        report = detect_seasonality(values, float(self.interval_s or 60))
        # The seasonal part comes from the series with rare extreme spikes clipped: otherwise
        # the last cycle's seasonal carries a burst (a news event) into every forecast a period
        # later (docs/decisions/0016-seasonality-detected-on-detrended-clipped-series.md).
        # Spikes stay in the adjusted series, where the damped level absorbs them.
        dec = decompose(clip_spikes(values), report.periods)
        self.profile = SeasonalProfile.from_decomposition(dec, end_step=n)
        seasonal_hist = dec.seasonal
        adjusted = values - seasonal_hist
        self.initial = fit_holt_winters(adjusted, 0)
        self.fit_summary.update(
            seasonality=report.to_dict(),
            periods=sorted(dec.seasonals),
            params=self.initial.to_meta(),
        )
        longest = max(dec.seasonals, default=0)

        def seasonal(origins: np.ndarray, horizon: int) -> np.ndarray:
            # Seasonal naive of the seasonal component, as at prediction time.
            if not longest:
                return np.zeros((len(origins), horizon))
            h = np.arange(1, horizon + 1)
            idx = origins[:, None] - 1 + h[None, :] - longest * np.ceil(h / longest)[None, :]
            return seasonal_hist[np.clip(idx.astype(int), 0, n - 1)]

        self._finish_fit(values, adjusted, seasonal)
