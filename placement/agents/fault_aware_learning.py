"""How ``fault_aware`` learns: an optional warm start, then actor-critic on whole batches.

1. **Warm start** (``imitation_batches``/``imitation_steps``; off by default): training
   batches are run under BestFit while a teacher records, for every first pick, the candidate
   unit rows the agent would see and which units lie on a node BestFit scores best; the actor
   is fitted to put its probability on those units (cross-entropy against the set). The
   document starts from random weights; decision 0152 records why the shipped agent does not.
2. **Actor-critic** (the document's loop): per batch, run it with the sampling policy, run
   ``K`` random placements of the same batch, reward every decision with the makespan term
   ``(T_random − T_rl) / T_random`` — and, with ``lost_weight``, minus the GPU-hours that
   decision's own job lost when a GPU it was given failed (``TimedRun.kills``: a failure
   kills exactly the jobs holding the unit, so the loss is that placement's) — push the
   decisions onto the replay stack and update on as many samples as the batch produced.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from placement.agents.common import TrainingCurve
from placement.cluster import Cluster
from placement.env.fault_batch import (
    FaultBatch,
    FaultBatchEnv,
    RandomUnitPolicy,
    makespan_reward,
    run_batch,
)
from placement.env.unit_features import unit_rows
from placement.pod import Pod
from placement.policies.base import PolicyContext
from placement.policies.simple import BestFitPolicy
from placement.timed import TimedRun

if TYPE_CHECKING:
    from placement.agents.fault_aware import Decision, FaultAwareAgent

IMITATION_SEED_BASE = 250_000


def decision_rewards(
    record: list[Decision],
    run: TimedRun,
    batch: FaultBatch,
    *,
    shared: float,
    weight: float,
    norm_gpu_h: float,
) -> list[float]:
    """Each decision's reward: the batch's ``shared`` term minus ``weight`` × the GPU-hours
    its job's run segment lost to a failure (÷ ``norm_gpu_h``)."""
    index = {p.name: i for i, p in enumerate(batch.pods)}
    lost: dict[tuple[int, int], float] = {}
    for job, epoch, hours in run.kills:
        lost[(job, epoch)] = lost.get((job, epoch), 0.0) + hours
    rewards = []
    for d in record:
        penalty = lost.get((index.get(d.pod, -1), d.start), 0.0) if weight else 0.0
        rewards.append(shared - weight * penalty / norm_gpu_h)
    return rewards


class _BestFitTeacher(BestFitPolicy):
    """BestFit that records, per GPU pod, the agent's view and BestFit's best units."""

    uses_faults = True

    def __init__(self, context: PolicyContext, out: list[tuple[np.ndarray, ...]]) -> None:
        super().__init__(context)
        self.out = out
        self.gpu_faults: np.ndarray | None = None

    def observe_faults(self, node_faults: np.ndarray, gpu_faults: np.ndarray) -> None:
        self.gpu_faults = np.asarray(gpu_faults, np.int64)

    def score(self, pod: Pod, cluster: Cluster, nodes: np.ndarray) -> np.ndarray:
        scores = super().score(pod, cluster, nodes)
        if pod.num_gpu:
            units = unit_rows(pod, cluster, nodes, gpu_faults=self.gpu_faults)
            best = set(nodes[scores == scores.max()].tolist())
            target = np.fromiter((n in best for n in units.node.tolist()), bool, len(units.node))
            self.out.append((units.rows, units.job, target))
        return scores


