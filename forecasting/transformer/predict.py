"""Forecasting from a fitted kale: one batched forward pass from several origins.

The pass that forecasts from the end of the context also forecasts from up to 48 origins
of the two days before it, so that the band can be judged on what has already happened
(:func:`~forecasting.calibration.recent_band_factor`) at no extra pass. Only the last
``geometry.need`` steps plus those two days are read, and the profile is looked up, so a
forecast takes milliseconds however long the history is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch

from forecasting.backbone import backbone
from forecasting.base import InsufficientHistoryError
from forecasting.calibration import (
    RECENT_BAND_DAYS,
    RECENT_BAND_MAX,
    RECENT_BAND_ORIGINS,
    recent_band_factor,
    recent_scores,
)
from forecasting.transformer.features import build_inputs
from forecasting.transformer.train import to_tensors

if TYPE_CHECKING:
    from forecasting.transformer.forecaster import KaleForecaster


def quantiles_z(
    model: KaleForecaster, tail: pd.Series, origins: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Forecast from several origins (positions in ``tail``) in one batch.

    Returns the season over the tail and ``out_len`` steps past it, the tail's ``z``,
    and ``(len(origins), H, 3)`` p10/p50/p90 of ``z − season`` after each origin.
    """
    geom, net = model.geom, model.net
    assert geom is not None and model.weights is not None
    assert net is not None or model.band is not None
    steps0 = int(model.step_index(tail.index[:1])[0])
    steps = steps0 + np.arange(len(tail) + geom.out_len)
    season = model.profile.at(steps)
    z = np.log(tail.to_numpy() + model.offset)
    d = z - season[: len(tail)]
    ref, bb = backbone(d, geom, origins, model.weights)
    ref, bb = ref / model.scale, bb / model.scale
    if net is None:
        assert model.band is not None
        mid = bb
        lo, hi = mid + model.band[None, :, 0], mid + model.band[None, :, 1]
    else:
        dn, sn = model.normalised(d, season)
        cal = model.calendar_features(steps)
        inputs = build_inputs(dn=dn, sn=sn, cal=cal, origins=origins, ref=ref, bb=bb, geom=geom)
        with torch.no_grad():
            q = (
                net(*to_tensors(inputs, model.device))[:, : model.horizon]
                .cpu()
                .numpy()
                .astype(float)
            )
        mid = bb + model.alpha * q[..., 1]
        lo = mid - model.k_lo * (q[..., 1] - q[..., 0])
        hi = mid + model.k_hi * (q[..., 2] - q[..., 1])
    return season, z, np.stack([lo, mid, hi], axis=-1) * model.scale


def forecast_z(
    model: KaleForecaster, context: pd.Series, *, score_recent: bool = False
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """(future steps' season, (H, 3) quantiles of z − season, recent-error report).

    With ``score_recent``, the same batch also forecasts from up to
    ``recent_band_origins`` origins over the last ``recent_band_days`` and scores what of
    those forecasts has already happened (see :func:`recent_band_factor`).
    """
    geom = model.geom
    assert geom is not None
    if len(context) < geom.need:
        raise InsufficientHistoryError(
            f"kale: predict needs {geom.need} steps of history, got {len(context)}"
        )
    back, stride = 0, 1
    if score_recent:
        days = float(model.params.get("recent_band_days", RECENT_BAND_DAYS))
        wanted = round(days * 86400.0 / float(model.interval_s or 60))
        back = max(0, min(wanted, len(context) - geom.need))
        stride = max(1, wanted // int(model.params.get("recent_band_origins", RECENT_BAND_ORIGINS)))
    tail = context.iloc[-(geom.need + back) :]
    end = len(tail)
    past = np.arange(end - stride, geom.need - 1, -stride) if back else np.zeros(0, int)
    origins = np.concatenate([[end], past]).astype(int)
    season, z, rel = quantiles_z(model, tail, origins)
    report: dict[str, Any] = {"band_widening": 1.0, "recent_errors_scored": 0}
    if len(past):
        report = recent_band_factor(
            recent_scores(z, season, rel[1:], past, end, model.horizon),
            float(model.params.get("recent_band_max", RECENT_BAND_MAX)),
        )
    return season[end : end + model.horizon], rel[0], report
