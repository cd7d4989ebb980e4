"""Cross-validation of a throughput family, k-fold *by configuration*.

Repeats of one (w, p) stay in one fold, so a family is scored on configurations it has not
seen, and it is scored on the rows the planner will ask about: p = ceil(w/ratio) (every row
when the profile has fewer than :data:`MIN_RATIO_ROWS` such configurations). Every family
sees the same folds, so two families' held-out errors pair row by row
(:func:`throughput.fit.select_best` uses that to call a small win a tie).
"""

from __future__ import annotations

import math

import numpy as np

from throughput.families import Family
from throughput.profile import Profile
from throughput.theta import predict_rows, solve_theta, trainable_rows

DEFAULT_FOLDS = 5
MIN_RATIO_ROWS = 3
"""Fewer on-ratio configurations than this and CV is scored on every row instead."""


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
    train_ok = trainable_rows(family, profile, ratio)
    evaluate = _eval_mask(profile, ratio)
    ids = profile.config_ids()
    for fold in range(k):
        held = folds == fold
        train = train_ok & ~held
        test = evaluate & held
        if not test.any() or len(np.unique(ids[train])) < family.n_params:
            continue
        theta = solve_theta(
            family,
            profile.workers[train],
            profile.ps[train],
            profile.throughput[train],
            global_batch,
        )
        pred = predict_rows(family, theta, profile, test, global_batch)
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
    return cv_mape(errors)


def cv_mape(errors: np.ndarray) -> float:
    """MAPE (percent) of the scored rows of :func:`cross_validate_rows`; NaN when none were."""
    scored = errors[~np.isnan(errors)]
    return float(np.mean(scored) * 100.0) if scored.size else math.nan