def imitate(agent: FaultAwareAgent, env: FaultBatchEnv) -> list[float]:
    """The warm start (module docstring); returns the imitation loss per step."""
    s = agent.settings
    if not (s.imitation_batches and s.imitation_steps):
        return []
    views: list[tuple[np.ndarray, ...]] = []
    for b in range(s.imitation_batches):
        batch = env.draw(IMITATION_SEED_BASE + 1000 * s.seed + b)
        run_batch(batch, lambda ctx: _BestFitTeacher(ctx, views), settings=env.settings)
    k = s.candidates
    rows = np.zeros((len(views), k, views[0][0].shape[1] if views else 1), np.float32)
    mask = np.zeros((len(views), k), bool)
    target = np.zeros((len(views), k), bool)
    job = np.zeros((len(views), views[0][1].shape[0] if views else 1), np.float32)
    for i, (r, j, t) in enumerate(views):
        keep = np.arange(len(r))
        if len(keep) > k:  # the best units first (up to half), then others at random
            good, bad = np.flatnonzero(t), np.flatnonzero(~t)
            good = agent.rng.permutation(good)[: k // 2]
            keep = np.concatenate([good, agent.rng.permutation(bad)[: k - len(good)]])
        rows[i, : len(keep)], mask[i, : len(keep)], target[i, : len(keep)] = r[keep], True, t[keep]
        job[i] = j
    tensors = [torch.from_numpy(a).to(agent.device) for a in (rows, mask, target, job)]
    optimizer = torch.optim.Adam(agent.actor.parameters(), lr=s.lr * 3)
    losses = []
    for _ in range(s.imitation_steps):
        pick = torch.from_numpy(agent.rng.integers(len(views), size=64)).to(agent.device)
        r, m, t, j = (x[pick] for x in tensors)
        logits = agent.actor(r, j).masked_fill(~m, -1e9)
        loss = (
            torch.logsumexp(logits, -1) - torch.logsumexp(logits.masked_fill(~t, -1e9), -1)
        ).mean()
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(agent.actor.parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def train_fault_aware(
    agent: FaultAwareAgent,
    env: FaultBatchEnv,
    episodes: int,
    *,
    on_episode: Callable[[dict[str, float]], None] | None = None,
) -> TrainingCurve:
    """Warm start, then ``episodes`` batches (module docstring)."""
    from placement.agents.fault_aware import EPISODE_SEED_BASE

    s = agent.settings
    started = time.perf_counter()
    imitation = imitate(agent, env)
    stack = agent._stack()
    for episode in range(episodes):
        batch = env.draw(EPISODE_SEED_BASE + 1000 * s.seed + episode)
        record: list[Decision] = []
        mine = run_batch(
            batch,
            lambda ctx, out=record: agent.policy(ctx, explore=True, record=out),
            settings=env.settings,
        )
        refs = [
            run_batch(batch, RandomUnitPolicy, settings=env.settings, policy_seed=1 + k)
            for k in range(env.settings.random_placements)
        ]
        shared = makespan_reward(mine.makespan_s, min(r.makespan_s for r in refs))
        rewards = decision_rewards(
            record,
            mine.run,
            batch,
            shared=shared,
            weight=s.lost_weight,
            norm_gpu_h=s.lost_norm_gpu_h,
        )
        agent.push(stack, record, rewards)
        losses = [
            agent.learn(stack.sample(max(len(record), 1), agent.rng))
            for _ in range(s.updates_per_episode if len(stack) else 0)
        ]
        row = {
            "episode": episode,
            "return": float(np.mean(rewards)) if rewards else shared,
            "makespan_reward": shared,
            "loss": float(np.mean(losses)) if losses else float("nan"),
            "makespan_h": mine.makespan_s / 3600.0,
            "random_best_h": min(r.makespan_s for r in refs) / 3600.0,
            "gpu_hours_lost": mine.gpu_hours_lost,
            "random_lost": float(np.mean([r.gpu_hours_lost for r in refs])),
            "restarts": mine.restarts,
            "decisions": len(record),
            "seconds": time.perf_counter() - started,
        }
        if episode == 0 and imitation:
            row["imitation_loss_first"] = imitation[0]
            row["imitation_loss_last"] = float(np.mean(imitation[-50:]))
        agent.curve.add(**row)
        if on_episode is not None:
            on_episode(row)
    agent.curve.seconds += time.perf_counter() - started
    return agent.curve
