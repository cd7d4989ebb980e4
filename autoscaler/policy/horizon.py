"""Whole-horizon plans: sizes and resize times chosen together, judged on the fluid queue.

A plan over the forecast horizon is "stay at the current size", "resize to w₁ at step k₁", or
"resize to w₁ at k₁, then to w₂ at k₂" (up before a peak and back down after it, or the
reverse around a dip). Every plan of a grid of resize times and a band of sizes is evaluated
with the fluid FIFO queue of :mod:`autoscaler.policy.queue`: each resize serves nothing for
the rescale duration and holds ``max(old, new)`` GPUs, so the backlog a resize leaves and its
GPU cost are part of the plan, not an afterthought.

A plan is **feasible** when the backlog under the upper quantile keeps the oldest sample
under the SLO (less a margin) at every step, ends the horizon with room for one more resize,
ends at a size that sustains the load there, and starts no more resizes than the budget
leaves (``maxPerHour``, counting the resizes already made in the last hour). Among feasible
plans the cheapest wins: GPU-seconds over the horizon, a tail at the final size, and a charge
per resize. With none feasible, the plan with the fewest violating steps wins (staying on
ties). Only the first move is acted on; the planner plans again next step.

The plans share most of their work, and the evaluation follows that structure instead of
judging a few thousand plans × the horizon's steps one cell at a time:

* the plans and their costs do not depend on the forecast: they are kept per job, current
  size and band (:func:`_grid`), the GPU-seconds in closed form from the prefix sums of a
  resize's availability;
* staying and the one-move plans (a few dozen) are rows of the queue, computed as always;
* a two-move plan is its one-move plan until k₂, then the queue of its *group* (k₂, w₂) —
  the same for every plan of the group — started from the backlog its one-move plan has at
  k₂. The backlog is monotone in that start, so a group needs one threshold (the largest
  start that keeps every step within the SLO) and a plan one comparison. Once w₂ serves
  whole steps the group's queue is that of staying at w₂, so all groups' thresholds come
  from suffix minimums over the steps (:func:`_group_queues`).

Rearranged sums round differently from the rows of a full matrix. Wherever rounding could
decide a comparison — a backlog within a bound on rounding of its limit, costs within
rounding of each other — those plans are judged again as full rows (:func:`_exact`), so the
search chooses what judging every plan as a row would.

A search still costs far more than following a plan, which is why the planner follows a
feasible plan while nothing it depends on changes instead of searching again every step
(:meth:`autoscaler.policy.kale.KalePolicy._follow`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from autoscaler.policy.queue import allowed_backlog
from autoscaler.policy.types import JobSizing

FIRST_MOVES = (0, 1, 2, 4, 8, 16, 32)
"""Steps from now at which a plan's first resize may start (denser soon: it is acted on)."""

_ROUNDING = 8.0 * float(np.finfo(float).eps)
"""Per term of a sum, a bound on how far two orders of adding it can round apart, with a
factor of 8 to spare (unit roundoff is half the machine epsilon)."""


@dataclass(frozen=True)
class PlanSettings:
    """The plan search's tunables."""

    margin_s: float
    """Keep the planned oldest-sample age this far under the SLO."""
    hold_steps: tuple[int, ...]
    """Candidate times (steps) between a plan's first and second resize."""
    resize_cost_factor: float = 1.0
    """Each resize is charged this × downtime × the larger size, in GPU-seconds."""
    tail_steps: int = 15
    """The final size is charged this many steps past the horizon (no plan ends big for free)."""
    band: int = 2
    """Sizes considered: the load's needs over the horizon, widened by this many sizes."""
    sustain: float = 1.0
    """The final size must serve this share of the upper quantile at the horizon's end."""
    sustain_steps: int = 1
    """... averaged over this many last steps of the horizon (the SLO's window: a final size
    rides the minutes' spikes on the backlog, as every other step of a plan does)."""
    max_sizes: int = 9
    """At most this many sizes per plan search (the two-move plans grow with its square)."""
    rise_tolerance: float = 0.1
    """A rise is the median exceeding the current capacity by this share (inf: no rise
    rule; the planning load's band widened in time stands for it)."""
    resize_margin: float = 0.0
    """A feasible plan resizing now must cost less than staying (when staying is feasible)
    by this × its resize charge (0: the cheapest plan wins)."""
    up_slack_steps: int = 2
    """With staying infeasible, a scale-up planned this soon is made now (timing errors)."""
    onward: str = ""
    """Two-move plans may also continue the way the first move went, not only go back the
    other way: "down" (down, then further down later), "both" (also up, then further up);
    "": neither."""


