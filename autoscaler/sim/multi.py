"""Several jobs replayed in lock-step, sharing one GPU quota through the resource manager.

Each step: every job's policy decides (it sees only its own past), the wishes go to
:class:`~autoscaler.policy.quota.ResourceManager` in one approval round, and each job resizes to
what was granted: all of it, part of it (a smaller growth), or nothing (it keeps its size).
A job in the middle of a resize holds ``max(old, new)`` and asks for nothing; GPUs given back
by a shrink return to the pool when its resize ends. Queueing, downtime and GPU-hours follow
:mod:`autoscaler.sim.engine` exactly, job by job.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autoscaler.policy.quota import Request, ResourceManager
from autoscaler.policy.types import JobSizing, Policy
from autoscaler.sim.engine import JobRun, Progress, SimResult


@dataclass
class JobInput:
    """One job of a multi-job run."""

    name: str
    sizing: JobSizing
    arrivals: Any
    """Arrival rates per step (warm-up included), on the shared grid."""
    policy: Policy
    priority: int = 0
    state: dict[str, Any] = field(default_factory=dict)


@dataclass
class MultiResult:
    """Per-job results and the quota's use over time."""

    quota_gpus: int
    results: dict[str, SimResult]
    gpus_in_use: np.ndarray
    """Σ over jobs of the most GPUs each held during the step."""
    short_steps: dict[str, int]
    """Steps in which a job was granted less than it asked for."""
    elapsed_s: float = 0.0

    @property
    def max_gpus_in_use(self) -> int:
        return int(self.gpus_in_use.max()) if len(self.gpus_in_use) else 0


def simulate_jobs(
    jobs: list[JobInput],
    *,
    quota_gpus: int,
    warmup_steps: int = 0,
    progress: Progress | None = None,
) -> MultiResult:
    """Replay every job together; the quota holds at every moment of every step."""
    if not jobs:
        raise ValueError("no jobs to simulate")
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"job names must be unique, got {names}")
    dts = {j.sizing.interval_s for j in jobs}
    if len(dts) != 1:
        raise ValueError("all jobs must share one step (interval)")
    minimum = sum(j.sizing.min_workers * j.sizing.gpus_per_worker for j in jobs)
    if minimum > quota_gpus:
        raise ValueError(
            f"the jobs' guaranteed minimums need {minimum} GPUs, more than the quota ({quota_gpus})"
        )
    n = min(len(j.arrivals) for j in jobs)
    began = time.perf_counter()
    runs = [
        JobRun(j.sizing, np.asarray(j.arrivals, float)[:n], warmup_steps=warmup_steps) for j in jobs
    ]
    manager = ResourceManager(quota_gpus)
    short = dict.fromkeys(names, 0)
    placed = False
    tick = 0
    while not runs[0].done:
        wishes: list[int] = []
        requests: list[Request] = []
        for job, run in zip(jobs, runs, strict=True):
            decision = job.policy.decide(run.observe(), job.state)
            w = run.clamp(decision.workers)
            gpw = job.sizing.gpus_per_worker
            held = run.held_workers() if placed else 0
            want = held if (placed and run.resizing) else w
            wishes.append(want)
            requests.append(
                Request(
                    job=job.name,
                    current_gpus=held * gpw,
                    desired_gpus=want * gpw,
                    priority=job.priority,
                    min_gpus=job.sizing.min_workers * gpw,
                    unit=gpw,
                )
            )
        grants = manager.allocate(requests)
        for job, run, want in zip(jobs, runs, wishes, strict=True):
            gpw = job.sizing.gpus_per_worker
            granted_w = grants[job.name] // gpw if gpw else want
            if granted_w < want:
                short[job.name] += 1
            run.apply(min(want, granted_w))
            run.serve()
        placed = True
        tick += 1
        if progress is not None and tick == 1024:
            progress(tick)
            tick = 0
    if progress is not None and tick:
        progress(tick)
    elapsed = time.perf_counter() - began
    results = {
        job.name: run.result(job.policy.name, elapsed) for job, run in zip(jobs, runs, strict=True)
    }
    in_use = np.sum([r.gpus for r in results.values()], axis=0)
    return MultiResult(quota_gpus, results, in_use, short, elapsed)
