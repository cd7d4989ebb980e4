"""Fitting θ to a profile, and choosing the family by cross-validation.

Two stages, because each fixes the other's weakness:

1. Non-negative least squares on the linearised form ``N/f = X·θ`` (exact and global, no
   starting point needed), with each row weighted by ``f/N`` so it minimises *relative* error
   of the step time. It is still the wrong objective when noise is in f, not 1/f.
2. ``scipy.optimize.least_squares`` with bounds θ ≥ 0 on the relative residual
   ``(f̂ − f)/f``, started from the NNLS solution, so a 1-worker point counts as much as an
   80-worker one (absolute error would let the large-throughput points drown the rest).

Model selection is k-fold cross-validation *by configuration* (repeats of one (w, p) stay in
one fold), scored on the rows the planner will ask about: p = ceil(w/ratio). Families that
ignore p (fixed-ratio, linear) are trained on those rows only. A CV win within one standard
error of the paired held-out differences is treated as a tie and goes to the general family.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares, nnls

from throughput.errors import FitError
from throughput.families import Family, families_for, get_family
from throughput.model import ProfileRange, ThroughputModel
from throughput.profile import Profile

DEFAULT_FOLDS = 5
MIN_RATIO_ROWS = 3
"""Fewer on-ratio configurations than this and CV is scored on every row instead."""


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


def _solve(
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


def _rows_for(family: Family, profile: Profile, ratio: int) -> np.ndarray:
    """Boolean mask of the rows ``family`` may be trained on."""
    if family.uses_ps:
        return np.ones(len(profile), dtype=bool)
    return profile.on_ratio(ratio)


def _mape(pred: np.ndarray, actual: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - actual) / actual) * 100.0)


def _r2(pred: np.ndarray, actual: np.ndarray) -> float:
    ss_tot = float(np.sum((actual - actual.mean()) ** 2))
    if ss_tot == 0:
        return math.nan
    return 1.0 - float(np.sum((pred - actual) ** 2)) / ss_tot


def _predict(
    family: Family, theta: np.ndarray, profile: Profile, mask: np.ndarray, global_batch: float
) -> np.ndarray:
    return family.predict(theta, profile.workers[mask], profile.ps[mask], global_batch)


def fit_theta(
    family: Family, profile: Profile, *, ratio: int, global_batch: float
) -> tuple[np.ndarray, np.ndarray]:
    """θ of ``family`` on its eligible rows of ``profile``; returns (θ, mask of rows used)."""
    mask = _rows_for(family, profile, ratio)
    n_cfg = len(np.unique(profile.config_ids()[mask]))
    if n_cfg < family.n_params:
        where = "" if family.uses_ps else f" with ps = ceil(workers/{ratio})"
        raise FitError(
            f"{profile.source}: family {family.name} needs at least {family.n_params} distinct "
            f"configurations{where}, the profile has {n_cfg}"
        )
    theta = _solve(
        family,
        profile.workers[mask],
        profile.ps[mask],
        profile.throughput[mask],
        global_batch,
    )
    return theta, mask


def fold_of_rows(profile: Profile, k: int, seed: int) -> np.ndarray:
    """Fold index of every row: configurations are shuffled by ``seed`` and dealt round-robin."""
    ids = profile.config_ids()
    n_cfg = int(ids.max()) + 1
    perm = np.random.default_rng(seed).permutation(n_cfg)
    fold_of_cfg = np.empty(n_cfg, dtype=np.int64)
    fold_of_cfg[perm] = np.arange(n_cfg) % k
    folds: np.ndarray = fold_of_cfg[ids]
    return folds


def _eval_mask(profile: Profile, ratio: int) -> np.ndarray:
    on = profile.on_ratio(ratio)
    if len(np.unique(profile.config_ids()[on])) >= MIN_RATIO_ROWS:
        return on
    return np.ones(len(profile), dtype=bool)


def cross_validate_rows(
    family: Family,
    profile: Profile,
    *,
    ratio: int,
    global_batch: float,
    k: int = DEFAULT_FOLDS,
    seed: int = 0,
) -> np.ndarray:
    """Held-out relative error of every row (NaN where not scored), k-fold by configuration.

    Every family sees the same folds (they depend on the profile and ``seed`` only) and is
    scored on the same rows, so two families' errors can be compared row by row.
    """
    out = np.full(len(profile), np.nan)
    k = min(k, profile.n_configs)
    if k < 2:
        return out
    folds = fold_of_rows(profile, k, seed)
    train_ok = _rows_for(family, profile, ratio)
    evaluate = _eval_mask(profile, ratio)
    ids = profile.config_ids()
    for fold in range(k):
        held = folds == fold
        train = train_ok & ~held
        test = evaluate & held
        if not test.any() or len(np.unique(ids[train])) < family.n_params:
            continue
        theta = _solve(
            family,
            profile.workers[train],
            profile.ps[train],
            profile.throughput[train],
            global_batch,
        )
        pred = _predict(family, theta, profile, test, global_batch)
        actual = profile.throughput[test]
        out[test] = np.abs(pred - actual) / actual
    return out


def cross_validate(
    family: Family,
    profile: Profile,
    *,
    ratio: int,
    global_batch: float,
    k: int = DEFAULT_FOLDS,
    seed: int = 0,
) -> float:
    """k-fold CV MAPE (percent) of ``family`` on held-out configurations; NaN if impossible."""
    errors = cross_validate_rows(
        family, profile, ratio=ratio, global_batch=global_batch, k=k, seed=seed
    )
    scored = errors[~np.isnan(errors)]
    return float(np.mean(scored) * 100.0) if scored.size else math.nan


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
    pred = _predict(family, theta, profile, mask, global_batch)
    actual = profile.throughput[mask]
    rows = cross_validate_rows(
        family, profile, ratio=ratio, global_batch=global_batch, k=k, seed=seed
    )
    scored = rows[~np.isnan(rows)]
    cv = float(np.mean(scored) * 100.0) if scored.size else math.nan
    return FamilyFit(
        family,
        theta,
        _mape(pred, actual),
        _r2(pred, actual),
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
) -> list[FamilyFit]:
    """Every family of ``mode`` (seed families, linear, optimus) fitted and cross-validated."""
    rows = profile.for_mode(mode)
    return [
        evaluate_family(fam, rows, ratio=ratio, global_batch=global_batch, k=k, seed=seed)
        for fam in families_for(mode)
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
        fits = [
            evaluate_family(f, rows, ratio=ratio, global_batch=global_batch, k=k, seed=seed)
            for f in families_for(mode, selectable_only=True)
        ]
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
