"""The timed simulator: jobs arrive, queue, start, run, fail, restart and leave.

Unlike RLScheduler's reference rules (:mod:`placement.queue.rlscheduler`), this event loop
re-decides at every event: after all events at an instant (job ends, repairs, failures,
re-queued jobs, arrivals) it orders the whole queue by the policy and starts jobs in that
order while they fit; the first that does not is the head. With ``backfill`` the head gets an
EASY reservation, recomputed at every event from the running jobs' estimated ends (the
earliest of them after which the pool says the head fits), and later jobs start now if they
fit and either end by the reservation (by their estimate) or leave the head still fitting at
it. The pool decides where a job goes (all-or-nothing for gangs), so the same loop runs an
SWF log on processors and an openb trace on GPU nodes with any node policy.

Faults (:mod:`placement.faults`): a failed unit kills the jobs on it; each keeps its work
up to the last checkpoint and re-enters the queue after the restart delay with the rest of
its run. The run ends when every job has finished (or could never fit the empty pool).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from placement.faults import FaultClock, FaultModel
from placement.pool import ProcessorPool, ResourcePool
from placement.queue.base import MachineView, QueuePolicy, QueueView, order
from placement.queue.rlscheduler import ScheduleRun
from placement.workloads.batch import BatchJobs, nodes_needed


@dataclass
class TimedRun:
    """Per-job outcomes and the run's timeline."""

    jobs: BatchJobs
    first_start_s: np.ndarray
    """When each job first started (NaN: never)."""
    end_s: np.ndarray
    """When each job finished (NaN: never)."""
    wait_s: np.ndarray
    """Time each job spent queued, summed over its restarts."""
    restarts: np.ndarray
    lost_unit_hours: float
    """Work thrown away by failures (since the last checkpoint) × units held, in hours."""
    failed: np.ndarray
    """Jobs that could not fit even the empty, healthy pool."""
    failures: int
    """Unit failures during the run (idle units included)."""
    usage_mean: dict[str, float]
    """Time-average share of each resource in use, first submit to last end."""
    last_start_s: float
    timeline: dict[str, list[float]] = field(default_factory=dict)
    kills: list[tuple[int, int, float]] = field(default_factory=list)
    """Every killed run segment: (job, its epoch = how many times it was killed before,
    unit-hours lost), for agents that credit a loss to the placement that caused it."""
    """``t_s``, ``queue`` and every usage key at each event (when recorded)."""


