"""``fault_aware``'s episode: place a batch of GPU jobs on GPUs that fail, measure makespan.

A *batch* is what a scheduler sees in one period: jobs (each ``n`` GPUs for an error-free
run time ``t``) submitted together, a cluster whose GPUs fail at their own rates (a
:class:`~placement.fault_patterns.FaultPattern`), and the failures of the last
``history_s`` that the scheduler has observed. The batch runs in the shared timed simulator
(:func:`placement.timed.simulate_timed`, FCFS): a failure kills the jobs on the GPU, they
keep their work up to the last checkpoint and queue again; the batch's *makespan* is when
its last job ends.

The document's reward compares the makespan under the agent's placement, ``T_rl``, with
``T_random``, the best makespan of ``K`` random placements of the *same* batch. Failure
times are the same in every run of a batch (each GPU's failure clock is drawn from the
batch's seed independently of where jobs go), so the comparison isolates placement.

Batches are drawn from a pod list (openb format; GPU pods only, run time = deletion −
scheduled, clipped to ``[min_run_s, max_run_s]``) on a random subset of a node list; an
episode is one batch. Because the reward exists only once the whole batch has run, an
episode is a rollout through the simulator (:func:`run_batch`) rather than a step API: the
policy records its own decisions and learns when the makespans are known.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from placement.cluster import Cluster, NodeSpec
from placement.fault_patterns import FaultPattern, PatternRange, pattern_model
from placement.faults import FaultModel, FaultSettings
from placement.frag import TypicalPods
from placement.node_pool import NodePool
from placement.placer import tie_order
from placement.pod import Pod
from placement.policies.base import PolicyContext, ScorePolicy
from placement.queue.priorities import queue_policy
from placement.timed import TimedRun, simulate_timed
from placement.workloads.batch import BatchJobs

DAY_S = 86_400.0


@dataclass(frozen=True)
class FaultBatchSettings:
    """How batches are drawn and run."""

    nodes: tuple[int, int] = (32, 64)
    """Cluster size range (nodes drawn at random from the node list)."""
    jobs_per_gpu: float = 1.0
    """Jobs in a batch per GPU of its cluster."""
    offered_load: tuple[float, float] | None = (0.5, 1.0)
    """None: every job is submitted at 0 (the document's batch, which oversubscribes the
    cluster). A range: each batch draws a load ρ in it and its jobs arrive uniformly over
    ``work / (GPUs · ρ)`` seconds (a scheduling period's submissions as they come in)."""
    multi_gpu_share: float | None = 0.1
    """Share of jobs drawn from the multi-GPU pods (the fault-aware
    document's distributed jobs are what
    faults hurt most); None keeps the pod list's own mix."""
    min_run_s: float = 600.0
    max_run_s: float = 24 * 3600.0
    random_placements: int = 2
    """K: random placements whose best makespan is the reward's reference."""
    patterns: PatternRange = field(default_factory=PatternRange)
    faults: FaultSettings = field(
        default_factory=lambda: FaultSettings(history_s=3 * DAY_S, window_s=3 * DAY_S)
    )
    queue: str = "fcfs"
    backfill: bool = False
    train_share: float = 0.7
    """Training draws from the first share of the pod list by creation time (the rest is
    held out for judging: ``placement.env.locality_env.split_pods``)."""


@dataclass(frozen=True)
class FaultBatch:
    """One drawn batch: its cluster, jobs, fault model and seed."""

    nodes: list[NodeSpec]
    jobs: BatchJobs
    pods: list[Pod]
    faults: FaultModel
    pattern: FaultPattern
    seed: int


@dataclass(frozen=True)
class BatchResult:
    """The judged numbers of one run of a batch."""

    makespan_s: float
    restarts: int
    gpu_hours_lost: float
    mean_jct_s: float
    failures: int
    run: TimedRun


def batch_jobs(
    pods: Sequence[Pod], run_s: np.ndarray, submit_s: np.ndarray | None = None
) -> tuple[BatchJobs, list[Pod]]:
    """Jobs (each the given pod, running ``run_s``, submitted at ``submit_s`` or 0) and
    their pods."""
    submit = np.zeros(len(pods)) if submit_s is None else np.asarray(submit_s, float)
    clones = [  # a pod may be drawn twice: each job gets its own name
        Pod(f"{p.name}#{i}", p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, p.gpu_models,
            t, t + r, t)
        for i, (p, r, t) in enumerate(zip(pods, run_s.tolist(), submit.tolist(), strict=True))
    ]  # fmt: skip
    jobs = BatchJobs(
        job_id=np.arange(len(clones), dtype=np.int64),
        submit_s=submit,
        run_s=run_s.astype(float),
        estimate_s=run_s.astype(float),
        size=np.array([p.total_gpu_milli / 1000 for p in clones], float),
    )
    return jobs, clones


class FaultBatchEnv:
    """Draws batches from a node list and a pod list (module docstring)."""

    def __init__(
        self, nodes: Sequence[NodeSpec], pods: Sequence[Pod], settings: FaultBatchSettings
    ) -> None:
        self.nodes = [n for n in nodes if n.gpus > 0]
        self.settings = settings
        timed: list[Pod] = []
        run_s: list[float] = []
        for p in pods:
            if p.num_gpu and p.scheduled_time is not None and p.deletion_time is not None:
                timed.append(p)
                run_s.append(p.deletion_time - p.scheduled_time)
        self.pods = timed
        self.run_s = np.clip(np.array(run_s, float), settings.min_run_s, settings.max_run_s)
        self.multi = np.array([p.num_gpu > 1 for p in timed], bool)
        if not self.nodes or not timed:
            from placement.errors import PlacementInputError

            raise PlacementInputError("fault batches need GPU nodes and timed GPU pods")

    def draw(self, seed: int, *, pattern: FaultPattern | None = None) -> FaultBatch:
        """The batch of ``seed`` (a drawn pattern unless one is given)."""
        s = self.settings
        rng = np.random.default_rng([seed, 0xBA7C])
        lo, hi = s.nodes
        count = min(int(rng.integers(lo, hi + 1)), len(self.nodes))
        picked = np.sort(rng.choice(len(self.nodes), count, replace=False))
        nodes = [self.nodes[i] for i in picked.tolist()]
        empty = Cluster(nodes)
        gpus = int(empty.gpu_count.sum())
        fits = np.array([bool(empty.feasible(p).any()) for p in self.pods])
        want = max(1, round(s.jobs_per_gpu * gpus))
        index = self._draw_jobs(rng, fits, want)
        run = self.run_s[index]
        submit = None
        if s.offered_load is not None:
            load = float(rng.uniform(*s.offered_load))
            size = np.array([self.pods[i].total_gpu_milli / 1000 for i in index])
            span = float(np.sum(size * run)) / (gpus * load)
            submit = np.sort(rng.uniform(0.0, span, len(index))).round()
            submit[0] = 0.0
        jobs, pods = batch_jobs([self.pods[i] for i in index], run, submit)
        pattern = pattern or s.patterns.draw(rng)
        unit_node = np.repeat(np.arange(count), empty.gpu_count)
        model = pattern_model(pattern, unit_node, seed=seed, settings=s.faults)
        return FaultBatch(nodes, jobs, pods, model, pattern, seed)

    def _draw_jobs(self, rng: np.random.Generator, fits: np.ndarray, want: int) -> np.ndarray:
        share = self.settings.multi_gpu_share
        pool = np.flatnonzero(fits)
        multi = np.flatnonzero(fits & self.multi)
        if share is None or not len(multi):
            return rng.choice(pool, want, replace=True)
        single = np.flatnonzero(fits & ~self.multi)
        n_multi = int(rng.binomial(want, share)) if len(single) else want
        parts = [rng.choice(multi, n_multi, replace=True)]
        if want - n_multi:
            parts.append(rng.choice(single, want - n_multi, replace=True))
        return rng.permutation(np.concatenate(parts))


def run_batch(
    batch: FaultBatch,
    make_policy: Callable[[PolicyContext], ScorePolicy],
    *,
    settings: FaultBatchSettings,
    policy_seed: int = 0,
    typical: TypicalPods | None = None,
) -> BatchResult:
    """Run ``batch`` with the node policy ``make_policy`` builds (FCFS unless set)."""
    rng = np.random.default_rng([batch.seed, policy_seed, 0x5EED])
    rank = tie_order(len(batch.nodes), rng)
    policy = make_policy(PolicyContext(rng=rng, typical=typical))
    pool = NodePool(
        batch.nodes,
        [(p,) for p in batch.pods],
        policy,
        rank=rank,
        fault_window_s=batch.faults.settings.window_s,
    )
    run = simulate_timed(
        batch.jobs,
        pool,
        policy=queue_policy(settings.queue),
        backfill=settings.backfill,
        faults=batch.faults,
        seed=batch.seed,
        record_timeline=False,
    )
    done = ~np.isnan(run.end_s)
    makespan = float(np.max(run.end_s[done])) if done.any() else 0.0
    return BatchResult(
        makespan_s=makespan,
        restarts=int(run.restarts.sum()),
        gpu_hours_lost=run.lost_unit_hours,
        mean_jct_s=float(np.mean(run.end_s[done])) if done.any() else 0.0,
        failures=run.failures,
        run=run,
    )


class RandomUnitPolicy(ScorePolicy):
    """The fault-aware document's random placement: a uniformly random feasible node and
    random fitting GPUs."""

    name = "random-units"

    def __init__(self, context: PolicyContext) -> None:
        self.rng = context.rng

    def score(self, pod: Pod, cluster: Cluster, nodes: np.ndarray) -> np.ndarray:
        scores = np.zeros(len(nodes), np.int64)
        scores[self.rng.integers(len(nodes))] = 1
        return scores

    def choose_gpus(self, pod: Pod, cluster: Cluster, node: int) -> tuple[int, ...]:
        if not pod.num_gpu:
            return ()
        fitting = np.flatnonzero(cluster.gpu_free[node] >= pod.gpu_milli)
        if fitting.size < pod.num_gpu:
            return ()
        return tuple(sorted(self.rng.choice(fitting, pod.num_gpu, replace=False).tolist()))


def random_reference(batch: FaultBatch, settings: FaultBatchSettings) -> float:
    """``T_random``: the best makespan of ``K`` random placements of ``batch``."""
    return min(
        run_batch(batch, RandomUnitPolicy, settings=settings, policy_seed=1 + k).makespan_s
        for k in range(settings.random_placements)
    )


def makespan_reward(t_rl: float, t_random: float) -> float:
    """The document's reward (its formula's image is lost): the makespan saved against the
    best random placement, relative to it — positive when the agent beat random."""
    if t_random <= 0:
        return 0.0
    return float(np.clip((t_random - t_rl) / t_random, -1.0, 1.0))
