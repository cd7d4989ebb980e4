"""Trace replay: one job, one policy, the arrival rates of a trace, and exact queueing.

Every policy is judged by this one model (docs/design.md, "Simulation semantics"), so its rules are
spelled out here and pinned by hand-computed tests (``tests/sim/test_sim_engine.py``):

* **Time.** Step ``t`` covers ``[t·Δ, (t+1)·Δ)`` seconds after the trace's first timestamp, with
  Δ the trace's interval. The policy decides at the start of step ``t`` and sees only the rates
  of steps ``< t`` (a read-only view; it never reaches step ``t`` or later).
* **Arrivals.** Rate ``r_t`` samples/s, spread evenly over the step (a fluid model).
* **Backlog.** A FIFO of segments ``[start, end, count]``: ``count`` samples that arrived evenly
  between ``start`` and ``end``. Serving takes the oldest samples first; taking part of a
  segment moves its start proportionally, so the arrival time of the oldest unconsumed sample
  is always exact.
* **Serving.** A step is cut at the end of a resize into at most two pieces of constant arrival
  rate ``r`` and service rate ``c`` (0 while resizing, ``f(w)`` otherwise). Over a piece of
  length ``L`` that starts with backlog ``B`` the job serves exactly ``min(c·L, B + r·L)``:
  if ``c ≤ r`` the server never idles (``c·L``); if ``c > r`` the queue drains at ``c − r`` and,
  once empty, the server follows the arrivals, so it serves everything present
  (``B + r·L``) unless ``c·L`` runs out first. It never serves a sample before its arrival.
  The piece's arrivals are appended to the FIFO and the served amount is taken from its front.
* **Delay** of step ``t``: ``(t+1)·Δ − arrival time of the oldest unconsumed sample``, 0 when
  nothing is left.
* **Resizes.** A decision that differs from the current size (after clamping to
  ``[min_workers, max_workers]``) starts a resize at the start of the step; for ``rescale_s``
  seconds the job serves nothing, across step boundaries, and the new size serves from the
  moment it ends (possibly mid-step). While a resize is in progress the policy is still called
  (it may keep state; it sees ``resizing=True`` and ``workers`` = the size being resized to)
  but its decision is ignored. ``rescale_s = 0`` resizes instantly (counted, no downtime).
  Only ``Decision.workers`` is used: p is always ``ceil(w / ratio)``, which the capacity
  table assumes.
* **GPU-hours** are pro-rated within a step: ``gpus_per_worker × workers held × seconds``, where
  a job holds ``max(old, new)`` workers for the part of the step inside a resize and the new
  size after it. PS pods are not counted (they run on CPUs).
* **Start.** The simulation starts at the end of the warm-up: the warm-up's rates are history
  every policy may see; metrics cover only the steps after it. The job starts with no backlog.
  The first observation reports ``workers = w0``, the smallest size that served the last
  warm-up step (``min_workers`` without a warm-up), and ``processed_rate`` = that step's rate (a
  job in steady state); the policy's first decision is placed instantly, without downtime.
  With ``initial_workers`` the job is already running at that size instead, and the first
  decision is an ordinary one (a resize if it differs): what a controller taking over a
  running job faces.

The per-step loop runs on plain Python floats; the FIFO rarely holds more than a few segments.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autoscaler.policy.types import JobSizing, Observation, Policy

_EPS = 1e-9
"""Relative tolerance below which a backlog counts as fully served (float noise)."""

Progress = Callable[[int], None]


@dataclass
class SimResult:
    """A finished run: per-step series over the evaluation window and the totals."""

    name: str
    interval_s: float
    start_step: int
    """Index (in the full trace) of the first evaluated step."""
    slo_s: float
    gpus_per_worker: int
    arrivals: np.ndarray
    """Arrival rate (samples/s) per evaluated step."""
    workers: np.ndarray
    """Workers held, time-averaged over the step (``max(old, new)`` while resizing)."""
    target: np.ndarray
    """Size in effect (or being resized to) at the end of the step."""
    capacity: np.ndarray
    """Samples/s the job could serve, averaged over the step (0 while resizing)."""
    served: np.ndarray
    """Samples/s actually served, averaged over the step."""
    backlog: np.ndarray
    """Unconsumed samples at the end of the step."""
    delay: np.ndarray
    """Age (s) of the oldest unconsumed sample at the end of the step."""
    gpus: np.ndarray
    """Most GPUs held at any moment of the step (the quota check uses it)."""
    downtime_s: float
    rescale_count: int
    gpu_hours: float
    events: list[tuple[int, int, int]] = field(default_factory=list)
    """Resizes as ``(step, old workers, new workers)``; the initial placement is not one."""
    elapsed_s: float = 0.0
    behavior: list[tuple[int, str, str]] = field(default_factory=list)
    """``(step, knob, what)`` each time a job's fallback, stabilization window or schedule
    started acting (:class:`~autoscaler.policy.behavior.BehavedPolicy`)."""

    @property
    def steps(self) -> int:
        return len(self.delay)

    def metrics(self) -> dict[str, float]:
        """The per-policy numbers of ``kale simulate --json`` (delays in minutes)."""
        d = self.delay
        n = len(d)
        return {
            "slo_violation_rate": float(np.count_nonzero(d > self.slo_s) / n) if n else 0.0,
            "cumulative_delay_min": float(d.sum() / 60.0),
            "downtime_min": self.downtime_s / 60.0,
            "rescale_count": self.rescale_count,
            "rescales_per_day": self.rescale_count / (n * self.interval_s / 86400.0) if n else 0.0,
            "gpu_hours": self.gpu_hours,
            "mean_workers": float(self.workers.mean()) if n else 0.0,
            "max_delay_min": float(d.max() / 60.0) if n else 0.0,
            "p99_delay_min": float(np.percentile(d, 99) / 60.0) if n else 0.0,
        }


class JobRun:
    """The state of one job being replayed; step it with observe → apply → serve.

    Split into three calls so the multi-job simulator can ask a resource manager between the
    policy's wish and the resize (see :mod:`autoscaler.sim.multi`).
    """

    def __init__(
        self,
        sizing: JobSizing,
        arrivals: Any,
        *,
        warmup_steps: int = 0,
        initial_workers: int | None = None,
        blind: Any = None,
    ) -> None:
        rates = np.array(arrivals, dtype=float)
        if rates.ndim != 1:
            raise ValueError("arrivals must be a 1-D series of rates")
        if not 0 <= warmup_steps < len(rates):
            raise ValueError("the warm-up must leave at least one step to evaluate")
        if np.any(~np.isfinite(rates)) or np.any(rates < 0):
            raise ValueError("arrival rates must be finite and non-negative")
        rates.setflags(write=False)
        self._blind = frozenset(int(t) for t in blind) if blind is not None else frozenset()
        """Steps whose decision is made without metrics (a simulated metrics outage)."""
        self.sizing = sizing
        self._rates = rates
        self._rate = rates.tolist()
        self._cap = sizing.capacity.tolist()
        self.dt = float(sizing.interval_s)
        self.rescale_s = float(sizing.rescale_s)
        self._gpw = sizing.gpus_per_worker
        self.start = warmup_steps
        self.t = warmup_steps
        self.n = len(rates)
        prev = self._rate[warmup_steps - 1] if warmup_steps else 0.0
        self.workers = sizing.workers_for(prev)[0] if warmup_steps else sizing.min_workers
        if initial_workers is not None:
            self.workers = self.clamp(initial_workers)
        self._old = self.workers
        self._resize_end = -math.inf
        self._placed = initial_workers is not None
        self._fifo: deque[list[float]] = deque()
        self._total = 0.0
        self._served_acc = 0.0
        self._last_served = prev * self.dt
        self.downtime_s = 0.0
        self.rescales = 0
        self.gpu_s = 0.0
        self.events: list[tuple[int, int, int]] = []
        self._rec: dict[str, list[float]] = {
            k: [] for k in ("workers", "target", "capacity", "served", "backlog", "delay", "gpus")
        }

    # -- the three calls of a step ---------------------------------------------------------

    @property
    def done(self) -> bool:
        return self.t >= self.n

    def observe(self) -> Observation:
        """What a policy may know at the start of the current step (only the past)."""
        t0 = self.t * self.dt
        fifo = self._fifo
        remaining = self._resize_end - t0
        return Observation(
            step=self.t,
            time_s=t0,
            arrivals=self._rates[: self.t],
            workers=self.workers,
            ps=self.sizing.ps_for(self.workers),
            backlog=self._total,
            oldest_age_s=t0 - fifo[0][0] if fifo else 0.0,
            processed_rate=self._last_served / self.dt,
            resizing=remaining > 0,
            resize_remaining_s=remaining if remaining > 0 else 0.0,
            metrics_missing=self.t in self._blind,
        )

    @property
    def resizing(self) -> bool:
        return self._resize_end > self.t * self.dt

    def held_workers(self) -> int:
        """Workers held right now: ``max(old, new)`` during a resize."""
        return max(self._old, self.workers) if self.resizing else self.workers

    def clamp(self, workers: int) -> int:
        s = self.sizing
        return min(max(int(workers), s.min_workers), s.max_workers)

    def apply(self, workers: int) -> bool:
        """Act on a decision at the start of the current step; True if a resize started.

        The first call places the job instantly (no resize, no downtime). Later calls are
        ignored while a resize is in progress.
        """
        w = self.clamp(workers)
        if not self._placed:
            self._placed = True
            self.workers = self._old = w
            return False
        if self.resizing or w == self.workers:
            return False
        t0 = self.t * self.dt
        self._old = self.workers
        self.workers = w
        self._resize_end = t0 + self.rescale_s
        self.rescales += 1
        self.events.append((self.t, self._old, w))
        return True

    def serve(self) -> None:
        """Run the current step: arrivals in, FIFO service, delay and GPU accounting."""
        dt = self.dt
        t0 = self.t * dt
        t1 = t0 + dt
        r = self._rate[self.t]
        w = self.workers
        c = self._cap[w]
        self._served_acc = 0.0
        if self._resize_end > t0:
            mid = self._resize_end if self._resize_end < t1 else t1
            held = max(self._old, w)
            self._piece(t0, mid, r, 0.0)
            up = t1 - mid
            if up > 0:
                self._piece(mid, t1, r, c)
            down = mid - t0
            self.downtime_s += down
            worker_s = held * down + w * up
            gpus = held * self._gpw
        else:
            self._piece(t0, t1, r, c)
            up = dt
            worker_s = w * dt
            gpus = w * self._gpw
        served = self._served_acc
        self._last_served = served
        self.gpu_s += worker_s * self._gpw
        fifo = self._fifo
        rec = self._rec
        rec["workers"].append(worker_s / dt)
        rec["target"].append(w)
        rec["capacity"].append(c * up / dt)
        rec["served"].append(served / dt)
        rec["backlog"].append(self._total)
        rec["delay"].append(t1 - fifo[0][0] if fifo else 0.0)
        rec["gpus"].append(gpus)
        self.t += 1

    # -- queueing --------------------------------------------------------------------------

    def _piece(self, s: float, e: float, r: float, c: float) -> None:
        """Arrivals at rate r and service at rate c over [s, e): serve min(c·L, B + r·L)."""
        length = e - s
        fifo = self._fifo
        if r > 0:
            count = r * length
            last = fifo[-1] if fifo else None
            if (
                last is not None
                and abs(last[1] - s) <= 1e-9 * (1.0 + abs(s))
                and abs(last[2] - r * (last[1] - last[0])) <= 1e-12 * last[2]
            ):
                last[1] = e
                last[2] += count
            else:
                fifo.append([s, e, count])
            self._total += count
        if c <= 0 or self._total <= 0:
            return
        amount = c * length
        if amount >= self._total * (1.0 - _EPS):
            self._served_acc += self._total
            fifo.clear()
            self._total = 0.0
            return
        self._served_acc += amount
        self._total -= amount
        while amount > 0 and fifo:
            seg = fifo[0]
            if seg[2] <= amount:
                amount -= seg[2]
                fifo.popleft()
            else:
                seg[0] += (seg[1] - seg[0]) * (amount / seg[2])
                seg[2] -= amount
                amount = 0.0
        if not fifo or self._total <= _EPS * max(1.0, c * length):
            fifo.clear()
            self._total = 0.0

    # -- results ---------------------------------------------------------------------------

    def result(self, name: str, elapsed_s: float = 0.0) -> SimResult:
        rec = {k: np.asarray(v, dtype=float) for k, v in self._rec.items()}
        return SimResult(
            name=name,
            interval_s=self.dt,
            start_step=self.start,
            slo_s=float(self.sizing.slo_s),
            gpus_per_worker=self._gpw,
            arrivals=np.array(self._rates[self.start : self.t]),
            workers=rec["workers"],
            target=rec["target"].astype(int),
            capacity=rec["capacity"],
            served=rec["served"],
            backlog=rec["backlog"],
            delay=rec["delay"],
            gpus=rec["gpus"],
            downtime_s=self.downtime_s,
            rescale_count=self.rescales,
            gpu_hours=self.gpu_s / 3600.0,
            events=list(self.events),
            elapsed_s=elapsed_s,
        )


def simulate(
    policy: Policy,
    sizing: JobSizing,
    arrivals: Any,
    *,
    warmup_steps: int = 0,
    initial_workers: int | None = None,
    state: dict[str, Any] | None = None,
    progress: Progress | None = None,
    name: str | None = None,
    blind: Any = None,
) -> SimResult:
    """Replay ``arrivals`` (rates per step, warm-up included) against one policy.

    ``blind``: steps (indices into ``arrivals``) whose decision is made without metrics —
    the policy must then be a :class:`~autoscaler.policy.behavior.BehavedPolicy`, which
    holds or falls back without asking the planner.
    """
    began = time.perf_counter()
    run = JobRun(
        sizing, arrivals, warmup_steps=warmup_steps, initial_workers=initial_workers, blind=blind
    )
    state = {} if state is None else state
    decide = policy.decide
    tick = 0
    while not run.done:
        run.apply(decide(run.observe(), state).workers)
        run.serve()
        tick += 1
        if progress is not None and tick == 1024:
            progress(tick)
            tick = 0
    if progress is not None and tick:
        progress(tick)
    result = run.result(name or policy.name, time.perf_counter() - began)
    result.behavior = list(getattr(policy, "applied", None) or ())
    return result


def lower_bound_gpu_hours(sizing: JobSizing, arrivals: Any) -> float:
    """GPU-hours of the smallest w with f(w) > each step's rate (the peak when saturated).

    Free, instant resizes and no backlog: the per-step sizing reference of docs/design.md.
    """
    rates = np.asarray(arrivals, dtype=float)
    workers = sum(sizing.workers_for(float(r))[0] for r in rates)
    return workers * sizing.gpus_per_worker * sizing.interval_s / 3600.0


def lower_bound_workers(sizing: JobSizing, arrivals: Any) -> np.ndarray:
    """The lower bound's worker count per step (for plots)."""
    return np.array([sizing.workers_for(float(r))[0] for r in np.asarray(arrivals, float)])
