"""Stages 1-2 of kale's fit: log space, periods, the windows' split, the decomposition.

Everything later (the backbone, the networks, the band) learns from what this returns: the
log series with its clock changes undone and its outliers replaced, less the seasonal profile
estimated before the held-out tail. Numpy only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from forecasting.backbone import BackboneFit, Geometry, cv_origins, cv_residuals
from forecasting.decomposition.history import (
    CleanHistory,
    clean_history,
    epoch_seconds,
    extend_history,
)
from forecasting.seasonality import SeasonalityReport, candidate_periods, detect_seasonality
from forecasting.transformer.features import Windows, plan_windows


@dataclass(frozen=True)
class FitData:
    """What the fit's stages hand on: the decomposed history and how its windows are used."""

    offset: float
    """``c`` in ``z = log(y + c)``."""
    report: SeasonalityReport
    geom: Geometry
    windows: Windows
    clean: CleanHistory
    midnight: int
    interval: float
    decomposition_s: float
    steps: np.ndarray
    """The history's steps and ``geom.out_len`` more."""
    season: np.ndarray
    """The profile (estimated before the held-out tail) over ``steps``."""
    d: np.ndarray
    """The cleaned log series less the season: what the backbone forecasts."""
    rng: np.random.Generator

    @property
    def periods(self) -> dict[str, int]:
        return self.report.detected

    @property
    def cv_origins(self) -> np.ndarray:
        return cv_origins(len(self.d), self.geom)

    def cv_errors(self, level: BackboneFit) -> np.ndarray:
        """The backbone's blocked cross-validation errors at :attr:`cv_origins`."""
        return cv_residuals(
            self.clean.z,
            self.clean.trend,
            self.periods,
            self.geom,
            self.cv_origins,
            level.ridge,
            prior=level.prior,
            day_start=self.midnight,
            half_life=self.clean.half_life,
            day_types=self.clean.day_types,
        )[1]


def log_offset(y: np.ndarray) -> float:
    """``c`` in ``z = log(y + c)``: traffic noise is multiplicative, and zeros must stay finite
    without a night of near-zero traffic dominating the log."""
    return max(float(np.quantile(y, 0.05)), 0.1 * float(np.mean(y)), 1e-6)


def midnight_step(t0: pd.Timestamp, interval_s: float, day: int | None) -> int:
    """Step number (from ``t0``, the first fitted timestamp) of a UTC midnight."""
    if not day:
        return 0
    into_day = float(epoch_seconds(t0, interval_s, np.array([0]))[0]) % 86400.0
    return round(-into_day / float(interval_s or 60)) % day


def prepare_refit(
    y: np.ndarray,
    t0: pd.Timestamp,
    interval: float,
    p: dict[str, Any],
    previous: Previous,
    *,
    shift: int,
    acf: dict[str, float | None],
    rng: np.random.Generator,
) -> FitData:
    """:func:`prepare` for an incremental refit: the history ``y`` continues ``previous``'s
    (it starts ``shift`` steps later), whose offset, periods and geometry it keeps and whose
    decomposition it extends (:func:`~forecasting.decomposition.history.extend_history`);
    ``acf``: the periods' autocorrelations checked on this history."""
    n = len(y)
    offset = previous.offset
    z_raw = np.log(y + offset)
    old = previous.report
    report = SeasonalityReport(
        interval_s=interval,
        candidates=dict(old.candidates),
        detected=dict(old.detected),
        acf={**old.acf, **acf},
        strength=dict(old.strength),
    )
    geom = previous.geom
    windows = plan_windows(n, geom, float(p["val_fraction"]))
    started = time.perf_counter()
    day = candidate_periods(interval).get("daily")
    midnight = midnight_step(t0, interval, day)
    steps = np.arange(n + geom.out_len)
    clean = extend_history(
        previous.clean,
        z_raw,
        report.detected,
        shift=shift,
        day_start=midnight,
        held=windows.held,
        hour=steps_per_hour(interval),
    )
    season = clean.profile.at(steps)
    return FitData(
        offset=offset,
        report=report,
        geom=geom,
        windows=windows,
        clean=clean,
        midnight=midnight,
        interval=interval,
        decomposition_s=time.perf_counter() - started,
        steps=steps,
        season=season,
        d=clean.z - season[:n],
        rng=rng,
    )


@dataclass(frozen=True)
class Previous:
    """What :func:`prepare_refit` keeps from the last fit."""

    offset: float
    report: SeasonalityReport
    geom: Geometry
    clean: CleanHistory


def prepare(y: np.ndarray, t0: pd.Timestamp | None, interval: float, p: dict[str, Any]) -> FitData:
    """The history ``y`` (starting at ``t0``, every ``interval`` seconds) prepared for the fit;
    ``p`` holds the forecaster's parameters (horizon, context, val_fraction, day_types, seed)."""
    assert t0 is not None
    n = len(y)
    offset = log_offset(y)
    z_raw = np.log(y + offset)
    report = detect_seasonality(z_raw, interval)
    day = candidate_periods(interval).get("daily")
    geom = Geometry.choose(horizon=p["horizon"], day=day, available=n, context=p["context"])
    windows = plan_windows(n, geom, float(p["val_fraction"]))
    started = time.perf_counter()
    midnight = midnight_step(t0, interval, day)
    hour = steps_per_hour(interval)
    clean = clean_history(
        z_raw,
        report.detected,
        day_start=midnight,
        hour=hour,
        held=windows.held,
        use_day_types=p.get("day_types", True),
    )
    decomposition_s = time.perf_counter() - started
    steps = np.arange(n + geom.out_len)
    season = clean.profile.at(steps)
    return FitData(
        offset=offset,
        report=report,
        geom=geom,
        windows=windows,
        clean=clean,
        midnight=midnight,
        interval=interval,
        decomposition_s=decomposition_s,
        steps=steps,
        season=season,
        d=clean.z - season[:n],
        rng=np.random.default_rng(p["seed"]),
    )


def steps_per_hour(interval: float) -> int:
    """Steps in an hour at ``interval`` seconds (0 where the interval does not divide an
    hour: then no clock changes are looked for)."""
    return round(3600.0 / interval) if 3600.0 % interval == 0 else 0
