"""``optimal``: the cheapest perfect-foresight schedule within a violations budget, and a bound.

What every other policy's GPU-hours are measured against (``regret``). The problem, under the
simulator's own semantics (:mod:`autoscaler.sim.engine`): choose, knowing every arrival, the
size of each step and when to resize — each resize serving nothing for the rescale duration
and holding ``max(old, new)`` — so that GPU-hours are least while at most ``budget`` of the
evaluated steps end with a delay above the SLO.

**Method.** A Lagrangian relaxation of the budget (each violating step costs λ GPU-seconds)
turns it into a shortest path over (step, size, backlog), solved forward in time by dynamic
programming; λ is searched by bisection on the true violations of each schedule, replayed
through the engine. The backlog is a continuous state: it is kept *exactly* on labels, one per
(size, backlog cell), the cells being ages of the oldest sample (``age_cells`` of them up to
``max_age_slo`` × SLO). A cell keeps its cheapest label; others are dropped, so the schedule
found is a real, exactly evaluated one — possibly not the cheapest (dropping restricts).

**Lower bound.** The same recursion, but each cell keeps the *least cost and the least
backlog* of the labels that reach it, from whichever labels they came, and backlogs past the
last cell are clipped to its edge. Every real trajectory is then dominated by a kept label
(the dynamics are monotone in the backlog, costs are additive), so that relaxed problem's
optimum is at most the real one; by weak duality, ``V_relaxed(λ) − λ·budget`` is a lower bound
on the cheapest schedule within the budget, for every λ ≥ 0. The bound reported is the best
of the λ tried. Sizes whose throughput a smaller size already reaches are left out of both:
they are dominated (more GPUs for no more capacity).

A resize that would not finish before the trace ends is never taken: it costs at least the
GPUs of staying and serves less.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autoscaler.policy.types import Decision, JobSizing, Observation
from autoscaler.sim.engine import SimResult, simulate

INF = math.inf

OptimalProgress = Callable[[int, int], None]
"""Hears ``(solved, total)`` recursions while the optimum is computed."""


@dataclass(frozen=True)
class OptimalSettings:
    """Tunables of the offline optimum (by default 1 % of the steps may violate the SLO)."""

    violation_budget: float = 0.01
    """Share of evaluated steps allowed to end above the SLO."""
    cell_steps: float = 0.5
    """Labels of one size whose backlogs differ by less than this many steps of that size's
    service are merged (see the module docstring: the error does not accumulate)."""
    max_age_slo: float = 2.0
    """Ages past this many SLOs are not kept (the bound clips them to it)."""
    max_labels: int = 64
    """Labels kept per size (the Pareto front is thinned past this)."""
    search_steps: int = 7
    """Bisection steps on λ."""


@dataclass
class OptimalResult:
    """The schedule, its replay by the engine, and the lower bound beside it."""

    schedule: np.ndarray
    """Size in force (or being resized to) during each evaluated step."""
    result: SimResult
    lower_bound_gpu_hours: float
    lam: float
    """λ (GPU-seconds per violating step) of the schedule kept."""
    budget_steps: int
    tried: list[dict[str, float]] = field(default_factory=list)
    """Every λ tried: its schedule's GPU-hours and violating steps, and its bound."""
    elapsed_s: float = 0.0

    def metrics(self) -> dict[str, Any]:
        m: dict[str, Any] = dict(self.result.metrics())
        m["lower_bound_gpu_hours"] = self.lower_bound_gpu_hours
        m["bound_gap"] = (
            m["gpu_hours"] / self.lower_bound_gpu_hours - 1.0
            if self.lower_bound_gpu_hours > 0
            else None
        )
        m["violation_budget_steps"] = self.budget_steps
        m["lambda_gpu_s"] = self.lam
        m["elapsed_s"] = self.elapsed_s
        return m


class ScheduledPolicy:
    """Replays a fixed schedule (what the optimum decided, step by step)."""

    def __init__(
        self, sizing: JobSizing, schedule: np.ndarray, first_step: int, name: str = "optimal"
    ) -> None:
        self.sizing = sizing
        self.schedule = np.asarray(schedule, dtype=int)
        self.first_step = first_step
        self.name = name

    def decide(self, obs: Observation, state: dict[str, Any]) -> Decision:
        i = min(max(obs.step - self.first_step, 0), len(self.schedule) - 1)
        w = int(self.schedule[i])
        return Decision(w, self.sizing.ps_for(w), {"action": "scheduled"})


