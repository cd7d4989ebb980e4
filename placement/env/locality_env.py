"""``async_transformer``'s episodes: windows of the openb trace, run through the timed simulator
with data locality (``placement.locality``), on a share of the nodes and with compressed arrivals.

The document's agent learns *online*: each task request is a decision, its reward arrives
when the data is served, and the training thread learns from the experience while the
decisions go on. An episode is therefore one run of a sequence through the shared timed
simulator with the agent inside the node policy — no step API (the simulator calls the
policy, the policy records its own experience).

Held out: :func:`split_pods` orders the pods by creation time and keeps the first
``train_share`` for training; the rest are the sequences an agent is judged on, so no
judged pod is ever trained on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from placement.cluster import NodeSpec
from placement.frag import TypicalPods
from placement.locality import LocalityNodePool, LocalitySettings
from placement.node_pool import openb_jobs
from placement.placer import tie_order
from placement.pod import Pod
from placement.policies.base import PolicyContext, ScorePolicy
from placement.queue.priorities import queue_policy
from placement.timed import TimedRun, simulate_timed
from placement.workloads.batch import BatchJobs, compress_arrivals


@dataclass(frozen=True)
class SequenceSettings:
    """How sequences are cut and run."""

    window: int = 1000
    """Consecutive pods (by creation time) per sequence."""
    node_share: float = 0.05
    """Share of the nodes each sequence runs on (a seeded subset)."""
    arrival_speedup: float = 300.0
    """Arrival gaps divided by this: the trace's own load is 0.2 % (docs/placement.md)."""
    train_share: float = 0.7
    """The first share of the trace (by creation time) is for training; the rest judges."""
    locality: LocalitySettings = field(default_factory=LocalitySettings)
    queue: str = "fcfs"
    backfill: bool = False


@dataclass(frozen=True)
class TraceWindow:
    """One drawn sequence: its nodes, jobs (one pod each) and seed."""

    nodes: list[NodeSpec]
    jobs: BatchJobs
    pods: list[Pod]
    seed: int


def split_pods(pods: Sequence[Pod], train_share: float) -> tuple[list[Pod], list[Pod]]:
    """(training pods, held-out pods): timed pods by creation time, first share to training."""
    timed = [
        p
        for p in pods
        if p.creation_time is not None
        and p.scheduled_time is not None
        and p.deletion_time is not None
    ]
    timed.sort(key=lambda p: (p.creation_time, p.name))
    cut = round(train_share * len(timed))
    return timed[:cut], timed[cut:]


def draw_sequence(
    nodes: Sequence[NodeSpec], pods: Sequence[Pod], settings: SequenceSettings, *, seed: int
) -> TraceWindow:
    """A window of ``pods`` (already split) on a seeded node share."""
    rng = np.random.default_rng([seed, 0x5E0])
    window = min(settings.window, len(pods))
    start = int(rng.integers(0, len(pods) - window + 1))
    chosen = list(pods[start : start + window])
    keep = max(1, round(settings.node_share * len(nodes)))
    picked = np.sort(rng.choice(len(nodes), keep, replace=False))
    jobs, kept, _ = openb_jobs(chosen)
    jobs = compress_arrivals(jobs, settings.arrival_speedup)
    return TraceWindow([nodes[i] for i in picked.tolist()], jobs, kept, seed)


def run_sequence(
    seq: TraceWindow,
    make_policy: Callable[[PolicyContext], ScorePolicy],
    settings: SequenceSettings,
    *,
    typical: TypicalPods | None = None,
) -> tuple[TimedRun, LocalityNodePool]:
    """Run ``seq`` under the node policy ``make_policy`` builds; the run and its pool."""
    rng = np.random.default_rng([seq.seed, 0x7A9])
    rank = tie_order(len(seq.nodes), rng)
    policy = make_policy(PolicyContext(rng=rng, typical=typical))
    pool = LocalityNodePool(
        seq.nodes,
        [(p,) for p in seq.pods],
        policy,
        rank=rank,
        locality=settings.locality,
        typical=typical,
    )
    run = simulate_timed(
        seq.jobs,
        pool,
        policy=queue_policy(settings.queue),
        backfill=settings.backfill,
        seed=seq.seed,
        record_timeline=False,
    )
    return run, pool


def window_utilisation(run: TimedRun, pool: LocalityNodePool) -> tuple[float, float]:
    """(GPU share held, GPU share doing work — held minus data loading) between the first
    and the last arrival of the run: utilisation while the window's jobs come in."""
    jobs = run.jobs
    t0, t1 = float(np.min(jobs.submit_s)), float(np.max(jobs.submit_s))
    gpus = float(pool.cluster.gpu_count.sum())
    if t1 <= t0 or gpus == 0:
        return 0.0, 0.0
    start, end = run.first_start_s, run.end_s
    ok = ~np.isnan(start) & ~np.isnan(end)
    delay = np.array([pool.start_delay_s(j) for j in range(len(jobs))])
    size = jobs.size

    def share(begin: np.ndarray) -> float:
        overlap = np.clip(np.minimum(end, t1) - np.maximum(begin, t0), 0, None)
        return float(np.sum((size * overlap)[ok]) / (gpus * (t1 - t0)))

    return share(start), share(start + delay)
