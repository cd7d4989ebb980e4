"""One forecast feed: the choices between a forecaster and the planner, made once.

The planner asks at step ``s`` for the rates of steps ``s … s+H−1``; a forecaster answers
"H steps after the end of this history". Between the two sit choices that change decisions:
when to refit (on the job's ``spec.forecast.refit``, and early while the history is young),
which history a fit and a forecast see (the last ``context`` of it), how often a new forecast
is made (origins on a fixed grid of steps; the steps in between slice the latest one), which
quantile is the upper band (``spec.forecast.quantile``), and what serves before the first fit
is done (an interim model). This module makes those choices once, as a state machine with no
threads, clock or I/O. The simulator drives it synchronously (:mod:`autoscaler.sim.forecasting`),
the controller synchronously or with its fit pool (:mod:`autoscaler.controller.forecast`), so a
simulated run shows the planner what the controller would show it.

Each fit starts from the one before it (:func:`fit_model`): a forecaster that can refits
incrementally where the data allows, so a daily refit costs seconds instead of a full fit.

**Answers depend on the step and the history only, not on which steps were asked before.** A
fit due at step ``d`` is fitted on the history up to ``d`` (and, incrementally, from the fit
before it, itself due at a step fixed by the history), whenever it is noticed; a forecast
for origin ``o`` uses the model in force at ``o`` and the history up to ``o``. So two policies
sharing one feed in a simulation (kale and madu, which ask at different steps because each
skips the steps of its own resizes) see the same window for the same step, and no forecast ever
comes from a model fitted on data after its origin. (A background fit relaxes the second rule
in the controller only: it serves from when it is done.)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from statistics import NormalDist
from typing import Any, Protocol

import numpy as np
import pandas as pd

from autoscaler.policy.forecasts import ForecastWindow
from common.frozen import quick_init
from forecasting.base import Forecaster

DAY_S = 86400.0
CATCH_UP = 3
"""Missed refits fitted one by one; beyond this many, only the last two (see ``due``)."""


@dataclass(frozen=True)
class FeedSettings:
    """How a job's forecasts are made; the defaults are a job's defaults."""

    interval_s: float
    """Step of the arrival history (``spec.forecast.interval``)."""
    horizon_steps: int
    """Steps the planner reads ahead (``spec.forecast.horizon`` / interval)."""
    refit_s: float | None = DAY_S
    """Refit this often (``spec.forecast.refit``); None: fit once."""
    quantile: float = 0.9
    """The upper band the planner keeps the SLO under (``spec.forecast.quantile``)."""
    predict_every: int = 1
    """Steps between forecasts: origins lie on a grid of this many steps (1: every step)."""
    context_s: float = 21 * DAY_S
    """History a fit and a forecast see: longer costs fit time and follows old levels."""
    min_points: int = 2
    """No forecast from a history shorter than this."""

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.horizon_steps < 1 or self.predict_every < 1:
            raise ValueError("need interval_s > 0, horizon_steps ≥ 1 and predict_every ≥ 1")
        if not 0.5 < self.quantile < 1.0:
            raise ValueError(f"quantile must be in (0.5, 1), got {self.quantile}")

    @cached_property
    def context_steps(self) -> int:
        return max(self.min_points, math.ceil(self.context_s / self.interval_s))

    @cached_property
    def refit_steps(self) -> int | None:
        return None if self.refit_s is None else max(1, round(self.refit_s / self.interval_s))


class HistoryLike(Protocol):
    """Arrival rates on a regular grid: step k covers ``[start_s + kΔ, start_s + (k+1)Δ)``."""

    @property
    def start_s(self) -> float: ...

    @property
    def interval_s(self) -> float: ...

    @property
    def rates(self) -> np.ndarray: ...


@quick_init
@dataclass(frozen=True)
class History:
    """Rates per step from ``start_s`` (epoch seconds); grid index = round(time / Δ)."""

    start_s: float
    interval_s: float
    rates: np.ndarray

    @classmethod
    def of(cls, history: HistoryLike) -> History:
        if isinstance(history, History):
            return history
        return cls(float(history.start_s), float(history.interval_s), np.asarray(history.rates))

    def __len__(self) -> int:
        return len(self.rates)

    @property
    def start_step(self) -> int:
        return round(self.start_s / self.interval_s)

    @property
    def end_step(self) -> int:
        """Grid index of the step after the last one held."""
        return self.start_step + len(self.rates)

    def window(self, end_step: int, steps: int) -> History:
        """The last ``steps`` steps before ``end_step`` (fewer when the history is shorter)."""
        stop = max(0, min(len(self.rates), end_step - self.start_step))
        lo = max(0, stop - steps)
        return History(self.start_s + lo * self.interval_s, self.interval_s, self.rates[lo:stop])

    def count(self, end_step: int, steps: int) -> int:
        """``len(self.window(end_step, steps))``, without building the window."""
        stop = max(0, min(len(self.rates), end_step - self.start_step))
        return stop - max(0, stop - steps)

    def series(self) -> pd.Series:
        """The forecasters' input: a tz-aware UTC index on a regular grid."""
        index = pd.date_range(
            pd.Timestamp(self.start_s, unit="s", tz="UTC"),
            periods=len(self.rates),
            freq=pd.Timedelta(seconds=self.interval_s),
        )
        return pd.Series(np.asarray(self.rates, dtype=float), index=index, name="arrival_rate")


