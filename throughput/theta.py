"""Fitting θ of one throughput family to profile rows: NNLS, then bounded least squares.

Two stages, because each fixes the other's weakness:

1. Non-negative least squares on the linearised form ``N/f = X·θ`` (exact and global, no
   starting point needed), with each row weighted by ``f/N`` so it minimises *relative* error
   of the step time. It is still the wrong objective when noise is in f, not 1/f.
2. ``scipy.optimize.least_squares`` with bounds θ ≥ 0 on the relative residual
   ``(f̂ − f)/f``, started from the NNLS solution, so a 1-worker point counts as much as an
   80-worker one (absolute error would let the large-throughput points drown the rest).

Why a module of its own: cross-validation (:mod:`throughput.crossval`) and family selection
(:mod:`throughput.fit`) both fit θ many times; this is the one solver they share.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import least_squares, nnls

from throughput.errors import FitError
from throughput.families import Family
from throughput.profile import Profile


def solve_theta(
    family: Family, w: np.ndarray, p: np.ndarray, f: np.ndarray, global_batch: float
) -> np.ndarray:
    """θ ≥ 0 minimising Σ((f̂ − f)/f)² (NNLS start, bounded least-squares refinement)."""
    x = family.design(w, p, global_batch)
    n = family.numer(w, global_batch)
    # Linearised: N/f = X·θ; weighting rows by f/N makes the residual relative.
    a = x * (f / n)[:, None]
    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0
    phi, _ = nnls(a / scale, np.ones_like(f), maxiter=50 * x.shape[1])
    xs = x / scale  # optimise in scaled coordinates φ = θ·scale (θ spans decades)

    def resid(ph: np.ndarray) -> np.ndarray:
        r: np.ndarray = n / (f * (xs @ ph)) - 1.0
        return r

    def jac(ph: np.ndarray) -> np.ndarray:
        d = xs @ ph
        j: np.ndarray = -(n / (f * d * d))[:, None] * xs
        return j

    start = phi if np.any(phi > 0) else np.full_like(phi, 1.0 / x.shape[1])
    best = start
    best_cost = float(np.sum(resid(start) ** 2)) if np.all(xs @ start > 0) else math.inf
    try:
        res = least_squares(
            resid,
            start,
            jac=jac,
            bounds=(0.0, np.inf),
            method="trf",
            x_scale="jac",
            xtol=1e-12,
            ftol=1e-12,
            gtol=1e-12,
            max_nfev=200,
        )
        cost = float(np.sum(res.fun**2))
        if np.all(np.isfinite(res.x)) and cost <= best_cost:
            best = res.x
    except (ValueError, np.linalg.LinAlgError):  # pragma: no cover - keep the NNLS answer
        pass
    theta: np.ndarray = np.maximum(best, 0.0) / scale
    if not np.any(theta > 0):
        raise FitError(f"family {family.name}: the fit collapsed to θ = 0")
    return theta


def trainable_rows(family: Family, profile: Profile, ratio: int) -> np.ndarray:
    """Boolean mask of the rows ``family`` may be trained on."""
    if family.uses_ps:
        return np.ones(len(profile), dtype=bool)
    return profile.on_ratio(ratio)


def mean_ape(pred: np.ndarray, actual: np.ndarray) -> float:
    """Mean absolute percentage error (percent)."""
    return float(np.mean(np.abs(pred - actual) / actual) * 100.0)


def r_squared(pred: np.ndarray, actual: np.ndarray) -> float:
    """Coefficient of determination in throughput space (NaN for a constant profile)."""
    ss_tot = float(np.sum((actual - actual.mean()) ** 2))
    if ss_tot == 0:
        return math.nan
    return 1.0 - float(np.sum((pred - actual) ** 2)) / ss_tot


def predict_rows(
    family: Family, theta: np.ndarray, profile: Profile, mask: np.ndarray, global_batch: float
) -> np.ndarray:
    """Predicted throughput of the rows of ``profile`` selected by ``mask``."""
    return family.predict(theta, profile.workers[mask], profile.ps[mask], global_batch)


def fit_theta(
    family: Family, profile: Profile, *, ratio: int, global_batch: float
) -> tuple[np.ndarray, np.ndarray]:
    """θ of ``family`` on its eligible rows of ``profile``; returns (θ, mask of rows used)."""
    mask = trainable_rows(family, profile, ratio)
    n_cfg = len(np.unique(profile.config_ids()[mask]))
    if n_cfg < family.n_params:
        where = "" if family.uses_ps else f" with ps = ceil(workers/{ratio})"
        raise FitError(
            f"{profile.source}: family {family.name} needs at least {family.n_params} distinct "
            f"configurations{where}, the profile has {n_cfg}"
        )
    theta = solve_theta(
        family,
        profile.workers[mask],
        profile.ps[mask],
        profile.throughput[mask],
        global_batch,
    )
    return theta, mask
