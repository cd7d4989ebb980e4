"""The plan search as it was before it was vectorised over plan structure: a frozen copy.

:func:`search` here evaluates every candidate plan as a row of full capacity, GPU and backlog
matrices, exactly as ``autoscaler.policy.horizon.search`` did. It is kept unchanged as the
baseline ``python -m benchmarks.planner`` times the planner against, and as the oracle
``tests/policy/test_horizon_equivalence.py`` checks the planner's choices against: the
planner must choose what this chooses on every input. Do not "improve" it.

One rule changed on purpose since it was frozen, in both: the final size must sustain the
upper quantile's mean over the horizon's last ``settings.sustain_steps`` steps (one step:
the rule it was frozen with). The rise rule is off with ``rise_tolerance`` infinite, here as
there (no rate exceeds an infinite multiple of a capacity). And the plan family may grow,
in both: with ``settings.onward`` a second move may also continue the first's way (down,
then further down), so the reference judges those plans as rows too; off, its plans are the
ones it was frozen with. The search's structure, which this file pins, did not change.
"""

from __future__ import annotations

import math

import numpy as np

from autoscaler.policy.horizon import FIRST_MOVES, Plan, PlanSettings
from autoscaler.policy.queue import allowed_backlog
from autoscaler.policy.types import JobSizing


def _sizes(sz: JobSizing) -> np.ndarray:
    """Sizes worth holding: those whose throughput no smaller size already reaches."""
    cap = sz.capacity
    out, best = [], -math.inf
    for w in range(sz.min_workers, sz.peak_workers + 1):
        if cap[w] > best:
            out.append(w)
            best = cap[w]
    return np.array(out)


def _availability(n: int, start: np.ndarray, down_steps: float) -> np.ndarray:
    """Share of each step (columns) served after a resize starting at ``start`` (rows)."""
    k = np.arange(n, dtype=float)[None, :]
    return np.clip((k + 1.0) - (start[:, None] + down_steps), 0.0, 1.0)


