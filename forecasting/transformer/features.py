"""What the kale network sees, built with numpy only (torch stays in ``model.py``).

Everything is in log space, ``z = log(y + c)``: traffic noise and day-to-day swings are
multiplicative, so a level correction learned at night carries over to the evening peak.

Channels per step (all causal, so training windows and live predictions are built the same
way — an STL trend or residual is two-sided and would leak the future into training inputs):

* ``season``: the seasonal profile (:mod:`forecasting.decomposition.profile`), known for any
  past or future step;
* ``d = z - season``: the deseasonalised series (trend + residual), relative to the
  backbone's reference level (:mod:`forecasting.backbone`);
* the calendar of each patch (:func:`calendar`).

The network learns quantiles of what the backbone gets wrong. Its training windows end before
a held-out tail that is forward in time (:func:`plan_windows`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from forecasting.backbone import Geometry
from forecasting.base import InsufficientHistoryError

DAY_S = 86400.0
N_CAL = 4


def calendar(seconds: np.ndarray) -> np.ndarray:
    """sin/cos of the time of day and of the day of week (Monday = 0) for epoch seconds."""
    s = np.asarray(seconds, dtype=float)
    tod = np.mod(s, DAY_S) / DAY_S
    dow = (np.mod(np.floor_divide(s, DAY_S) + 3.0, 7.0) + tod) / 7.0  # 1970-01-01 = Thursday
    return np.stack(
        [
            np.sin(2 * np.pi * tod),
            np.cos(2 * np.pi * tod),
            np.sin(2 * np.pi * dow),
            np.cos(2 * np.pi * dow),
        ],
        axis=-1,
    ).astype(np.float32)


MIN_NETWORK_WINDOWS = (32, 4)
"""Training and held-out windows the network needs; with fewer, kale forecasts with the
backbone alone (docs/decisions/0015-backbone-alone-for-short-histories.md)."""
MIN_BACKBONE_ORIGINS = 24
"""Forecast origins the level model needs to be fitted and cross-validated at all."""
MAX_VAL_ORIGINS = 1024
"""Held-out windows scored at most (evenly thinned beyond)."""


def holdout_start(n: int, horizon: int, fraction: float) -> int:
    """Where the held-out tail begins: the last ``fraction`` of the history (≥ 2·horizon).

    The tail is held out *forward in time*, the way the model is used; blocks interleaved
    with the training days let the network learn those weeks
    (docs/decisions/0009-held-out-tail-forward-in-time.md).
    """
    return n - max(round(fraction * n), 2 * horizon)


@dataclass(frozen=True)
class Windows:
    """How a history's forecast windows are used: fitting, holding out, or both."""

    holdout_start: int
    held: np.ndarray
    """Steps the profile, the backbone and the gradient steps never see (none without a net)."""
    origins: np.ndarray
    train_origins: np.ndarray
    val_origins: np.ndarray
    network_skipped: str | None
    """Why there is no network (None: there is one)."""


def plan_windows(n: int, geom: Geometry, val_fraction: float) -> Windows:
    """Training and held-out forecast origins of an n-step history.

    A training window lies wholly before the held-out tail, a held-out one wholly inside it.
    With too few of either for the network, the backbone alone is fitted on the whole
    history (no tail); with too few origins even for that, the history is refused.
    """
    h = geom.horizon
    tail = holdout_start(n, h, val_fraction)
    held = np.arange(n) >= tail
    ends = np.concatenate([[0], np.cumsum(held)])
    origins = np.arange(geom.need, n - h + 1)
    in_held = ends[origins + h] - ends[origins]
    train_origins = origins[in_held == 0]
    val_origins = origins[in_held == h]
    if len(train_origins) >= MIN_NETWORK_WINDOWS[0] and len(val_origins) >= MIN_NETWORK_WINDOWS[1]:
        if len(val_origins) > MAX_VAL_ORIGINS:
            val_origins = np.unique(
                np.linspace(val_origins[0], val_origins[-1], MAX_VAL_ORIGINS).round().astype(int)
            )
        return Windows(tail, held, origins, train_origins, val_origins, None)
    if len(origins) < MIN_BACKBONE_ORIGINS:
        raise InsufficientHistoryError(
            f"kale: {n} steps leave {len(origins)} forecast windows for horizon {h} "
            f"(context {geom.need} steps); {MIN_BACKBONE_ORIGINS} are needed"
        )
    skipped = (
        f"{len(train_origins)} training and {len(val_origins)} "
        f"held-out windows are too few for the network (it needs "
        f"{MIN_NETWORK_WINDOWS[0]} and {MIN_NETWORK_WINDOWS[1]})"
    )
    return Windows(tail, np.zeros(n, dtype=bool), origins, origins, val_origins, skipped)


@dataclass
class Inputs:
    """One batch of network inputs (float32 numpy arrays)."""

    long: np.ndarray  # (B, n_long, 2·p_long + N_CAL)
    short: np.ndarray  # (B, n_short, 2·p_short + N_CAL)
    out: np.ndarray  # (B, n_out, 3·p_out + N_CAL)


def build_inputs(
    *,
    dn: np.ndarray,
    sn: np.ndarray,
    cal: np.ndarray,
    origins: np.ndarray,
    ref: np.ndarray,
    bb: np.ndarray,
    geom: Geometry,
) -> Inputs:
    """Patch the normalised channels around each origin.

    ``dn``/``sn``: normalised deseasonalised series and season over the steps the origins
    need (``sn``/``cal`` also over ``out_len`` future steps); ``ref``/``bb``: the backbone's
    reference level and forecast (normalised, relative to the same scale as ``dn``).
    """
    b = len(origins)
    o = origins[:, None]

    def patches(length: int, p: int, count: int) -> np.ndarray:
        idx = o - length + np.arange(length)[None, :]
        dpart = (dn[idx] - ref[:, None]).reshape(b, count, p)
        spart = sn[idx].reshape(b, count, p)
        cal_idx = o - length + (np.arange(count)[None, :] + 1) * p - 1
        return np.concatenate([dpart, spart, cal[cal_idx]], axis=-1)

    long = patches(geom.long_len, geom.p_long, geom.n_long)
    short = patches(geom.short_len, geom.p_short, geom.n_short)
    fut = o + np.arange(geom.out_len)[None, :]
    s_fut = sn[fut]
    s_now = sn[origins - 1][:, None]
    bb_pad = (
        np.concatenate([bb, np.repeat(bb[:, -1:], geom.out_len - geom.horizon, axis=1)], axis=1)
        - ref[:, None]
    )
    shape = (b, geom.n_out, geom.p_out)
    out = np.concatenate(
        [
            s_fut.reshape(shape),
            (s_fut - s_now).reshape(shape),
            bb_pad.reshape(shape),
            cal[fut[:, :: geom.p_out]],
        ],
        axis=-1,
    )
    return Inputs(
        long=long.astype(np.float32), short=short.astype(np.float32), out=out.astype(np.float32)
    )
