"""Model-predictive planning: a dynamic program over (step, size, backlog) on the forecast.

Each decision solves, on the fluid FIFO queue of :mod:`autoscaler.policy.queue` under the
forecast's upper quantile, "the cheapest sequence of sizes and resize times over the horizon
that keeps every step's oldest sample under the SLO" — all schedules at once, not a family of
one- and two-move plans — and acts on its first step. It is the offline optimum's recursion
(:mod:`autoscaler.sim.optimal`) cut to the horizon, in numpy (the controller has no numba):

* **State**: step k, size, backlog, and how many resizes the plan has made (the hourly
  budget ``maxPerHour`` is a hard constraint: a resize at k needs one left after those of
  the last hour and the plan's own; the horizon is at most an hour, so every resize of the
  plan counts against every later one).
* **Backlog lattice**: per size a lattice of backlogs ``X[k, size] + q·h`` (X the size's
  accumulated net inflow), so staying at a size moves a point to a point exactly, however
  long; only an emptied queue refilling and a resize landing are rounded — *up*, so a plan
  the lattice finds feasible is feasible (the queue is monotone in the backlog).
* **Resizes** serve nothing for the rescale duration and hold ``max(old, new)`` GPUs; their
  value over the target size is a prefix/suffix minimum (O(sizes) per step, not sizes²).
* **Cost**: GPU-seconds held, a charge per resize (``resize_cost_factor`` × downtime × the
  larger size), a violating step costs ``violation_cost`` (default: more than any plan, so
  "fewest violations, then cheapest"), and the horizon's end is valued by the size it ends
  at (:func:`_terminal`), so a plan cannot make the end cheap by leaving a debt past it.

Backward over the steps for the values, then forward from the exact state for the plan.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from autoscaler.policy.horizon import Plan
from autoscaler.policy.lattice import BacklogLattice, band_sizes
from autoscaler.policy.mpc_problem import (
    _EPS,
    _Problem,
    _resize_tables,
    _resize_values,
    _terminal,
)
from autoscaler.policy.mpc_problem import (
    DpSettings as DpSettings,
)
from autoscaler.policy.queue import allowed_backlog
from autoscaler.policy.types import JobSizing


def solve(
    *,
    sizing: JobSizing,
    plan_sizing: JobSizing,
    cur: int,
    backlog: float,
    upper: np.ndarray,
    median: np.ndarray,
    past: np.ndarray,
    settings: DpSettings,
    resizes_left: np.ndarray,
    floor_rate: float,
    sizes: np.ndarray,
    up_now: bool = False,
) -> Plan:
    """The cheapest plan over the horizon (see the module docstring).

    ``resizes_left[k]``: resizes that may start at step k or later under the hourly budget
    (net of the past ones; more than the horizon's steps means no budget). ``floor_rate``: a
    resize now may not go to a size serving less than this (no scale-in on a forecast
    alone). ``sizes``: the sizes worth holding (non-dominated), ascending. ``up_now``: a
    scale-up the plan makes later is made now (the load it plans for is a guess: the
    forecast is wrong now, or there is none).
    """
    s = settings
    dt = sizing.interval_s
    gpw = float(sizing.gpus_per_worker)
    upper = np.asarray(upper, dtype=float)
    n = len(upper)
    d = max(0.0, sizing.rescale_s / dt)
    m = math.ceil(d - 1e-9)
    if m > n:  # a resize longer than the horizon: plan as if it just fits
        m, d = n, float(n)
    cap_of = plan_sizing.capacity
    needs = np.unique(plan_sizing.workers_for_many(upper))
    lowest = plan_sizing.workers_for(float(np.min(median)))[0]
    S = band_sizes(sizes, cur, needs, lowest, s.band, s.max_sizes)
    W = len(S)
    C = np.asarray(cap_of[S], dtype=float)
    allowed = allowed_backlog(past, upper, dt, max(0.0, sizing.slo_s - s.margin_s))
    room = allowed_backlog(past, upper, dt, max(0.0, sizing.slo_s - sizing.rescale_s - s.margin_s))
    Q = max(2, s.buckets)
    # The lattice reaches a quarter past the largest allowed backlog, and past where even the
    # largest size's backlog grows when the load outgrows it (so that the least behind plan
    # is still told apart from the others).
    behind = backlog + float(np.max(np.cumsum(np.maximum(upper - C[-1], 0.0)))) * dt
    top = max(float(allowed.max()) * 1.25, backlog * 1.05, behind + m * dt * float(upper.max()))
    h = max(top, 1e-6) / (Q - 1)
    net = (upper[None, :] - C[:, None]).T * dt
    lat = BacklogLattice(net, h, Q)
    worst = float(S[-1]) * gpw * dt * (n + s.tail_steps + 2 * m + 2) * (2.0 + s.resize_cost_factor)
    P = worst * 1e3 if math.isinf(s.violation_cost) else float(s.violation_cost)
    limited = bool(np.max(resizes_left) <= n)
    R = int(max(0, np.max(resizes_left))) + 1 if limited else 1
    left = np.clip(resizes_left, 0, R) if limited else np.full(n, 1)
    kappa = gpw * sizing.rescale_s * (1.0 + s.resize_cost_factor)
    p = _Problem(
        n=n, m=m, d=d, S=S, C=C, net=net, lat=lat, allowed=allowed,
        cum=np.concatenate([[0.0], np.cumsum(upper * dt)]), upper=upper, gpw=gpw, dt=dt,
        kappa=kappa, P=P, R=R, limited=limited, left=left, grid=np.arange(Q + 2) * h,
    )  # fmt: skip
    V = np.empty((n + 1, R, W, Q + 1))
    V[n] = _terminal(
        s, lat.values[n], S, C, load=float(upper[-1]), room=float(room[-1]),
        top=plan_sizing.peak_workers, gpw=gpw, dt=dt, P=P, slack=h,
    )  # fmt: skip
    stay_cost = gpw * dt * S[None, :, None] + P * p.units(lat.reached, allowed[:, None, None])
    G = len(p.grid)
    tab = np.full((n, R, W, G), np.inf)
    stays = np.empty_like(V) if m == 0 else V
    land_cols, land_cost = _resize_tables(p)
    # Gathers on flattened (size, column) planes: one index per target cell.
    plane = np.arange(W)[None, :, None]
    stay_at = (plane * (Q + 1) + lat.stay).reshape(n, -1)
    src = np.clip(np.ceil(lat.values / h - _EPS), 0, G - 1).astype(np.int64)
    src_at = (plane * G + src[:n]).reshape(n, -1)
    layer_of = p.layers = _all_layers(p)
    can = (layer_of.max(axis=1) >= 0).tolist()
    flat_v = V.reshape(n + 1, R, -1)
    flat_tab = tab.reshape(n, R, -1)
    flat_cost = stay_cost.reshape(n, 1, -1)
    # Resizes started within m steps land beyond all of them: their values are computed
    # together, one block of m steps at a time (m = 0: instant resizes land on the same step).
    hi = n - 1
    while hi >= 0:
        lo = max(0, hi - max(1, m) + 1)
        ks = np.arange(lo, hi + 1)[can[lo : hi + 1]]
        if m > 0 and len(ks):
            tab[ks] = _resize_values(p, V, ks, layer_of[ks], land_cols[ks], land_cost[ks])
        for k in range(hi, lo - 1, -1):
            out = flat_v[k]
            np.add(np.take(flat_v[k + 1], stay_at[k], axis=1), flat_cost[k], out=out)
            if not can[k]:
                continue
            if m == 0:
                stays[k] = V[k]
                one = np.array([k])
                tab[k] = _resize_values(
                    p, stays, one, layer_of[one], land_cols[one], land_cost[one]
                )[0]
            np.minimum(out, np.take(flat_tab[k], src_at[k], axis=1), out=out)
        hi = lo - 1

    ci = int(np.flatnonzero(cur == S)[0])
    rise_at = 0.0 if up_now else math.inf
    if s.up_before_rise and not up_now:
        above = np.flatnonzero(median > C[ci] * (1.0 + s.rise_tolerance))
        rise_at = float(above[0]) if above.size else math.inf

    def terminal(i: int, b: float) -> float:
        return float(
            _terminal(
                s, np.array([[b]]), S[i : i + 1], C[i : i + 1], load=float(upper[-1]),
                room=float(room[-1]), top=plan_sizing.peak_workers, gpw=gpw, dt=dt, P=P,
            )[0, 0]
        )  # fmt: skip

    return _forward(
        p, V, stays, tab, stay_cost, cur=ci, b0=backlog,
        floor_rate=floor_rate, terminal=terminal, rise_at=rise_at,
    )  # fmt: skip


def _all_layers(p: _Problem) -> np.ndarray:
    """Per step and budget layer, the layer a resize started then lands in (−1: none
    allowed): the next one while the plan's resizes stay within what the hour leaves."""
    r = np.arange(p.R)[None, :]
    if p.limited:
        out = np.where(r < p.left[:, None], r + 1, -1)
    else:
        out = np.broadcast_to(r, (p.n, p.R)).copy()
    out[np.arange(p.n) + p.m > p.n] = -1  # a resize must end within the horizon
    return out


def _options(p: _Problem, k: int, r: int, i: int, b: float, stays: np.ndarray) -> np.ndarray:
    """Exact value of a resize at step k from (layer r, size i, backlog b) to each size."""
    tgt = int(p.layers[k, r])
    W = len(p.S)
    if tgt < 0:
        return np.full(W, np.inf)
    land, viol, _, extra = p.landing(k, np.array([b]))
    cols = p.lat.column(k + p.m, np.arange(W), land[:, 0])
    vals: np.ndarray = (
        stays[k + p.m][tgt, np.arange(W), cols]
        + extra[:, 0]
        + p.P * viol[:, 0]
        + p.kappa * np.maximum(p.S[i], p.S)
    )
    vals[i] = np.inf
    return vals


def _forward(
    p: _Problem,
    V: np.ndarray,
    stays: np.ndarray,
    tab: np.ndarray,
    stay_cost: np.ndarray,
    *,
    cur: int,
    b0: float,
    floor_rate: float,
    terminal: Callable[[int, float], float],
    rise_at: float = math.inf,
) -> Plan:
    """Follow the values from the exact state: stay while staying is no worse than the
    tabulated resize, resize (exactly evaluated) where it is better."""
    n, m, h = p.n, p.m, p.lat.h
    k, r, i, b = 0, 0, cur, float(b0)
    moves: list[tuple[int, int]] = []
    violating = 0
    value = math.nan
    just_landed = False
    first: tuple[float, ...] | None = None
    while k < n:
        seg = p.net[k:, i]
        s = np.cumsum(seg)
        path = s - np.minimum(-b, np.minimum.accumulate(s))  # backlog after steps k … n−1
        steps = np.arange(k, n)
        cols = p.lat.column(steps + 1, i, path)
        over = path > p.allowed[k:] + _EPS
        pen = p.P * p.units(path, p.allowed[k:])
        sv = p.gpw * p.dt * p.S[i] + pen + V[steps + 1, r, i, cols]
        # Staying to the end is a plan too, evaluated exactly: near the SLO's edge the
        # lattice's rounding up can make a path that keeps it look as if it did not.
        to_end = np.cumsum((p.gpw * p.dt * p.S[i] + pen)[::-1])[::-1] + terminal(i, path[-1])
        sv = np.minimum(sv, to_end)
        starts = np.concatenate([[b], path[:-1]])
        g = np.clip(np.ceil(starts / h - _EPS), 0, len(p.grid) - 1).astype(np.int64)
        rv = tab[steps, r, i, g]
        exact = _options(p, k, r, i, b, stays)
        if k == 0:
            exact[(p.S[i] > p.S) & (floor_rate > p.C)] = np.inf
        if just_landed and m == 0:  # an instant resize lands where it started: stay now
            exact[:] = np.inf
        just_landed = False
        rv[0] = exact.min()
        if k == 0:
            value = float(min(sv[0], rv[0]))
        better = np.flatnonzero(rv < sv - (1e-12 * np.abs(sv) + 1e-6))
        t = int(better[0]) if better.size else len(path)
        if first is None:
            first = tuple(float(x) for x in path[:t])
        if not better.size:
            violating += int(over.sum())
            b = float(path[-1])
            break
        violating += int(over[:t].sum())
        b = float(starts[t])
        k += t
        if t > 0:
            exact = _options(p, k, r, i, b, stays)
        j = int(np.argmin(exact))
        if not moves and k > 0 and j > cur and k + m + 1 > rise_at:
            # A scale-up must be in force when the median rises past the current capacity:
            # waiting longer would spend the SLO's slack on the forecast's timing.
            # The size the plan scales up to, now (or the best larger one allowed now).
            now = _options(p, 0, 0, cur, float(b0), stays)
            now[: cur + 1] = np.inf
            up = j if np.isfinite(now[j]) else int(np.argmin(now))
            if np.isfinite(now[up]):
                return Plan(((0, int(p.S[up])),), float(now[up]), 0, True, int(V[1:].size))
        moves.append((k, int(p.S[j])))
        land, _, count, _ = p.landing(k, np.array([b]))
        violating += int(count[j, 0])
        b = float(land[j, 0])
        r = int(p.layers[k, r])
        i = j
        k += m
        just_landed = True
    feasible = violating == 0 and terminal(i, b) < p.P
    return Plan(tuple(moves), value, violating, feasible, int(V[1:].size), first or ())