class _Problem:
    """Everything the recursion needs, precomputed once per trace."""

    def __init__(
        self,
        sizing: JobSizing,
        arrivals: np.ndarray,
        warmup_steps: int,
        settings: OptimalSettings,
    ) -> None:
        dt = sizing.interval_s
        rates = np.asarray(arrivals, dtype=float)
        self.dt = dt
        self.warm = warmup_steps
        self.T = len(rates) - warmup_steps
        self.rates = rates[warmup_steps:]
        self.gpw = sizing.gpus_per_worker
        cap = sizing.capacity
        sizes, best = [], -INF
        for w in range(sizing.min_workers, sizing.peak_workers + 1):
            if cap[w] > best:
                sizes.append(w)
                best = cap[w]
        self.sizes = np.array(sizes, dtype=float)
        self.cap = cap[np.array(sizes)]
        self.W = len(sizes)
        self.rescale_s = sizing.rescale_s
        self.m = math.ceil(sizing.rescale_s / dt - 1e-9) if sizing.rescale_s > 0 else 0
        self.up_last = self.m * dt - sizing.rescale_s if self.m else 0.0
        cum = np.concatenate([[0.0], np.cumsum(rates * dt)])
        pos = np.arange(len(cum), dtype=float)
        ends = warmup_steps + 1 + np.arange(self.T, dtype=float)  # end of each evaluated step
        c_end = cum[warmup_steps + 1 :]

        def before(x: np.ndarray) -> np.ndarray:
            out: np.ndarray = c_end - np.interp(x, pos, cum, left=0.0)
            return out

        self.cum = cum
        self.cum_eval = np.ascontiguousarray(cum[warmup_steps:])
        """Samples arrived before each evaluated step (index T: the end of the last one)."""
        self.labels = settings.max_labels
        # Net inflow per size, accumulated: a label staying at size i keeps backlog − X[i, t]
        # (until the queue empties), so cells of that quantity never mix staying labels.
        inflow = (self.rates[None, :] - self.cap[:, None]) * dt
        self.X = np.ascontiguousarray(np.cumsum(inflow, axis=1))
        self.cell_width = np.maximum(settings.cell_steps * self.cap * dt, 1e-9)
        self.allowed = before(ends - sizing.slo_s / dt)
        """Backlog at the end of each step beyond which its delay exceeds the SLO."""
        self.too_old = before(ends - settings.max_age_slo * sizing.slo_s / dt)
        """Backlog past the ages kept (dropped by the schedule search, clipped by the bound)."""

    def arrived(self, t0: int, t1: int) -> float:
        """Samples arriving from the start of evaluated step t0 to the end of step t1 − 1."""
        return float(self.cum[self.warm + t1] - self.cum[self.warm + t0])


def _solve(p: _Problem, lam: float, *, relaxed: bool) -> tuple[float, np.ndarray | None, int]:
    """The least Lagrangian cost at ``lam``, the schedule (not ``relaxed``) and the violating
    steps of the best label."""
    from autoscaler.sim.optimal_dp import solve

    best, bi, bq, back, res, offsets, viol = solve(
        p.rates,
        p.cap,
        p.sizes,
        p.X,
        p.cell_width,
        p.allowed,
        p.too_old,
        p.cum_eval,
        p.m,
        p.up_last,
        p.dt,
        float(p.gpw),
        p.rescale_s,
        float(lam),
        relaxed,
        p.labels,
        not relaxed,
    )
    if relaxed or not math.isfinite(best):
        return float(best), None, int(viol)
    return float(best), _recover(p, back, res, offsets, int(bi), int(bq)), int(viol)


def _recover(
    p: _Problem, back: np.ndarray, res: np.ndarray, offsets: np.ndarray, i: int, q: int
) -> np.ndarray:
    """Follow the back pointers from the cheapest final label to the size of every step."""
    schedule = np.zeros(p.T, dtype=int)
    t, L, W = p.T - 1, p.labels, p.W
    while t >= 0:
        w = int(p.sizes[i])
        at = int(offsets[t * W + i]) + q
        code, resized = int(back[at]), bool(res[at])
        if resized and p.m:
            schedule[max(0, t - p.m + 1) : t + 1] = w
            t -= p.m
        else:
            schedule[t] = w
            t -= 1
        i, q = divmod(code, L)
    return schedule


