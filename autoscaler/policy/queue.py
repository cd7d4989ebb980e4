"""A fluid FIFO model of a job's backlog, for evaluating candidate plans on a forecast.

FIFO means the unconsumed samples are always the most recent ones, so the whole queue state
is one number, the backlog B: the oldest unconsumed sample is the one B samples back from the
newest arrival. A plan is judged by whether, at the end of each step, B stays within what
arrived during the last ``threshold`` seconds (then the oldest sample is younger than the
threshold). Everything is vectorised, so the planner can afford many candidates per
decision.

The step-level recursion (Lindley) ignores the order of arrivals and service inside a step,
which the simulator models exactly; planning at step granularity is what the controller can
act on anyway, and the planner keeps a margin of one step on the SLO for it.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np


def backlog_path(
    backlog0: float, arrivals: np.ndarray, capacity: np.ndarray, interval_s: float
) -> np.ndarray:
    """Backlog (samples) at the end of each step: B_k = max(0, B_{k-1} + (a_k − c_k)·Δ).

    Closed form of the Lindley recursion: B_k = S_k − min(−B_0, min_{j≤k} S_j) with S the
    cumulative net inflow.
    """
    s = np.cumsum((arrivals - capacity) * interval_s)
    return s - np.minimum(-backlog0, np.minimum.accumulate(s))


def allowed_backlog(
    past: np.ndarray, future: np.ndarray, interval_s: float, threshold_s: float
) -> np.ndarray:
    """Samples that arrived in the last ``threshold_s`` before the end of each future step.

    A backlog above this at the end of step k means its oldest sample is older than the
    threshold. ``past`` are the observed rates before the window, ``future`` the (forecast)
    rates of the window's steps.
    """
    n_back = math.ceil(threshold_s / interval_s) + 1
    tail = past[-n_back:] if len(past) else np.zeros(0)
    if len(tail) < n_back:
        tail = np.concatenate([np.zeros(n_back - len(tail)), tail])
    rates = np.concatenate([tail, future])
    cum = np.concatenate([[0.0], np.cumsum(rates * interval_s)])
    lo, hi, frac = _window_index(n_back, len(future), threshold_s / interval_s)
    a_start = cum[lo] + frac * (cum[hi] - cum[lo])
    out: np.ndarray = cum[n_back + 1 : n_back + 1 + len(future)] - a_start
    return out


@lru_cache(maxsize=256)
def _window_index(n_back: int, n: int, window_steps: float) -> tuple[np.ndarray, ...]:
    """Where each future step's threshold window starts on the cumulative curve: the same
    for every decision of a job (and of most jobs), so computed once (read-only arrays)."""
    # End of future step k is at position n_back + k + 1 (in steps) of the curve.
    ends = np.arange(n_back + 1, n_back + 1 + n, dtype=float)
    starts = ends - window_steps
    lo = np.floor(starts).astype(int)
    frac = starts - lo
    hi = np.minimum(lo + 1, n_back + n)  # the curve has n_back + n + 1 points
    for array in (lo, hi, frac):
        array.setflags(write=False)
    return lo, hi, frac


def first_violation(backlog: np.ndarray, allowed: np.ndarray) -> int | None:
    """Index of the first step whose backlog exceeds what the threshold allows, or None."""
    over = np.flatnonzero(backlog > allowed + 1e-9)
    return int(over[0]) if over.size else None


def oldest_age(backlog: float, past: np.ndarray, interval_s: float) -> float:
    """Age (s) of the oldest unconsumed sample given the backlog and the recent arrival rates."""
    if backlog <= 0:
        return 0.0
    age = 0.0
    remaining = backlog
    for rate in past[::-1]:
        amount = rate * interval_s
        if amount >= remaining:
            return age + (remaining / rate if rate > 0 else 0.0)
        remaining -= amount
        age += interval_s
    return age
