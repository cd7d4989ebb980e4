"""RLScheduler's queue simulator, rule for rule, so its published baselines can be reproduced.

RLScheduler (Zhang et al., SC'20) reports its baselines from a simple simulator whose rules
are part of the numbers (PLACEMENT.md states them). This module follows them exactly and
nothing else:

* The machine is a pool of identical processors (or of whole nodes, when the log states
  both MaxProcs and MaxNodes: a job then holds ⌈n / processors-per-node⌉ nodes); a
  sequence starts on an empty machine at its first job's submit time.
* A *head* job is chosen from the whole queue by the priority, and is **not reconsidered**:
  the simulator moves from event to event (one arrival or one job end at a time; an arrival
  at the same instant as an end comes first) until the head fits, then starts it. Jobs
  arriving meanwhile can start earlier only by backfilling.
* EASY (``backfill=True``): when the head does not fit, its reservation is computed once, from
  the running jobs' *estimated* ends; then at every event (before moving on) the queue is
  scanned in submit order and a job that fits now and whose estimated end is strictly before
  the reservation starts at once.
* After a start, the next head is chosen at the same instant; when the queue is empty the
  simulator moves on to the next arrival.
* It stops when the last job of the sequence has started: jobs still running are not waited
  for, and RLScheduler's utilisation divides the work of all jobs by the span from the first
  submit to that moment (:func:`placement.queue.metrics.rlscheduler_utilisation`).

The queue and the running list are kept in the same order the reference code leaves them in
(stable sorts), so ties between equal priorities and between jobs ending at the same instant
resolve the same way. Sounder semantics (the head reconsidered at every event, classic EASY,
utilisation over the whole run) are :mod:`placement.timed`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placement.queue.base import BackfillChooser, MachineView, QueuePolicy, QueueView, order
from placement.queue.easy import may_backfill, reserve
from placement.workloads.batch import BatchJobs, nodes_needed


@dataclass(frozen=True)
class ScheduleRun:
    """When each job of a sequence started and ended."""

    jobs: BatchJobs
    start_s: np.ndarray
    """Start time per job (NaN for a job that could never start)."""
    end_s: np.ndarray
    last_decision_s: float
    """The clock when the simulator stopped (RLScheduler's utilisation horizon)."""
    failed: int = 0
    """Jobs larger than the whole machine (never started)."""
    restarts: int = 0
    gpu_hours_lost: float = 0.0


class _Sim:
    """One sequence under RLScheduler's rules; indices are positions in the sequence."""

    def __init__(self, jobs: BatchJobs, need: np.ndarray, capacity: int) -> None:
        self.submit = jobs.submit_s.astype(np.float64)
        self.run = jobs.run_s.astype(np.float64)
        self.est = jobs.estimate_s.astype(np.float64)
        self.procs = jobs.size  # what the priorities see
        self.size = need  # whole nodes held (processors when a node is a processor)
        self.start = np.full(len(jobs), np.nan)
        self.capacity = capacity
        self.free = capacity
        self.queue: list[int] = []
        self.running: list[int] = []
        self.next_arrival = 0
        self.now = 0.0

    def arrive(self) -> None:
        j = self.next_arrival
        self.now = max(self.now, float(self.submit[j]))
        self.queue.append(j)
        self.next_arrival += 1

    def step(self) -> None:
        """Move to the next event: one arrival, or one job end (arrivals first on ties)."""
        release = np.inf
        if self.running:
            self.running.sort(key=lambda j: self.start[j] + self.run[j])
            release = self.start[self.running[0]] + self.run[self.running[0]]
        if self.next_arrival < len(self.submit) and self.submit[self.next_arrival] <= release:
            self.arrive()
            return
        if not self.running:
            raise RuntimeError("no event left while a job waits (is it larger than the machine?)")
        done = self.running.pop(0)
        self.now = max(self.now, float(release))
        self.free += int(self.size[done])

    def launch(self, j: int) -> None:
        self.start[j] = self.now
        self.free -= int(self.size[j])
        self.running.append(j)
        self.queue.remove(j)

    def machine(self, q: np.ndarray) -> MachineView:
        """The machine as a learned policy sees it (estimated ends of running jobs), with
        the units each job of ``q`` would hold."""
        running = np.asarray(self.running, dtype=np.int64)
        return MachineView(
            capacity=float(self.capacity),
            free=float(self.free),
            running_end_s=self.start[running] + self.est[running],
            running_size=self.size[running].astype(np.float64),
            job_units=self.size[q].astype(np.float64),
        )

    def view(self, q: np.ndarray) -> QueueView:
        return QueueView(self.submit[q], self.est[q], self.procs[q], self.now, self.machine(q))

    def pick_head(self, policy: QueuePolicy) -> int:
        q = np.asarray(self.queue, dtype=np.int64)
        self.queue = q[order(policy, self.view(q))].tolist()
        return self.queue[0]

    def backfill_by(self, policy: BackfillChooser, head: int, shadow: float) -> None:
        """Start eligible jobs one at a time in the order ``policy.pick_backfill`` asks."""
        while True:
            q = np.asarray(self.queue, dtype=np.int64)
            q = q[np.argsort(self.submit[q], kind="stable")]
            self.queue = q.tolist()
            ok = (q != head) & (self.size[q] <= self.free) & (self.now + self.est[q] < shadow)
            candidates = np.flatnonzero(ok)
            if candidates.size == 0:
                return
            pick = int(policy.pick_backfill(self.view(q), candidates, shadow))
            self.launch(int(q[candidates[pick]]))

    def wait_with_backfill(self, head: int, policy: object = None) -> None:
        self.running.sort(key=lambda j: self.start[j] + self.est[j])
        ends = np.array([self.start[j] + self.est[j] for j in self.running])
        sizes = np.array([self.size[j] for j in self.running])
        reservation = reserve(
            need=float(self.size[head]),
            free_now=self.free,
            now_s=self.now,
            running_end_s=ends,
            running_size=sizes,
        )
        # (An estimated end already past counts as "now"; the strict test below then lets
        # nothing backfill, exactly as the reference code's raw past time does.)
        shadow = reservation.start_s
        chooser: BackfillChooser | None = policy if hasattr(policy, "pick_backfill") else None
        while self.size[head] > self.free:
            if chooser is not None:
                self.backfill_by(chooser, head, shadow)
                self.step()
                continue
            q = np.asarray(self.queue, dtype=np.int64)
            q = q[np.argsort(self.submit[q], kind="stable")]
            self.queue = q.tolist()
            for j in q[self.now + self.est[q] < shadow].tolist():
                if may_backfill(
                    size=float(self.size[j]),
                    estimate_s=float(self.est[j]),
                    now_s=self.now,
                    free_now=self.free,
                    reservation=reservation,
                    flavour="rlscheduler",
                ):
                    self.launch(j)
            self.step()


def simulate(
    jobs: BatchJobs,
    *,
    processors: int,
    policy: QueuePolicy,
    backfill: bool,
    nodes: int | None = None,
) -> ScheduleRun:
    """Run one sequence (``jobs`` in submit order) on an empty machine of ``processors``
    (in ``nodes`` whole nodes when the log says so; see :func:`nodes_needed`).

    Jobs larger than the machine are left out before the run (they would wait forever) and
    counted in ``failed``.
    """
    need = nodes_needed(jobs.size, processors=processors, nodes=nodes)
    capacity = nodes if nodes is not None else processors
    fits = need <= capacity
    runnable = jobs.take(np.nonzero(fits)[0])
    sim = _Sim(runnable, need[fits], capacity)
    if len(runnable):
        sim.arrive()
    while sim.queue:
        head = sim.pick_head(policy)
        if sim.size[head] > sim.free:
            if backfill:
                sim.wait_with_backfill(head, policy)
            else:
                while sim.size[head] > sim.free:
                    sim.step()
        sim.launch(head)
        while not sim.queue and sim.next_arrival < len(runnable):
            sim.step()
    start = np.full(len(jobs), np.nan)
    start[fits] = sim.start
    return ScheduleRun(
        jobs=jobs,
        start_s=start,
        end_s=start + jobs.run_s,
        last_decision_s=sim.now,
        failed=int((~fits).sum()),
    )