def band(forecast: Any, level: float) -> tuple[np.ndarray, str | None]:
    """The ``level`` quantile of a forecast, and a note when it had to be derived.

    Forecasters give p10/p50/p90 at least; a level they lack is interpolated (or, past the
    outermost one, extrapolated) between its neighbours on the normal scale, so asking for
    p95 never silently plans for p90.
    """
    try:
        return np.asarray(forecast.quantile(level), dtype=float), None
    except KeyError:
        pass
    levels: dict[float, np.ndarray] = {
        float(q): np.asarray(v, dtype=float) for q, v in getattr(forecast, "quantiles", {}).items()
    }
    if len(levels) < 2:
        return np.asarray(forecast.p90, dtype=float), f"no p{level * 100:g}: planned on p90"
    qs = sorted(levels)
    below = [q for q in qs if q < level]
    above = [q for q in qs if q > level]
    if below and above:
        lo, hi = below[-1], above[0]
    elif below:  # past the outermost level: extrapolate from the two highest
        lo, hi = (below[-2], below[-1]) if len(below) > 1 else (qs[0], qs[-1])
    else:
        lo, hi = (above[0], above[1]) if len(above) > 1 else (qs[0], qs[-1])
    z = NormalDist().inv_cdf
    t = (z(level) - z(lo)) / (z(hi) - z(lo))
    values = levels[lo] + t * (levels[hi] - levels[lo])
    return np.maximum(values, 0.0), f"p{level * 100:g} derived from p{lo * 100:g}/p{hi * 100:g}"


@dataclass
class Fit:
    """One model the feed installed: fitted on ``length`` steps of history up to ``step``."""

    step: int
    length: int
    model: Any
    interim: bool = False
    serial: int = 0


@dataclass
class _Forecast:
    fit_serial: int
    origin: int
    mean: np.ndarray
    median: np.ndarray
    low: np.ndarray
    high: np.ndarray
    source: str
    interim: bool = False

    @cached_property
    def key(self) -> str:
        """Names this forecast in the windows sliced from it (:attr:`ForecastWindow.key`)."""
        return f"{self.fit_serial}/{self.origin}"


