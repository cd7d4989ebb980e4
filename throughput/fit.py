"""Choosing a throughput family by cross-validation, and fitting the model that is saved.

Families that ignore p (fixed-ratio, linear) are trained on the on-ratio rows only (θ is
fitted by :mod:`throughput.theta`, scored by :mod:`throughput.crossval`). A CV win within
one standard error of the paired held-out differences is treated as a tie and goes to the
general family, which is exact in p.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from throughput.crossval import DEFAULT_FOLDS, cross_validate_rows, cv_mape
from throughput.errors import FitError
from throughput.families import Family, families_for, get_family
from throughput.model import ProfileRange, ThroughputModel
from throughput.profile import Profile
from throughput.theta import fit_theta, mean_ape, predict_rows, r_squared


@dataclass(frozen=True)
class FamilyFit:
    """One family fitted to one profile, with its scores."""

    family: Family
    """The family."""
    theta: np.ndarray | None
    """Coefficients on the whole (eligible) profile; None when it could not be fitted."""
    mape: float
    """In-sample mean absolute percentage error (percent)."""
    r2: float
    """In-sample coefficient of determination, in throughput space."""
    cv_mape: float
    """Cross-validated MAPE (percent) on held-out configurations; NaN when not possible."""
    seconds: float
    """Wall time of the fit and its cross-validation."""
    error: str | None = None
    """Why the family could not be fitted (None when it was)."""
    cv_errors: np.ndarray | None = None
    """Held-out |f̂ − f|/f per profile row (NaN where the row was not scored), for pairing."""

    def row(self) -> dict[str, object]:
        """JSON-ready summary."""
        return {
            "family": self.family.name,
            "formula": self.family.formula(),
            "n_params": self.family.n_params,
            "selectable": self.family.selectable,
            "cv_mape": None if math.isnan(self.cv_mape) else self.cv_mape,
            "mape": None if math.isnan(self.mape) else self.mape,
            "r2": None if math.isnan(self.r2) else self.r2,
            "seconds": self.seconds,
            "error": self.error,
        }


def evaluate_family(
    family: Family,
    profile: Profile,
    *,
    ratio: int,
    global_batch: float,
    k: int = DEFAULT_FOLDS,
    seed: int = 0,
) -> FamilyFit:
    """Fit ``family`` on the whole profile and cross-validate it; never raises FitError."""
    start = time.perf_counter()
    try:
        theta, mask = fit_theta(family, profile, ratio=ratio, global_batch=global_batch)
    except FitError as exc:
        return FamilyFit(
            family, None, math.nan, math.nan, math.nan, time.perf_counter() - start, str(exc)
        )
    pred = predict_rows(family, theta, profile, mask, global_batch)
    actual = profile.throughput[mask]
    rows = cross_validate_rows(
        family, profile, ratio=ratio, global_batch=global_batch, k=k, seed=seed
    )
    cv = cv_mape(rows)
    return FamilyFit(
        family,
        theta,
        mean_ape(pred, actual),
        r_squared(pred, actual),
        cv,
        time.perf_counter() - start,
        cv_errors=rows,
    )


def compare_families(
    profile: Profile,
    *,
    mode: str,
    ratio: int = 4,
    global_batch: float = 4096,
    k: int = DEFAULT_FOLDS,
    seed: int = 0,
    selectable_only: bool = False,
) -> list[FamilyFit]:
    """Every family of ``mode`` (seed families, linear, optimus; with ``selectable_only``
    the seed families only) fitted and cross-validated."""
    rows = profile.for_mode(mode)
    return [
        evaluate_family(fam, rows, ratio=ratio, global_batch=global_batch, k=k, seed=seed)
        for fam in families_for(mode, selectable_only=selectable_only)
    ]


def _clearly_better(a: FamilyFit, b: FamilyFit) -> bool:
    """True when ``a``'s held-out errors beat ``b``'s by more than one paired standard error."""
    if a.cv_errors is None or b.cv_errors is None:
        return a.cv_mape < b.cv_mape
    both = ~np.isnan(a.cv_errors) & ~np.isnan(b.cv_errors)
    if both.sum() < 3:
        return a.cv_mape < b.cv_mape
    d = a.cv_errors[both] - b.cv_errors[both]
    return float(d.mean()) < -float(d.std(ddof=1) / math.sqrt(d.size))


def select_best(fits: list[FamilyFit]) -> FamilyFit:
    """The selectable family with the lowest CV MAPE, ties going to the general family.

    The fixed-ratio family is the general one with p = w/ratio substituted, so it is nested
    in it up to the ceil(): it can only win by having fewer θ to estimate, and it is biased
    wherever ceil(w/ratio) ≠ w/ratio. A CV win smaller than one standard error of the paired
    held-out differences is noise, and then the general family (exact in p) is kept.
    Falls back to in-sample MAPE when no family could be cross-validated (tiny profiles).
    """
    usable = [f for f in fits if f.family.selectable and f.theta is not None]
    if not usable:
        reasons = "; ".join(f.error for f in fits if f.error) or "no family could be fitted"
        raise FitError(reasons)
    with_cv = [f for f in usable if not math.isnan(f.cv_mape)]
    if not with_cv:
        return min(usable, key=lambda f: (f.mape, f.family.n_params))
    best = min(with_cv, key=lambda f: (f.cv_mape, f.family.n_params))
    general = next((f for f in with_cv if f.family.name == "general"), None)
    if general is not None and best is not general and not _clearly_better(best, general):
        return general
    return best


def _without_timing(row: dict[str, object]) -> dict[str, object]:
    """Saved models stay byte-stable across refits of the same profile: no wall times."""
    return {k: v for k, v in row.items() if k != "seconds"}


def fit_model(
    profile: Profile,
    *,
    mode: str,
    ratio: int = 4,
    global_batch: float = 4096,
    family: str = "auto",
    k: int = DEFAULT_FOLDS,
    seed: int = 0,
    min_workers: int = 1,
    max_workers: int | None = None,
) -> ThroughputModel:
    """Fit a :class:`ThroughputModel` of ``mode`` to ``profile``.

    ``family="auto"`` cross-validates the seed families (general, fixed-ratio) and keeps the
    best (see :func:`select_best` for ties); ``linear`` and ``optimus`` are fitted only when
    named. ``max_workers`` defaults to
    twice the largest profiled worker count: beyond that the model is extrapolating, and
    the peak reported must not depend on a guess.
    """
    if ratio < 1 or int(ratio) != ratio:
        raise FitError(f"ratio must be a positive integer, got {ratio!r}")
    if not (math.isfinite(global_batch) and global_batch > 0):
        raise FitError(f"global batch must be positive, got {global_batch!r}")
    rows = profile.for_mode(mode)
    if family == "auto":
        fits = compare_families(
            rows,
            mode=mode,
            ratio=ratio,
            global_batch=global_batch,
            k=k,
            seed=seed,
            selectable_only=True,
        )
        chosen = select_best(fits)
    else:
        fam = get_family(mode, family)
        chosen = evaluate_family(fam, rows, ratio=ratio, global_batch=global_batch, k=k, seed=seed)
        if chosen.theta is None:
            raise FitError(chosen.error or f"family {family} could not be fitted")
        fits = [chosen]
    assert chosen.theta is not None
    prof_range = ProfileRange(
        workers_min=int(rows.workers.min()),
        workers_max=int(rows.workers.max()),
        ps_min=int(rows.ps.min()),
        ps_max=int(rows.ps.max()),
        throughput_min=float(rows.throughput.min()),
        throughput_max=float(rows.throughput.max()),
        n_points=len(rows),
        n_configs=rows.n_configs,
    )
    hi = max_workers if max_workers is not None else max(min_workers, 2 * prof_range.workers_max)
    metrics: dict[str, float | int | None] = {
        "mape": chosen.mape,
        "cv_mape": None if math.isnan(chosen.cv_mape) else chosen.cv_mape,
        "r2": None if math.isnan(chosen.r2) else chosen.r2,
        "n_points": len(rows),
        "n_configs": rows.n_configs,
        "folds": min(k, rows.n_configs),
    }
    return ThroughputModel(
        family=chosen.family.name,
        mode=mode,
        theta=tuple(float(t) for t in chosen.theta),
        global_batch=float(global_batch),
        ratio=int(ratio),
        min_workers=min_workers,
        max_workers=hi,
        profile_range=prof_range,
        metrics=metrics,
        candidates={f.family.name: _without_timing(f.row()) for f in fits},
    )
