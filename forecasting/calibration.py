"""kale's band: how much of the network's correction to keep, and how wide p10–p90 is.

The band is calibrated on out-of-sample errors only: a held-out tail the network never
trained on, and the backbone's blocked cross-validation over the whole history. Its shape
over the horizon comes from all of them pooled; its level is the median of what each stretch
of history asks for, so one holiday or level shift cannot set it alone
(docs/decisions/0011-band-calibration.md). At predict time the band widens when the last
two days' forecasts missed more than it promised (:func:`recent_band_factor`). Numpy only:
the network's forward pass reaches this module as a function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from forecasting.backbone import Geometry, backbone

ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0)
"""Shares of the network's median correction on offer (0: the backbone alone)."""
BAND_LEVEL = 0.8
"""The central band p10–p90 covers 80 % of the calibration errors."""

RECENT_BAND_DAYS = 2.0
"""Predict-time widening looks at forecasts made over the last two days
(docs/decisions/0012-band-widens-after-recent-misses.md)."""
RECENT_BAND_ORIGINS = 48
"""From at most this many origins (evenly spaced)."""
RECENT_BAND_MAX = 3.0
"""By at most this factor."""
RECENT_BAND_LEVEL = 0.8
"""The quantile of the recent scores compared with 1 (the fitted band covers 80 % of them)."""
RECENT_BAND_MIN_SCORES = 10
"""Fewer scored steps than this say nothing: no widening."""

QuantilesAt = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
"""origins → (the network's (B, H, 3) quantiles, the (B, H) targets), in units of the scale."""


def band_scores(err: np.ndarray, up: np.ndarray, down: np.ndarray) -> np.ndarray:
    """Errors in units of the half-band on their own side (1 = on p10 or p90).

    One definition for calibrating the band and for judging it afterwards
    (:func:`recent_band_factor`), so that "80 % of scores under 1" means the same in both.
    ``up`` and ``down`` must be positive.
    """
    return np.maximum(err / up, -err / down)


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
    stretches of the origins, not just on average: at 30 minutes or 1 hour the overlapping
    held-out windows hold only a few independent horizons, and one stretch the network
    happened to fit could carry the average
    (docs/decisions/0010-kept-share-must-help-every-stretch.md). Among the qualifying shares
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


@dataclass(frozen=True)
class BandCalibration:
    """What :func:`calibrate_band` chose."""

    kept_share: float
    """Share of the network's median correction added to the backbone."""
    factors: np.ndarray
    """Per horizon step: the network's half-bands are multiplied by this."""
    report: dict[str, Any]
    """For the fit summary."""


def calibrate_band(
    *,
    quantiles_at: QuantilesAt,
    val_origins: np.ndarray,
    cv_origins: np.ndarray,
    cv_target: np.ndarray,
    z: np.ndarray,
    season: np.ndarray,
    geom: Geometry,
    weights: np.ndarray,
    offset: float,
    scale: float,
    max_share: float = 1.0,
) -> BandCalibration:
    """Pick the share of the median correction to keep and the band's conformal factors.

    The share is chosen on the held-out tail (the network never trained there), by its error
    in traffic units, among the shares up to ``max_share`` (an incremental refit's cap: its
    fine-tuned weights were chosen on this same tail, which flatters them). The factors use
    the tail's errors and the backbone's cross-validated errors (``cv_target``, one row per
    ``cv_origins``, NaN where a chunk could not be scored). Groups for the level: three
    consecutive parts of the tail, five cross-validation chunks.
    """
    q, tgt = quantiles_at(val_origins)
    h = geom.horizon
    bb_dn = backbone(z - season[: len(z)], geom, val_origins, weights)[1] / scale
    fut = val_origins[:, None] + np.arange(h)[None, :]
    actual = np.exp(z[fut]) - offset

    def to_y(rel: np.ndarray) -> np.ndarray:
        return np.exp(season[fut] + (bb_dn + rel) * scale) - offset

    errors = {a: np.abs(to_y(a * q[..., 1]) - actual) for a in ALPHAS if a <= max_share}
    alpha, maes, by_part = choose_kept_share(errors)

    ok = np.isfinite(cv_target).all(axis=1)
    q_cv, _ = quantiles_at(cv_origins[ok]) if ok.any() else (q[:0], tgt[:0])
    q_all = np.concatenate([q, q_cv])
    tgt_all = np.concatenate([tgt, cv_target[ok]])
    val_group = np.concatenate(
        [np.full(len(c), i) for i, c in enumerate(np.array_split(val_origins, 3))]
    )
    cv_group = (
        3
        + np.concatenate([np.full(len(c), i) for i, c in enumerate(np.array_split(cv_origins, 5))])[
            ok
        ]
    )
    group = np.concatenate([val_group, cv_group])
    mid = alpha * q_all[..., 1]
    up = np.maximum(q_all[..., 2] - q_all[..., 1], 1e-6)
    down = np.maximum(q_all[..., 1] - q_all[..., 0], 1e-6)
    # One score per error, whichever side it falls on: the central 80 % band then covers
    # 80 % of the calibration errors, and a bias that differs between stretches of the
    # history widens the band instead of shifting it (the next week may be biased the
    # other way).
    score = band_scores(tgt_all - mid, up, down)
    factors = conformal_factors(score, group, level=BAND_LEVEL)
    return BandCalibration(
        kept_share=alpha,
        factors=factors,
        report={
            "median_correction_kept": alpha,
            "val_mae_by_kept_share": maes,
            "val_mae_by_kept_share_and_part": by_part,
            "conformal_k_lo": float(np.mean(factors)),
            "conformal_k_hi": float(np.mean(factors)),
            "calibration_windows": len(tgt_all),
        },
    )


