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
band from cross-validated errors.

Predicting reads only the last ``geometry.need`` steps plus two days, looks the profile up
and runs one batched forward pass: the pass that forecasts from the end of the context also
forecasts from up to 48 origins of the two days before it, so the band can be judged on what
has already happened (:func:`~forecasting.calibration.recent_band_factor`) at no extra pass,
and widened when those forecasts missed. A forecast takes milliseconds however long the
history is.

A refit given the last fit (``fit(history, previous=...)``, what the forecast feed does) is
incremental where :func:`~forecasting.refit.decide_refit` allows: the offset, periods, day
types, recency, geometry, the level model's penalty and the networks' normalisation are kept;
the decomposition is extended over the new steps instead of recomputed (at 10 minutes and
coarser, where extending costs about as much, the history is cleaned again as a full fit
cleans it); the level model is solved again; each network is fine-tuned from its weights
on the windows it never trained on, with old ones replayed, and keeps the new weights only
if they do better on the new held-out tail; the band is calibrated again. Otherwise (drift,
a gap, the age limit, …) it is a full fit. Either way ``fit_summary["refit"]`` says which and why.

Saving keeps what predicting needs: the geometry, the profile table, the backbone's
weights, the log offset and scales, the kept share and band factors, and the networks'
weights (``weights.pt``; none when the backbone forecasts alone, which saves its ``band``
instead); and what the next incremental refit starts from: the cleaned log series, its
trend and outliers, and the full fit's choices (``refit``; files without it load and refit
in full). The raw training windows are not kept: a loaded model predicts exactly as the
fitted one did and refits exactly as it would have.
"""

from __future__ import annotations

import copy
import io
import logging
import math
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from forecasting.backbone import (
    BackboneFit,
    Geometry,
    backbone,
    fit_level_model,
    refit_level_model,
)
from forecasting.base import Forecaster, InsufficientHistoryError, Payload
from forecasting.calibration import (
    RECENT_BAND_DAYS,
    RECENT_BAND_MAX,
    RECENT_BAND_ORIGINS,
    backbone_band,
    calibrate_band,
    recent_band_factor,
    recent_scores,
)
from forecasting.decomposition import ClockChange, DayTypes, SeasonalProfile
from forecasting.decomposition.history import (
    CleanHistory,
    epoch_seconds,
    iso_step,
    summarise,
    whole_history_profile,
)
from forecasting.refit import RefitBasis, RefitDecision, decide_refit
from forecasting.seasonality import SeasonalityReport, candidate_periods
from forecasting.series import iso_utc
from forecasting.transformer.features import build_inputs, calendar, plan_windows
from forecasting.transformer.model import build_net
from forecasting.transformer.prepare import FitData, Previous, prepare, prepare_refit
from forecasting.transformer.train import (
    Batch,
    TrainSettings,
    fine_tune_networks,
    network_quantiles,
    resolve_device,
    to_tensors,
    torch_settings,
    train_networks,
    window_batches,
)

log = logging.getLogger(__name__)

_FLOATS = ("offset", "scale", "season_mu", "season_sd", "alpha")
"""The fitted scalars, saved and restored by name."""


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
        refit_steps: int = 12,
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
            refit_steps=refit_steps,
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
        # What an incremental refit starts from besides the above (None: full fits only).
        self.clean: CleanHistory | None = None
        self.refit_memory: RefitMemory | None = None

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
        return epoch_seconds(self._t0, self.interval_s, steps)

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
        self.device = resolve_device(self.params["device"])
        # 1-2: log space, periods, the windows' split, the decomposition (prepare.py)
        data = prepare(series.to_numpy(), self._t0, float(self.interval_s or 60), self.params)
        self.offset, self.geom, self.band = data.offset, data.geom, None
        # 3: the ridge level model (backbone.py)
        level, resid = self._fit_backbone(data)
        if data.windows.network_skipped:
            # Too short for the network: the backbone alone, its band from cross-validation.
            log.info("kale: backbone only: %s", data.windows.network_skipped)
            self._fit_backbone_band(data, level, resid)
        else:
            # 4-6: the networks (train.py), the band (calibration.py), the final profile.
            self._fit_networks(data, level)
        self._remember(data, level, full_fit_end=series.index[-1], refits=0, kept_share=self.alpha)

    def _remember(
        self,
        data: FitData,
        level: BackboneFit,
        *,
        full_fit_end: pd.Timestamp,
        refits: int,
        kept_share: float,
    ) -> None:
        """Keep what the next incremental refit starts from (:meth:`_refit_state`)."""
        self.clean = data.clean
        self.refit_memory = RefitMemory(
            full_fit_end=full_fit_end,
            refits=refits,
            kept_share=kept_share,
            ridge=level.ridge,
            prior=level.prior,
            holdout_start=int(data.windows.holdout_start),
            report=data.report,
        )

    def _fit_backbone(self, data: FitData) -> tuple[BackboneFit, np.ndarray]:
        clean, interval = data.clean, data.interval
        level, resid, self.scale = fit_level_model(
            data.d, data.geom, data.windows.train_origins, data.rng, seasonal=bool(data.periods)
        )
        self.weights = level.weights
        table = clean.profile.table
        self.season_mu = float(np.mean(table)) if clean.profile.period else 0.0
        self.season_sd = float(max(np.std(table), 1e-3)) if clean.profile.period else 1.0
        self.profile = clean.profile
        assert self._t0 is not None
        self.fit_summary.update(
            seasonality=data.report.to_dict(),
            device=self.device,
            geometry=data.geom.to_dict(),
            decomposition_seconds=data.decomposition_s,
            **summarise(clean, self._t0, interval),
            offset=self.offset,
            scale=self.scale,
            backbone_ridge=level.ridge,
            backbone_prior=level.prior,
            backbone_cv_mae=level.cv_mae,
        )
        return level, resid

    def _fit_backbone_band(self, data: FitData, level: BackboneFit, resid: np.ndarray) -> None:
        started = time.perf_counter()
        self.band, band_info = backbone_band(data.cv_errors(level), resid, self.scale)
        self.net, self.net_config, self.alpha = None, {}, 0.0
        self.k_lo = self.k_hi = np.ones(self.horizon)
        self.fit_summary.update(
            profile=data.clean.profile_info,
            network=None,
            network_skipped=data.windows.network_skipped,
            train_windows=len(data.windows.train_origins),
            val_windows=0,
            cv_seconds=time.perf_counter() - started,
            median_correction_kept=0.0,
            **band_info,
        )

    def _fit_networks(self, data: FitData, level: BackboneFit) -> None:
        p, windows = self.params, data.windows
        assert self.weights is not None and self._t0 is not None
        dn, sn = self.normalised(data.d, data.season)
        batch = window_batches(
            d=data.d,
            dn=dn,
            sn=sn,
            cal=self.calendar_features(data.steps),
            geom=data.geom,
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
                data.rng,
                geom=data.geom,
                settings=settings,
                device=self.device,
                progress=self.progress,
            )
            self.net = net
            self._calibrate(data, level, batch, train_info)

    def _calibrate(
        self,
        data: FitData,
        level: BackboneFit,
        batch: Batch,
        train_info: dict[str, Any],
        max_share: float = 1.0,
    ) -> None:
        """5-6: the kept share (at most ``max_share``) and the band (calibration.py), then
        the whole history's profile for forecasting (the network is unchanged)."""
        net, h, windows = self.net, self.horizon, data.windows
        assert net is not None and self.weights is not None and self._t0 is not None
        started = time.perf_counter()
        cv_err = data.cv_errors(level)
        cv_s = time.perf_counter() - started
        calib = calibrate_band(
            quantiles_at=lambda origins: network_quantiles(net, batch, origins, h),
            val_origins=windows.val_origins,
            cv_origins=data.cv_origins,
            cv_target=cv_err / self.scale,
            z=data.clean.z,
            season=data.season,
            geom=data.geom,
            weights=self.weights,
            offset=self.offset,
            scale=self.scale,
            max_share=max_share,
        )
        self.alpha = calib.kept_share
        self.k_hi = self.k_lo = calib.factors
        self.profile, profile_info = whole_history_profile(data.clean, data.periods, data.midnight)
        self.fit_summary.update(
            profile=profile_info,
            network="transformer",
            network_skipped=None,
            train_windows=len(windows.train_origins),
            val_windows=len(windows.val_origins),
            holdout_start=iso_step(self._t0, data.interval, windows.holdout_start),
            cv_seconds=cv_s,
            **train_info,
            **calib.report,
        )

    # ---- incremental refits
    def _layout(self, steps: int) -> tuple[Geometry, bool] | None:
        """The window geometry and whether there is a network, for a history of ``steps``
        (None: too short for either)."""
        day = candidate_periods(float(self.interval_s or 60)).get("daily")
        p = self.params
        geom = Geometry.choose(horizon=self.horizon, day=day, available=steps, context=p["context"])
        try:
            windows = plan_windows(steps, geom, float(p["val_fraction"]))
        except InsufficientHistoryError:
            return None
        return geom, windows.network_skipped is None

    def _refit_state(self) -> RefitState | None:
        memory, clean, ctx = self.refit_memory, self.clean, self._context
        if memory is None or clean is None or ctx is None or self.net is None:
            return None  # a backbone alone refits in full: it is cheap, and has no network
        assert self.geom is not None and self._t0 is not None and self.interval_s is not None
        if ctx.index[0] != self._t0 or len(ctx) < len(clean.z):
            return None  # the context lost its first fitted steps (max_context_days)
        basis = RefitBasis(
            start=self._t0,
            interval_s=self.interval_s,
            values=ctx.to_numpy(dtype=float)[: len(clean.z)].copy(),
            full_fit_end=memory.full_fit_end,
            offset=self.offset,
            periods=dict(memory.report.detected),
            acf=dict(memory.report.acf),
            profile=self.profile,
            layout=(self.geom, True),
        )
        return RefitState(
            basis=basis,
            memory=memory,
            previous=Previous(self.offset, memory.report, self.geom, clean),
            net=copy.deepcopy(self.net),
            net_config=dict(self.net_config),
            scale=self.scale,
            season_mu=self.season_mu,
            season_sd=self.season_sd,
        )

    def _refit(self, series: pd.Series, state: RefitState) -> dict[str, Any]:
        """A refit from ``state`` (:meth:`_refit_state`): incremental where
        :func:`~forecasting.refit.decide_refit` allows, else :meth:`_fit`."""
        # ``self`` may be the model ``state`` was taken from: the base class has already set
        # the new history's start and interval, and nothing of the old fit is read but
        # ``state``.
        decision = decide_refit(state.basis, series, layout=self._layout(len(series)))
        if not decision.incremental:
            log.info("kale: full refit: %s", decision.reason)
            self._fit(series)
            return decision.to_dict()
        self._fit_incrementally(series, state, decision)
        return {**decision.to_dict(), "refits_since_full_fit": state.memory.refits + 1}

    def _fit_incrementally(
        self, series: pd.Series, state: RefitState, decision: RefitDecision
    ) -> None:
        """The stages of :meth:`_fit` from where the last fit left them: its offset, periods,
        day types, recency, geometry, penalty and network normalisation kept; the
        decomposition extended over the new steps; the level model solved again; the
        networks fine-tuned on the new windows with old ones replayed; the band calibrated
        again on the new held-out tail."""
        p, h, memory = self.params, self.horizon, state.memory
        assert self._t0 is not None
        self.device = resolve_device(p["device"])
        rng = np.random.default_rng([int(p["seed"]), memory.refits + 1])
        data = prepare_refit(
            series.to_numpy(),
            self._t0,
            float(self.interval_s or 60),
            p,
            state.previous,
            shift=decision.shift,
            acf=decision.acf,
            rng=rng,
        )
        windows = data.windows
        self.offset, self.geom, self.band = data.offset, data.geom, None
        self.scale, self.season_mu, self.season_sd = state.scale, state.season_mu, state.season_sd
        level = refit_level_model(
            data.d, data.geom, windows.train_origins, rng, ridge=memory.ridge, prior=memory.prior
        )
        self.weights = level.weights
        self.profile = data.clean.profile
        self.fit_summary.update(
            seasonality=data.report.to_dict(),
            device=self.device,
            geometry=data.geom.to_dict(),
            decomposition_seconds=data.decomposition_s,
            **summarise(data.clean, self._t0, data.interval),
            offset=self.offset,
            scale=self.scale,
            backbone_ridge=level.ridge,
            backbone_prior=level.prior,
        )
        dn, sn = self.normalised(data.d, data.season)
        batch = window_batches(
            d=data.d,
            dn=dn,
            sn=sn,
            cal=self.calendar_features(data.steps),
            geom=data.geom,
            weights=self.weights,
            scale=self.scale,
            device=self.device,
        )
        # Windows that reach past the old held-out tail's start were never trained on.
        trained_until = memory.holdout_start - decision.shift
        fresh = windows.train_origins + h > trained_until
        with torch_settings(int(p["threads"])):
            torch.manual_seed(int(p["seed"]) + memory.refits + 1)
            self.net, train_info = fine_tune_networks(
                state.net.to(self.device),
                batch,
                windows.train_origins[fresh],
                windows.train_origins[~fresh],
                windows.val_origins,
                rng,
                settings=TrainSettings.from_params(p),
                steps=int(p.get("refit_steps", 0)),
                horizon=h,
            )
            self.net_config = state.net_config
            # The held-out tail that judges the kept share also chose the fine-tuned weights,
            # which flatters them: no more of the correction than the full fit kept.
            self._calibrate(data, level, batch, train_info, max_share=memory.kept_share)
        self._remember(
            data,
            level,
            full_fit_end=memory.full_fit_end,
            refits=memory.refits + 1,
            kept_share=memory.kept_share,
        )

    # ---- predict
    def _predict(
        self, context: pd.Series, horizon: int
    ) -> tuple[np.ndarray, dict[float, np.ndarray]]:
        chunks: list[np.ndarray] = []
        ctx = context
        widen_recent = 1.0
        with torch_settings(1):  # one small forward pass: more threads only add overhead
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
            dn, sn = self.normalised(d, season)
            cal = self.calendar_features(steps)
            inputs = build_inputs(dn=dn, sn=sn, cal=cal, origins=origins, ref=ref, bb=bb, geom=geom)
            with torch.no_grad():
                q = (
                    net(*to_tensors(inputs, self.device))[:, : self.horizon]
                    .cpu()
                    .numpy()
                    .astype(float)
                )
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
            origins_wanted = int(self.params.get("recent_band_origins", RECENT_BAND_ORIGINS))
            stride = max(1, wanted // origins_wanted)
        tail = context.iloc[-(geom.need + back) :]
        end = len(tail)
        past = np.arange(end - stride, geom.need - 1, -stride) if back else np.zeros(0, int)
        origins = np.concatenate([[end], past]).astype(int)
        season, z, rel = self._quantiles_z(tail, origins)
        report: dict[str, Any] = {"band_widening": 1.0, "recent_errors_scored": 0}
        if len(past):
            report = recent_band_factor(
                recent_scores(z, season, rel[1:], past, end, self.horizon),
                float(self.params.get("recent_band_max", RECENT_BAND_MAX)),
            )
        return season[end : end + self.horizon], rel[0], report

    # ---- persistence (the base class writes the file itself)
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
        if self.refit_memory is not None and self.clean is not None:
            meta["refit"] = self.refit_memory.to_dict(self.clean)
            arrays.update(
                refit_z=self.clean.z,
                refit_trend=self.clean.trend,
                refit_outliers=self.clean.outliers,
            )
        return Payload(meta=meta, arrays=arrays, blobs=blobs)

    def _restore(self, payload: Payload) -> None:
        """The fitted state from what :meth:`_dump` wrote (on the CPU)."""
        m = payload.meta
        self.geom = Geometry.from_dict(m["geometry"])
        self.net_config = dict(m["net"] or {})
        for key in _FLOATS:
            setattr(self, key, float(m[key]))
        self.k_lo, self.k_hi = payload.arrays["k_lo"], payload.arrays["k_hi"]
        self.profile = SeasonalProfile(payload.arrays["profile"], int(m["profile_anchor"]))
        self.weights = payload.arrays["backbone"]
        self.band = payload.arrays.get("band")
        self.device = "cpu"
        if "refit" in m:  # files saved before incremental refits have none: full refits
            self.refit_memory, self.clean = RefitMemory.restore(
                m["refit"],
                z=payload.arrays["refit_z"],
                trend=payload.arrays["refit_trend"],
                outliers=payload.arrays["refit_outliers"],
                profile=self.profile,
            )
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


@dataclass(frozen=True)
class RefitMemory:
    """What a fit keeps for the next incremental refit, besides the model's own state."""

    full_fit_end: pd.Timestamp
    """The last step of the last full fit's history (the age limit counts from it)."""
    refits: int
    """Incremental refits since that full fit."""
    kept_share: float
    """The share of the network's correction the full fit kept: an incremental refit keeps
    no more (its held-out tail chose the fine-tuned weights, so it flatters them)."""
    ridge: float
    prior: str
    """The level model's penalty and prior, chosen by the full fit's cross-validation."""
    holdout_start: int
    """Where the held-out tail began: the network trained on the windows before it."""
    report: SeasonalityReport

    def to_dict(self, clean: CleanHistory) -> dict[str, Any]:
        """For the saved file, with the decomposition's choices (its arrays go apart)."""
        dt = clean.day_types
        return {
            "full_fit_end": iso_utc(self.full_fit_end),
            "refits": self.refits,
            "kept_share": self.kept_share,
            "ridge": self.ridge,
            "prior": self.prior,
            "holdout_start": self.holdout_start,
            "seasonality": self.report.to_dict(),
            "clocks": [asdict(c) for c in clean.clocks],
            "day_types": None if dt is None else dt._asdict(),
            "day_type_report": clean.day_type_report,
            "half_life": clean.half_life,
            "half_life_scores": clean.half_life_scores,
        }

    @classmethod
    def restore(
        cls,
        d: dict[str, Any],
        *,
        z: np.ndarray,
        trend: np.ndarray,
        outliers: np.ndarray,
        profile: SeasonalProfile,
    ) -> tuple[RefitMemory, CleanHistory]:
        """What :meth:`to_dict` and the arrays saved."""
        dt = d["day_types"]
        clean = CleanHistory(
            z=z,
            trend=trend,
            outliers=outliers.astype(bool),
            clocks=tuple(ClockChange(**c) for c in d["clocks"]),
            day_types=None if dt is None else DayTypes(**{**dt, "groups": tuple(dt["groups"])}),
            day_type_report=d["day_type_report"],
            half_life=d["half_life"],
            half_life_scores=d["half_life_scores"],
            profile=profile,
            profile_info={},
        )
        memory = cls(
            full_fit_end=pd.Timestamp(d["full_fit_end"]),
            refits=int(d["refits"]),
            kept_share=float(d.get("kept_share", 1.0)),
            ridge=float(d["ridge"]),
            prior=str(d["prior"]),
            holdout_start=int(d["holdout_start"]),
            report=SeasonalityReport.from_dict(d["seasonality"]),
        )
        return memory, clean


@dataclass
class RefitState:
    """A snapshot of a fit that an incremental refit starts from and may change (its network
    is a copy)."""

    basis: RefitBasis
    memory: RefitMemory
    previous: Previous
    net: torch.nn.Module
    net_config: dict[str, int]
    scale: float
    season_mu: float
    season_sd: float
