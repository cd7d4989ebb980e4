"""When a refit may start from the last fit, and when it must start over.

A daily refit sees a history that is mostly the one fitted the day before: the same weeks,
one day more, one day less at the start. A model that can (``kale``) then starts from its
last fitted state — its choices kept, its decomposition updated with the new days, its
networks fine-tuned — instead of fitting from nothing. That is only sound while the new days
look like the old ones, so :func:`decide_refit` checks the history against what the last fit
saw and asks for a full fit when:

* the history is **not an extension** of the last fit's: another interval, an earlier start,
  nothing new, less than half of it seen before, or values that differ where both overlap
  (a backfill rewrote them);
* the **full-fit age limit** passed: the last full fit's history ended
  :data:`FULL_FIT_MAX_AGE` or more before this one's end, so every choice is made afresh
  at least weekly;
* the new steps hold a **gap**: a straight run (constant or linearly interpolated, what a
  filled gap looks like) of at least :data:`GAP_MIN_SECONDS`;
* the model's **layout** for the new history differs (for ``kale``: the window geometry, or
  whether there is a network at all);
* a **new seasonality** may be there: a period now covered twice that was not (or no
  longer), a period's autocorrelation crossed the detection threshold, or the new steps fit
  the last profile :data:`SHAPE_DRIFT_RATIO` times worse than the days before them did at
  the same times of day (a clock change, a new daily shape);
* the **level shifted**: the new steps' deseasonalised level left the last days' levels by
  more than :data:`LEVEL_SHIFT_SPREADS` of their spread (and at least
  :data:`LEVEL_SHIFT_MIN`, in log units).

Whether a model can start from another at all (the same model with the same settings, a
state saved with the fit) is the model's to say (:meth:`forecasting.base.Forecaster.fit`);
the rules above are the data's. Numpy and pandas only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from forecasting.decomposition.profile import SeasonalProfile
from forecasting.seasonality import (
    ACF_THRESHOLD,
    autocorrelation,
    candidate_periods,
    clip_spikes,
    detrended,
)

FULL_FIT_MAX_AGE = pd.Timedelta(days=7)
"""A full fit at least this often (by the history's end): incremental refits keep the last
full fit's choices (periods, day types, recency, penalty), which a week of drift can age."""
MIN_OVERLAP_SHARE = 0.5
"""At least this share of the new history must have been fitted before."""
GAP_MIN_SECONDS = 3600.0
"""A straight run of new steps this long (and at least :data:`GAP_MIN_STEPS` interior
steps) is a gap that was filled, not traffic."""
GAP_MIN_STEPS = 2
SHAPE_DRIFT_RATIO = 1.5
"""The new steps' error against the last profile (each day's median taken out), over the
median of the same error on the days before at the same times of day."""
SHAPE_REFERENCE_DAYS = 7
"""Days before the new steps that the shape and level tests compare with."""
LEVEL_SHIFT_MIN = math.log(1.3)
"""A level move below 30 % never counts as a shift (the level model follows it)."""
LEVEL_SHIFT_SPREADS = 4.0
"""A level move counts as a shift beyond this many robust spreads of the days' levels."""


@dataclass(frozen=True)
class RefitBasis:
    """What the last fit saw and chose, as far as the refit rules need it."""

    start: pd.Timestamp
    """The first fitted step."""
    interval_s: float
    values: np.ndarray
    """The fitted history (rates)."""
    full_fit_end: pd.Timestamp
    """The last step of the last full fit's history."""
    offset: float
    """``c`` in ``z = log(y + c)``."""
    periods: dict[str, int]
    """The seasonal periods in use (steps)."""
    acf: dict[str, float | None]
    """Each candidate period's autocorrelation when it was last checked."""
    profile: SeasonalProfile
    """The seasonal profile of ``z`` by step, step 0 at :attr:`start`."""
    layout: Any = None
    """The model's structure for that history (compared with the new history's)."""

    @property
    def end(self) -> pd.Timestamp:
        """The last fitted step."""
        return self.start + pd.Timedelta(seconds=self.interval_s * (len(self.values) - 1))


@dataclass(frozen=True)
class RefitDecision:
    """Full or incremental, and why; ``shift`` and ``new_steps`` place the new history."""

    incremental: bool
    reason: str
    shift: int = 0
    """Steps the new history starts after the basis's (what fell off its start)."""
    new_steps: int = 0
    """Steps at the end of the new history that the basis did not hold."""
    acf: dict[str, float | None] = field(default_factory=dict)
    """Each candidate period's autocorrelation on the new history (when it was checked)."""

    @property
    def mode(self) -> str:
        return "incremental" if self.incremental else "full"

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "reason": self.reason,
            "shift_steps": self.shift,
            "new_steps": self.new_steps,
        }


def _full(reason: str, shift: int = 0, new: int = 0) -> RefitDecision:
    return RefitDecision(False, reason, shift, new)