@dataclass
class ForecastFeed:
    """A job's forecasts (see the module docstring). Drive it with :meth:`due`,
    :meth:`install` / :meth:`failed` and :meth:`window`, or with :func:`refresh`.

    ``keep_fits`` / ``keep_forecasts``: how many models and forecasts to remember (None: all,
    what a simulation replayed by several policies needs; a controller keeps a couple).
    """

    settings: FeedSettings
    keep_fits: int | None = None
    keep_forecasts: int | None = None
    name: str = "forecast"
    """The job's model (a fallback wrapper's choice, once a fit says it)."""
    interim_name: str = "interim"
    """The model serving before the first fit is done."""
    fits: list[Fit] = field(default_factory=list)
    failures: int = 0
    """Fits and forecasts that raised (the controller counts them as errors)."""
    failed_at: int | None = None
    """Step of the last failed fit: the next try waits for the next step."""
    reason: str | None = "not fitted yet"
    """Why the forecast is missing or degraded (shown in the job's status)."""
    _forecasts: dict[int, _Forecast] = field(default_factory=dict)
    _serial: int = 0

    # -- fits -----------------------------------------------------------------------------
    def latest(self, *, real: bool = True) -> Fit | None:
        """The most recent real fit (``real=False``: interim ones count too)."""
        for fit in reversed(self.fits):
            if real and fit.interim:
                continue
            return fit
        return None

    def in_force(self, step: int) -> Fit | None:
        """The model that serves a forecast made at ``step``: the latest fit at or before it."""
        best: Fit | None = None
        for fit in self.fits:
            if fit.step <= step and (best is None or fit.step >= best.step):
                best = fit
        return best

    def due(self, history: HistoryLike, step: int) -> int | None:
        """The step whose history the next fit must use, if one is due by ``step``.

        Due: with no model yet; ``refit`` after the last fit; and, while the history is
        young, once it has doubled since the last fit (a model fitted on an hour must not
        stand for a day). Due steps passed unnoticed are fitted one by one, oldest first,
        so whoever asks later finds the model each step had; after more than
        ``CATCH_UP`` of them (a controller that was away) only the last two are.
        """
        hist = History.of(history)
        s = self.settings
        last = self.latest()
        if last is not None:  # the usual answer, asked every step: nothing due yet
            nxt = self._next_due(hist, last.step, last.length)
            if nxt is None or nxt > step:
                return None
        if hist.count(step, s.context_steps) < s.min_points:
            return None
        pending: list[int] = []
        if last is None:
            pending.append(step)
        else:
            at, length = last.step, last.length
            while len(pending) <= 4 * CATCH_UP:
                nxt = self._next_due(hist, at, length)
                if nxt is None or nxt > step:
                    break
                pending.append(nxt)
                at, length = nxt, hist.count(nxt, s.context_steps)
        if not pending:
            return None
        due = pending[0] if len(pending) <= CATCH_UP else pending[-2]
        if self.failed_at is not None and self.failed_at >= due:
            # The fit due then failed: try again once per step, on the history up to now.
            return None if self.failed_at >= step else step
        return due

    def _next_due(self, hist: History, at: int, length: int) -> int | None:
        s = self.settings
        out: list[int] = []
        if s.refit_steps is not None:
            out.append(at + s.refit_steps)
        if 2 * length <= s.context_steps:
            out.append(max(at + 1, hist.start_step + 2 * length))
        return min(out) if out else None

    def fit_input(self, history: HistoryLike, due_step: int) -> History:
        """The history a fit due at ``due_step`` is fitted on."""
        return History.of(history).window(due_step, self.settings.context_steps)

    def install(self, model: Any, *, step: int, length: int, interim: bool = False) -> None:
        """Serve ``model`` for forecasts made at ``step`` or later."""
        self._serial += 1
        self.fits.append(Fit(step, length, model, interim, self._serial))
        if self.keep_fits is not None and len(self.fits) > self.keep_fits:
            del self.fits[: len(self.fits) - self.keep_fits]
        summary = getattr(model, "fit_summary", {}) or {}
        summary = summary if isinstance(summary, dict) else {}
        active = summary.get("model") or getattr(model, "name", None)
        if interim:
            self.interim_name = str(getattr(model, "name", None) or "interim")
            self.reason = f"{self.interim_name} serves while the first fit runs"
        else:
            self.failed_at = None
            if isinstance(active, str) and active:
                self.name = active
            self.reason = summary.get("reason")
        for origin in [o for o in self._forecasts if o >= step]:
            del self._forecasts[origin]

    def failed(self, exc: BaseException, *, step: int) -> None:
        """A fit due by ``step`` raised: no new model; try again at the next step."""
        self.failed_at = step
        self.failures += 1
        self.reason = f"fit failed: {type(exc).__name__}: {exc}"

    # -- forecasts ------------------------------------------------------------------------
    def window(self, history: HistoryLike, step: int) -> ForecastWindow | None:
        """The forecast for steps ``step … step+H−1`` (None: none can be made)."""
        hist = History.of(history)
        s = self.settings
        grid = step - step % s.predict_every
        origin = min(grid, hist.end_step)  # a history that ends early: forecast from its end
        fit = self.in_force(origin)
        if fit is None:
            return None
        cached = self._forecasts.get(origin)
        if cached is None or cached.fit_serial != fit.serial:
            cached = self._predict(fit, hist, origin, grid)
            if cached is None:
                return None
        skip = step - origin
        end = skip + s.horizon_steps
        if end > len(cached.mean):
            return None
        return ForecastWindow(
            cached.mean[skip:end],
            cached.low[skip:end],
            cached.high[skip:end],
            source=cached.source,
            median=cached.median[skip:end],
            key=cached.key,
            interim=cached.interim,
        )

    def _predict(self, fit: Fit, hist: History, origin: int, grid: int) -> _Forecast | None:
        s = self.settings
        need = (grid - origin) + s.predict_every + s.horizon_steps
        context = hist.window(origin, s.context_steps)
        try:
            fc = fit.model.predict(need, history=context.series())
            high, note = band(fc, s.quantile)
            try:
                median = np.asarray(fc.quantile(0.5), dtype=float)
            except KeyError:
                median = np.asarray(fc.mean, dtype=float)
            made = _Forecast(
                fit.serial,
                origin,
                np.asarray(fc.mean, dtype=float),
                median,
                np.asarray(fc.p10, dtype=float),
                high,
                f"{self.interim_name} (interim)" if fit.interim else self.name,
                fit.interim,
            )
        except Exception as exc:  # a failed forecast is a missing one: the planner goes reactive
            self.failures += 1
            self.reason = f"predict failed: {type(exc).__name__}: {exc}"
            return None
        if note:
            self.reason = note
        self._forecasts[origin] = made
        if self.keep_forecasts is not None and len(self._forecasts) > self.keep_forecasts:
            for old in sorted(self._forecasts)[: len(self._forecasts) - self.keep_forecasts]:
                del self._forecasts[old]
        return made