def optimal(
    sizing: JobSizing,
    arrivals: Any,
    *,
    warmup_steps: int,
    settings: OptimalSettings | None = None,
    on_progress: OptimalProgress | None = None,
) -> OptimalResult:
    """The cheapest schedule within the budget (replayed by the engine) and its lower bound.

    ``on_progress(done, total)`` hears of every recursion solved (a run takes seconds).
    """
    began = time.perf_counter()
    s = settings or OptimalSettings()
    rates = np.asarray(arrivals, dtype=float)
    p = _Problem(sizing, rates, warmup_steps, s)
    budget = math.floor(s.violation_budget * p.T + 1e-9)

    def run(lam: float) -> tuple[SimResult, np.ndarray, int]:
        _, schedule, _ = _solve(p, lam, relaxed=False)
        assert schedule is not None
        policy = ScheduledPolicy(sizing, schedule, warmup_steps)
        res = simulate(policy, sizing, rates, warmup_steps=warmup_steps, name="optimal")
        return res, schedule, int(np.count_nonzero(res.delay > sizing.slo_s))

    # λ brackets: from "a violating step costs a fraction of a worker-step" to "more than
    # holding the peak size for a whole SLO".
    unit = float(p.gpw * p.dt)
    mid = float(np.median(p.sizes))
    lo0 = math.log(0.2 * unit)
    hi0 = math.log(unit * mid * max(4.0, 2 * sizing.slo_s / p.dt))
    done = [0]
    total = 2 * s.search_steps
    lock = threading.Lock()

    def solved() -> None:  # called from both searches' threads
        with lock:
            done[0] += 1
            if on_progress is not None:
                on_progress(done[0], total)

    def lower_bound() -> tuple[float, list[dict[str, float]]]:
        # max over λ of V_relaxed(λ) − λ·budget, a concave function whose slope is
        # (violations of the relaxed optimum − budget): bisect on that sign.
        bound, tried = 0.0, []
        lo, hi = lo0, hi0
        for _ in range(s.search_steps):
            lb_lam = math.exp((lo + hi) / 2)
            value, _, viol = _solve(p, lb_lam, relaxed=True)
            solved()
            lb = (value - lb_lam * budget) / 3600.0
            tried.append(
                {"lambda": lb_lam, "lower_bound_gpu_hours": lb, "relaxed_violations": viol}
            )
            bound = max(bound, lb)
            if viol > budget:
                lo = math.log(lb_lam)
            else:
                hi = math.log(lb_lam)
        return bound, tried

    # The bound's bisection is independent of the schedule's: the compiled recursion releases
    # the GIL, so it runs on a second core meanwhile.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="kale-optimal-bound") as pool:
        bound_search = pool.submit(lower_bound)
        tried: list[dict[str, float]] = []
        best: tuple[SimResult, np.ndarray, float] | None = None
        fewest: tuple[int, SimResult, np.ndarray, float] | None = None
        lo, hi = lo0, hi0
        for step in range(s.search_steps):
            lam = math.exp(hi if step == 0 else (lo + hi) / 2)
            res, schedule, viol = run(lam)
            solved()
            tried.append({"lambda": lam, "gpu_hours": res.gpu_hours, "violations": viol})
            if fewest is None or viol < fewest[0]:
                fewest = (viol, res, schedule, lam)
            if viol <= budget:
                if best is None or res.gpu_hours < best[0].gpu_hours:
                    best = (res, schedule, lam)
                hi = math.log(lam)
            else:
                lo = math.log(lam)
        bound, bound_tried = bound_search.result()
    tried += bound_tried
    if best is None:  # even the largest λ misses the budget: the fewest violations found
        assert fewest is not None
        _, res, schedule, lam = fewest
    else:
        res, schedule, lam = best
    res.elapsed_s = time.perf_counter() - began
    return OptimalResult(
        schedule=schedule,
        result=res,
        lower_bound_gpu_hours=bound,
        lam=lam,
        budget_steps=budget,
        tried=tried,
        elapsed_s=res.elapsed_s,
    )