class _Engine:
    def __init__(
        self,
        jobs: BatchJobs,
        pool: ResourcePool,
        policy: QueuePolicy,
        *,
        backfill: bool,
        units_held: np.ndarray,
        faults: FaultModel | None,
        seed: int,
        record: bool,
    ) -> None:
        n = len(jobs)
        self.jobs, self.pool, self.policy, self.backfill = jobs, pool, policy, backfill
        self.units_held = units_held
        units = getattr(pool, "processors", None) or len(getattr(pool, "unit_names", ()))
        self.capacity = float(units or np.sum(jobs.size))
        self.remaining = jobs.run_s.astype(np.float64).copy()
        self.est_left = jobs.estimate_s.astype(np.float64).copy()
        self.first_start = np.full(n, np.nan)
        self.end = np.full(n, np.nan)
        self.wait = np.zeros(n)
        self.queued_since = np.full(n, np.nan)
        self.seg_start = np.full(n, np.nan)
        self.epoch = np.zeros(n, dtype=np.int64)
        self.restarts = np.zeros(n, dtype=np.int64)
        self.failed = np.zeros(n, dtype=bool)
        self.arrivals = np.argsort(jobs.submit_s, kind="stable").tolist()
        self.next_arrival = 0
        self.queue: list[int] = []
        self.running: set[int] = set()
        self.ends: list[tuple[float, int, int]] = []  # (time, epoch, job)
        self.requeues: list[tuple[float, int]] = []
        self.repairs: list[tuple[float, int]] = []
        self.faults = faults
        first = float(np.min(jobs.submit_s)) if n else 0.0
        history = faults.settings.history_s if faults else 0.0
        self.clock = FaultClock(faults, start_s=first - history, seed=seed) if faults else None
        self.down: set[int] = set()
        self.note_fault = getattr(pool, "note_fault", None)
        """Optional pool hook ``note_fault(unit, time_s)``: a failure from before the run (a
        failure during the run reaches the pool as ``set_down``)."""
        self.note_time = getattr(pool, "note_time", None)
        """Optional pool hook ``note_time(now)``: the clock, before a failure and before each
        scheduling pass (fault-aware policies count failures over a window)."""
        self.start_delay = getattr(pool, "start_delay_s", None)
        """Optional pool hook ``start_delay_s(job)``: seconds a (re)started job spends before
        its work proceeds (loading its data, ``placement.locality``)."""
        self.seg_delay = np.zeros(n)
        self.lost = 0.0
        self.kills: list[tuple[int, int, float]] = []
        self.failures = 0
        self.finished = 0
        self.last_start = math.nan
        self.record = record
        self.timeline: dict[str, list[float]] = {"t_s": [], "queue": []}
        if self.clock is not None and history > 0:
            self.replay_history(first)

    def replay_history(self, first: float) -> None:
        """Failures before the first submit: observed by the pool, repaired on schedule."""
        assert self.clock is not None and self.faults is not None
        while self.clock.peek() < first:
            time_s, unit = self.clock.pop()
            if self.note_time is not None:
                self.note_time(time_s)
            back = time_s + self.faults.settings.repair_s
            if back > first and unit not in self.down:  # still under repair at the start
                self.down.add(unit)
                heapq.heappush(self.repairs, (back, unit))
                self.pool.set_down(unit, True)
            elif self.note_fault is not None:
                self.note_fault(unit, time_s)

    # --- events -------------------------------------------------------------------------
    def work_left(self) -> bool:
        return self.finished + int(self.failed.sum()) < len(self.jobs)

    def next_time(self) -> float:
        times = [math.inf]
        if self.next_arrival < len(self.arrivals):
            times.append(float(self.jobs.submit_s[self.arrivals[self.next_arrival]]))
        for heap in (self.ends, self.requeues, self.repairs):
            if heap:
                times.append(heap[0][0])
        if self.clock is not None and self.work_left():
            times.append(self.clock.peek())
        return min(times)

    def process(self, now: float) -> None:
        """Every event at ``now``: ends, repairs, failures, re-queues, arrivals, in that order."""
        busy = True
        while busy:
            busy = False
            while self.ends and self.ends[0][0] <= now:
                _, epoch, job = heapq.heappop(self.ends)
                if epoch == self.epoch[job]:
                    self.pool.stop(job)
                    self.running.discard(job)
                    self.end[job] = now
                    self.finished += 1
                busy = True
            while self.repairs and self.repairs[0][0] <= now:
                unit = heapq.heappop(self.repairs)[1]
                self.down.discard(unit)
                self.pool.set_down(unit, False)
                busy = True
            while self.clock is not None and self.work_left() and self.clock.peek() <= now:
                self.fail(*self.clock.pop())
                busy = True
            while self.requeues and self.requeues[0][0] <= now:
                job = heapq.heappop(self.requeues)[1]
                self.queue.append(job)
                self.queued_since[job] = now
                busy = True
            while self.next_arrival < len(self.arrivals):
                job = self.arrivals[self.next_arrival]
                if self.jobs.submit_s[job] > now:
                    break
                self.next_arrival += 1
                if self.pool.ever_fits(job):
                    self.queue.append(job)
                    self.queued_since[job] = now
                else:
                    self.failed[job] = True
                busy = True

    def fail(self, now: float, unit: int) -> None:
        assert self.faults is not None
        if unit in self.down:
            return  # a scripted failure of a unit already under repair
        settings = self.faults.settings
        self.failures += 1
        if self.note_time is not None:
            self.note_time(now)
        self.down.add(unit)
        heapq.heappush(self.repairs, (now + settings.repair_s, unit))
        for job in self.pool.jobs_on(unit):
            elapsed = max(now - self.seg_start[job] - self.seg_delay[job], 0.0)
            saved = 0.0  # checkpoint_s = inf: the job never checkpoints
            if math.isfinite(settings.checkpoint_s):
                saved = math.floor(elapsed / settings.checkpoint_s) * settings.checkpoint_s
            lost = (elapsed - saved) * float(self.units_held[job]) / 3600.0
            self.lost += lost
            self.kills.append((job, int(self.epoch[job]), lost))
            self.remaining[job] -= saved
            self.est_left[job] = max(self.est_left[job] - saved, 0.0)
            self.pool.stop(job)
            self.running.discard(job)
            self.epoch[job] += 1
            self.restarts[job] += 1
            heapq.heappush(self.requeues, (now + settings.restart_s, job))
        self.pool.set_down(unit, True)  # after its jobs have let go of it

    # --- scheduling ---------------------------------------------------------------------
    def start(self, job: int, now: float) -> None:
        self.wait[job] += now - self.queued_since[job]
        if np.isnan(self.first_start[job]):
            self.first_start[job] = now
        self.seg_start[job] = now
        self.last_start = now
        self.running.add(job)
        self.seg_delay[job] = float(self.start_delay(job)) if self.start_delay is not None else 0.0
        end = now + self.seg_delay[job] + float(self.remaining[job])
        heapq.heappush(self.ends, (end, int(self.epoch[job]), job))

    def schedule(self, now: float) -> None:
        if not self.queue:
            return
        if self.note_time is not None:
            self.note_time(now)
        q = np.asarray(self.queue, dtype=np.int64)
        view = QueueView(
            self.jobs.submit_s[q], self.est_left[q], self.jobs.size[q], now, self.machine()
        )
        ranked = q[order(self.policy, view)].tolist()
        started: set[int] = set()
        position = 0
        while position < len(ranked) and self.pool.try_start(ranked[position]):
            self.start(ranked[position], now)
            started.add(ranked[position])
            position += 1
        if self.backfill and position < len(ranked) - 1:
            started |= self.backfill_around(ranked[position], ranked[position + 1 :], now)
        if started:
            self.queue = [j for j in self.queue if j not in started]

    def machine(self) -> MachineView:
        """The pool as a learned queue policy sees it: interchangeable units (processors or
        GPUs), the running jobs' estimated ends and sizes (``placement.agents``)."""
        ids = np.asarray(sorted(self.running), dtype=np.int64)
        sizes = self.jobs.size[ids].astype(np.float64)
        free = max(self.capacity - float(sizes.sum()) - len(self.down), 0.0)
        ends = self.seg_start[ids] + self.seg_delay[ids] + self.est_left[ids]
        return MachineView(self.capacity, free, ends, sizes)

    def reservation(self, head: int, now: float) -> tuple[float, list[int]]:
        """The head's shadow time and the running jobs expected to have ended by then."""
        ids = sorted(self.running)
        ends = np.maximum(self.seg_start[ids] + self.seg_delay[ids] + self.est_left[ids], now)
        by_end = np.argsort(ends, kind="stable")
        ids_sorted = [ids[i] for i in by_end]
        count = self.pool.fits_after_prefix(head, ids_sorted) if ids_sorted else None
        if count is None:
            return math.inf, ids_sorted
        shadow = float(ends[by_end[count - 1]])
        return shadow, [ids[i] for i in by_end if ends[i] <= shadow]

    def backfill_around(self, head: int, candidates: list[int], now: float) -> set[int]:
        shadow, released = self.reservation(head, now)
        cands = np.asarray(candidates, dtype=np.int64)
        started: set[int] = set()
        # Within one pass free resources only shrink and placement is deterministic, so a
        # request that did not fit (or would delay the head) answers for its equals.
        no_fit: set[object] = set()
        delays: set[object] = set()
        for job in cands[self.pool.fit_mask(cands)].tolist():
            kind = self.pool.kind(job)
            short = now + self.est_left[job] <= shadow
            if kind in no_fit or (not short and kind in delays):
                continue
            if not self.pool.try_start(job):
                no_fit.add(kind)
                continue
            if short:
                released.append(job)
            elif not self.pool.could_start_after(head, released):
                self.pool.stop(job)  # it would delay the head: undo
                delays.add(kind)
                continue
            self.start(job, now)
            started.add(job)
        return started

    def note(self, now: float, usage: dict[str, float]) -> None:
        if not self.record:
            return
        self.timeline["t_s"].append(now)
        self.timeline["queue"].append(float(len(self.queue)))
        for key, value in usage.items():
            self.timeline.setdefault(key, []).append(value)