class FitHook(Protocol):
    """``fit(model, series, previous) -> fitted model`` (e.g. a disk cache of fits); default
    :func:`fit_model`."""

    def __call__(self, model: Any, series: pd.Series, previous: Any = None, /) -> Any: ...


def fit_model(model: Any, series: pd.Series, previous: Any = None) -> Any:
    """Fit ``model`` on ``series``, starting from ``previous`` (the job's last fit) where the
    model can: a forecaster's refit is then incremental where the data allows
    (:func:`forecasting.refit.decide_refit`). Anything else just fits."""
    if previous is not None and isinstance(model, Forecaster):
        return model.fit(series, previous=previous)
    return model.fit(series)


def refresh(
    feed: ForecastFeed,
    history: HistoryLike,
    step: int,
    make: Callable[[], Any],
    *,
    fit: FitHook | None = None,
) -> bool:
    """Fit now every fit due by ``step`` (the synchronous driver); False if one failed.

    Each fit starts from the fit before it (:func:`fit_model`), so a daily refit is
    incremental where the data allows.
    """
    for _ in range(2 * CATCH_UP + 1):
        due = feed.due(history, step)
        if due is None:
            return True
        data = feed.fit_input(history, due)
        last = feed.latest()
        previous = last.model if last is not None else None
        try:
            model = make()
            fitted = (fit or fit_model)(model, data.series(), previous)
            model = fitted if fitted is not None else model
        except Exception as exc:  # any failure means "plan without a new model"
            feed.failed(exc, step=step)
            return False
        feed.install(model, step=due, length=len(data))
    return True