@dataclass(frozen=True)
class Plan:
    """The chosen plan: its moves (step, size), its cost and violating steps (upper quantile)."""

    moves: tuple[tuple[int, int], ...]
    cost_gpu_s: float
    violating_steps: int
    feasible: bool
    candidates: int
    path: tuple[float, ...] = ()
    """Planned backlog (upper quantile) at the end of each step before the first move."""


def _sizes(sz: JobSizing) -> np.ndarray:
    """Sizes worth holding: those whose throughput no smaller size already reaches
    (read-only: the same array for every call with the same capacities)."""
    return _sizes_of(sz.min_workers, sz.peak_workers, sz.capacity.tobytes())


@lru_cache(maxsize=64)
def _sizes_of(lowest: int, peak: int, capacity: bytes) -> np.ndarray:
    """:func:`_sizes` of a capacity table given as bytes (hashable, so kept)."""
    ws = np.arange(lowest, peak + 1)
    cap = np.frombuffer(capacity)[ws]
    best = np.fmax.accumulate(np.concatenate(([-math.inf], cap[:-1])))
    out: np.ndarray = ws[cap > best]
    out.setflags(write=False)
    return out


def _availability(n: int, start: np.ndarray, down_steps: float) -> np.ndarray:
    """Share of each step (columns) served after a resize starting at ``start`` (rows)."""
    k = np.arange(n, dtype=float)[None, :]
    return np.clip((k + 1.0) - (start[:, None] + down_steps), 0.0, 1.0)


def _running_min(x: np.ndarray) -> np.ndarray:
    """Running minimum over axis 0 (the steps), as log₂(steps) minimums of whole slices:
    numpy's accumulate walks one column at a time, which costs more on these short axes."""
    a, b = x.copy(), np.empty_like(x)
    shift = 1
    while shift < len(a):
        np.minimum(a[shift:], a[:-shift], out=b[shift:])
        b[:shift] = a[:shift]
        a, b = b, a
        shift *= 2
    return a


@dataclass(frozen=True)
class _Job:
    """The job's constants the plans and their costs depend on."""

    n: int
    down_steps: float
    holds: tuple[int, ...]
    interval_s: float
    gpus_per_worker: int
    tail_steps: int
    charge: float
    """GPU-seconds charged per worker of a resize's larger size."""
    onward: str = ""
    """Second moves may continue the first's way (see :class:`PlanSettings`)."""


@dataclass(frozen=True)
class _Grid:
    """The candidate plans for one job, current size and band of sizes, and their costs.

    Rows ``(k1, w1, k2, w2)`` (k = n: never) in the order the search breaks ties in:
    staying, then for each first-move step and size its one-move plan followed by its
    two-move plans (hold times, then second sizes). None of it depends on the forecast, so a
    grid serves every decision with the same arguments. Besides the rows: where each plan
    sits in the structure :func:`search` evaluates (F first-move steps × m band sizes of
    one-move plans; groups of two-move plans by second-move step × m), as indices, and
    each row's final size as a band index (m: the current size).
    """

    job: _Job
    band: np.ndarray
    c_band: np.ndarray
    """The band's capacities."""
    cap_end: np.ndarray
    """Capacity of each size a plan may end at: the band's, then the current size's."""
    top_end: np.ndarray
    """Which of those is the largest size worth holding."""
    steps: np.ndarray
    """[step, 0]: the step."""
    cap1: np.ndarray
    """[step, f·m + size]: the one-move plans' capacity."""
    k1: np.ndarray
    w1: np.ndarray
    k2: np.ndarray
    w2: np.ndarray
    cost: np.ndarray
    """GPU-seconds over the horizon, the tail at the final size, the resizes' charge."""
    order: np.ndarray
    """Each row's place in [staying, the one-move plans, the two-move plans]."""
    one: np.ndarray
    """Row of each one-move plan, f·m + size."""
    two: np.ndarray
    """Rows of the two-move plans."""
    two_one: np.ndarray
    """For each two-move plan: its one-move plan, f·m + size."""
    two_start: np.ndarray
    """For each two-move plan: its one-move plan at step k2 − 1, flat in [step, f·m + size]."""
    two_k2: np.ndarray
    two_group: np.ndarray
    """For each two-move plan: its group, flat in [second-move step, size]."""
    group_k: np.ndarray
    """The distinct second-move steps."""
    up_cum: np.ndarray
    """[s]: steps' worth of service in the first s steps after a resize starts."""
    down_at: np.ndarray
    """[t, k2]: the t-th step from k2 while its resize is under way (within the horizon)."""
    down_in: np.ndarray
    """[t, k2]: that step is inside the horizon."""
    full_from: np.ndarray
    """[k2]: the first step the second size serves whole (n: none in the horizon)."""
    served: np.ndarray
    """[j, size]: samples the size serves in steps 0 … j − 1 (j = 0 … n)."""
    down_served: np.ndarray
    """[t, 0, size]: samples w2 serves from k2 through the t-th step of its resize."""
    latest_up: int
    """The largest k1 + lead (the resize and a step) of a plan scaling up later (−1: none)."""
    final_at: np.ndarray
    """Index into ``cap_end`` of the size a plan ends at."""