def backbone_band(
    cv_err: np.ndarray, resid: np.ndarray, scale: float
) -> tuple[np.ndarray, dict[str, Any]]:
    """p10/p90 offsets (horizon × 2, in units of ``scale``) of the backbone alone, from the
    per-step quantiles of its cross-validated errors.

    Without a network there is no held-out tail, so the blocked cross-validation over the
    whole history is the only out-of-sample error there is. Where it cannot run (too few
    windows in every chunk) the in-sample residuals stand in, and the report says so: they
    are optimistic.
    """
    ok = np.isfinite(cv_err).all(axis=1)
    errors, source = (
        (cv_err[ok], "cross-validation") if ok.sum() >= 8 else (resid, "in-sample residuals")
    )
    lo = np.minimum(smooth_over_horizon(np.quantile(errors, 0.1, axis=0)), 0.0)
    hi = np.maximum(smooth_over_horizon(np.quantile(errors, 0.9, axis=0)), 0.0)
    band = np.stack([lo, hi], axis=1) / scale
    return band, {"band_from": source, "calibration_windows": len(errors)}


def recent_scores(
    z: np.ndarray, season: np.ndarray, rel: np.ndarray, past: np.ndarray, end: int, horizon: int
) -> np.ndarray:
    """Band scores of the forecasts made from the ``past`` origins, over their steps before
    ``end`` (those that have happened). ``rel[i]``: the (H, 3) quantiles of ``z − season``
    forecast from ``past[i]``."""
    scores = []
    for o, r in zip(past, rel, strict=True):
        n = min(horizon, end - o)
        err = z[o : o + n] - (season[o : o + n] + r[:n, 1])
        up = np.maximum(r[:n, 2] - r[:n, 1], 1e-9)
        down = np.maximum(r[:n, 1] - r[:n, 0], 1e-9)
        scores.append(band_scores(err, up, down))
    return np.concatenate(scores)


def recent_band_factor(scores: np.ndarray, most: float = RECENT_BAND_MAX) -> dict[str, Any]:
    """How much to widen the band, given how the last days' forecasts fared.

    ``scores`` are errors of forecasts made from recent origins, over the steps that have
    already happened, each in units of its own half-band (1 = on p10 or p90). The fitted band
    covers 80 % of such scores in calibration; when the recent 80th percentile is larger —
    the level moved, a calm history met a busy week, the shape drifted — the band is widened
    by that ratio (at most ``most``). It is never narrowed: a calm stretch says little about
    the next burst (docs/decisions/0012-band-widens-after-recent-misses.md).
    """
    if len(scores) < RECENT_BAND_MIN_SCORES:
        return {"band_widening": 1.0, "recent_errors_scored": len(scores)}
    q = float(np.quantile(scores, RECENT_BAND_LEVEL))
    return {
        "band_widening": float(np.clip(q, 1.0, most)),
        "recent_errors_scored": len(scores),
        "recent_error_p80": q,
    }
