"""``balance_dqn``: DQN node placement rewarded for uniform, unsaturated nodes.

The document's value network has two parts: a *proposing* network that reads the state and
the task and gives a probability per node (its "actor vector"), and a *scoring* network
that reads the state and an action and gives that action's value; a *target* network of the
same shape is copied from it every ``target_sync`` updates. Here both parts score node rows
with one shared MLP each (``placement.env.node_features``: the node before/after the pod,
the pod, the cluster), so the same weights run on any number of nodes:

1. the proposing net ranks every feasible node and shortlists the best ``shortlist``;
2. the scoring net values those and the highest value wins (ε-greedy while training).

Learning (one update every ``train_every`` decisions, from a replay buffer): the scoring net
by the squared TD error ``(r + γ · max_a′ Q_target(s′, a′) − Q(s, a))²`` where the max runs
over a stored candidate set of ``s′`` (the online proposer's half of the shortlist plus
random feasible nodes); the proposing net by cross-entropy toward the scoring net's best
node among the stored candidates of ``s``, so it learns to shortlist what the scorer values.
The reward is the environment's (``placement.env.node_env``): α·uniformity gain −
β·stranded GPU milli − κ·failed pods.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from placement.agents.common import (
    EpsilonSchedule,
    ReplayBuffer,
    TrainingCurve,
    configure,
    enable_determinism,
    gradient_step,
    load_checkpoint,
    load_weights,
    mlp,
    save_checkpoint,
    settings_from_dict,
    sync_target,
)
from placement.cluster import Cluster
from placement.env.node_env import (
    NODE_SPEC,
    NodeEnvSettings,
    NodeObservation,
    NodePlacementEnv,
    observe,
)
from placement.env.node_features import (
    CLUSTER_FEATURES,
    NODE_FEATURES,
    POD_FEATURES,
    Tolerance,
)
from placement.fallback import FeatureRanges
from placement.pod import Pod
from placement.policies.base import PolicyContext, ScorePolicy

NAME = "balance_dqn"
CONTEXT_FEATURES = (*POD_FEATURES, *CLUSTER_FEATURES)
EPISODE_SEED_BASE = 100_000
"""Training episode seeds start here, far from the judged seeds (42–51 and nearby)."""


@dataclass(frozen=True)
class BalanceDQNSettings:
    """Every knob of the agent and its training (the seed included)."""

    seed: int = 0
    hidden: int = 64
    lr: float = 1e-3
    gamma: float = 0.5
    batch: int = 64
    replay: int = 10_000
    warmup: int = 256
    train_every: int = 4
    target_sync: int = 200
    """Updates of the value network between copies into the target network."""
    shortlist: int = 16
    """Nodes the proposing net passes to the scoring net (half of the stored candidates
    are the proposer's, half random)."""
    explore: EpsilonSchedule = field(default_factory=lambda: EpsilonSchedule(1.0, 0.02, 0.999))
    env: NodeEnvSettings = field(
        default_factory=lambda: NodeEnvSettings(node_share=0.15, alpha=0.5, beta=1.0)
    )


class RowNet(nn.Module):
    """One value per row from (row features, shared context): the shared per-node network."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.body = mlp([NODE_SPEC.row + NODE_SPEC.context, hidden, hidden, 1])

    def forward(self, rows: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        ctx = context
        if rows.dim() > context.dim():  # many rows share one context
            ctx = context.unsqueeze(-2).expand(*rows.shape[:-1], context.shape[-1])
        value: torch.Tensor = self.body(torch.cat([rows, ctx], dim=-1))
        return value.squeeze(-1)


class BalanceDQN:
    """The agent: networks, acting, learning, saving (module docstring)."""

    name = NAME
    settings_type = BalanceDQNSettings

    def __init__(
        self,
        settings: BalanceDQNSettings | None = None,
        *,
        device: str = "cpu",
        tolerance: Tolerance | None = None,
        deterministic: bool = True,
    ) -> None:
        self.settings = settings or BalanceDQNSettings()
        self.device = configure(self.settings.seed, device, deterministic=deterministic)
        self.tolerance = tolerance or Tolerance()
        h = self.settings.hidden
        self.proposer, self.scorer = RowNet(h).to(self.device), RowNet(h).to(self.device)
        self.target_proposer, self.target_scorer = (
            RowNet(h).to(self.device),
            RowNet(h).to(self.device),
        )
        sync_target(self.proposer, self.target_proposer)
        sync_target(self.scorer, self.target_scorer)
        params = [*self.proposer.parameters(), *self.scorer.parameters()]
        self.optimizer = torch.optim.Adam(params, lr=self.settings.lr)
        self.curve = TrainingCurve()
        self.updates = 0
        self.ranges = FeatureRanges()
        """Each input feature's range over training (the guard's out-of-range check)."""

    # -- acting -----------------------------------------------------------------------------
    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array, np.float32)).to(self.device)

    @torch.no_grad()
    def values(self, rows: np.ndarray, context: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shortlisted row indices, their values) for one decision."""
        r, c = self._tensor(rows), self._tensor(context)
        k = min(self.settings.shortlist, len(rows))
        logits = self.proposer(r, c)
        short = torch.topk(logits, k).indices.sort().values
        q = self.scorer(r[short], c)
        return short.cpu().numpy(), q.cpu().numpy()

    def greedy(self, rows: np.ndarray, context: np.ndarray) -> int:
        """Row index of the best node (the scoring net's pick from the proposer's list)."""
        short, q = self.values(rows, context)
        return int(short[int(np.argmax(q))])

    def scores(self, rows: np.ndarray, context: np.ndarray) -> np.ndarray:
        """Integer scores for a score plugin: shortlisted rows 1…k by value (equal values
        equal scores, for the placer's tie-break), other rows 0."""
        short, q = self.values(rows, context)
        out = np.zeros(len(rows), np.int64)
        out[short] = np.unique(q, return_inverse=True)[1].reshape(-1) + 1
        return out

    def policy(self, context: PolicyContext | None = None) -> BalanceDQNPolicy:
        return BalanceDQNPolicy(self, context)

    # -- learning ---------------------------------------------------------------------------
    def _candidates(
        self, obs: NodeObservation | None, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Stored candidate rows of a state: the proposer's top half plus random others."""
        k, width = self.settings.shortlist, NODE_SPEC.row
        rows = np.zeros((k, width), np.float32)
        mask = np.zeros(k, bool)
        if obs is None:
            return rows, mask, np.zeros(NODE_SPEC.context, np.float32)
        n = len(obs.nodes)
        if n <= k:
            pick = np.arange(n)
        else:
            with torch.no_grad():
                logits = self.proposer(self._tensor(obs.rows), self._tensor(obs.context))
            top = torch.topk(logits, k // 2).indices.cpu().numpy()
            rest = np.setdiff1d(np.arange(n), top)
            pick = np.concatenate([top, rng.choice(rest, k - len(top), replace=False)])
        rows[: len(pick)], mask[: len(pick)] = obs.rows[pick], True
        return rows, mask, obs.context

    def _buffer(self) -> ReplayBuffer:
        k, f, c = self.settings.shortlist, NODE_SPEC.row, NODE_SPEC.context
        return ReplayBuffer(
            self.settings.replay,
            {
                "row": ((f,), np.float32),
                "ctx": ((c,), np.float32),
                "reward": ((), np.float32),
                "done": ((), np.float32),
                "cand": ((k, f), np.float32),
                "cand_mask": ((k,), bool),
                "next": ((k, f), np.float32),
                "next_mask": ((k,), bool),
                "next_ctx": ((c,), np.float32),
            },
        )

    def learn(self, batch: dict[str, np.ndarray]) -> float:
        """One gradient step on a replay batch; returns the loss before the step."""
        t = {k: torch.from_numpy(v).to(self.device) for k, v in batch.items()}
        q = self.scorer(t["row"], t["ctx"])
        with torch.no_grad():
            nq = self.target_scorer(t["next"], t["next_ctx"]).masked_fill(~t["next_mask"], -1e9)
            best = torch.where(t["next_mask"].any(dim=1), nq.max(dim=1).values, 0.0)
            target = t["reward"] + self.settings.gamma * (1.0 - t["done"]) * best
            cq = self.scorer(t["cand"], t["ctx"]).masked_fill(~t["cand_mask"], -1e9)
            label = cq.argmax(dim=1)
        logits = self.proposer(t["cand"], t["ctx"]).masked_fill(~t["cand_mask"], -1e9)
        loss_q = torch.mean((target - q) ** 2)
        loss = loss_q + nn.functional.cross_entropy(logits, label)
        params = [*self.proposer.parameters(), *self.scorer.parameters()]
        gradient_step(self.optimizer, loss, params, max_norm=10.0)
        self.updates += 1
        if self.updates % self.settings.target_sync == 0:
            sync_target(self.scorer, self.target_scorer)
            sync_target(self.proposer, self.target_proposer)
        return float(loss_q.detach())

    def train(
        self,
        env: NodePlacementEnv,
        episodes: int,
        *,
        on_episode: Callable[[dict[str, float]], None] | None = None,
    ) -> TrainingCurve:
        """Run ``episodes`` ε-greedy episodes of ``env``, learning from replay as it goes."""
        s = self.settings
        enable_determinism(self.device.type)
        self.tolerance = env.tolerance
        rng = np.random.default_rng(s.seed)
        buffer = self._buffer()
        started, step = time.perf_counter(), 0
        for episode in range(episodes):
            obs, info = env.reset(seed=EPISODE_SEED_BASE + 1000 * s.seed + episode)
            cand = self._candidates(obs, rng)
            total, losses = 0.0, []
            while obs is not None:
                self.ranges.update("rows", obs.rows, NODE_FEATURES)
                self.ranges.update("context", obs.context[None], CONTEXT_FEATURES)
                epsilon = s.explore.value(step)
                if rng.random() < epsilon:
                    index = int(rng.integers(len(obs.nodes)))
                else:
                    index = self.greedy(obs.rows, obs.context)
                nxt, reward, done, _, info = env.step(int(obs.nodes[index]))
                after = self._candidates(nxt, rng)
                buffer.add(
                    row=obs.rows[index],
                    ctx=obs.context,
                    reward=reward,
                    done=float(done),
                    cand=cand[0],
                    cand_mask=cand[1],
                    next=after[0],
                    next_mask=after[1],
                    next_ctx=after[2],
                )
                obs, cand, total, step = nxt, after, total + reward, step + 1
                if step % s.train_every == 0 and len(buffer) >= s.warmup:
                    losses.append(self.learn(buffer.sample(s.batch, rng)))
            record = {
                "episode": episode,
                "return": total,
                "loss": float(np.mean(losses)) if losses else float("nan"),
                "epsilon": s.explore.value(step),
                "allocated_share": info["allocated_share"],
                "failed_pods": info["failed_pods"],
                "seconds": time.perf_counter() - started,
            }
            self.curve.add(**record)
            if on_episode is not None:
                on_episode(record)
        self.curve.seconds += time.perf_counter() - started
        return self.curve

    # -- files --------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        save_checkpoint(
            path,
            agent=NAME,
            settings=self.settings,
            networks={"proposer": self.proposer, "scorer": self.scorer},
            curve=self.curve,
            extra={
                "tolerance": [self.tolerance.cpu_milli, self.tolerance.gpu_milli],
                "ranges": self.ranges.as_dict(),
            },
        )

    @classmethod
    def from_payload(cls, payload: dict[str, Any], *, path: str, device: str = "cpu") -> BalanceDQN:
        settings = settings_from_dict(BalanceDQNSettings, payload["settings"])
        cpu_milli, gpu_milli = payload.get("extra", {}).get("tolerance", [4000.0, 500.0])
        agent = cls(
            settings,
            device=device,
            tolerance=Tolerance(cpu_milli, gpu_milli),
            deterministic=False,
        )
        for name in ("proposer", "scorer"):
            load_weights(getattr(agent, name), payload["networks"].get(name), path=path, name=name)
        sync_target(agent.proposer, agent.target_proposer)
        sync_target(agent.scorer, agent.target_scorer)
        agent.curve = TrainingCurve.from_dict(payload.get("curve", {}))
        agent.ranges = FeatureRanges.from_dict(payload.get("extra", {}).get("ranges"))
        return agent

    @classmethod
    def load(cls, path: str | Path, *, device: str = "cpu") -> BalanceDQN:
        return cls.from_payload(load_checkpoint(path), path=str(path), device=device)


class BalanceDQNPolicy(ScorePolicy):
    """The agent as a node score plugin (``agent:PATH`` in ``kale place simulate``)."""

    name = NAME

    def __init__(self, agent: BalanceDQN, context: PolicyContext | None = None) -> None:
        self.agent = agent
        typical = context.typical if context is not None else None
        self.tolerance = Tolerance.of(typical) if typical is not None else agent.tolerance
        self.ranges = agent.ranges
        self.check_ranges = False
        """Set by the guard: raise ``OutsideTrainingRange`` instead of deciding on inputs
        outside the training ranges."""

    def score(self, pod: Pod, cluster: Cluster, nodes: np.ndarray) -> np.ndarray:
        rows, context = observe(cluster, pod, nodes, self.tolerance)
        if self.check_ranges:
            self.ranges.check("rows", rows)
            self.ranges.check("context", context[None])
        return self.agent.scores(rows, context)