def simulate_timed(
    jobs: BatchJobs,
    pool: ResourcePool,
    *,
    policy: QueuePolicy,
    backfill: bool = False,
    units_held: np.ndarray | None = None,
    faults: FaultModel | None = None,
    seed: int = 0,
    record_timeline: bool = True,
    progress: Callable[[int], None] | None = None,
) -> TimedRun:
    """Run ``jobs`` on ``pool`` until each has finished; ``units_held`` (default ``jobs.size``)
    weighs the work a failure throws away (GPUs per job for GPU pools)."""
    held = jobs.size.astype(np.float64) if units_held is None else units_held
    eng = _Engine(
        jobs,
        pool,
        policy,
        backfill=backfill,
        units_held=held,
        faults=faults,
        seed=seed,
        record=record_timeline,
    )
    integral: dict[str, float] = {}
    usage = _usage(pool)
    first = float(np.min(jobs.submit_s)) if len(jobs) else 0.0
    prev, done_before = first, 0
    while eng.work_left():
        now = eng.next_time()
        if math.isinf(now):
            break  # nothing left can happen (cannot occur while every job fits the pool)
        for key, value in usage.items():
            integral[key] = integral.get(key, 0.0) + value * (now - prev)
        eng.process(now)
        eng.schedule(now)
        usage = _usage(pool)
        eng.note(now, usage)
        prev = now
        if progress is not None and eng.finished > done_before:
            progress(eng.finished - done_before)
            done_before = eng.finished
    span = prev - first
    return TimedRun(
        jobs=jobs,
        first_start_s=eng.first_start,
        end_s=eng.end,
        wait_s=eng.wait,
        restarts=eng.restarts,
        lost_unit_hours=float(eng.lost),
        failed=eng.failed,
        failures=eng.failures,
        usage_mean={k: (v / span if span > 0 else math.nan) for k, v in integral.items()},
        last_start_s=eng.last_start,
        timeline=eng.timeline,
        kills=eng.kills,
    )


def _usage(pool: ResourcePool) -> dict[str, float]:
    """The pool's usage shares, plus ``frag`` where the pool measures fragmentation."""
    usage = pool.usage()
    measure = getattr(pool, "fragmentation", None)
    frag = measure() if measure is not None else None
    return usage if frag is None else {**usage, "frag": frag}


def simulate_batch(
    jobs: BatchJobs,
    *,
    processors: int,
    policy: QueuePolicy,
    backfill: bool,
    nodes: int | None = None,
) -> ScheduleRun:
    """The ``kale`` protocol's engine: one sequence on an empty, fault-free processor pool
    (of whole nodes when ``nodes`` is given; see :func:`nodes_needed`)."""
    need = nodes_needed(jobs.size, processors=processors, nodes=nodes)
    run = simulate_timed(
        jobs,
        ProcessorPool(nodes if nodes is not None else processors, need),
        policy=policy,
        backfill=backfill,
        record_timeline=False,
    )
    return ScheduleRun(
        jobs=jobs,
        start_s=run.first_start_s,
        end_s=run.end_s,
        last_decision_s=run.last_start_s,
        failed=int(run.failed.sum()),
    )
