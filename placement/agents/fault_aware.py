"""``fault_aware``: actor-critic placement of GPU jobs on GPUs that fail.

The document's agent, rebuilt for a cluster of any size:

* **Policy network** — a probability per computing unit. Here one shared network scores
  each candidate GPU's row (``placement.env.unit_features``: the unit, its node, the job
  and the cluster), and a softmax over the candidates is the document's ``p_i``. Occupied
  and faulty units are masked by never being candidates (a down GPU reads 0 free). A job
  of ``n`` GPUs is placed one unit at a time, the state recomputed after each pick, until
  ``n`` are placed (all on one node: a pod's GPUs share a node). Greedy (``p_k = max``)
  when deployed; sampled while training.
* **Value network** — the state's long-term value ``V``: the job and cluster row and the
  mean and max of a per-unit encoding of the candidates.
* **Replay stack** that overflows its oldest sample; each update draws as many samples as
  the last batch produced (the document's dynamic batch).
* **Reward** (``placement.env.fault_batch``): the batch's makespan ``T_rl`` against the
  best of ``K`` random placements of the same batch; optionally also the GPU-hours lost
  to failures against the random placements' (``lost_weight``;
  docs/decisions/0152-fault-aware-reward-and-two-attempts.md).

Learning is advantage actor-critic on the replayed samples; because a replayed sample was
drawn by an older policy, the actor's step uses the clipped probability ratio of PPO
(``clip``), which keeps old samples from pushing the policy further than they justify.
Training runs in two parts:

1. **Warm start** (``imitation_batches``/``imitation_steps``): training batches are run
   under BestFit while a teacher records, for every first pick, the candidate unit rows the
   agent would see and which units lie on a node BestFit scores best; the actor is fitted to
   put its probability on those units (cross-entropy against the set). The document starts
   from random weights; docs/decisions/0152-fault-aware-reward-and-two-attempts.md records
   why the shipped agent does not.
2. **Actor-critic** (the document's loop): per batch, run it with the sampling policy, run
   ``K`` random placements of the same batch, reward every decision with the makespan term
   ``(T_random − T_rl) / T_random`` — and, with ``lost_weight``, minus the GPU-hours that
   decision's own job lost when a GPU it was given failed (``TimedRun.kills``: a failure
   kills exactly the jobs holding the unit, so the loss is that placement's) — push the
   decisions onto the replay stack and update on as many samples as the batch produced.

**The rules' proposals** (``proposals`` = K, the shipped agent): the candidate units are
only those on the top K nodes of fault-bestfit, BestFit and FGD
(``placement.env.proposals``), and each unit row carries what those rules say of its node
(scores, FGD's fragmentation gain, picks, places) beside its own fault history — so the
agent can follow the fault-aware rule and leave it where it learned better. Then the warm
start imitates fault-bestfit unit by unit (its node, its fewest-faults-then-tightest GPUs)
instead of BestFit's node — or, with ``rule = "healthy-fgd"``, FGD's choice among the
healthiest proposals, which is FGD wherever no fault is known — and every
``validate_every`` batches the greedy agent is judged on validation batches (GPU-hours
lost, at most 1 % more makespan than the warm start's): the best weights, the warm start's
included, are kept. ``proposals = 0`` (agent files from
before): every feasible GPU is a candidate.

CPU-only pods hold no GPU and no GPU failure can kill them: they are placed by BestFit (by
FGD when the agent starts as ``healthy-fgd``, so that it is FGD where nothing fails).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from placement.agents.common import (
    ReplayBuffer,
    TrainingCurve,
    configure,
    gradient_step,
    load_checkpoint,
    load_weights,
    mlp,
    save_checkpoint,
    settings_from_dict,
)
from placement.cluster import Cluster, NodeSpec
from placement.env.fault_batch import (
    FaultBatch,
    FaultBatchEnv,
    FaultBatchSettings,
    RandomUnitPolicy,
    makespan_reward,
    run_batch,
)
from placement.env.locality_env import split_pods
from placement.env.proposals import Proposals, Proposer, rule_feature_names
from placement.env.unit_features import JOB_FEATURES, UNIT_FEATURES, UnitRows, unit_rows
from placement.errors import PlacementInputError
from placement.fallback import FeatureRanges
from placement.frag import TypicalPods, typical_pods
from placement.pod import MILLI, Pod
from placement.policies.base import PolicyContext, ScorePolicy
from placement.policies.capabilities import wants_faults
from placement.policies.fault_aware import FAULT_CAP, FaultAwareBestFitPolicy
from placement.policies.fgd import FGDPolicy
from placement.policies.simple import BestFitPolicy
from placement.timed import TimedRun

NAME = "fault_aware"
EPISODE_SEED_BASE = 200_000
"""Training batch seeds start here; judged batches use other seeds (the benchmark's)."""
IMITATION_SEED_BASE = 250_000
"""The warm start's batch seeds start here."""
VALIDATION_SEED_BASE = 280_000
"""Validation batches (training pods, seeds of their own; never judged)."""
U, J = len(UNIT_FEATURES), len(JOB_FEATURES)
FAULT_RULES = ("fault-bestfit", "bestfit", "fgd")
"""The rules whose proposals are the candidates (``proposals`` > 0)."""
RULE_FEATURES = rule_feature_names(FAULT_RULES, gains=("fgd",))
TAUGHT_RULES = ("fault-bestfit", "healthy-fgd")
"""What ``FaultAwareSettings.rule`` may name."""
PROPOSAL_UNIT_FEATURES = (*UNIT_FEATURES, *RULE_FEATURES)
"""A candidate unit's row with proposals: the unit, then its node's rule features."""


@dataclass(frozen=True)
class FaultAwareSettings:
    """Every knob of the agent and its training (the seed included)."""

    seed: int = 0
    hidden: int = 64
    """Width of the per-unit networks (the document's 256-196-196-128 layers take one
    input per GPU; a per-unit network this wide would not decide in 5 ms on 6,212 GPUs)."""
    lr: float = 3e-4
    clip: float = 0.2
    """PPO ratio clip for replayed samples."""
    entropy: float = 0.01
    value_coef: float = 0.5
    stack: int = 2048
    """Replay stack capacity (the oldest samples overflow)."""
    candidates: int = 128
    """Unit rows stored per decision: the chosen unit and up to this many − 1 others."""
    updates_per_episode: int = 2
    lost_weight: float = 1.0
    """Weight of each decision's own loss term: minus the GPU-hours its job lost when a GPU
    it was given failed, per ``lost_norm_gpu_h`` (0: the document's makespan term only)."""
    lost_norm_gpu_h: float = 8.0
    imitation_batches: int = 20
    """Training batches run under BestFit whose node choices warm-start the actor."""
    imitation_steps: int = 800
    """Gradient steps of that warm start (0: random initial weights, as the document)."""
    proposals: int = 3
    """Top nodes of each rule whose GPUs are the candidates (0: every feasible GPU)."""
    rule: str = "fault-bestfit"
    """The rule the agent starts as (its warm start's demonstrations, with proposals):
    ``fault-bestfit``, or ``healthy-fgd`` — FGD's choice among the candidates with the
    fewest recent node faults, on the GPUs with the fewest faults (FGD's where they are as
    healthy), and CPU-only pods by FGD: where no fault is known it decides as FGD does."""
    validate_every: int = 25
    """Batches between validation runs (0: keep the last weights)."""
    validation_batches: int = 6
    env: FaultBatchSettings = field(default_factory=FaultBatchSettings)

    def __post_init__(self) -> None:
        if self.rule not in TAUGHT_RULES:
            raise PlacementInputError(f"rule must be one of {TAUGHT_RULES}, not {self.rule!r}")


class UnitPolicyNet(nn.Module):
    """One logit per unit row from (row, job): the shared per-unit actor."""

    def __init__(self, hidden: int, width: int = U) -> None:
        super().__init__()
        self.body = mlp([width + J, hidden, hidden, 1])

    def forward(self, rows: torch.Tensor, job: torch.Tensor) -> torch.Tensor:
        ctx = job.unsqueeze(-2).expand(*rows.shape[:-1], job.shape[-1])
        logit: torch.Tensor = self.body(torch.cat([rows, ctx], dim=-1))
        return logit.squeeze(-1)


class ValueNet(nn.Module):
    """``V(s)`` from the job row and the pooled encoding of the candidate units."""

    def __init__(self, hidden: int, width: int = U) -> None:
        super().__init__()
        self.encode = nn.Sequential(mlp([width + J, hidden, hidden]), nn.ReLU())
        self.head = mlp([2 * hidden + J, hidden, 1])

    def forward(self, rows: torch.Tensor, mask: torch.Tensor, job: torch.Tensor) -> torch.Tensor:
        ctx = job.unsqueeze(-2).expand(*rows.shape[:-1], job.shape[-1])
        h: torch.Tensor = self.encode(torch.cat([rows, ctx], dim=-1))
        weight = mask.unsqueeze(-1).to(h.dtype)
        mean = (h * weight).sum(-2) / weight.sum(-2).clamp(min=1.0)
        top = h.masked_fill(~mask.unsqueeze(-1), 0.0).max(dim=-2).values
        value: torch.Tensor = self.head(torch.cat([mean, top, job], dim=-1))
        return value.squeeze(-1)


@dataclass
class Decision:
    """One unit pick as the replay stack stores it."""

    rows: np.ndarray
    job: np.ndarray
    action: int
    logp: float
    pod: str = ""
    """The pod (job) placed."""
    start: int = 0
    """Which start of that job (0 first, 1 after its first restart, …)."""


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


class FaultAwareAgent:
    """The agent: networks, acting, learning, saving (module docstring)."""

    name = NAME
    settings_type = FaultAwareSettings

    def __init__(self, settings: FaultAwareSettings | None = None, *, device: str = "cpu"):
        self.settings = settings or FaultAwareSettings()
        self.device = configure(self.settings.seed, device)
        h = self.settings.hidden
        self.width = len(PROPOSAL_UNIT_FEATURES) if self.settings.proposals else U
        self.actor = UnitPolicyNet(h, self.width).to(self.device)
        self.critic = ValueNet(h, self.width).to(self.device)
        self.projection = np.random.default_rng(0x5EED).standard_normal(self.width) * np.pi
        params = [*self.actor.parameters(), *self.critic.parameters()]
        self.optimizer = torch.optim.Adam(params, lr=self.settings.lr)
        self.curve = TrainingCurve()
        self.rng = np.random.default_rng([self.settings.seed, 0xAC7])
        self.ranges = FeatureRanges()
        """Each input feature's range over training (the guard's out-of-range check)."""
        self.kept_episode: int | None = None
        """The batch whose weights validation kept (−1: the warm start's)."""
        self.validation_log: list[dict[str, float]] = []
        self.typical: TypicalPods | None = None
        """The training pods' typical pods: FGD's, when the caller has none."""

    # -- acting -----------------------------------------------------------------------------
    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array, np.float32)).to(self.device)

    @torch.no_grad()
    def logits(self, units: UnitRows) -> np.ndarray:
        """One logit per candidate unit. Units whose rows are equal (idle GPUs of alike
        nodes: most of a large cluster) share one evaluation; rows are told apart by a
        random projection (exact for distinct rows but for a measure-zero coincidence)."""
        rows = units.rows
        key = rows.astype(np.float64) @ self.projection
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        out: torch.Tensor = self.actor(self._tensor(rows[first]), self._tensor(units.job))
        return out.cpu().numpy().astype(np.float64)[inverse.reshape(-1)]

    def _decision(
        self, units: UnitRows, logits: np.ndarray, index: int, pod: str = "", start: int = 0
    ) -> Decision:
        keep = np.arange(len(logits))
        k = self.settings.candidates
        if len(keep) > k:  # the chosen unit and a uniform sample of the others
            others = np.delete(keep, index)
            keep = np.concatenate([[index], self.rng.choice(others, k - 1, replace=False)])
        sub = logits[keep]
        logp = float(sub[keep == index][0] - sub.max() - np.log(np.exp(sub - sub.max()).sum()))
        action = int(np.flatnonzero(keep == index)[0])
        return Decision(units.rows[keep], units.job, action, logp, pod, start)

    def policy(
        self,
        context: PolicyContext | None = None,
        *,
        explore: bool = False,
        record: list[Decision] | None = None,
        teacher: bool = False,
    ) -> FaultAwarePolicy:
        return FaultAwarePolicy(self, context, explore=explore, record=record, teacher=teacher)

    # -- learning ---------------------------------------------------------------------------
    def _stack(self) -> ReplayBuffer:
        k = self.settings.candidates
        return ReplayBuffer(
            self.settings.stack,
            {
                "rows": ((k, self.width), np.float32),
                "mask": ((k,), bool),
                "job": ((J,), np.float32),
                "action": ((), np.int64),
                "logp": ((), np.float32),
                "reward": ((), np.float32),
            },
        )

    def push(self, stack: ReplayBuffer, decisions: list[Decision], rewards: list[float]) -> None:
        """Store the batch's decisions with their rewards."""
        k = self.settings.candidates
        for d, reward in zip(decisions, rewards, strict=True):
            rows = np.zeros((k, self.width), np.float32)
            mask = np.zeros(k, bool)
            rows[: len(d.rows)], mask[: len(d.rows)] = d.rows, True
            stack.add(rows=rows, mask=mask, job=d.job, action=d.action, logp=d.logp, reward=reward)

    def losses(self, batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        """Actor (clipped ratio), critic and entropy terms on a replay batch."""
        t = {key: torch.from_numpy(value).to(self.device) for key, value in batch.items()}
        s = self.settings
        logits = self.actor(t["rows"], t["job"]).masked_fill(~t["mask"], -1e9)
        logp_all = torch.log_softmax(logits, dim=-1)
        logp = logp_all.gather(1, t["action"].unsqueeze(1)).squeeze(1)
        entropy = -(logp_all.exp() * logp_all).masked_fill(~t["mask"], 0.0).sum(-1).mean()
        value = self.critic(t["rows"], t["mask"], t["job"])
        advantage = (t["reward"] - value).detach()
        if advantage.numel() > 1:
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-6)
        ratio = torch.exp(logp - t["logp"])
        clipped = torch.clamp(ratio, 1.0 - s.clip, 1.0 + s.clip)
        actor = -torch.min(ratio * advantage, clipped * advantage).mean()
        critic = torch.mean((value - t["reward"]) ** 2)
        total = actor + s.value_coef * critic - s.entropy * entropy
        return {"total": total, "actor": actor, "critic": critic, "entropy": entropy}

    def learn(self, batch: dict[str, np.ndarray]) -> float:
        """One gradient step; returns the loss before it."""
        loss = self.losses(batch)["total"]
        params = [*self.actor.parameters(), *self.critic.parameters()]
        gradient_step(self.optimizer, loss, params, max_norm=1.0)
        return float(loss.detach())

    def train(
        self,
        env: FaultBatchEnv,
        episodes: int,
        *,
        on_episode: Callable[[dict[str, float]], None] | None = None,
    ) -> TrainingCurve:
        """Warm start (if set), then ``episodes`` batches of actor-critic learning (module
        docstring)."""
        s = self.settings
        started = time.perf_counter()
        typical = self.typical = typical_pods(env.pods)
        imitation = self._imitate(env, typical)
        stack = self._stack()
        best: tuple[float, int, dict[str, dict[str, torch.Tensor]]] | None = None
        if s.validate_every > 0 and s.validation_batches > 0:
            best = (self._validate(env, typical), -1, self._weights())
        for episode in range(episodes):
            batch = env.draw(EPISODE_SEED_BASE + 1000 * s.seed + episode)
            record: list[Decision] = []
            mine = run_batch(
                batch,
                functools.partial(self.policy, explore=True, record=record),
                settings=env.settings,
                typical=typical,
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
            self.push(stack, record, rewards)
            losses = [
                self.learn(stack.sample(max(len(record), 1), self.rng))
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
            if best is not None and (episode + 1) % s.validate_every == 0:
                row["validation_score"] = score = self._validate(env, typical)
                if score < best[0]:
                    best = (score, episode, self._weights())
            row["cpu_seconds"] = time.process_time()
            self.curve.add(**row)
            if on_episode is not None:
                on_episode(row)
        if best is not None:
            for name, state in best[2].items():
                getattr(self, name).load_state_dict(state)
            self.kept_episode = best[1]
        self.curve.seconds += time.perf_counter() - started
        return self.curve

    def _weights(self) -> dict[str, dict[str, torch.Tensor]]:
        return {
            name: {k: v.detach().clone() for k, v in getattr(self, name).state_dict().items()}
            for name in ("actor", "critic")
        }

    def _validate(self, env: FaultBatchEnv, typical: TypicalPods) -> float:
        """The greedy agent on the validation batches: mean GPU-hours lost, plus a heavy
        charge for each percent of makespan beyond 1 % over BestFit's (what it is judged
        by: no fewer GPU-hours bought with a slower batch)."""
        lost, slower = [], []
        for k in range(self.settings.validation_batches):
            batch = env.draw(VALIDATION_SEED_BASE + k)
            mine = run_batch(batch, self.policy, settings=env.settings, typical=typical)
            ref = run_batch(batch, BestFitPolicy, settings=env.settings, typical=typical)
            lost.append(mine.gpu_hours_lost)
            slower.append(mine.makespan_s / max(ref.makespan_s, 1.0) - 1.0)
        excess = max(0.0, float(np.mean(slower)) - 0.01)
        score = float(np.mean(lost)) + 1000.0 * excess
        self.validation_log.append({"lost": float(np.mean(lost)), "slower": float(np.mean(slower))})
        return score

    def _imitate(self, env: FaultBatchEnv, typical: TypicalPods) -> list[float]:
        """The warm start (module docstring); returns the imitation loss per step."""
        s = self.settings
        if not (s.imitation_batches and s.imitation_steps):
            return []
        if s.proposals:
            return self._imitate_rule(env, typical)
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
                good = self.rng.permutation(good)[: k // 2]
                keep = np.concatenate([good, self.rng.permutation(bad)[: k - len(good)]])
            n = len(keep)
            rows[i, :n], mask[i, :n], target[i, :n] = r[keep], True, t[keep]
            job[i] = j
        tensors = [torch.from_numpy(a).to(self.device) for a in (rows, mask, target, job)]
        optimizer = torch.optim.Adam(self.actor.parameters(), lr=s.lr * 3)
        losses = []
        for _ in range(s.imitation_steps):
            pick = torch.from_numpy(self.rng.integers(len(views), size=64)).to(self.device)
            rows_b, mask_b, best_b, job_b = (x[pick] for x in tensors)
            out: torch.Tensor = self.actor(rows_b, job_b)
            logits = out.masked_fill(~mask_b, -1e9)
            loss = (
                torch.logsumexp(logits, -1) - torch.logsumexp(logits.masked_fill(~best_b, -1e9), -1)
            ).mean()
            gradient_step(optimizer, loss, self.actor.parameters(), max_norm=1.0)
            losses.append(float(loss.detach()))
        return losses

    def _imitate_rule(self, env: FaultBatchEnv, typical: TypicalPods) -> list[float]:
        """Warm start with proposals: batches run by a teacher that takes fault-bestfit's
        unit at every pick; the actor is fitted to those picks (cross-entropy)."""
        s = self.settings
        record: list[Decision] = []
        teacher = functools.partial(self.policy, record=record, teacher=True)
        for b in range(s.imitation_batches):
            batch = env.draw(IMITATION_SEED_BASE + 1000 * s.seed + b)
            run_batch(batch, teacher, settings=env.settings, typical=typical)
        k = s.candidates
        rows = np.zeros((len(record), k, self.width), np.float32)
        mask = np.zeros((len(record), k), bool)
        action = np.array([d.action for d in record], np.int64)
        job = np.stack([d.job for d in record]).astype(np.float32) if record else np.zeros((0, J))
        for i, d in enumerate(record):
            rows[i, : len(d.rows)], mask[i, : len(d.rows)] = d.rows, True
        tensors = [torch.from_numpy(a).to(self.device) for a in (rows, mask, action, job)]
        optimizer = torch.optim.Adam(self.actor.parameters(), lr=s.lr * 3)
        losses = []
        for _ in range(s.imitation_steps if record else 0):
            pick = torch.from_numpy(self.rng.integers(len(record), size=64)).to(self.device)
            rows_b, mask_b, action_b, job_b = (x[pick] for x in tensors)
            logits = self.actor(rows_b, job_b).masked_fill(~mask_b, -1e9)
            loss = nn.functional.cross_entropy(logits, action_b)
            gradient_step(optimizer, loss, self.actor.parameters(), max_norm=1.0)
            losses.append(float(loss.detach()))
        return losses

    @classmethod
    def training_env(
        cls, settings: FaultAwareSettings, *, nodes: list[NodeSpec], pods: list[Pod]
    ) -> FaultBatchEnv:
        """Batches drawn from the training share of ``pods`` (``kale place train``)."""
        train, _ = split_pods(pods, settings.env.train_share)
        return FaultBatchEnv(nodes, train, settings.env)

    # -- files --------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        save_checkpoint(
            path,
            agent=NAME,
            settings=self.settings,
            networks={"actor": self.actor, "critic": self.critic},
            curve=self.curve,
            extra={
                "ranges": self.ranges.as_dict(),
                "kept_episode": self.kept_episode,
                "validation": self.validation_log,
                "typical": self.typical.as_dict() if self.typical is not None else None,
            },
        )

    @classmethod
    def from_payload(
        cls, payload: dict[str, Any], *, path: str, device: str = "cpu"
    ) -> FaultAwareAgent:
        values = {"proposals": 0, **payload["settings"]}  # files from before: no proposals
        agent = cls(settings_from_dict(FaultAwareSettings, values), device=device)
        for name in ("actor", "critic"):
            load_weights(getattr(agent, name), payload["networks"].get(name), path=path, name=name)
        agent.curve = TrainingCurve.from_dict(payload.get("curve", {}))
        extra = payload.get("extra", {})
        agent.ranges = FeatureRanges.from_dict(extra.get("ranges"))
        agent.kept_episode = extra.get("kept_episode")
        agent.validation_log = list(extra.get("validation", []))
        if extra.get("typical"):
            agent.typical = TypicalPods.from_dict(extra["typical"])
        return agent

    @classmethod
    def load(cls, path: str | Path, *, device: str = "cpu") -> FaultAwareAgent:
        return cls.from_payload(load_checkpoint(path), path=str(path), device=device)


class FaultAwarePolicy(ScorePolicy):
    """The agent as a fault-aware node score plugin (``agent:PATH``).

    ``score`` picks the job's first unit and ranks every feasible node by its best unit;
    ``choose_gpus`` then picks the rest of the job's units on the chosen node one at a time.
    With proposals the candidates are the units of the rules' top nodes (it needs the
    placer's tie order, ``uses_rank``, and typical pods for FGD); a *teacher* picks the
    unit fault-bestfit would take instead of the network's (the warm start's demonstrations).
    """

    name = NAME
    uses_faults = True
    uses_rank = True

    def __init__(
        self,
        agent: FaultAwareAgent,
        context: PolicyContext | None = None,
        *,
        explore: bool = False,
        record: list[Decision] | None = None,
        teacher: bool = False,
    ) -> None:
        self.agent, self.explore, self.record, self.teacher = agent, explore, record, teacher
        self.bestfit = BestFitPolicy(context)
        self.healthy_fgd = agent.settings.rule == "healthy-fgd"
        self.gpu_faults: np.ndarray | None = None
        self.node_faults: np.ndarray | None = None
        self._first: tuple[str, int, int] | None = None
        self.starts: dict[str, int] = {}
        """How many times each pod has been placed (its restarts), for the records."""
        self.ranges = agent.ranges
        self.check_ranges = False
        """Set by the guard: raise ``OutsideTrainingRange`` instead of deciding on inputs
        outside the training ranges."""
        self.rank: np.ndarray | None = None
        self.proposer: Proposer | None = None
        if agent.settings.proposals:
            typical = (context.typical if context is not None else None) or agent.typical
            if typical is None:
                raise ValueError(f"{NAME} chooses among FGD's proposals: it needs typical pods")
            rules: dict[str, ScorePolicy] = {
                "fault-bestfit": FaultAwareBestFitPolicy(context),
                "bestfit": BestFitPolicy(context),
                "fgd": FGDPolicy(PolicyContext(typical=typical)),
            }
            self.proposer = Proposer(rules, top=agent.settings.proposals, gpu_rule="fault-bestfit")
        self.cpu_rule: ScorePolicy = self.bestfit
        """Who places CPU-only pods (no GPU of theirs can fail): BestFit, or FGD when the
        agent starts as ``healthy-fgd`` (their CPU shapes the GPUs' fragmentation)."""
        if self.healthy_fgd and self.proposer is not None:
            self.cpu_rule = self.proposer.rules["fgd"]
        self._node_rules: dict[int, np.ndarray] = {}

    def observe_rank(self, rank: np.ndarray) -> None:
        self.rank = rank

    def _inputs(self, units: UnitRows) -> UnitRows:
        """Training (recording) widens the ranges; a guarded policy checks them."""
        names = PROPOSAL_UNIT_FEATURES if self.proposer is not None else UNIT_FEATURES
        if self.record is not None:
            self.ranges.update("units", units.rows, names)
            self.ranges.update("job", units.job[None], JOB_FEATURES)
        if self.check_ranges:
            self.ranges.check("units", units.rows)
            self.ranges.check("job", units.job[None])
        return units

    def observe_faults(self, node_faults: np.ndarray, gpu_faults: np.ndarray) -> None:
        self.gpu_faults = np.asarray(gpu_faults, np.int64)
        self.node_faults = np.asarray(node_faults, np.int64)
        if self.proposer is not None:
            rule = self.proposer.rules["fault-bestfit"]
            if wants_faults(rule):
                rule.observe_faults(node_faults, gpu_faults)

    def _faults(self, cluster: Cluster) -> np.ndarray | None:
        f = self.gpu_faults
        return f if f is not None and f.shape[0] == len(cluster) else None

    def _units(
        self, pod: Pod, cluster: Cluster, nodes: np.ndarray, picked: tuple[int, ...] = ()
    ) -> tuple[UnitRows, int | None]:
        """The candidate units (with their nodes' rule features when proposing) and, for a
        first pick with proposals, the row fault-bestfit's choice stands at."""
        faults = self._faults(cluster)
        if self.proposer is None:
            return self._inputs(
                unit_rows(pod, cluster, nodes, gpu_faults=faults, picked=picked)
            ), None
        if not picked:
            rank = self.rank if self.rank is not None else np.arange(len(cluster), dtype=np.int64)
            proposals = self.proposer.propose(pod, cluster, nodes, rank)
            self._node_rules = dict(zip(proposals.nodes.tolist(), proposals.features, strict=True))
            nodes = np.sort(proposals.nodes)
            rule_node = self._taught_node(proposals, rank, cluster)
        else:
            rule_node = int(nodes[0])
            if rule_node not in self._node_rules:  # a lone feasible node: never scored
                rank = np.arange(len(cluster), dtype=np.int64)
                proposals = self.proposer.propose(pod, cluster, nodes, rank)
                self._node_rules = dict(
                    zip(proposals.nodes.tolist(), proposals.features, strict=True)
                )
        units = unit_rows(pod, cluster, nodes, gpu_faults=faults, picked=picked)
        extra = (
            np.stack([self._node_rules[int(n)] for n in units.node.tolist()])
            if len(units.node)
            else np.zeros((0, len(RULE_FEATURES)), np.float32)
        )
        rows = np.concatenate([units.rows, extra], axis=1).astype(np.float32)
        units = UnitRows(rows, units.job, units.node, units.gpu)
        target = None
        if self.teacher:
            gpus = self._taught_gpus(pod, cluster, rule_node)
            want = [g for g in gpus if g not in picked] or [-1]
            hit = np.flatnonzero((units.node == rule_node) & (units.gpu == want[0]))
            target = int(hit[0]) if hit.size else None
        return self._inputs(units), target

    def _taught_node(self, proposals: Proposals, rank: np.ndarray, cluster: Cluster) -> int:
        """The candidate node the agent's rule takes (``FaultAwareSettings.rule``): for
        ``healthy-fgd``, the fewest recent node faults (capped as fault-bestfit caps them),
        then FGD's order (its score, then the placer's tie order)."""
        nodes = proposals.nodes
        if not self.healthy_fgd:
            return int(nodes[proposals.picks["fault-bestfit"]])
        faults = np.zeros(len(nodes), np.int64)
        if self.node_faults is not None and self.node_faults.shape[0] == len(cluster):
            faults = np.minimum(self.node_faults[nodes], FAULT_CAP)
        fgd = proposals.features[:, RULE_FEATURES.index("fgd_score")]
        return int(nodes[np.lexsort((rank[nodes], -fgd, faults))[0]])

    def _taught_gpus(self, pod: Pod, cluster: Cluster, node: int) -> tuple[int, ...]:
        """The GPUs the agent's rule takes on ``node``: fault-bestfit's; or, for
        ``healthy-fgd``, FGD's unless a GPU with fewer recent faults fits, then the fewest
        faults (tightest, lowest index among equals, as fault-bestfit)."""
        assert self.proposer is not None
        fault_rule = self.proposer.rules["fault-bestfit"]
        if not self.healthy_fgd:
            return fault_rule.choose_gpus(pod, cluster, node)
        gpus = self.proposer.rules["fgd"].choose_gpus(pod, cluster, node)
        faults = self._faults(cluster)
        if faults is None or not gpus:
            return gpus
        count = int(cluster.gpu_count[node])
        free, mine = cluster.gpu_free[node, :count], faults[node, :count]
        fitting = np.flatnonzero(free >= (pod.gpu_milli if pod.is_sharing else MILLI))
        healthiest = np.sort(mine[fitting])[: pod.num_gpu].sum()
        if mine[list(gpus)].sum() <= healthiest:
            return gpus
        return fault_rule.choose_gpus(pod, cluster, node)

    def score(self, pod: Pod, cluster: Cluster, nodes: np.ndarray) -> np.ndarray:
        if not pod.num_gpu:
            return self.cpu_rule.score(pod, cluster, nodes)
        units, target = self._units(pod, cluster, nodes)
        logits = self.agent.logits(units)
        index = self._choose(units, logits, pod.name, target)
        self._first = (pod.name, int(units.node[index]), int(units.gpu[index]))
        order = np.argsort(nodes, kind="stable")
        position = order[np.searchsorted(nodes[order], units.node)]
        best = np.full(len(nodes), -np.inf)
        np.maximum.at(best, position, logits)
        scores = np.unique(best, return_inverse=True)[1].reshape(-1).astype(np.int64)
        if self.explore or self.teacher:  # the drawn (or taught) unit's node wins outright
            scores[position[index]] = scores.max() + 1
        return scores

    def _choose(self, units: UnitRows, logits: np.ndarray, pod: str, target: int | None) -> int:
        agent = self.agent
        if target is not None:
            index = target
        elif self.explore:
            p = np.exp(logits - logits.max())
            index = int(agent.rng.choice(len(p), p=p / p.sum()))
        else:
            index = int(np.argmax(logits))
        if self.record is not None:
            start = self.starts.get(pod, 0)
            self.record.append(agent._decision(units, logits, index, pod, start))
        return index

    def choose_gpus(self, pod: Pod, cluster: Cluster, node: int) -> tuple[int, ...]:
        if not pod.num_gpu:
            return ()
        picked: list[int] = []
        first, self._first = self._first, None
        if first is not None and first[0] == pod.name and first[1] == node:
            picked.append(first[2])
        while len(picked) < pod.num_gpu:
            units, target = self._units(pod, cluster, np.array([node]), tuple(picked))
            if not len(units.rows):
                return ()
            index = self._choose(units, self.agent.logits(units), pod.name, target)
            picked.append(int(units.gpu[index]))
        self.starts[pod.name] = self.starts.get(pod.name, 0) + 1
        return tuple(sorted(picked))