@lru_cache(maxsize=32)
def _grid(cur: int, band: tuple[int, ...], top: int, capacity: bytes, job: _Job) -> _Grid:
    """The plans for these arguments, their structure and costs (read-only arrays).

    ``top``: the largest size worth holding; ``capacity``: the capacity table's bytes. A
    job's consecutive decisions mostly share their size and band, so a few dozen grids
    (each some hundred kilobytes) serve several jobs; another job's, or a new band, costs a
    build about as long as a search."""
    n, d = job.n, job.down_steps
    again = d > 0
    settle = math.ceil(d) if again else 0
    sizes = np.array(band, dtype=np.int64)
    m = len(sizes)
    firsts = np.array([k for k in FIRST_MOVES if k < n] if again else [0], dtype=np.int64)
    hold = np.array(job.holds if again else (), dtype=np.int64)
    # Hold times are tried while the second move starts inside the horizon: the first that
    # does not ends the ones tried (they are meant in increasing order).
    seconds = firsts[:, None] + settle + hold[None, :]
    fits = np.logical_and.accumulate(seconds < n, axis=1)
    group_k = np.array(sorted(set(seconds[fits].tolist())), dtype=np.int64)
    # back[w, v]: from w, a second move to v goes back the other way (or, onward, anywhere
    # else).
    lower = sizes[None, :] < sizes[:, None]
    back = (sizes[None, :] != sizes[:, None]) & (lower == (sizes[:, None] > cur))
    if job.onward == "both":
        back |= (sizes[None, :] != sizes[:, None]) & ~back
    elif job.onward == "down":
        back |= lower & (sizes[:, None] < cur)
    # One cell per (first step, w1, slot, w2): slot 0 is the one-move plan (w2 column 0
    # only), slot 1 + h the two-move plans holding hold[h]; nonzero walks it in row order.
    cells = np.zeros((len(firsts), m, 1 + len(hold), max(m, 1)), dtype=bool)
    cells[:, :, 0, 0] = True
    if m:
        cells[:, :, 1:, :] = fits[:, None, :, None] & back[None, :, None, :]
    a_i, w_i, slot, v_i = np.nonzero(cells)
    single = slot == 0
    pair = ~single
    rows = np.arange(1, len(a_i) + 1)
    k1 = np.concatenate(([n], firsts[a_i]))
    second = seconds[a_i, np.maximum(slot - 1, 0)] if hold.size else np.full(len(a_i), n)
    k2 = np.concatenate(([n], np.where(single, n, second)))
    w1 = np.concatenate(([cur], sizes[w_i]))
    w2 = np.concatenate(([cur], np.where(single, sizes[w_i], sizes[v_i])))
    # GPU-seconds: before k1 the current size; from k1 to k2 max(cur, w1) while down and w1
    # once up; after k2 max(w1, w2) while down and w2 once up. ``up_cum[s]``: steps' worth
    # of service in the first s steps after a resize starts.
    up_cum = np.concatenate(([0.0], np.cumsum(np.clip(np.arange(1.0, n + 1.0) - d, 0.0, 1.0))))
    hi1, hi2 = np.maximum(cur, w1), np.maximum(w1, w2)
    span1, span2 = k2 - k1, n - k2
    up1, up2 = up_cum[span1], up_cum[span2]
    held = cur * k1 + hi1 * (span1 - up1) + w1 * up1 + hi2 * (span2 - up2) + w2 * up2
    dt, gpw = job.interval_s, job.gpus_per_worker
    final = np.where(n > k2, w2, np.where(n > k1, w1, cur))
    cost = held * dt * gpw + final * job.tail_steps * dt * gpw
    cost += job.charge * ((n > k1) * hi1 + (n > k2) * hi2)
    up_later = (cur < w1) & (k1 > 0)
    steps = np.arange(n)
    down = group_k[None, :] + np.arange(settle)[:, None]
    two_k2 = k2[1:][pair]
    order = np.zeros(len(k1), dtype=np.int64)  # rows: [staying, one-move, two-move plans]
    order[rows[single]] = np.arange(1, single.sum() + 1)
    order[rows[pair]] = np.arange(single.sum() + 1, len(k1))
    cap_of = np.frombuffer(capacity)
    ends_at = np.concatenate((sizes, [cur]))
    one_open = steps[:, None] < firsts[None, :]
    one_up = _availability(n, firsts.astype(float), d).T
    c_band = cap_of[sizes]
    # The one-move plans' capacity [step, f·m + size], as the search always made it.
    cap1 = np.where(one_open[:, :, None], cap_of[cur], one_up[:, :, None] * c_band)
    grid = _Grid(
        job=job,
        band=sizes,
        c_band=c_band,
        cap_end=cap_of[ends_at],
        top_end=ends_at == top,
        steps=steps[:, None],
        cap1=cap1.reshape(n, -1),
        k1=k1,
        w1=w1,
        k2=k2,
        w2=w2,
        cost=cost,
        order=order,
        one=rows[single],
        two=rows[pair],
        two_one=(a_i * m + w_i)[pair],
        two_start=(two_k2 - 1) * len(firsts) * m + (a_i * m + w_i)[pair],
        two_k2=two_k2,
        two_group=np.searchsorted(group_k, two_k2) * m + v_i[pair],
        group_k=group_k,
        up_cum=up_cum,
        down_at=np.minimum(down, n - 1),
        down_in=down < n,
        full_from=np.minimum(group_k + settle, n),
        served=np.arange(n + 1.0)[:, None] * (c_band * dt),
        down_served=up_cum[1 : settle + 1][:, None, None] * (c_band * dt),
        latest_up=int(np.max(np.where(up_later, k1 + math.ceil(d) + 1, -1))),
        final_at=np.concatenate(([m], np.where(single, w_i, v_i))),
    )
    for value in vars(grid).values():
        if isinstance(value, np.ndarray):
            value.setflags(write=False)
    return grid


