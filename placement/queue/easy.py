"""EASY backfilling (Lifka 1995; Mu'alem & Feitelson 2001) over a pool of interchangeable units.

When the head job cannot start, EASY gives it a *reservation*: the earliest time at which,
by the running jobs' estimated ends, enough units will be free (the "shadow time"), and the
units that will be free then beyond what the head needs (the "extra" units). A later job may
start now ("backfill") only if it fits now and cannot delay the head: it ends (by its own
estimate) before the shadow time, or — in the classic form — it uses no more than the extra
units, which the head will not need.

Two flavours, both pure functions here:

* ``rlscheduler``: the form RLScheduler's reference code uses (PLACEMENT.md) — the
  reservation is computed once, when the head is chosen, and a job backfills only if it ends
  *strictly before* the shadow time; the extra units are never used.
* ``classic``: the textbook form — a job backfills if it ends no later than the shadow time
  or fits in the extra units (which it then uses up).

Node-level pools (GPUs on nodes) cannot count units this way; ``placement.timed`` computes
their reservation by replaying estimated releases on a copy of the cluster instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Reservation:
    """When the head job can start by the estimates, and what is left over then."""

    start_s: float
    """The shadow time; ``inf`` when the head can never fit (larger than the machine)."""
    extra: float
    """Units free at ``start_s`` beyond the head's need."""


def reserve(
    *,
    need: float,
    free_now: float,
    now_s: float,
    running_end_s: np.ndarray,
    running_size: np.ndarray,
) -> Reservation:
    """The head's reservation, releasing running jobs in order of their *estimated* ends.

    ``running_end_s`` are estimated end times (start + estimate), which may already be in the
    past for a job that overran its estimate: it is then counted as ending now.
    """
    if free_now >= need:
        return Reservation(start_s=now_s, extra=free_now - need)
    ends = np.maximum(np.asarray(running_end_s, dtype=np.float64), now_s)
    order = np.argsort(ends, kind="stable")
    free = free_now + np.cumsum(np.asarray(running_size, dtype=np.float64)[order])
    enough = np.nonzero(free >= need)[0]
    if len(enough) == 0:
        return Reservation(start_s=math.inf, extra=0.0)
    first = int(enough[0])
    start = float(ends[order[first]])
    # Every job ending at the same moment frees its units at the shadow time too.
    last_same = int(np.searchsorted(ends[order], start, side="right")) - 1
    return Reservation(start_s=start, extra=float(free[last_same] - need))


def may_backfill(
    *,
    size: float,
    estimate_s: float,
    now_s: float,
    free_now: float,
    reservation: Reservation,
    flavour: str = "classic",
) -> bool:
    """Whether a job of ``size`` units lasting ``estimate_s`` may start now without delaying
    the head."""
    if size > free_now:
        return False
    ends = now_s + estimate_s
    if flavour == "rlscheduler":
        return ends < reservation.start_s
    if flavour != "classic":
        raise ValueError(f"unknown EASY flavour {flavour!r}")
    return ends <= reservation.start_s or size <= reservation.extra


def after_backfill(reservation: Reservation, *, size: float, ends_s: float) -> Reservation:
    """The reservation once a job has backfilled: a job still running at the shadow time
    (it used the extra units) leaves fewer extra units for the next candidate."""
    if ends_s <= reservation.start_s:
        return reservation
    return Reservation(start_s=reservation.start_s, extra=reservation.extra - size)
