"""``kale``: STL/MSTL decomposition + a transformer correction, with calibrated quantiles.

Fit, in order (each stage lives in its own module; :meth:`KaleForecaster._fit` only wires
them together):

1. ``z = log(y + c)``; seasonality detection (:mod:`forecasting.seasonality`) picks the
   periods; the history's windows are split into training windows and a held-out tail,
   forward in time (:func:`~forecasting.transformer.features.plan_windows`).
2. Decomposition (:mod:`forecasting.decomposition`): clock changes undone, incidents
   replaced, day types in short histories, the profile's recency, the seasonal profile —
   all chosen before the tail.
3. The backbone (:mod:`forecasting.backbone`): profile(t+h) + a ridge-fitted function of the
   recent deseasonalised levels.
4. The networks (:mod:`.train`, :mod:`.model`) learn p10/p50/p90 of the backbone's error.
5. Calibration (:mod:`forecasting.calibration`): how much of the median correction to keep,
   and the band's conformal factors, from the tail and the backbone's cross-validation.
6. The profile is re-estimated on the whole history for forecasting.

A history too short for the network's windows is forecast by the backbone alone, with its
band from cross-validated errors. Predicting reads only the last ``geometry.need`` steps plus
two days, looks the profile up and runs one forward pass; the same pass scores the forecasts
of the last two days and widens the band when they missed
(:func:`~forecasting.calibration.recent_band_factor`). Saving: :mod:`.saving`.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np
import pandas as pd
import torch

from forecasting.backbone import Geometry, cv_origins, cv_residuals, fit_level_model
from forecasting.base import Forecaster, Payload
from forecasting.calibration import (
    backbone_band,
    calibrate_band,
)
from forecasting.decomposition import SeasonalProfile
from forecasting.decomposition.history import (
    clean_history,
    describe_clocks,
    describe_day_types,
    iso_step,
    whole_history_profile,
)
from forecasting.seasonality import candidate_periods, detect_seasonality
from forecasting.transformer.features import calendar, plan_windows
from forecasting.transformer.predict import forecast_z
from forecasting.transformer.saving import dump_state, restore_state
from forecasting.transformer.train import (
    TrainSettings,
    network_quantiles,
    resolve_device,
    torch_settings,
    train_networks,
    window_batches,
)

log = logging.getLogger(__name__)

EPOCH = pd.Timestamp("1970-01-01", tz="UTC")


class KaleForecaster(Forecaster):
    """Decomposition backbone + transformer corrections with calibrated quantiles.

    ``threads`` (torch's intra-op threads while fitting) defaults to one: fits that share
    cores spin at torch's barriers (docs/decisions/0013-one-training-thread.md). ``members``
    networks (default 3, seeds ``seed``, ``seed + 1``, …) are trained and their quantiles
    averaged (docs/decisions/0014-three-networks-averaged.md).
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

    def calendar_features(self, steps: np.ndarray) -> np.ndarray:
        """The network's calendar inputs at these steps (zeros with ``use_calendar=False``)."""
        cal = calendar(self._epoch_seconds(steps))
        return cal if self.params.get("use_calendar", True) else np.zeros_like(cal)

    def normalised(self, d: np.ndarray, season: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The network's two input channels: ``d`` in units of the scale, the season
        standardised."""
        return d / self.scale, (season - self.season_mu) / self.season_sd

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
        periods = report.detected
        day = candidate_periods(interval).get("daily")
        geom = Geometry.choose(horizon=h, day=day, available=n, context=p["context"])
        windows = plan_windows(n, geom, float(p["val_fraction"]))
        if windows.network_skipped:
            log.info("kale: backbone only: %s", windows.network_skipped)
        self.geom = geom
        self.band = None

        started = time.perf_counter()
        midnight = self._midnight_step(day)
        hour = round(3600.0 / interval) if 3600.0 % interval == 0 else 0
        clean = clean_history(
            z_raw,
            periods,
            day_start=midnight,
            hour=hour,
            held=windows.held,
            use_day_types=p.get("day_types", True),
        )
        decomp_s = time.perf_counter() - started
        # From here on the models learn from the cleaned series (clock changes undone,
        # outliers replaced; docs/decisions/0002); predicting still reads the raw series.
        z, trend = clean.z, clean.trend
        steps = np.arange(n + geom.out_len)
        season = clean.profile.at(steps)
        d = z - season[:n]
        rng = np.random.default_rng(p["seed"])
        level, resid, self.scale = fit_level_model(
            d, geom, windows.train_origins, rng, seasonal=bool(periods)
        )
        self.weights = level.weights
        table = clean.profile.table
        self.season_mu = float(np.mean(table)) if clean.profile.period else 0.0
        self.season_sd = float(max(np.std(table), 1e-3)) if clean.profile.period else 1.0
        self.profile = clean.profile
        assert self._t0 is not None
        clocks = describe_clocks(clean, self._t0, interval)
        hl = clean.half_life
        self.fit_summary.update(
            seasonality=report.to_dict(),
            device=self.device,
            geometry=geom.to_dict(),
            decomposition_seconds=decomp_s,
            outliers_replaced=int(np.count_nonzero(clean.outliers)),
            # None: every week of the profile weighs the same.
            profile_half_life_days=None if hl is None else hl * interval / 86400,
            profile_half_life_scores=clean.half_life_scores,
            # Every change found, in time order; clock_change is the latest (or None).
            clock_changes=clocks,
            clock_change=clocks[-1] if clocks else None,
            day_types=describe_day_types(clean, self._t0, interval),
            offset=self.offset,
            scale=self.scale,
            backbone_ridge=level.ridge,
            backbone_prior=level.prior,
            backbone_cv_mae=level.cv_mae,
        )
        origins_cv = cv_origins(n, geom)

        def cv_errors() -> np.ndarray:
            return cv_residuals(
                z,
                trend,
                periods,
                geom,
                origins_cv,
                level.ridge,
                prior=level.prior,
                day_start=midnight,
                half_life=hl,
                day_types=clean.day_types,
            )[1]

        if windows.network_skipped:
            started = time.perf_counter()
            self.band, band_info = backbone_band(cv_errors(), resid, self.scale)
            self.net, self.net_config, self.alpha = None, {}, 0.0
            self.k_lo = self.k_hi = np.ones(h)
            self.fit_summary.update(
                profile=clean.profile_info,
                network=None,
                network_skipped=windows.network_skipped,
                train_windows=len(windows.train_origins),
                val_windows=0,
                cv_seconds=time.perf_counter() - started,
                median_correction_kept=0.0,
                **band_info,
            )
            return
        dn, sn = self.normalised(d, season)
        batch = window_batches(
            d=d,
            dn=dn,
            sn=sn,
            cal=self.calendar_features(steps),
            geom=geom,
            weights=self.weights,
            scale=self.scale,
            device=self.device,
        )
        settings = TrainSettings.from_params(p)
        with torch_settings(int(p["threads"])):
            torch.manual_seed(settings.seed)
            net, self.net_config, train_info = train_networks(
                batch,
                windows.train_origins,
                windows.val_origins,
                rng,
                geom=geom,
                settings=settings,
                device=self.device,
                progress=self.progress,
            )
            self.net = net
            started = time.perf_counter()
            cv_err = cv_errors()
            cv_s = time.perf_counter() - started
            calib = calibrate_band(
                quantiles_at=lambda origins: network_quantiles(net, batch, origins, h),
                val_origins=windows.val_origins,
                cv_origins=origins_cv,
                cv_target=cv_err / self.scale,
                z=z,
                season=season,
                geom=geom,
                weights=self.weights,
                offset=self.offset,
                scale=self.scale,
            )
        self.alpha = calib.kept_share
        self.k_hi = self.k_lo = calib.factors
        # Forecast with the profile of the whole history (the network is unchanged).
        self.profile, profile_info = whole_history_profile(clean, periods, midnight)
        self.fit_summary.update(
            profile=profile_info,
            network="transformer",
            network_skipped=None,
            train_windows=len(windows.train_origins),
            val_windows=len(windows.val_origins),
            holdout_start=iso_step(self._t0, interval, windows.holdout_start),
            cv_seconds=cv_s,
            **train_info,
            **calib.report,
        )

    # ---- predict (forecasting/transformer/predict.py)
    def _predict(self, context: pd.Series, horizon: int):
        chunks: list[np.ndarray] = []
        ctx = context
        widen_recent = 1.0
        with torch_settings(1):  # one small forward pass: more threads only add overhead
            while sum(len(c) for c in chunks) < horizon:
                k = len(chunks)
                season, rel, report = forecast_z(self, ctx, score_recent=k == 0)
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

    # ---- persistence (forecasting/transformer/saving.py)
    def _dump(self) -> Payload:
        return dump_state(self)

    def _restore(self, payload: Payload) -> None:
        restore_state(self, payload)