@dataclass(frozen=True)
class _Queue:
    """What judging plans on the fluid queue needs, for :func:`_exact`."""

    cur: int
    capacity: np.ndarray
    upper: np.ndarray
    backlog: float
    limit: np.ndarray
    """The backlog a step may end with (``allowed`` + 1e-9): above it, the step violates."""
    end_limit: float


def _exact(q: _Queue, g: _Grid, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Violating steps, "ends with room", and cost of the plans ``rows``, each plan a row of
    full capacity, GPU and backlog matrices: the arithmetic the plan search has always made,
    for the few plans where the search's rearranged sums could round to another choice."""
    job, cur = g.job, q.cur
    n, dt, d = job.n, job.interval_s, job.down_steps
    k1, w1, k2, w2 = g.k1[rows], g.w1[rows], g.k2[rows], g.w2[rows]
    av1 = _availability(n, k1.astype(float), d)
    av2 = _availability(n, k2.astype(float), d)
    before1 = (np.arange(n)[None, :] < k1[:, None]).astype(float)
    before2 = (np.arange(n)[None, :] < k2[:, None]).astype(float)
    cap_of = q.capacity
    c_cur, c1, c2 = cap_of[cur], cap_of[w1][:, None], cap_of[w2][:, None]
    cap = before1 * c_cur + (1 - before1) * np.where(before2 > 0, av1 * c1, av2 * c2)
    down1 = (1 - before1) * (1 - av1) * before2
    down2 = (1 - before2) * (1 - av2)
    held = (
        before1 * cur
        + down1 * np.maximum(cur, w1)[:, None]
        + (1 - before1) * before2 * av1 * w1[:, None]
        + down2 * np.maximum(w1, w2)[:, None]
        + (1 - before2) * av2 * w2[:, None]
    )
    final = np.where(n > k2, w2, np.where(n > k1, w1, cur))
    s = np.cumsum((q.upper[None, :] - cap) * dt, axis=1)
    path = s - np.minimum(-q.backlog, np.minimum.accumulate(s, axis=1))
    violating = (path > q.limit[None, :]).sum(axis=1)
    ends = path[:, -1] <= q.end_limit
    gpw = job.gpus_per_worker
    cost = held.sum(axis=1) * dt * gpw + final * job.tail_steps * dt * gpw
    cost += job.charge * ((n > k1) * np.maximum(cur, w1) + (n > k2) * np.maximum(w1, w2))
    return violating, ends, cost


def _suffix_min(x: np.ndarray) -> np.ndarray:
    """[t]: the minimum of x's rows t … end; one more row of +inf (t = len(x))."""
    out = np.full((len(x) + 1, *x.shape[1:]), np.inf)
    out[:-1] = np.minimum.accumulate(x[::-1], axis=0)[::-1]
    return out


def _group_queues(g: _Grid, arrived: np.ndarray, limit: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per group (k2, w2), flat over [k2, size]: the least threshold a start at k2 must stay
    under, and the least slack of the queue started empty (below 0: a step goes over its
    limit whatever the start).

    ``arrived[j]``: samples arrived in steps 0 … j − 1. While the second resize is under way
    (a few steps) the queue is followed step by step. Once the size serves whole steps, the
    net inflow is that of staying at w2 — the same for every k2 — so every k2's threshold
    and slack come from suffix minimums over the steps of two small tables.

    A backlog is the largest of 0 and the net inflows since earlier steps; the slack is
    taken over the inflows only, and an empty queue against a negative limit is checked
    apart, exactly: a queue that empties by a clear margin then has a clear slack, even
    against a limit of almost nothing (an idle load, no room left at the horizon's end).
    """
    b = g.group_k
    if not len(b):  # one-move plans only
        return np.zeros(0), np.zeros(0)
    net = arrived[:, None] - g.served  # [j, size]: net inflow of steps 0 … j − 1
    to_limit = _suffix_min(limit[:, None] - net[1:])  # [t]: min over j ≥ t of limit − net
    # [t]: min over t ≤ i < j of limit_j − (net_j − net_i), the empty-start slack from t on.
    empty_from = _suffix_min(net[1:] + to_limit[1:])
    # While resizing: [t, k2, size], the step k2 + t; ``since`` the inflow since an earlier
    # step's end (or k2), at its largest.
    inflow = (arrived[g.down_at + 1] - arrived[b])[:, :, None] - g.down_served
    earlier = np.zeros_like(inflow)
    np.minimum.accumulate(inflow[:-1], axis=0, out=earlier[1:])
    since = inflow - np.minimum(earlier, 0.0)
    cap = np.where(g.down_in, limit[g.down_at], np.inf)[:, :, None]
    lowest = (cap - inflow).min(axis=0)
    slack = (cap - since).min(axis=0)
    # From the first whole step s on (rows s = n: +inf, no such step in the horizon), with
    # the net inflow and the empty-start backlog at the end of step s − 1.
    s = g.full_from
    base = to_limit[s] + net[s]
    lowest = np.minimum(lowest, base - inflow[-1])
    slack = np.minimum(slack, np.minimum(base - np.maximum(since[-1], 0.0), empty_from[s]))
    below = limit < 0
    if below.any():  # even an empty queue is over the limit there
        below_from = np.logical_or.accumulate(below[::-1])[::-1]
        slack[below_from[b]] = -np.inf
    return lowest.ravel(), slack.ravel()


def _group_steps(
    g: _Grid, arrived: np.ndarray, service: np.ndarray, limit: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per group, every step [step, k2, size]: the threshold a start must stay under (inf
    before k2) and the running minimum of the net inflow since k2 (zero before k2), for
    counting violating steps."""
    n = g.job.n
    through = np.arange(n)[:, None] - g.group_k + 1  # steps from k2 through each step
    on = through > 0
    inflow = g.up_cum[np.maximum(through, 0)][:, :, None] * service
    np.subtract(((arrived[1:, None] - arrived[g.group_k]) * on)[:, :, None], inflow, out=inflow)
    threshold = np.where(on, limit[:, None], np.inf)[:, :, None] - inflow
    return threshold, _running_min(inflow)


def _tail_violations(
    threshold: np.ndarray, lowest_cum: np.ndarray, grp: np.ndarray, start: np.ndarray, eps: float
) -> tuple[np.ndarray, np.ndarray]:
    """Violating steps from k2 on of each two-move plan (group ``grp``, backlog ``start`` at
    k2), and which of those counts rounding could change.

    Per group, the steps that violate from an empty start are counted once; the others
    violate when ``start`` exceeds their threshold, so they are sorted and every plan's count
    is one binary search over (group, threshold) pairs, ordered as complex numbers are.
    """
    n = threshold.shape[0]
    gap = (threshold + lowest_cum).reshape(n, -1).T
    groups = len(gap)
    over = gap < 0
    order = np.sort(np.where(over, np.inf, threshold.reshape(n, -1).T), axis=1)
    order = np.concatenate([order, np.full((groups, 1), np.inf)], axis=1)
    keys = np.empty(order.size, dtype=complex)
    keys.real = np.repeat(np.arange(groups), n + 1)
    keys.imag = order.ravel()
    asked = np.empty(len(grp), dtype=complex)
    asked.real, asked.imag = grp, start
    below = np.searchsorted(keys, asked) - grp * (n + 1)
    count = over.sum(axis=1)[grp] + below
    near = (np.abs(gap) <= eps).any(axis=1)[grp]
    near |= order[grp, below] - start <= eps
    near |= start - np.where(below > 0, order[grp, below - 1], -np.inf) <= eps
    return count, near


def _first_min(
    key: np.ndarray, rows: np.ndarray, tol: float, exact_key: Callable[[np.ndarray], np.ndarray]
) -> int:
    """The first of ``rows`` with the least key, where ``key`` may be off by rounding: rows
    within ``tol`` of the least are judged again by ``exact_key(rows)``."""
    vals = key[rows]
    near = rows[vals <= vals.min() + tol]
    if len(near) == 1:
        return int(near[0])
    return int(near[np.argmin(exact_key(near))])


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
    capacity = plan_sizing.capacity.tobytes()
    sizes = _sizes_of(plan_sizing.min_workers, plan_sizing.peak_workers, capacity)
    cap_of = plan_sizing.capacity
    u_hi, u_lo = float(upper.max()), float(upper.min())
    need_hi = plan_sizing.workers_for(u_hi * 1.05)[0]
    need_lo = plan_sizing.workers_for(float(median.min()))[0]
    at_lo, at_hi = sizes.searchsorted([need_lo, need_hi]).tolist()
    band = sizes[max(0, at_lo - settings.band) : min(len(sizes), at_hi + settings.band + 1)]
    if len(band) > settings.max_sizes:  # dense around the peak's need, spread below it
        top = band[-(2 * settings.band + 1) :]
        rest = band[: -(2 * settings.band + 1)]
        keep = max(1, settings.max_sizes - len(top))
        rest = rest[np.unique(np.linspace(0, len(rest) - 1, keep).round().astype(int))]
        band = np.concatenate([rest, top])
    job = _Job(
        n=n,
        down_steps=d,
        holds=tuple(settings.hold_steps),
        interval_s=dt,
        gpus_per_worker=gpw,
        tail_steps=settings.tail_steps,
        charge=settings.resize_cost_factor * sizing.rescale_s * gpw,
        onward=settings.onward,
    )
    others = tuple(w for w in band.tolist() if w != cur)
    g = _grid(int(cur), others, int(sizes[-1]), capacity, job)
    band, c_band = g.band, g.c_band
    P = len(g.k1)
    allowed = allowed_backlog(past, upper, dt, max(0.0, sizing.slo_s - settings.margin_s))
    room = allowed_backlog(
        past, upper, dt, max(0.0, sizing.slo_s - sizing.rescale_s - settings.margin_s)
    )
    limit = allowed + 1e-9
    end_limit = float(room[-1] + 1e-9)
    c_cur = cap_of[cur]
    # -- staying and the one-move plans: the queue step by step, as the search always made it
    s0 = ((upper - c_cur) * dt).cumsum()
    path0 = s0 - np.minimum(-backlog, np.minimum.accumulate(s0))
    over0 = path0 > limit
    # [step, f·m + size]
    s1 = ((upper[:, None] - g.cap1) * dt).cumsum(axis=0)
    path1 = s1 - np.minimum(-backlog, _running_min(s1))
    over1 = path1 > limit[:, None]
    first_over = np.where(over1, g.steps, n).min(axis=0, initial=n)
    # -- the two-move plans, per group (k2, w2) -------------------------------------------
    # From k2 on, a two-move plan's backlog is the larger of its group's queue started empty
    # at k2 and ``start`` (its one-move plan's backlog at k2) plus the group's net inflow
    # since k2. So a step violates when the empty start does, or when ``start`` exceeds the
    # step's threshold: its limit less that inflow.
    arrived = np.concatenate(((0.0,), (upper * dt).cumsum()))
    # A plan is feasible when no step goes over its limit and the last ends with room: for
    # that question the last step's limit is the smaller of the two.
    strict = limit.copy()
    strict[-1] = min(limit[-1], end_limit)
    lowest, slack = _group_queues(g, arrived, strict)
    # Rounding: every backlog is a sum of at most n + 4 terms no larger than ``scale``.
    scale = backlog + dt * n * (max(u_hi, -u_lo) + max(c_cur, c_band.max(initial=0.0)))
    eps = _ROUNDING * (n + 4) * (scale + float(np.abs(limit).max()) + abs(end_limit))
    # Per group, the largest start that keeps every step within its limit and ends with room
    # (−inf: none does; nan: rounding could decide, so its plans are judged as full rows).
    most = np.where(slack < 0, -np.inf, lowest)
    most[np.abs(slack) <= eps] = np.nan
    start = np.where(first_over[g.two_one] >= g.two_k2, path1.ravel()[g.two_start], np.inf)
    most_two = most[g.two_group]
    # -- per plan: no violating step, room at the end, a final size that sustains the load ----
    ok_one = (first_over == n) & (path1[-1] <= end_limit)
    ok_stay = not over0.any() and path0[-1] <= end_limit
    ok = np.concatenate(([ok_stay], ok_one, start <= most_two))[g.order]
    unsure = ~(np.abs(start - most_two) > eps)  # near its group's limit, or a nan group
    q = _Queue(int(cur), cap_of, upper, backlog, limit, end_limit)
    if unsure.any():
        rows = g.two[unsure]
        v, e, _ = _exact(q, g, rows)
        ok[rows] = (v == 0) & e
    end_load = float(upper[-max(1, settings.sustain_steps) :].mean())
    sustains = (g.cap_end >= end_load * settings.sustain) | g.top_end
    if not sustains.all():
        ok &= sustains[g.final_at]
    # -- the resize budget and the observed-rate floor ---------------------------------------
    K1, W1, K2, W2 = g.k1, g.w1, g.k2, g.w2
    allowed_plan = np.ones(P, dtype=bool)
    if resizes_left[:n].min() < 2:  # else every plan's one or two resizes fit
        first_ok = (n == K1) | (resizes_left[np.minimum(K1, n - 1)] >= 1)
        same_hour = hour_steps > (K2 - K1)
        second_ok = (n == K2) | (resizes_left[np.minimum(K2, n - 1)] - same_hour >= 1)
        allowed_plan &= first_ok & second_ok
    if ((c_band < floor_rate) & (cur > band)).any():
        allowed_plan &= ~((K1 == 0) & (cap_of[W1] < floor_rate) & (cur > W1))
    # A scale-up must be in force (one step ahead) when the median rises past the current
    # capacity: waiting longer would spend the SLO's slack on the forecast's timing.
    rise_at = n
    if math.isfinite(settings.rise_tolerance):
        above = (median > cap_of[cur] * (1.0 + settings.rise_tolerance)).nonzero()[0]
        rise_at = int(above[0]) if above.size else n
    if rise_at < g.latest_up:
        allowed_plan &= ~((cur < W1) & (K1 > 0) & (K1 + (math.ceil(d) + 1) > rise_at))
    # -- the choice -------------------------------------------------------------------------
    cost = g.cost
    # With whole-step resizes every term of a cost is an integer and the costs are exact;
    # otherwise costs within rounding of the least are compared again as full rows.
    exact_cost = float(d).is_integer()
    tol = 0.0 if exact_cost else 2.0 * _ROUNDING * (n + 4) * float(np.abs(cost).max())

    def cost_of(rows: np.ndarray) -> np.ndarray:
        return _exact(q, g, rows)[2]

    pick = ok & allowed_plan
    i = int(np.where(pick, cost, np.inf).argmin())
    feasible = bool(pick[i])
    counted: np.ndarray | None = None
    if feasible and not exact_cost:
        i = _first_min(cost, pick.nonzero()[0], tol, cost_of)
    elif not feasible:  # fewest violating steps: every plan's count
        start = path1.ravel()[g.two_start]
        threshold, lowest_cum = _group_steps(g, arrived, c_band * dt, limit)
        after, doubt = _tail_violations(threshold, lowest_cum, g.two_group, start, eps)
        before_k2 = over1.cumsum(axis=0).ravel()[g.two_start]
        parts = ([over0.sum()], over1.sum(axis=0), before_k2 + after)
        violating = counted = np.concatenate(parts)[g.order]
        if doubt.any():
            rows = g.two[doubt]
            violating[rows] = _exact(q, g, rows)[0]

        def score_of(rows: np.ndarray) -> np.ndarray:
            out: np.ndarray = violating[rows] * 1e12 + cost_of(rows)
            out[rows == 0] -= 1e-3
            return out

        score = np.where(allowed_plan, violating * 1e12 + cost, np.inf)
        score[0] = violating[0] * 1e12 + cost[0] - 1e-3  # staying wins ties
        if exact_cost:
            i = int(score.argmin())
        else:
            finite = np.isfinite(score).nonzero()[0]
            spread = 4.0 * tol + 16.0 * float(np.spacing(np.abs(score[finite]).max()))
            i = _first_min(score, finite, spread, score_of)
    if feasible and K1[i] == 0 and settings.resize_margin > 0:
        # A resize is worth its downtime only if the plan after it beats waiting by more
        # than the resize costs: else the best plan that does not resize now is kept.
        # (Against staying, not against the same resize a step later: that would wait
        # forever.)
        extra = settings.resize_margin * job.charge * max(cur, int(W1[i]))
        if pick[0] and cost[0] <= cost[i] + extra:
            i = 0
    stay_bad = not (ok[0] and allowed_plan[0])
    if stay_bad and 0 < K1[i] <= settings.up_slack_steps and W1[i] > cur and resizes_left[0] >= 1:
        # Staying fails and the plan scales up in a moment: do it now, then re-plan. (The
        # one-move plans resizing now are the first m, in band order.)
        i = int(g.one[int(band.searchsorted(W1[i]))])
    moves: list[tuple[int, int]] = []
    if K1[i] < n:
        moves.append((int(K1[i]), int(W1[i])))
    if K2[i] < n:
        moves.append((int(K2[i]), int(W2[i])))
    cost_i = float(cost[i]) if exact_cost else float(cost_of(np.array([i]))[0])
    at = int(g.order[i])  # staying, a one-move plan, or a two-move one (feasible or counted)
    if at == 0:
        violating_i = int(over0.sum())
    elif at <= over1.shape[1]:
        violating_i = int(over1[:, at - 1].sum())
    else:
        violating_i = 0 if counted is None else int(counted[i])
    before = tuple(path0[: int(K1[i])].tolist())
    return Plan(tuple(moves), cost_i, violating_i, feasible, P, before)