def decide_refit(basis: RefitBasis, history: pd.Series, *, layout: Any = None) -> RefitDecision:
    """Whether a refit on ``history`` (validated: regular, UTC, finite) may start from the
    fit described by ``basis``; ``layout`` is the model's structure for ``history``. The
    rules, in the order they are checked, are the module's list."""
    interval = basis.interval_s
    idx = history.index
    if len(idx) > 1 and abs((idx[1] - idx[0]).total_seconds() - interval) > 1e-6:
        return _full("not an extension: another interval")
    offset_s = (idx[0] - basis.start).total_seconds()
    shift = round(offset_s / interval)
    if offset_s < 0 or abs(offset_s - shift * interval) > 1e-6:
        return _full("not an extension: the history starts before the last fit's or off its grid")
    n, n_prev = len(history), len(basis.values)
    overlap = max(0, n_prev - shift)
    new = n - overlap
    if new <= 0:
        return _full("not an extension: no new steps", shift, new)
    if overlap < MIN_OVERLAP_SHARE * n:
        return _full(
            f"not an extension: {overlap} of {n} steps were fitted before "
            f"(at least {MIN_OVERLAP_SHARE:.0%} must be)",
            shift,
            new,
        )
    values = history.to_numpy(dtype=float)
    old = basis.values[shift:]
    if not np.allclose(values[:overlap], old, rtol=1e-9, atol=1e-12):
        return _full("not an extension: the history differs from the last fit's", shift, new)
    if idx[-1] - basis.full_fit_end >= FULL_FIT_MAX_AGE:
        return _full(f"the last full fit is {FULL_FIT_MAX_AGE.days} days old or more", shift, new)
    gap = longest_straight_run(values[max(0, overlap - 1) :])
    if gap * interval >= GAP_MIN_SECONDS and gap >= GAP_MIN_STEPS:
        return _full(f"a gap in the new data ({gap} steps in a straight line)", shift, new)
    if layout != basis.layout:
        return _full("the model's layout changed with the history's length", shift, new)
    z = np.log(values + basis.offset)
    seasonal, acf = _new_seasonality(basis, z, n)
    if seasonal:
        return RefitDecision(False, seasonal, shift, new, acf)
    drift = _drift(basis, z, shift, new)
    if drift:
        return RefitDecision(False, drift, shift, new, acf)
    return RefitDecision(True, f"{new} new steps", shift, new, acf)


def longest_straight_run(values: np.ndarray) -> int:
    """Interior steps of the longest run on one straight line (constant or linear): a gap
    filled by interpolation, or a meter that repeated its last rate."""
    if len(values) < 3:
        return 0
    d2 = np.abs(np.diff(values, 2))
    flat = d2 <= 1e-9 * (1.0 + float(np.mean(np.abs(values))))
    best = run = 0
    for f in flat:
        run = run + 1 if f else 0
        best = max(best, run)
    return best


def _new_seasonality(basis: RefitBasis, z: np.ndarray, n: int) -> tuple[str, dict[str, Any]]:
    """Why a new seasonality may be there ("" if not), and the candidates' autocorrelations."""
    acf: dict[str, float | None] = {}
    for name, period in candidate_periods(basis.interval_s).items():
        before, now = len(basis.values) >= 2 * period, n >= 2 * period
        if before != now:
            return f"the history {'now' if now else 'no longer'} covers two {name} cycles", acf
        if not now:
            acf[name] = None
            continue
        now_acf = autocorrelation(detrended(clip_spikes(z), period), period)
        acf[name] = now_acf
        was = basis.acf.get(name)
        if (
            was is not None
            and now_acf is not None
            and ((was >= ACF_THRESHOLD) != (now_acf >= ACF_THRESHOLD))
        ):
            return f"the {name} autocorrelation crossed the detection threshold", acf
    return "", acf


def _drift(basis: RefitBasis, z: np.ndarray, shift: int, new: int) -> str:
    """Why the new steps do not look like the days before them ("" if they do)."""
    day = basis.periods.get("daily") or candidate_periods(basis.interval_s).get("daily")
    n = len(z)
    if not day:
        return ""
    r = z - basis.profile.at(np.arange(n) + shift)
    fresh = np.arange(n - new, n)
    ref_days = [fresh - j * day for j in range(1, SHAPE_REFERENCE_DAYS + 1)]
    ref_days = [s for s in ref_days if s[0] >= 0]
    if not ref_days:
        return ""
    levels = np.array([float(np.median(r[s])) for s in ref_days])
    level_new = float(np.median(r[fresh]))
    ref_level = float(np.median(levels))
    spread = 1.4826 * float(np.median(np.abs(levels - ref_level))) if len(levels) > 2 else 0.0
    limit = max(LEVEL_SHIFT_MIN, LEVEL_SHIFT_SPREADS * spread)
    if abs(level_new - ref_level) > limit:
        return f"the level shifted by {level_new - ref_level:+.2f} (log; the limit is {limit:.2f})"
    if not basis.periods:
        return ""

    def shape_error(s: np.ndarray) -> float:
        part = r[s]
        return float(np.mean(np.abs(part - np.median(part))))

    ref = float(np.median([shape_error(s) for s in ref_days]))
    now = shape_error(fresh)
    if ref > 0 and now > SHAPE_DRIFT_RATIO * ref:
        return (
            f"the seasonal shape changed: the new steps miss the profile {now / ref:.2f}x as "
            "much as the days before"
        )
    return ""