def search(
    *,
    sizing: JobSizing,
    plan_sizing: JobSizing,
    cur: int,
    backlog: float,
    upper: np.ndarray,
    median: np.ndarray,
    past: np.ndarray,
    settings: PlanSettings,
    resizes_left: np.ndarray,
    floor_rate: float,
    hour_steps: int,
) -> Plan:
    """The best plan (see the module docstring).

    ``resizes_left[k]``: how many resizes may start at step k and after without exceeding the
    hourly budget (already net of past resizes). ``floor_rate``: a resize now may not go to a
    size serving less than this (no scale-in on a forecast while the observed rate says
    otherwise).
    """
    dt = sizing.interval_s
    d = sizing.rescale_s / dt
    if d <= 0:  # free resizes: any later step can be fixed then, so only this one matters
        upper, median = upper[:1], median[:1]
    n = len(upper)
    gpw = sizing.gpus_per_worker
    sizes = _sizes(plan_sizing)
    cap_of = plan_sizing.capacity
    need_hi = plan_sizing.workers_for(float(np.max(upper)) * 1.05)[0]
    need_lo = plan_sizing.workers_for(float(np.min(median)))[0]
    lo_i = max(0, int(np.searchsorted(sizes, need_lo)) - settings.band)
    hi_i = min(len(sizes), int(np.searchsorted(sizes, need_hi)) + settings.band + 1)
    band = sizes[lo_i:hi_i]
    if len(band) > settings.max_sizes:  # dense around the peak's need, spread below it
        top = band[-(2 * settings.band + 1) :]
        rest = band[: -(2 * settings.band + 1)]
        keep = max(1, settings.max_sizes - len(top))
        rest = rest[np.unique(np.linspace(0, len(rest) - 1, keep).round().astype(int))]
        band = np.concatenate([rest, top])
    band = band[band != cur]
    # -- the plans: rows of (k1, w1, k2, w2); k = n means "never" --------------------------
    firsts = np.array([k for k in FIRST_MOVES if k < n] if d > 0 else [0])
    k1 = [n]
    w1 = [cur]
    k2 = [n]
    w2 = [cur]
    settle = math.ceil(d)
    for a in firsts:
        for w in band:
            k1.append(a)
            w1.append(w)
            k2.append(n)
            w2.append(w)
            if d <= 0:
                continue
            for h in settings.hold_steps:
                b = a + settle + h
                if b >= n:
                    break
                for v in band:
                    # back the other way (or, with ``onward``, on the same way too)
                    onward = settings.onward == "both" or (
                        settings.onward == "down" and cur > w > v
                    )
                    if v != w and (onward or (v < w) == (w > cur)):
                        k1.append(a)
                        w1.append(w)
                        k2.append(b)
                        w2.append(v)
    K1, W1, K2, W2 = (np.array(x) for x in (k1, w1, k2, w2))
    P = len(K1)
    # -- capacity and GPUs per step ---------------------------------------------------------
    av1 = _availability(n, K1.astype(float), d)
    av2 = _availability(n, K2.astype(float), d)
    before1 = (np.arange(n)[None, :] < K1[:, None]).astype(float)
    before2 = (np.arange(n)[None, :] < K2[:, None]).astype(float)
    c_cur, c1, c2 = cap_of[cur], cap_of[W1][:, None], cap_of[W2][:, None]
    # Before k1: current size; then size 1 once up; after k2 starts: size 2 once up.
    cap = before1 * c_cur + (1 - before1) * np.where(before2 > 0, av1 * c1, av2 * c2)
    down1 = (1 - before1) * (1 - av1) * before2
    down2 = (1 - before2) * (1 - av2)
    held = (
        before1 * cur
        + down1 * np.maximum(cur, W1)[:, None]
        + (1 - before1) * before2 * av1 * W1[:, None]
        + down2 * np.maximum(W1, W2)[:, None]
        + (1 - before2) * av2 * W2[:, None]
    )
    final = np.where(n > K2, W2, np.where(n > K1, W1, cur))
    # -- the queue under the upper quantile -------------------------------------------------
    s = np.cumsum((upper[None, :] - cap) * dt, axis=1)
    path = s - np.minimum(-backlog, np.minimum.accumulate(s, axis=1))
    allowed = allowed_backlog(past, upper, dt, max(0.0, sizing.slo_s - settings.margin_s))
    room = allowed_backlog(
        past, upper, dt, max(0.0, sizing.slo_s - sizing.rescale_s - settings.margin_s)
    )
    over = path > allowed[None, :] + 1e-9
    violating = over.sum(axis=1)
    ok = (violating == 0) & (path[:, -1] <= room[-1] + 1e-9)
    end_load = float(upper[-max(1, settings.sustain_steps) :].mean())
    ok &= (cap_of[final] >= end_load * settings.sustain) | (final == sizes[-1])
    # -- the resize budget and the observed-rate floor ---------------------------------------
    first_ok = (n == K1) | (resizes_left[np.minimum(K1, n - 1)] >= 1)
    same_hour = hour_steps > (K2 - K1)
    second_ok = (n == K2) | (resizes_left[np.minimum(K2, n - 1)] - same_hour >= 1)
    within = first_ok & second_ok
    floor_ok = ~((K1 == 0) & (cap_of[W1] < floor_rate) & (cur > W1))
    # A scale-up must be in force (one step ahead) when the median rises past the current
    # capacity: waiting longer would spend the SLO's slack on the forecast's timing.
    above = np.flatnonzero(median > cap_of[cur] * (1.0 + settings.rise_tolerance))
    rise_at = int(above[0]) if above.size else n
    lead = math.ceil(d) + 1
    timely = ~((cur < W1) & (K1 > 0) & (K1 + lead > rise_at))
    allowed_plan = within & floor_ok & timely
    # -- cost ---------------------------------------------------------------------------------
    cost = held.sum(axis=1) * dt * gpw + final * settings.tail_steps * dt * gpw
    charge = settings.resize_cost_factor * sizing.rescale_s * gpw
    cost += charge * ((n > K1) * np.maximum(cur, W1) + (n > K2) * np.maximum(W1, W2))
    pick = ok & allowed_plan
    if pick.any():
        i = int(np.flatnonzero(pick)[np.argmin(cost[pick])])
        feasible = True
    else:
        score = np.where(allowed_plan, violating * 1e12 + cost, np.inf)
        score[0] = violating[0] * 1e12 + cost[0] - 1e-3  # staying wins ties
        i = int(np.argmin(score))
        feasible = False
    stay_bad = not (ok[0] and allowed_plan[0])
    if stay_bad and 0 < K1[i] <= settings.up_slack_steps and W1[i] > cur:
        # Staying fails and the plan scales up in a moment: do it now, then re-plan.
        now = np.flatnonzero((K1 == 0) & (W1[i] == W1) & (n == K2))
        if now.size and first_ok[now[0]]:
            i = int(now[0])
    moves: list[tuple[int, int]] = []
    if K1[i] < n:
        moves.append((int(K1[i]), int(W1[i])))
    if K2[i] < n:
        moves.append((int(K2[i]), int(W2[i])))
    before = tuple(float(b) for b in path[i, : int(K1[i])])
    return Plan(tuple(moves), float(cost[i]), int(violating[i]), feasible, P, before)
