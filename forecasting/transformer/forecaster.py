"""``kale``: the seed's forecaster — STL/MSTL decomposition + a transformer, with quantiles.

Fit, in order:

1. ``z = log(y + c)``; seasonality detection (ACF + STL strength) picks the periods.
2. STL/MSTL (fast settings) gives the trend, decomposed again with the outliers (outages,
   spikes, holidays) replaced until they stay the same; the cleaned series is what the rest
   learns from. A one-hour clock change (daylight saving time, of all or part of the
   traffic) is looked for first; the days before it are then put on the current clock. The
   detrended series gives the seasonal profile, with days of the week that look alike
   pooled (:mod:`forecasting.decomposition`). With one to three weeks and no weekly season
   detected, days that differ (a weekend) may still get their own profile
   (:func:`~forecasting.decomposition.daytypes.choose_day_types`; ``day_types=False`` turns it off).
3. The backbone (the decomposition forecast): profile(t+h) + a ridge-fitted function of the
   recent deseasonalised levels (penalty by blocked cross-validation).
4. The transformer (:mod:`.model`) learns p10/p50/p90 of the backbone's error from patched
   channels and calendar features, with pinball loss, sampled windows, AdamW and early
   stopping on a held-out tail (the last ~15 % of the history: the profile, the backbone and
   the gradient steps never see it).
5. On that tail: how much of the network's median correction to keep (0–100 %: the ensemble
   with the decomposition). The p10/p90 band gets conformal factors per horizon step from the
   tail's errors and the backbone's cross-validated errors over the whole history.
6. The profile is re-estimated on the whole history for forecasting.

A history too short for the network's training and held-out windows is forecast by the
backbone alone (fitted on all of it), with p10/p90 from its cross-validated errors.

Predicting reads only the last ``geometry.need`` steps plus two days and looks the profile
up, so it takes milliseconds however long the history is. In the same forward pass it
forecasts from up to 48 origins of the last two days and scores what has happened since;
when those forecasts missed more than the band promised, the band is widened
(:func:`recent_band_factor`).
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import math
import sys
import time
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import torch

from forecasting.base import Forecaster, InsufficientHistoryError, Payload
from forecasting.decomposition import (
    DayTypes,
    SeasonalProfile,
    choose_day_types,
    choose_half_life,
    estimate_profile,
    robust_trend,
)
from forecasting.seasonality import candidate_periods, detect_seasonality
from forecasting.transformer.features import (
    LEVEL_PRIORS,
    Geometry,
    backbone,
    build_inputs,
    calendar,
    cv_residuals,
    fit_backbone,
)
from forecasting.transformer.model import KaleNet, MeanOfNets, build_net, pinball_loss

log = logging.getLogger(__name__)

EPOCH = pd.Timestamp("1970-01-01", tz="UTC")
ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0)
MAX_BACKBONE_ORIGINS = 20000
MAX_VAL_ORIGINS = 1024
MAX_CV_ORIGINS = 2048
MIN_NETWORK_WINDOWS = (32, 4)
"""Training and held-out windows the network needs; with fewer, kale forecasts with the
backbone alone (see ``KaleForecaster._fit``)."""
MIN_BACKBONE_ORIGINS = 24
"""Forecast origins the level model needs to be fitted and cross-validated at all."""


RECENT_BAND_DAYS = 2.0
RECENT_BAND_ORIGINS = 48
RECENT_BAND_MAX = 3.0
RECENT_BAND_LEVEL = 0.8
RECENT_BAND_MIN_SCORES = 10
"""Predict-time widening from the forecasts of the last two days (:func:`recent_band_factor`):
how far back, from how many origins at most, by at most how much."""


def band_scores(err: np.ndarray, up: np.ndarray, down: np.ndarray) -> np.ndarray:
    """Errors in units of the half-band on their own side (1 = on p10 or p90).

    One definition for calibrating the band (``_calibrate``) and for judging it afterwards
    (:func:`recent_band_factor`), so that "80 % of scores under 1" means the same in both.
    ``up`` and ``down`` must be positive.
    """
    return np.maximum(err / up, -err / down)


def recent_band_factor(scores: np.ndarray, most: float = RECENT_BAND_MAX) -> dict[str, Any]:
    """How much to widen the band, given how the last days' forecasts fared.

    ``scores`` are errors of forecasts made from recent origins, over the steps that have
    already happened, each in units of its own half-band (1 = on p10 or p90). The fitted band
    covers 80 % of such scores in calibration; when the recent 80th percentile is larger —
    the level moved, a calm history met a busy week, the shape drifted — the band is widened
    by that ratio (at most ``most``). It is never narrowed: a calm stretch says little about
    the next burst; narrowing down to 0.7x put no more traces in range on 7 folds and cost one
    hourly trace 5.5 % of pinball (its narrowed band met a burst).
    Measured offline on 47 traces (1 min … 1 h, generated and real; 7 folds): p90 coverage
    in 0.85–0.95 on 27 → 35, mean pinball unchanged.
    """
    if len(scores) < RECENT_BAND_MIN_SCORES:
        return {"band_widening": 1.0, "recent_errors_scored": len(scores)}
    q = float(np.quantile(scores, RECENT_BAND_LEVEL))
    return {
        "band_widening": float(np.clip(q, 1.0, most)),
        "recent_errors_scored": len(scores),
        "recent_error_p80": q,
    }


@contextlib.contextmanager
def _torch_settings(threads: int) -> Iterator[None]:
    """Thread count and deterministic kernels for the duration of a fit/predict."""
    old_threads = torch.get_num_threads()
    old_det = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(max(1, threads))
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_det)


def _iso_step(model: Forecaster, step: int) -> str:
    assert model._t0 is not None and model.interval_s is not None
    ts = model._t0 + pd.Timedelta(seconds=step * model.interval_s)
    return ts.isoformat().replace("+00:00", "Z")


def smooth_over_horizon(per_step: np.ndarray) -> np.ndarray:
    """A moving average over a sixth of the horizon (ends padded with the end values):
    per-step quantiles of a few hundred overlapping windows are noisy step to step."""
    width = max(1, len(per_step) // 6)
    kernel = np.ones(width) / width
    padded = np.concatenate(
        [np.full(width // 2, per_step[0]), per_step, np.full(width - 1 - width // 2, per_step[-1])]
    )
    return np.convolve(padded, kernel, mode="valid")


def conformal_factors(scores: np.ndarray, group: np.ndarray, level: float) -> np.ndarray:
    """Per-step factors k[h] such that ``level`` of the scores (windows × steps) are ≤ k[h].

    Shape over h: pooled per-step quantiles, smoothed over a sixth of the horizon. Level:
    the median over groups of the factor each group alone would need.
    """
    shape = np.maximum(smooth_over_horizon(np.quantile(scores, level, axis=0)), 1e-3)
    shape = shape / np.mean(shape)
    norm = scores / shape
    levels = [
        float(np.quantile(norm[group == g], level))
        for g in np.unique(group)
        if (group == g).sum() >= 4
    ]
    k = float(np.median(levels)) if levels else float(np.quantile(norm, level))
    return np.maximum(k * shape, 0.05)


def choose_kept_share(
    errors: dict[float, np.ndarray], parts: int = 3
) -> tuple[float, dict[float, float], dict[float, list[float]]]:
    """The share of the network's median correction to keep, from held-out errors.

    ``errors[a]`` holds the absolute errors, one row per held-out origin in time order,
    when the share ``a`` is kept; share 0 (the backbone alone) must be among them. A share
    qualifies only if its MAE is no worse than share 0's on each of ``parts`` consecutive
    stretches of the origins, not just on average: the held-out windows overlap, so at
    30-minute or hourly intervals they hold only a few independent horizons, and one
    stretch the network happened to fit can carry the average (on such traces the kept
    correction then made the following week 18-27 % worse). Among the qualifying shares
    the lowest overall MAE wins; ties keep less.

    Returns (share, MAE per share, MAE per share and stretch).
    """
    if 0.0 not in errors:
        raise ValueError("choose_kept_share: share 0 (the backbone alone) is missing")
    maes = {a: float(np.mean(e)) for a, e in errors.items()}
    n = len(errors[0.0])
    chunks = [i for i in np.array_split(np.arange(n), parts) if len(i)]
    by_part = {a: [float(np.mean(e[i])) for i in chunks] for a, e in errors.items()}
    steady = [
        a for a in errors if all(m <= m0 for m, m0 in zip(by_part[a], by_part[0.0], strict=True))
    ]
    return min(steady, key=lambda a: (maes[a], a)), maes, by_part


def resolve_device(device: str) -> str:
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        warnings.warn(
            "kale: CUDA is not available, training on the CPU", RuntimeWarning, stacklevel=3
        )
        return "cpu"
    return device


def holdout_start(n: int, horizon: int, fraction: float) -> int:
    """Where the held-out tail begins: the last ``fraction`` of the history (≥ 2·horizon).

    The tail is held out *forward in time*, the way the model is used. Blocks interleaved
    with the training days were tried and rejected: the network learned what those weeks
    looked like and seemed to help on the blocks, then made the following week worse.
    """
    return n - max(round(fraction * n), 2 * horizon)


class KaleForecaster(Forecaster):
    """Decomposition backbone + transformer corrections with calibrated quantiles.

    ``threads`` (torch's intra-op threads while fitting) defaults to one. The network is small
    (d_model 32), so a second thread saves only a quarter of the training time on an idle
    machine, and torch's thread pool spins at every operator's barrier when its threads share
    cores with other work: on the 2-core machine, two 2-thread fits side by side (two jobs of
    a controller, a backtest beside a predict) each trained 15x slower and hit the time
    budget after 2 epochs instead of early-stopping after 4; one thread each, both ran at
    full speed.

    ``members`` networks (default 3, seeds ``seed``, ``seed + 1``, …) are trained and their
    quantiles averaged: one network's correction depends on its seed and on the machine's
    float rounding enough to move a trace's 7-fold MASE by 7 %.
    """

    name = "kale"

    def __init__(
        self,
        *,
        horizon: int = 60,
        seed: int = 0,
        device: str = "cpu",
        threads: int = 1,
        epochs: int = 20,
        patience: int = 4,
        steps_per_epoch: int = 40,
        batch_size: int = 128,
        lr: float = 2e-3,
        time_budget_s: float = 90.0,
        d_model: int = 32,
        heads: int = 2,
        enc_layers: int = 2,
        dec_layers: int = 1,
        dropout: float = 0.0,
        context: int | None = None,
        val_fraction: float = 0.15,
        use_calendar: bool = True,
        members: int = 3,
        progress: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(
            horizon=horizon,
            seed=seed,
            device=device,
            threads=threads,
            epochs=epochs,
            patience=patience,
            steps_per_epoch=steps_per_epoch,
            batch_size=batch_size,
            lr=lr,
            time_budget_s=time_budget_s,
            d_model=d_model,
            heads=heads,
            enc_layers=enc_layers,
            dec_layers=dec_layers,
            dropout=dropout,
            context=context,
            val_fraction=val_fraction,
            use_calendar=use_calendar,
            members=members,
            **kw,
        )
        if horizon < 1:
            raise ValueError("horizon must be ≥ 1")
        self.horizon = horizon
        self.progress = progress
        self.device = "cpu"
        self.geom: Geometry | None = None
        self.net: torch.nn.Module | None = None
        self.net_config: dict[str, int] = {}
        self.profile = SeasonalProfile(np.zeros(0), 0)
        self.weights: np.ndarray | None = None
        self.offset = 1.0
        self.scale = 1.0
        self.season_mu = 0.0
        self.season_sd = 1.0
        self.alpha = 1.0
        self.k_lo = np.ones(horizon)
        self.k_hi = np.ones(horizon)
        # Without a network (histories too short for it): p10/p90 offsets of z − season from
        # the backbone forecast, per step, in units of ``scale``.
        self.band: np.ndarray | None = None
        # What the last predict did with the band (recent_band_factor's report).
        self.last_predict: dict[str, Any] = {}

    # ---- capabilities
    @property
    def supports_gpu(self) -> bool:
        return True

    @property
    def min_history(self) -> pd.Timedelta:
        return pd.Timedelta(days=2)

    def min_history_steps_for(self, interval_s: float) -> int:
        # The backbone needs its context, the horizon and enough origins; the network, more
        # (without them kale fits the backbone alone, see _fit).
        return max(super().min_history_steps_for(interval_s), 2 * self.horizon + 24)

    # ---- helpers
    def _epoch_seconds(self, steps: np.ndarray) -> np.ndarray:
        assert self._t0 is not None and self.interval_s is not None
        return (self._t0 - EPOCH).total_seconds() + steps.astype(float) * self.interval_s

    def _midnight_step(self, day: int | None) -> int:
        """Step number (from the first fitted timestamp) of a UTC midnight."""
        if not day:
            return 0
        into_day = float(self._epoch_seconds(np.array([0]))[0]) % 86400.0
        return round(-into_day / float(self.interval_s or 60)) % day

    def _calendar(self, steps: np.ndarray) -> np.ndarray:
        cal = calendar(self._epoch_seconds(steps))
        return cal if self.params.get("use_calendar", True) else np.zeros_like(cal)

    def _normalised(self, d: np.ndarray, season: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return d / self.scale, (season - self.season_mu) / self.season_sd

    def _tensors(self, inputs) -> tuple[torch.Tensor, ...]:
        return tuple(
            torch.from_numpy(a).to(self.device) for a in (inputs.long, inputs.short, inputs.out)
        )

    # ---- fit
    def _fit(self, series: pd.Series) -> None:
        p = self.params
        self.device = resolve_device(p["device"])
        y = series.to_numpy()
        n = len(y)
        interval = float(self.interval_s or 60)
        h = self.horizon
        self.offset = max(float(np.quantile(y, 0.05)), 0.1 * float(np.mean(y)), 1e-6)
        z_raw = np.log(y + self.offset)
        report = detect_seasonality(z_raw, interval)
        day = candidate_periods(interval).get("daily")
        geom = Geometry.choose(horizon=h, day=day, available=n, context=p["context"])
        tail = holdout_start(n, h, float(p["val_fraction"]))
        held = np.arange(n) >= tail
        ends = np.concatenate([[0], np.cumsum(held)])
        origins = np.arange(geom.need, n - h + 1)
        in_held = ends[origins + h] - ends[origins]
        train_origins = origins[in_held == 0]
        val_origins = origins[in_held == h]
        # Too short for the network (a week of hourly data for 60 steps ahead): the backbone
        # alone, fitted on the whole history, with its band from cross-validated errors.
        # Refusing left only the fallback's seasonal naive; what the backbone does instead is
        # measured in docs/forecasting.md ("Short histories").
        no_net = (
            len(train_origins) < MIN_NETWORK_WINDOWS[0] or len(val_origins) < MIN_NETWORK_WINDOWS[1]
        )
        if no_net:
            if len(origins) < MIN_BACKBONE_ORIGINS:
                raise InsufficientHistoryError(
                    f"kale: {n} steps leave {len(origins)} forecast windows for horizon {h} "
                    f"(context {geom.need} steps); {MIN_BACKBONE_ORIGINS} are needed"
                )
            network_skipped = (
                f"{len(train_origins)} training and {len(val_origins)} "
                f"held-out windows are too few for the network (it needs "
                f"{MIN_NETWORK_WINDOWS[0]} and {MIN_NETWORK_WINDOWS[1]})"
            )
            log.info("kale: backbone only: %s", network_skipped)
            held, train_origins = np.zeros(n, dtype=bool), origins
        self.geom = geom
        self.band = None

        # The trend from a decomposition repeated with the outliers replaced (robust_trend);
        # the profile used in training never sees the held-out tail, so validation and
        # calibration stay honest.
        started = time.perf_counter()
        midnight = self._midnight_step(day)
        hour = round(3600.0 / interval) if 3600.0 % interval == 0 else 0
        trend, z, outliers, changes = robust_trend(
            z_raw, report.detected, day_start=midnight, hour=hour
        )
        # Under two weeks there is no weekly season; days that differ (a weekend) may still
        # get their own profile (choose_day_types), judged before the held-out tail on the
        # series with its incidents replaced. The outliers are then judged again, each
        # step against the days of its type.
        day_types, day_type_report = None, None
        if (
            p.get("day_types", True)
            and report.detected.get("daily")
            and not report.detected.get("weekly")
        ):
            day_types, day_type_report = self._choose_day_types(
                z, report.detected["daily"], midnight, hour, held
            )
            if day_types is not None:
                trend, z, outliers, changes = robust_trend(
                    z_raw, report.detected, day_start=midnight, hour=hour, day_types=day_types
                )
        # From here on the days before a clock change (daylight saving time) are on the
        # current clock (ClockChange.apply) and the outliers (an outage, a holiday, a spike)
        # are replaced (the seasonally adjusted series interpolated across them): the level
        # model, the network and the band learn from ordinary traffic.
        # Left in, the network learned the incidents' level from the calendar (measured on an
        # hourly trace with a holiday, an outage and a spike: a kept -11 % correction doubled
        # the next week's error). Predicting still reads the raw series.
        # How fast the profile forgets old weeks, chosen before the held-out tail.
        half_life, half_life_scores = choose_half_life(
            z, trend, report.detected, mask=~held, day_start=midnight, day_types=day_types
        )
        profile_tr, profile_tr_info = estimate_profile(
            z,
            trend,
            report.detected,
            mask=~held,
            day_start=midnight,
            half_life=half_life,
            day_types=day_types,
        )
        decomp_s = time.perf_counter() - started

        steps = np.arange(n + geom.out_len)
        season = profile_tr.at(steps)
        d = z - season[:n]
        rng = np.random.default_rng(p["seed"])
        bb_origins = train_origins
        if len(bb_origins) > MAX_BACKBONE_ORIGINS:
            bb_origins = np.sort(rng.choice(train_origins, MAX_BACKBONE_ORIGINS, replace=False))
        # Without a season the level may wander (see fit_backbone): both priors compete.
        level = fit_backbone(
            d, geom, bb_origins, priors=("mean",) if report.detected else LEVEL_PRIORS
        )
        self.weights, ridge, prior = level.weights, level.ridge, level.prior
        _, bb_tr = backbone(d, geom, bb_origins, self.weights)
        resid = d[bb_origins[:, None] + np.arange(h)[None, :]] - bb_tr
        self.scale = float(max(1.4826 * np.median(np.abs(resid - np.median(resid))), 1e-6))
        self.season_mu = float(np.mean(profile_tr.table)) if profile_tr.period else 0.0
        self.season_sd = float(max(np.std(profile_tr.table), 1e-3)) if profile_tr.period else 1.0
        self.profile = profile_tr
        clocks = self._clocks(changes)
        self.fit_summary.update(
            seasonality=report.to_dict(),
            device=self.device,
            geometry=geom.to_dict(),
            decomposition_seconds=decomp_s,
            outliers_replaced=int(np.count_nonzero(outliers)),
            # None: every week of the profile weighs the same.
            profile_half_life_days=None if half_life is None else half_life * interval / 86400,
            profile_half_life_scores=half_life_scores,
            # Every change found, in time order; clock_change is the latest (or None).
            clock_changes=clocks,
            clock_change=clocks[-1] if clocks else None,
            day_types=self._describe_day_types(day_types, day_type_report),
            offset=self.offset,
            scale=self.scale,
            backbone_ridge=ridge,
            backbone_prior=prior,
            backbone_cv_mae=level.cv_mae,
        )
        cv_origins = self._cv_origins(n)
        if no_net:
            started = time.perf_counter()
            band_info = self._fit_band_without_network(
                z,
                trend,
                report.detected,
                ridge,
                prior,
                midnight,
                half_life,
                resid,
                cv_origins,
                day_types,
            )
            self.fit_summary.update(
                profile=profile_tr_info,
                network=None,
                network_skipped=network_skipped,
                train_windows=len(train_origins),
                val_windows=0,
                cv_seconds=time.perf_counter() - started,
                median_correction_kept=0.0,
                **band_info,
            )
            return
        dn, sn = self._normalised(d, season)
        cal = self._calendar(steps)

        def batch(origins: np.ndarray) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
            ref, bb = backbone(d, geom, origins, self.weights)
            ref, bb = ref / self.scale, bb / self.scale
            inputs = build_inputs(dn=dn, sn=sn, cal=cal, origins=origins, ref=ref, bb=bb, geom=geom)
            target = dn[origins[:, None] + np.arange(h)[None, :]] - bb
            return self._tensors(inputs), torch.from_numpy(target.astype(np.float32)).to(
                self.device
            )

        if len(val_origins) > MAX_VAL_ORIGINS:
            val_origins = np.unique(
                np.linspace(val_origins[0], val_origins[-1], MAX_VAL_ORIGINS).round().astype(int)
            )
        with _torch_settings(int(p["threads"])):
            torch.manual_seed(int(p["seed"]))
            train_info = self._train(batch, train_origins, val_origins, rng)
            started = time.perf_counter()
            _, cv_err = cv_residuals(
                z,
                trend,
                report.detected,
                geom,
                cv_origins,
                ridge,
                prior=prior,
                day_start=midnight,
                half_life=half_life,
                day_types=day_types,
            )
            cv_s = time.perf_counter() - started
            calib = self._calibrate(batch, val_origins, z, season, cv_origins, cv_err / self.scale)

        # Forecast with the profile of the whole history (the network is unchanged).
        self.profile, profile_info = estimate_profile(
            z, trend, report.detected, day_start=midnight, half_life=half_life, day_types=day_types
        )
        self.fit_summary.update(
            profile=profile_info,
            network="transformer",
            network_skipped=None,
            train_windows=len(train_origins),
            val_windows=len(val_origins),
            holdout_start=_iso_step(self, tail),
            cv_seconds=cv_s,
            **train_info,
            **calib,
        )

    @staticmethod
    def _choose_day_types(
        z: np.ndarray, day: int, midnight: int, hour: int, held: np.ndarray
    ) -> tuple[DayTypes | None, dict[str, Any]]:
        """Day types chosen before the held-out tail, or on the whole history when fewer
        than seven days precede the tail.

        A week of minute data leaves six days before its tail (15 %), too few to tell a
        weekend, and kale forecast weekends like working days: on 14-day generated 1-minute
        traces (7 days fitted) it lost to seasonal naive on four of five. The choice is
        itself made on left-out days (each day predicted by the others of its group), and
        the profile is still estimated before the tail, so the tail's values do not enter
        the forecast; only which days are told apart does.
        """
        day_types, rep = choose_day_types(z, day, day_start=midnight, hour=hour, mask=~held)
        rep["chosen_on"] = "before the held-out tail"
        if day_types is None and "skipped" in rep and held.any():
            whole, rep_whole = choose_day_types(z, day, day_start=midnight, hour=hour)
            if "skipped" not in rep_whole:
                day_types, rep = whole, rep_whole
                rep["chosen_on"] = "whole history (under 7 days before the held-out tail)"
        return day_types, rep

    def _describe_day_types(
        self, day_types: DayTypes | None, report: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """The day types for the fit summary: which calendar days (UTC) form each group and
        when their days start; None when the weekly season or too short a history left
        nothing to choose."""
        if report is None:
            return None
        out: dict[str, Any] = {
            "used": day_types is not None,
            "score": report.get("score"),
            "shape_score": report.get("shape_score"),
        }
        for key in ("skipped", "chosen_on"):
            if key in report:
                out[key] = report[key]
        if day_types is None:
            return out
        # Each day is named by the calendar day its middle falls on (a day that starts at
        # 23:00 UTC on Friday is Saturday's).
        starts = day_types.start + day_types.day * np.arange(7)
        middles = self._epoch_seconds(starts + day_types.day // 2)
        names = [pd.Timestamp(s, unit="s", tz="UTC").day_name()[:3] for s in middles]
        first = pd.Timestamp(self._epoch_seconds(starts[:1])[0], unit="s", tz="UTC")
        out.update(
            groups={name: int(g) for name, g in zip(names, day_types.groups, strict=True)},
            days_start_at=first.strftime("%H:%M UTC"),
        )
        return out

    def _clocks(self, changes) -> list[dict[str, Any]]:
        """The clock changes found, in time order, for the fit summary."""
        interval = float(self.interval_s or 60)
        return [
            {
                "at": _iso_step(self, c.at),
                "shift_minutes": c.shift * interval / 60.0,
                "share": c.share,
                "gain": c.gain,
            }
            for c in sorted(changes, key=lambda c: c.at)
        ]

    def _cv_origins(self, n: int) -> np.ndarray:
        """Every forecast origin of an n-step history, thinned to MAX_CV_ORIGINS."""
        assert self.geom is not None
        origins = np.arange(self.geom.need, n - self.horizon + 1)
        pick = np.linspace(0, len(origins) - 1, min(MAX_CV_ORIGINS, len(origins)))
        return origins[np.unique(pick.round().astype(int))]

    def _fit_band_without_network(
        self,
        z: np.ndarray,
        trend: np.ndarray,
        periods: dict[str, int],
        ridge: float,
        prior: str,
        midnight: int,
        half_life: float | None,
        resid: np.ndarray,
        cv_origins: np.ndarray,
        day_types: DayTypes | None = None,
    ) -> dict[str, Any]:
        """p10/p90 of the backbone alone: per-step quantiles of its cross-validated errors.

        With no held-out tail, the blocked cross-validation over the whole history is the only
        out-of-sample error there is. Where it cannot run (too few windows in every chunk)
        the in-sample residuals stand in, and the summary says so: they are optimistic.
        """
        geom = self.geom
        assert geom is not None
        _, cv_err = cv_residuals(
            z,
            trend,
            periods,
            geom,
            cv_origins,
            ridge,
            prior=prior,
            day_start=midnight,
            half_life=half_life,
            day_types=day_types,
        )
        ok = np.isfinite(cv_err).all(axis=1)
        errors, source = (
            (cv_err[ok], "cross-validation") if ok.sum() >= 8 else (resid, "in-sample residuals")
        )
        lo = np.minimum(smooth_over_horizon(np.quantile(errors, 0.1, axis=0)), 0.0)
        hi = np.maximum(smooth_over_horizon(np.quantile(errors, 0.9, axis=0)), 0.0)
        self.net, self.net_config, self.alpha = None, {}, 0.0
        self.band = np.stack([lo, hi], axis=1) / self.scale
        self.k_lo = self.k_hi = np.ones(self.horizon)
        return {"band_from": source, "calibration_windows": len(errors)}

    def _train(
        self, batch, train_origins: np.ndarray, val_origins: np.ndarray, rng: np.random.Generator
    ) -> dict[str, Any]:
        """Train ``members`` networks one after another (seeds ``seed``, ``seed + 1``, …),
        each early-stopped on the held-out tail, and keep their mean (:class:`MeanOfNets`).
        They share the time budget: a member that would start after it is not trained. When
        the first one never beats its starting point (no correction), it is the only one."""
        p = self.params
        geom = self.geom
        assert geom is not None
        shape = {
            "long_in": 2 * geom.p_long + 4,
            "short_in": 2 * geom.p_short + 4,
            "out_in": 3 * geom.p_out + 4,
            "n_long": geom.n_long,
            "n_short": geom.n_short,
            "n_out": geom.n_out,
            "p_out": geom.p_out,
            "d_model": int(p["d_model"]),
            "heads": int(p["heads"]),
            "enc_layers": int(p["enc_layers"]),
            "dec_layers": int(p["dec_layers"]),
            "ff": 2 * int(p["d_model"]),
        }
        h = self.horizon
        val_x, val_y = batch(val_origins)
        started = time.perf_counter()
        wanted = max(1, int(p.get("members", 1)))
        nets: list[KaleNet] = []
        runs: list[dict[str, Any]] = []
        budget_hit = False
        for k in range(wanted):
            left = float(p["time_budget_s"]) - (time.perf_counter() - started)
            if k and left <= 0:
                budget_hit = True
                log.warning("kale: time budget spent after %d of %d networks", k, wanted)
                break
            torch.manual_seed(int(p["seed"]) + k)
            net, run = self._train_member(
                batch,
                train_origins,
                val_x,
                val_y,
                rng,
                shape,
                left,
                label=f" {k + 1}/{wanted}" if wanted > 1 else "",
            )
            nets.append(net)
            runs.append(run)
            budget_hit = budget_hit or run["time_budget_hit"]
            if k == 0 and run["best_epoch"] == 0:
                # No epoch beat the starting point (no correction) on the held-out tail: the
                # tail has nothing for a network to learn, and more seeds would only be
                # more chances to fit its noise (and cost their time at every predict).
                log.info(
                    "kale: the first network never beat no correction on the held-out "
                    "tail; no further networks trained"
                )
                break
        self.net_config = {**shape, "members": len(nets)} if len(nets) > 1 else shape
        self.net = MeanOfNets(nets) if len(nets) > 1 else nets[0]
        self.net.eval()
        with torch.no_grad():
            ensemble_val = float(pinball_loss(self.net(*val_x)[:, :h], val_y))
        return {
            "epochs_run": sum(r["epochs_run"] for r in runs),
            "best_epoch": runs[0]["best_epoch"],
            "val_pinball_backbone": runs[0]["val_pinball_backbone"],
            "val_pinball": ensemble_val,
            "networks": len(nets),
            "member_runs": [
                {
                    "best_epoch": r["best_epoch"],
                    "epochs_run": r["epochs_run"],
                    "val_pinball": r["val_pinball"],
                }
                for r in runs
            ],
            "train_seconds": time.perf_counter() - started,
            "time_budget_hit": budget_hit,
        }

    def _train_member(
        self,
        batch,
        train_origins: np.ndarray,
        val_x,
        val_y,
        rng: np.random.Generator,
        shape: dict[str, int],
        budget_s: float,
        label: str = "",
    ) -> tuple[KaleNet, dict[str, Any]]:
        """One network, early-stopped on the held-out tail (its best epoch's weights)."""
        p = self.params
        h = self.horizon
        net = KaleNet(**shape, dropout=float(p["dropout"])).to(self.device)
        opt = torch.optim.AdamW(net.parameters(), lr=float(p["lr"]), weight_decay=1e-4)

        def val_loss() -> float:
            net.eval()
            with torch.no_grad():
                return float(pinball_loss(net(*val_x)[:, :h], val_y))

        best = val_loss()
        baseline_loss = best
        best_state = copy.deepcopy(net.state_dict())
        best_epoch, stale, epochs_run, budget_hit = 0, 0, 0, False
        started = time.perf_counter()
        epochs = range(1, int(p["epochs"]) + 1)
        bar = None
        if self.progress and sys.stderr.isatty():
            from tqdm import tqdm

            bar = tqdm(epochs, desc=f"kale fit{label}", unit="epoch", leave=False)
            epochs = bar
        bs = min(int(p["batch_size"]), len(train_origins))
        for epoch in epochs:
            net.train()
            train_loss = 0.0
            for _ in range(int(p["steps_per_epoch"])):
                x, target = batch(np.sort(rng.choice(train_origins, bs, replace=False)))
                loss = pinball_loss(net(*x)[:, :h], target)
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
                opt.step()
                train_loss += float(loss.detach()) / int(p["steps_per_epoch"])
            epochs_run = epoch
            current = val_loss()
            log.debug("kale epoch %d: train %.4f val %.4f", epoch, train_loss, current)
            if bar is not None:
                bar.set_postfix(val=f"{current:.4f}", best=f"{best:.4f}")
            if current < best - 1e-4:
                best, best_epoch, stale = current, epoch, 0
                best_state = copy.deepcopy(net.state_dict())
            else:
                stale += 1
            if stale >= int(p["patience"]):
                break
            if time.perf_counter() - started > budget_s:
                budget_hit = True
                log.warning("kale: training stopped by the time budget after %d epochs", epoch)
                break
        if bar is not None:
            bar.close()
        net.load_state_dict(best_state)
        net.eval()
        return net, {
            "epochs_run": epochs_run,
            "best_epoch": best_epoch,
            "val_pinball_backbone": baseline_loss,
            "val_pinball": best,
            "time_budget_hit": budget_hit,
        }

    def _calibrate(
        self,
        batch,
        val_origins: np.ndarray,
        z: np.ndarray,
        season: np.ndarray,
        cv_origins: np.ndarray,
        cv_target: np.ndarray,
    ) -> dict[str, Any]:
        """Pick the share of the median correction to keep and the band's conformal factors.

        The share is chosen on the held-out tail (the network never trained there). The
        band's factors use two kinds of out-of-sample errors: the held-out tail and the
        backbone's cross-validated errors over the whole history. Their shape over the
        horizon (errors grow with the lead time) comes from all of them pooled; their level
        is the median of the levels each block or cross-validation chunk asks for, so that
        one unusual stretch (a holiday, a level shift, a weekend-only tail) cannot set the
        band alone. Groups: three consecutive parts of the tail, five cross-validation chunks.
        """
        assert self.net is not None
        h = self.horizon

        def net_out(origins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            qs, ts = [], []
            for part in np.array_split(origins, max(1, len(origins) // 512)):
                x, target = batch(part)
                with torch.no_grad():
                    qs.append(self.net(*x)[:, :h].cpu().numpy().astype(float))
                ts.append(target.cpu().numpy().astype(float))
            return np.concatenate(qs), np.concatenate(ts)

        q, tgt = net_out(val_origins)
        bb_dn = backbone(z - season[: len(z)], self.geom, val_origins, self.weights)[1] / self.scale
        fut = val_origins[:, None] + np.arange(h)[None, :]
        actual = np.exp(z[fut]) - self.offset

        def to_y(rel: np.ndarray) -> np.ndarray:
            return np.exp(season[fut] + (bb_dn + rel) * self.scale) - self.offset

        errors = {a: np.abs(to_y(a * q[..., 1]) - actual) for a in ALPHAS}
        self.alpha, maes, by_part = choose_kept_share(errors)

        ok = np.isfinite(cv_target).all(axis=1)
        q_cv, _ = net_out(cv_origins[ok]) if ok.any() else (q[:0], tgt[:0])
        q_all = np.concatenate([q, q_cv])
        tgt_all = np.concatenate([tgt, cv_target[ok]])
        val_group = np.concatenate(
            [np.full(len(c), i) for i, c in enumerate(np.array_split(val_origins, 3))]
        )
        cv_group = (
            3
            + np.concatenate(
                [np.full(len(c), i) for i, c in enumerate(np.array_split(cv_origins, 5))]
            )[ok]
        )
        group = np.concatenate([val_group, cv_group])
        mid = self.alpha * q_all[..., 1]
        up = np.maximum(q_all[..., 2] - q_all[..., 1], 1e-6)
        down = np.maximum(q_all[..., 1] - q_all[..., 0], 1e-6)
        # One score per error, whichever side it falls on: the central 80 % band then covers
        # 80 % of the calibration errors, and a bias that differs between stretches of the
        # history widens the band instead of shifting it (the next week may be biased the
        # other way).
        score = band_scores(tgt_all - mid, up, down)
        self.k_hi = self.k_lo = conformal_factors(score, group, level=0.8)
        return {
            "median_correction_kept": self.alpha,
            "val_mae_by_kept_share": maes,
            "val_mae_by_kept_share_and_part": by_part,
            "conformal_k_lo": float(np.mean(self.k_lo)),
            "conformal_k_hi": float(np.mean(self.k_hi)),
            "calibration_windows": len(tgt_all),
        }

    # ---- predict
    def _quantiles_z(
        self, tail: pd.Series, origins: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Forecast from several origins (positions in ``tail``) in one batch.

        Returns the season over the tail and ``out_len`` steps past it, the tail's ``z``,
        and ``(len(origins), H, 3)`` p10/p50/p90 of ``z − season`` after each origin.
        """
        geom, net = self.geom, self.net
        assert geom is not None and self.weights is not None
        assert net is not None or self.band is not None
        steps0 = int(self.step_index(tail.index[:1])[0])
        steps = steps0 + np.arange(len(tail) + geom.out_len)
        season = self.profile.at(steps)
        z = np.log(tail.to_numpy() + self.offset)
        d = z - season[: len(tail)]
        ref, bb = backbone(d, geom, origins, self.weights)
        ref, bb = ref / self.scale, bb / self.scale
        if net is None:
            assert self.band is not None
            mid = bb
            lo, hi = mid + self.band[None, :, 0], mid + self.band[None, :, 1]
        else:
            dn, sn = self._normalised(d, season)
            inputs = build_inputs(
                dn=dn, sn=sn, cal=self._calendar(steps), origins=origins, ref=ref, bb=bb, geom=geom
            )
            with torch.no_grad():
                q = net(*self._tensors(inputs))[:, : self.horizon].cpu().numpy().astype(float)
            mid = bb + self.alpha * q[..., 1]
            lo = mid - self.k_lo * (q[..., 1] - q[..., 0])
            hi = mid + self.k_hi * (q[..., 2] - q[..., 1])
        return season, z, np.stack([lo, mid, hi], axis=-1) * self.scale

    def _forecast_z(
        self, context: pd.Series, *, score_recent: bool = False
    ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        """(future steps' season, (H, 3) quantiles of z − season, recent-error report).

        With ``score_recent``, the same batch also forecasts from up to
        ``recent_band_origins`` origins over the last ``recent_band_days`` and scores what of
        those forecasts has already happened (see :func:`recent_band_factor`).
        """
        geom = self.geom
        assert geom is not None
        if len(context) < geom.need:
            raise InsufficientHistoryError(
                f"kale: predict needs {geom.need} steps of history, got {len(context)}"
            )
        back, stride = 0, 1
        if score_recent:
            days = float(self.params.get("recent_band_days", RECENT_BAND_DAYS))
            wanted = round(days * 86400.0 / float(self.interval_s or 60))
            back = max(0, min(wanted, len(context) - geom.need))
            stride = max(
                1, wanted // int(self.params.get("recent_band_origins", RECENT_BAND_ORIGINS))
            )
        tail = context.iloc[-(geom.need + back) :]
        end = len(tail)
        past = np.arange(end - stride, geom.need - 1, -stride) if back else np.zeros(0, int)
        origins = np.concatenate([[end], past]).astype(int)
        season, z, rel = self._quantiles_z(tail, origins)
        report: dict[str, Any] = {"band_widening": 1.0, "recent_errors_scored": 0}
        if len(past):
            scores = []
            for o, r in zip(past, rel[1:], strict=True):
                n = min(self.horizon, end - o)
                err = z[o : o + n] - (season[o : o + n] + r[:n, 1])
                up = np.maximum(r[:n, 2] - r[:n, 1], 1e-9)
                down = np.maximum(r[:n, 1] - r[:n, 0], 1e-9)
                scores.append(band_scores(err, up, down))
            report = recent_band_factor(
                np.concatenate(scores), float(self.params.get("recent_band_max", RECENT_BAND_MAX))
            )
        return season[end : end + self.horizon], rel[0], report

    def _predict(self, context: pd.Series, horizon: int):
        chunks: list[np.ndarray] = []
        ctx = context
        widen_recent = 1.0
        with _torch_settings(1):  # one small forward pass: more threads only add overhead
            while sum(len(c) for c in chunks) < horizon:
                k = len(chunks)
                season, rel, report = self._forecast_z(ctx, score_recent=k == 0)
                if k == 0:
                    widen_recent = float(report["band_widening"])
                    self.last_predict = report
                # Recent misses widen the band around the median (see recent_band_factor);
                # recursive chunks past the trained horizon widen it by √(chunks) as well.
                widen = widen_recent * math.sqrt(k + 1)
                rel = rel[:, 1:2] + (rel - rel[:, 1:2]) * widen
                y = np.exp(season[:, None] + rel) - self.offset
                chunks.append(y)
                step = pd.Timedelta(seconds=float(self.interval_s or 60))
                idx = pd.date_range(ctx.index[-1] + step, periods=len(y), freq=step)
                ctx = pd.concat(
                    [
                        ctx.iloc[-(self.geom.need if self.geom else 0) :],
                        pd.Series(np.clip(y[:, 1], 0, None), index=idx),
                    ]
                )
        out = np.concatenate(chunks)[:horizon]
        return out[:, 1], {0.1: out[:, 0], 0.5: out[:, 1], 0.9: out[:, 2]}

    # ---- persistence
    def _dump(self) -> Payload:
        assert self.geom is not None and self.weights is not None
        blobs: dict[str, bytes] = {}
        if self.net is not None:
            buf = io.BytesIO()
            torch.save({k: v.detach().cpu() for k, v in self.net.state_dict().items()}, buf)
            blobs["weights.pt"] = buf.getvalue()
        meta = {
            "geometry": self.geom.to_dict(),
            "net": self.net_config if self.net is not None else None,
            "offset": self.offset,
            "scale": self.scale,
            "season_mu": self.season_mu,
            "season_sd": self.season_sd,
            "alpha": self.alpha,
            "profile_anchor": self.profile.anchor,
        }
        arrays = {
            "profile": self.profile.table,
            "backbone": self.weights,
            "k_lo": self.k_lo,
            "k_hi": self.k_hi,
        }
        if self.band is not None:
            arrays["band"] = self.band
        return Payload(meta=meta, arrays=arrays, blobs=blobs)

    def _restore(self, payload: Payload) -> None:
        m = payload.meta
        self.geom = Geometry.from_dict(m["geometry"])
        self.net_config = dict(m["net"] or {})
        for key in ("offset", "scale", "season_mu", "season_sd", "alpha"):
            setattr(self, key, float(m[key]))
        self.k_lo, self.k_hi = payload.arrays["k_lo"], payload.arrays["k_hi"]
        self.profile = SeasonalProfile(payload.arrays["profile"], int(m["profile_anchor"]))
        self.weights = payload.arrays["backbone"]
        self.band = payload.arrays.get("band")
        self.device = "cpu"
        if m["net"] is None:
            self.net = None
            return
        net = build_net(self.net_config)
        state = torch.load(
            io.BytesIO(payload.blobs["weights.pt"]), map_location="cpu", weights_only=True
        )
        net.load_state_dict(state)
        net.eval()
        self.net = net
