"""The backbone: kale's decomposition forecast, and the window geometry it shares with the net.

In log space, ``d = z - season`` (trend + residual) is summarised by trailing means over 1,
2, 4, … steps up to the long context. Per horizon step, a ridge regression maps them
(relative to the longest) to the future ``d``: forecast = season(t+h) + backbone(h). The
penalty is chosen by blocked cross-validation, so a few hundred hourly windows shrink hard
to "the recent level" while tens of thousands of minute windows learn how fast deviations
decay. The network (:mod:`forecasting.transformer`) only learns what this gets wrong, and
on 30-minute and hourly data this usually *is* kale's forecast
(docs/decisions/0008-level-model-ridge-and-priors.md). Numpy only.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from forecasting.decomposition import DayTypes, estimate_profile

LONG_CONTEXT_MAX_DAYS = 4
"""Days the long context (the level model's longest mean) spans at most: a longer mean lags a
level that moves over weeks (docs/decisions/0007-long-context-at-most-four-days.md)."""


@dataclass(frozen=True)
class Geometry:
    """Window sizes (in steps): the network's input patches and output patches, and the
    level model's trailing means (whose longest is the long context)."""

    horizon: int
    p_long: int
    n_long: int
    p_short: int
    n_short: int
    p_out: int
    level_windows: tuple[int, ...]

    @property
    def long_len(self) -> int:
        return self.p_long * self.n_long

    @property
    def short_len(self) -> int:
        return self.p_short * self.n_short

    @property
    def n_out(self) -> int:
        return math.ceil(self.horizon / self.p_out)

    @property
    def out_len(self) -> int:
        return self.n_out * self.p_out

    @property
    def need(self) -> int:
        """History steps one forecast reads."""
        return max(self.long_len, self.short_len, max(self.level_windows))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Geometry:
        return cls(**{**d, "level_windows": tuple(d["level_windows"])})

    @classmethod
    def choose(
        cls,
        *,
        horizon: int,
        day: int | None,
        available: int,
        long_tokens: int = 24,
        short_tokens: int = 8,
        out_tokens: int = 12,
        context: int | None = None,
    ) -> Geometry:
        """Long context: a day or 4·horizon (whichever is longer, but 4·horizon at most
        ``LONG_CONTEXT_MAX_DAYS`` days) as ≤ ``long_tokens`` patches, shortened when the
        history would leave too few training windows; short context: the last few patches at
        finer resolution; output: ≤ ``out_tokens`` patches of the horizon.

        The longest window is also the level model's anchor (``level_features``): the mean it
        shrinks towards. Longer anchors lag a level that moves over weeks; see
        ``LONG_CONTEXT_MAX_DAYS``.
        """
        four_h = 4 * horizon if not day else min(4 * horizon, LONG_CONTEXT_MAX_DAYS * day)
        want = context or max(day or 0, four_h)
        want = max(8, min(want, max(8, (available - horizon) // 3)))
        p_long = max(1, math.ceil(want / long_tokens))
        n_long = math.ceil(want / p_long)
        p_short = max(1, p_long // 8)
        n_short = min(short_tokens, max(1, (p_long * n_long) // p_short))
        p_out = max(1, math.ceil(horizon / out_tokens))
        longest = p_long * n_long
        windows = [
            w for w in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096) if w < longest
        ]
        if day and day < longest:
            windows.append(day)
        windows.append(longest)
        return cls(
            horizon=horizon,
            p_long=p_long,
            n_long=n_long,
            p_short=p_short,
            n_short=n_short,
            p_out=p_out,
            level_windows=tuple(sorted(set(windows))),
        )


def trailing_means(d: np.ndarray, windows: tuple[int, ...], origins: np.ndarray) -> np.ndarray:
    """(len(origins), len(windows)): mean of d[o - w : o] for each origin o and window w."""
    c = np.concatenate([[0.0], np.cumsum(d, dtype=float)])
    o = origins[:, None]
    w = np.asarray(windows)[None, :]
    return (c[o] - c[o - w]) / w


def level_features(means: np.ndarray) -> np.ndarray:
    """Backbone inputs: each trailing mean relative to the longest one, plus a constant."""
    rel = means[:, :-1] - means[:, -1:]
    return np.hstack([rel, np.ones((len(means), 1))])


RIDGE_GRID = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)
"""Penalties the blocked cross-validation chooses from (relative to the Gram matrix's trace)."""
LEVEL_PRIORS = ("mean", "last")
"""What a heavy penalty shrinks towards (:func:`prior_weights`)."""
LAST_PRIOR_MARGIN = 0.9
"""``last`` must beat ``mean`` by this factor in cross-validation: three weeks of a wandering
level can look mean-reverting, and the chunks' errors are noisy
(docs/decisions/0008-level-model-ridge-and-priors.md)."""


def prior_weights(prior: str, n_features: int, horizon: int) -> np.ndarray:
    """The weights a heavy penalty shrinks towards.

    ``mean``: all zero, so the forecast reverts to the longest trailing mean (deseasonalised
    traffic returns to its usual level). ``last``: weight one on the shortest window, so the
    forecast stays at the latest value (a level that wanders and does not come back).
    """
    w0 = np.zeros((n_features, horizon))
    if prior == "last":
        w0[0] = 1.0
    elif prior != "mean":
        raise ValueError(f"unknown level prior {prior!r}")
    return w0


def _solve(gram: np.ndarray, xty: np.ndarray, lam: float, prior: str = "mean") -> np.ndarray:
    """Ridge weights shrunk towards :func:`prior_weights`.

    Under ``mean`` the intercept is free: it carries the usual gap between the longest mean
    and the next steps (a trend's). Under ``last`` it would be a drift per step ahead, and it
    is held at zero: the drift of three weeks of a wandering level does not continue, and the
    cross-validation chunks, which share the same path, cannot tell
    (docs/decisions/0008-level-model-ridge-and-priors.md).
    """
    reg = lam * np.trace(gram) / len(gram) * np.eye(len(gram))
    w0 = prior_weights(prior, *xty.shape)
    if prior == "mean":
        reg[-1, -1] = 0.0
        return np.linalg.solve(gram + reg, xty + reg @ w0)
    w = np.zeros_like(w0)
    w[:-1] = np.linalg.solve(gram[:-1, :-1] + reg[:-1, :-1], xty[:-1] + reg[:-1, :-1] @ w0[:-1])
    return w


@dataclass(frozen=True)
class BackboneFit:
    """The level model's weights and how they were chosen."""

    weights: np.ndarray
    ridge: float
    prior: str
    cv_mae: dict[str, float]  # per prior, at its best penalty (log units per step)


def fit_backbone(
    d: np.ndarray,
    geom: Geometry,
    origins: np.ndarray,
    folds: int = 5,
    priors: tuple[str, ...] = ("mean",),
) -> BackboneFit:
    """Per-horizon-step ridge weights: d[o+h] - longest mean ≈ features(o) @ W[:, h].

    The penalty is chosen by blocked cross-validation over time (``folds`` contiguous
    chunks of origins, each scored by a fit on the others with a horizon-wide gap): with a
    few hundred overlapping hourly windows an unpenalised fit chases noise, with tens of
    thousands of minute windows it should not be shrunk.

    Among ``priors``, so is what the penalty shrinks towards (:func:`prior_weights`): the
    longest mean, right for traffic whose deviations from its season decay, or the latest
    value, right for a level that wanders like a random walk. ``last`` is chosen only when
    clearly better (:data:`LAST_PRIOR_MARGIN`), and the caller offers it only for series
    without a season, where the chunks' preference for it did not hold the next week
    (docs/decisions/0008-level-model-ridge-and-priors.md).
    """
    for p in priors:
        prior_weights(p, 1, 1)  # unknown names fail here, before any work
    means = trailing_means(d, geom.level_windows, origins)
    x = level_features(means)
    idx = origins[:, None] + np.arange(geom.horizon)[None, :]
    y = d[idx] - means[:, -1:]
    chunks = np.array_split(np.arange(len(origins)), folds)
    errors = {(p, lam): 0.0 for p in priors for lam in RIDGE_GRID}
    scored = 0
    for chunk in chunks:
        if len(chunk) == 0:
            continue
        lo, hi = origins[chunk[0]] - geom.horizon, origins[chunk[-1]] + geom.horizon
        keep = (origins < lo) | (origins > hi)
        if keep.sum() < x.shape[1] + 1:
            continue
        gram, xty = x[keep].T @ x[keep], x[keep].T @ y[keep]
        scored += y[chunk].size
        for p, lam in errors:
            w = _solve(gram, xty, lam, p)
            errors[(p, lam)] += float(np.sum(np.abs(x[chunk] @ w - y[chunk])))

    def best_for(prior: str) -> tuple[float, float]:
        lam = min(RIDGE_GRID, key=lambda v: (errors[(prior, v)], -v))
        return lam, errors[(prior, lam)]

    chosen = {p: best_for(p) for p in priors}
    prior = priors[0]
    for p in priors[1:]:
        if chosen[p][1] < LAST_PRIOR_MARGIN * chosen[prior][1]:
            prior = p
    scored = max(scored, 1)
    return BackboneFit(
        weights=_solve(x.T @ x, x.T @ y, chosen[prior][0], prior),
        ridge=chosen[prior][0],
        prior=prior,
        cv_mae={p: err / scored for p, (_, err) in chosen.items()},
    )


MAX_BACKBONE_ORIGINS = 20000
"""Training windows the level model is fitted on at most (a random subset beyond)."""


def fit_level_model(
    d: np.ndarray,
    geom: Geometry,
    origins: np.ndarray,
    rng: np.random.Generator,
    *,
    seasonal: bool,
) -> tuple[BackboneFit, np.ndarray, float]:
    """The level model fitted on ``origins`` (at most :data:`MAX_BACKBONE_ORIGINS` of them),
    its in-sample residuals (origins × horizon) and their robust spread (the unit that the
    network's inputs and outputs are measured in).

    Only a series without a season may choose the ``last`` prior (:func:`fit_backbone`).
    """
    h = geom.horizon
    bb_origins = origins
    if len(bb_origins) > MAX_BACKBONE_ORIGINS:
        bb_origins = np.sort(rng.choice(origins, MAX_BACKBONE_ORIGINS, replace=False))
    # Without a season the level may wander (see fit_backbone): both priors compete.
    level = fit_backbone(d, geom, bb_origins, priors=("mean",) if seasonal else LEVEL_PRIORS)
    _, bb_tr = backbone(d, geom, bb_origins, level.weights)
    resid = d[bb_origins[:, None] + np.arange(h)[None, :]] - bb_tr
    scale = float(max(1.4826 * np.median(np.abs(resid - np.median(resid))), 1e-6))
    return level, resid, scale


def refit_level_model(
    d: np.ndarray,
    geom: Geometry,
    origins: np.ndarray,
    rng: np.random.Generator,
    *,
    ridge: float,
    prior: str,
) -> BackboneFit:
    """The level model fitted again on ``origins`` with the penalty and prior an earlier fit
    chose by cross-validation (an incremental refit keeps them: a day more of windows hardly
    moves the choice, and choosing is most of the cost)."""
    fit_o = origins
    if len(fit_o) > MAX_BACKBONE_ORIGINS:
        fit_o = np.sort(rng.choice(origins, MAX_BACKBONE_ORIGINS, replace=False))
    means = trailing_means(d, geom.level_windows, fit_o)
    x = level_features(means)
    y = d[fit_o[:, None] + np.arange(geom.horizon)[None, :]] - means[:, -1:]
    return BackboneFit(
        weights=_solve(x.T @ x, x.T @ y, ridge, prior), ridge=ridge, prior=prior, cv_mae={}
    )


MAX_CV_ORIGINS = 2048
"""Cross-validated forecast origins at most (evenly thinned beyond)."""


def cv_origins(n: int, geom: Geometry, most: int = MAX_CV_ORIGINS) -> np.ndarray:
    """Every forecast origin of an n-step history, evenly thinned to ``most``."""
    origins = np.arange(geom.need, n - geom.horizon + 1)
    pick = np.linspace(0, len(origins) - 1, min(most, len(origins)))
    return origins[np.unique(pick.round().astype(int))]


def cv_residuals(
    z: np.ndarray,
    trend: np.ndarray,
    periods: dict[str, int],
    geom: Geometry,
    origins: np.ndarray,
    ridge: float,
    *,
    prior: str = "mean",
    folds: int = 5,
    day_start: int = 0,
    max_fit: int = 20000,
    half_life: float | None = None,
    day_types: DayTypes | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Out-of-sample backbone errors for every origin, by blocked cross-validation.

    ``origins`` are cut into ``folds`` contiguous chunks; for each, the seasonal profile and
    the backbone are re-estimated without the chunk's steps (and a horizon-wide margin) and
    the chunk is forecast. Returns (origins, errors of d with shape (len(origins), horizon)).
    These errors — from every part of the history, not just the last days — set the width
    of the forecast band.
    """
    n = len(z)
    steps = np.arange(n)
    out = np.full((len(origins), geom.horizon), np.nan)
    for chunk in np.array_split(np.arange(len(origins)), folds):
        if len(chunk) == 0:
            continue
        lo, hi = int(origins[chunk[0]]), min(n, int(origins[chunk[-1]]) + geom.horizon)
        fit_o = origins[(origins + geom.horizon <= lo) | (origins >= hi)]
        if len(fit_o) < 4 * len(geom.level_windows):
            continue
        held = (steps >= lo) & (steps < hi)
        # Weeks weigh by their distance from the held-out chunk, as they would from a
        # forecast made there.
        profile, _ = estimate_profile(
            z,
            trend,
            periods,
            mask=~held,
            day_start=day_start,
            half_life=half_life,
            center=lo,
            day_types=day_types,
        )
        d = z - profile.at(steps)
        if len(fit_o) > max_fit:
            fit_o = fit_o[np.linspace(0, len(fit_o) - 1, max_fit).round().astype(int)]
        means = trailing_means(d, geom.level_windows, fit_o)
        x = level_features(means)
        y = d[fit_o[:, None] + np.arange(geom.horizon)[None, :]] - means[:, -1:]
        weights = _solve(x.T @ x, x.T @ y, ridge, prior)
        o = origins[chunk]
        _, bb = backbone(d, geom, o, weights)
        out[chunk] = d[o[:, None] + np.arange(geom.horizon)[None, :]] - bb
    return origins, out


def backbone(
    d: np.ndarray, geom: Geometry, origins: np.ndarray, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(reference level per origin, backbone forecast of d per origin and step)."""
    means = trailing_means(d, geom.level_windows, origins)
    return means[:, -1], means[:, -1:] + level_features(means) @ weights
