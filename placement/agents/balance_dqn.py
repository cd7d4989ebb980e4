"""``balance_dqn``: DQN node placement rewarded for uniform, unsaturated nodes.

The document's value network has two parts: a *proposing* network that reads the state and
the task and gives a probability per node (its "actor vector"), and a *scoring* network
that reads the state and an action and gives that action's value; a *target* network of the
same shape is copied from it every ``target_sync`` updates. Here both parts score node rows
with one shared MLP each, so the same weights run on any number of nodes:

1. the proposing net ranks the candidate nodes and shortlists the best ``shortlist``;
2. the scoring net values those and the highest value wins (ε-greedy while training).

**The candidates are the rules' proposals** (``env.candidates`` = K, the shipped agent;
``placement.env.proposals``): the top K nodes of BestFit, FGD and GpuPacking, each row the
node before/after the pod (``placement.env.node_features``) beside what the rules say of it
— their scores, FGD's fragmentation gain, which rule picks it and where it stands in each
rule's list. So the agent can *be* the rule it must beat (following FGD's pick, with FGD's
GPU choice, is FGD decision for decision) and leave it only where it learned better. With
``candidates = 0`` (agent files from before) every feasible node is a candidate.

Learning (one update every ``train_every`` decisions, from a replay buffer): the scoring net
by the squared TD error ``(r + γ · max_a′ Q_target(s′, a′) − Q(s, a))²``; the proposing net
by cross-entropy toward the scoring net's best candidate, so it shortlists what the scorer
values. With proposals the networks are first *warm-started* from a rule's picks
(``imitate``: DQfD — the TD loss plus a large-margin term on demonstrations, which stay in
every later batch; ``placement.agents.tr_dqn_warm``), episodes draw their workload from a
family (``env.family``: ``train-mix``), and every ``validate_every`` episodes the greedy
agent is judged by the inflation experiment on generated *validation* workloads: the best
weights — the warm start's included — are kept. The reward is the environment's
(``placement.env.node_env``): α·uniformity gain − β·stranded GPU milli − κ·failed pods.
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
from placement.agents.tr_dqn_warm import ImitationSettings
from placement.cluster import Cluster, default_gpus
from placement.env.node_env import (
    CANDIDATE_FEATURES,
    CANDIDATE_SPEC,
    CONTEXT_FEATURES,
    NODE_SPEC,
    NodeEnvSettings,
    NodeObservation,
    NodePlacementEnv,
    observe,
    observe_candidates,
)
from placement.env.node_features import NODE_FEATURES, Tolerance
from placement.env.proposals import RULES, Proposer, default_proposer
from placement.fallback import FeatureRanges
from placement.frag import TypicalPods
from placement.pod import Pod
from placement.policies.base import PolicyContext, ScorePolicy

NAME = "balance_dqn"
EPISODE_SEED_BASE = 100_000
"""Training episode seeds start here, far from the judged seeds (42–51 and nearby)."""
DEMO_SEED_BASE = 150_000
"""Demonstration episodes (the warm start) use seeds from here."""
VALIDATION_SEED_BASE = 9_000
"""Validation workloads: family generator seeds from here (one per family)."""
VALIDATION_RUN_SEED = 1_000
"""The inflation seed of every validation run (never a judged seed)."""
VALIDATION_FAMILIES = (
    "sharing-0.55+multi-gpu-0.15+nodes-0.2",
    "cpu-0.35+constrained-0.1+nodes-0.2",
    "multi-gpu-0.25+sharing-0.3+nodes-0.2",
)
"""Generated workloads that pick the kept weights: inside the training box, never judged."""


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
    shortlist: int = 8
    """Candidates the proposing net passes to the scoring net."""
    explore: EpsilonSchedule = field(default_factory=lambda: EpsilonSchedule(0.3, 0.02, 0.999))
    imitate: str = "fgd"
    """The rule whose picks warm-start the networks (with proposals; "" for none)."""
    imitation: ImitationSettings = field(
        default_factory=lambda: ImitationSettings(
            episodes=6, steps=1500, margin=0.05, weight=1.0, demo_batch=16
        )
    )
    validate_every: int = 6
    """Episodes between validation runs (0: keep the last weights)."""
    validation: tuple[str, ...] = VALIDATION_FAMILIES
    env: NodeEnvSettings = field(
        default_factory=lambda: NodeEnvSettings(
            alpha=0.5, beta=1.0, candidates=4, family="train-mix"
        )
    )


class RowNet(nn.Module):
    """One value per row from (row features, shared context): the shared per-node network."""

    def __init__(self, hidden: int, row: int = NODE_SPEC.row) -> None:
        super().__init__()
        self.body = mlp([row + NODE_SPEC.context, hidden, hidden, 1])

    def forward(self, rows: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        ctx = context
        if rows.dim() > context.dim():  # many rows share one context
            ctx = context.unsqueeze(-2).expand(*rows.shape[:-1], context.shape[-1])
        value: torch.Tensor = self.body(torch.cat([rows, ctx], dim=-1))
        return value.squeeze(-1)


def _masked(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return values.masked_fill(~mask, -1e9)


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
        self.proposals = self.settings.env.candidates > 0
        spec = CANDIDATE_SPEC if self.proposals else NODE_SPEC
        self.width = spec.row
        h = self.settings.hidden
        self.proposer, self.scorer = RowNet(h, spec.row), RowNet(h, spec.row)
        self.target_proposer, self.target_scorer = RowNet(h, spec.row), RowNet(h, spec.row)
        for net in (self.proposer, self.scorer, self.target_proposer, self.target_scorer):
            net.to(self.device)
        sync_target(self.proposer, self.target_proposer)
        sync_target(self.scorer, self.target_scorer)
        params = [*self.proposer.parameters(), *self.scorer.parameters()]
        self.optimizer = torch.optim.Adam(params, lr=self.settings.lr)
        self.curve = TrainingCurve()
        self.updates = 0
        self.ranges = FeatureRanges()
        """Each input feature's range over training (the guard's out-of-range check)."""
        self.kept_episode: int | None = None
        """The episode whose weights validation kept (−1: the warm start's)."""
        self.validation_log: list[dict[str, float]] = []
        self.typical: TypicalPods | None = None
        """The training workload's typical pods: FGD's, when the caller has none."""

    @property
    def slots(self) -> int:
        """Candidates per decision with proposals (every rule's top K)."""
        return self.settings.env.candidates * len(RULES)

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

    def note_inputs(self, rows: np.ndarray, context: np.ndarray) -> None:
        """Widen the training ranges to one decision's inputs."""
        names = CANDIDATE_FEATURES if self.proposals else NODE_FEATURES
        self.ranges.update("rows", rows, names)
        self.ranges.update("context", context[None], CONTEXT_FEATURES)

    # -- learning over every feasible node (candidates = 0) ---------------------------------
    def _candidates(
        self, obs: NodeObservation | None, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Stored candidate rows of a state: the proposer's top half plus random others."""
        k, width = self.settings.shortlist, self.width
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
        k, f, c = self.settings.shortlist, self.width, NODE_SPEC.context
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

    def _step(self, loss: torch.Tensor) -> None:
        params = [*self.proposer.parameters(), *self.scorer.parameters()]
        gradient_step(self.optimizer, loss, params, max_norm=10.0)
        self.updates += 1
        if self.updates % self.settings.target_sync == 0:
            sync_target(self.scorer, self.target_scorer)
            sync_target(self.proposer, self.target_proposer)

    def learn(self, batch: dict[str, np.ndarray]) -> float:
        """One gradient step on a replay batch; returns the loss before the step."""
        t = {k: torch.from_numpy(v).to(self.device) for k, v in batch.items()}
        q = self.scorer(t["row"], t["ctx"])
        with torch.no_grad():
            nq = _masked(self.target_scorer(t["next"], t["next_ctx"]), t["next_mask"])
            best = torch.where(t["next_mask"].any(dim=1), nq.max(dim=1).values, 0.0)
            target = t["reward"] + self.settings.gamma * (1.0 - t["done"]) * best
            label = _masked(self.scorer(t["cand"], t["ctx"]), t["cand_mask"]).argmax(dim=1)
        logits = _masked(self.proposer(t["cand"], t["ctx"]), t["cand_mask"])
        loss_q = torch.mean((target - q) ** 2)
        self._step(loss_q + nn.functional.cross_entropy(logits, label))
        return float(loss_q.detach())

    def _train_all_nodes(
        self,
        env: NodePlacementEnv,
        episodes: int,
        on_episode: Callable[[dict[str, float]], None] | None,
    ) -> None:
        s = self.settings
        rng = np.random.default_rng(s.seed)
        buffer = self._buffer()
        started, step = time.perf_counter(), 0
        for episode in range(episodes):
            obs, info = env.reset(seed=EPISODE_SEED_BASE + 1000 * s.seed + episode)
            cand = self._candidates(obs, rng)
            total, losses = 0.0, []
            while obs is not None:
                self.note_inputs(obs.rows, obs.context)
                if rng.random() < s.explore.value(step):
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
            self._record(episode, total, losses, step, info, started, on_episode)

    # -- learning among the rules' proposals (candidates = K) -------------------------------
    def _proposal_buffer(self, capacity: int) -> ReplayBuffer:
        k, f, c = self.slots, self.width, NODE_SPEC.context
        return ReplayBuffer(
            capacity,
            {
                "cand": ((k, f), np.float32),
                "mask": ((k,), bool),
                "ctx": ((c,), np.float32),
                "action": ((), np.int64),
                "reward": ((), np.float32),
                "done": ((), np.float32),
                "next": ((k, f), np.float32),
                "next_mask": ((k,), bool),
                "next_ctx": ((c,), np.float32),
            },
        )

    def _padded(self, obs: NodeObservation | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows = np.zeros((self.slots, self.width), np.float32)
        mask = np.zeros(self.slots, bool)
        if obs is None:
            return rows, mask, np.zeros(NODE_SPEC.context, np.float32)
        rows[: len(obs.rows)], mask[: len(obs.rows)] = obs.rows, True
        return rows, mask, obs.context

    def _proposal_loss(self, part: dict[str, np.ndarray], *, demo: bool) -> torch.Tensor:
        """TD loss + the proposer's cross-entropy (toward the scorer's best, or on a
        demonstration the rule's pick) + on demonstrations the large-margin term."""
        t = {k: torch.from_numpy(v).to(self.device) for k, v in part.items()}
        mask, action = t["mask"], t["action"]
        q_all = self.scorer(t["cand"], t["ctx"])
        q = q_all.gather(1, action.unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            nq = _masked(self.target_scorer(t["next"], t["next_ctx"]), t["next_mask"])
            best = torch.where(t["next_mask"].any(dim=1), nq.max(dim=1).values, 0.0)
            target = t["reward"] + self.settings.gamma * (1.0 - t["done"]) * best
            label = action if demo else _masked(q_all, mask).argmax(dim=1)
        logits = _masked(self.proposer(t["cand"], t["ctx"]), mask)
        loss = torch.mean((target - q) ** 2) + nn.functional.cross_entropy(logits, label)
        if demo:
            imitation = self.settings.imitation
            penalty = torch.full_like(q_all, imitation.margin).scatter(1, action.unsqueeze(1), 0)
            over = _masked(q_all + penalty, mask).max(dim=1).values - q
            loss = loss + imitation.weight * over.mean()
        return loss

    def learn_proposals(
        self, batch: dict[str, np.ndarray] | None, demo: dict[str, np.ndarray] | None = None
    ) -> float:
        """One gradient step on a replay batch and/or a demonstration batch."""
        loss = torch.zeros((), device=self.device)
        if batch is not None:
            loss = loss + self._proposal_loss(batch, demo=False)
        if demo is not None:
            loss = loss + self._proposal_loss(demo, demo=True)
        self._step(loss)
        return float(loss.detach())

    def _episode(
        self,
        env: NodePlacementEnv,
        seed: int,
        buffer: ReplayBuffer,
        choose: Callable[[NodeObservation], int],
        after_step: Callable[[], float | None] = lambda: None,
    ) -> tuple[float, list[float], int, dict[str, Any]]:
        """One episode of ``env`` acting by ``choose`` (an index into the candidates),
        every transition stored in ``buffer``; ``after_step`` may learn."""
        obs, info = env.reset(seed=seed)
        total, losses, steps = 0.0, [], 0
        current = self._padded(obs)
        while obs is not None:
            self.note_inputs(obs.rows, obs.context)
            index = choose(obs)
            nxt, reward, done, _, info = env.step(int(obs.nodes[index]))
            after = self._padded(nxt)
            buffer.add(
                cand=current[0],
                mask=current[1],
                ctx=current[2],
                action=index,
                reward=reward,
                done=float(done),
                next=after[0],
                next_mask=after[1],
                next_ctx=after[2],
            )
            obs, current, total, steps = nxt, after, total + reward, steps + 1
            loss = after_step()
            if loss is not None:
                losses.append(loss)
        return total, losses, steps, info

    def _weights(self) -> dict[str, dict[str, torch.Tensor]]:
        return {
            name: {k: v.detach().clone() for k, v in getattr(self, name).state_dict().items()}
            for name in ("proposer", "scorer")
        }

    def _restore(self, weights: dict[str, dict[str, torch.Tensor]]) -> None:
        for name, state in weights.items():
            getattr(self, name).load_state_dict(state)
        sync_target(self.proposer, self.target_proposer)
        sync_target(self.scorer, self.target_scorer)

    def validate(self, env: NodePlacementEnv) -> float:
        """Mean allocation (%) at 130 % demand of the greedy agent on the validation
        workloads (generated from the env's source lists; never judged)."""
        from placement.frag import typical_pods
        from placement.inflation import InflationSettings, run_inflation
        from placement.workloads.families import generate_openb

        settings = InflationSettings(track_fragmentation=False)
        finals = []
        for i, family in enumerate(self.settings.validation):
            made = generate_openb(family, env.nodes, env.pods, seed=VALIDATION_SEED_BASE + i)
            run = run_inflation(
                made.nodes,
                made.pods,
                NAME,
                VALIDATION_RUN_SEED,
                settings,
                typical=typical_pods(made.pods),
                factory=self.policy,
            )
            finals.append(run.final)
        return float(np.mean(finals))

    def _train_proposals(
        self,
        env: NodePlacementEnv,
        episodes: int,
        on_episode: Callable[[dict[str, float]], None] | None,
    ) -> None:
        s = self.settings
        rng = np.random.default_rng(s.seed)
        started = time.perf_counter()
        demos: ReplayBuffer | None = None
        if s.imitate and s.imitation.episodes > 0:
            demos = self._proposal_buffer(200_000)
            rule = s.imitate
            for i in range(s.imitation.episodes):
                seed = DEMO_SEED_BASE + 1000 * s.seed + i
                self._episode(env, seed, demos, lambda obs: obs.picks[rule])
            for _ in range(s.imitation.steps):
                self.learn_proposals(None, demos.sample(s.batch, rng))
        best: tuple[float, int, dict[str, dict[str, torch.Tensor]]] | None = None
        if s.validate_every > 0 and s.validation:
            best = (self.validate(env), -1, self._weights())
            self.validation_log.append({"episode": -1, "allocated": best[0]})
        buffer = self._proposal_buffer(s.replay)
        demo_batch = s.imitation.demo_batch if demos is not None else 0
        counter = {"step": 0}

        def choose(obs: NodeObservation) -> int:
            if rng.random() < s.explore.value(counter["step"]):
                return int(rng.integers(len(obs.nodes)))
            return self.greedy(obs.rows, obs.context)

        def after_step() -> float | None:
            counter["step"] += 1
            if counter["step"] % s.train_every or len(buffer) < s.warmup:
                return None
            demo = demos.sample(demo_batch, rng) if demos is not None and demo_batch else None
            return self.learn_proposals(buffer.sample(s.batch, rng), demo)

        for episode in range(episodes):
            seed = EPISODE_SEED_BASE + 1000 * s.seed + episode
            total, losses, _, info = self._episode(env, seed, buffer, choose, after_step)
            record = self._record(
                episode, total, losses, counter["step"], info, started, on_episode, quiet=True
            )
            if best is not None and (episode + 1) % s.validate_every == 0:
                score = self.validate(env)
                record["validation_allocated"] = score
                self.validation_log.append({"episode": episode, "allocated": score})
                if score > best[0]:
                    best = (score, episode, self._weights())
            if on_episode is not None:
                on_episode(record)
        if best is not None:
            self._restore(best[2])
            self.kept_episode = best[1]

    def _record(
        self,
        episode: int,
        total: float,
        losses: list[float],
        step: int,
        info: dict[str, Any],
        started: float,
        on_episode: Callable[[dict[str, float]], None] | None,
        *,
        quiet: bool = False,
    ) -> dict[str, float]:
        record = {
            "episode": episode,
            "return": total,
            "loss": float(np.mean(losses)) if losses else float("nan"),
            "epsilon": self.settings.explore.value(step),
            "allocated_share": info["allocated_share"],
            "failed_pods": info["failed_pods"],
            "seconds": time.perf_counter() - started,
            "cpu_seconds": time.process_time(),
        }
        self.curve.add(**record)
        if on_episode is not None and not quiet:
            on_episode(record)
        return record

    def train(
        self,
        env: NodePlacementEnv,
        episodes: int,
        *,
        on_episode: Callable[[dict[str, float]], None] | None = None,
    ) -> TrainingCurve:
        """Warm-start (with proposals), then run ``episodes`` ε-greedy episodes of ``env``,
        learning from replay as it goes (module docstring)."""
        enable_determinism(self.device.type)
        self.tolerance = env.tolerance
        self.typical = env.typical
        started = time.perf_counter()
        if self.proposals:
            self._train_proposals(env, episodes, on_episode)
        else:
            self._train_all_nodes(env, episodes, on_episode)
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
                "kept_episode": self.kept_episode,
                "validation": self.validation_log,
                "typical": self.typical.as_dict() if self.typical is not None else None,
            },
        )

    @classmethod
    def from_payload(cls, payload: dict[str, Any], *, path: str, device: str = "cpu") -> BalanceDQN:
        settings = settings_from_dict(BalanceDQNSettings, payload["settings"])
        extra = payload.get("extra", {})
        cpu_milli, gpu_milli = extra.get("tolerance", [4000.0, 500.0])
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
        agent.ranges = FeatureRanges.from_dict(extra.get("ranges"))
        agent.kept_episode = extra.get("kept_episode")
        agent.validation_log = list(extra.get("validation", []))
        if extra.get("typical"):
            agent.typical = TypicalPods.from_dict(extra["typical"])
        return agent

    @classmethod
    def load(cls, path: str | Path, *, device: str = "cpu") -> BalanceDQN:
        return cls.from_payload(load_checkpoint(path), path=str(path), device=device)


class BalanceDQNPolicy(ScorePolicy):
    """The agent as a node score plugin (``agent:PATH`` in ``kale place simulate``).

    With proposals it needs the placer's tie order (``uses_rank``) to know each rule's
    pick, and the workload's typical pods for FGD; the chosen candidate alone scores 1."""

    name = NAME
    uses_rank = True

    def __init__(self, agent: BalanceDQN, context: PolicyContext | None = None) -> None:
        self.agent = agent
        typical = context.typical if context is not None else None
        self.typical: TypicalPods | None = typical or agent.typical
        self.tolerance = Tolerance.of(typical) if typical is not None else agent.tolerance
        self.ranges = agent.ranges
        self.check_ranges = False
        """Set by the guard: raise ``OutsideTrainingRange`` instead of deciding on inputs
        outside the training ranges."""
        self.rank: np.ndarray | None = None
        self._proposer: Proposer | None = None

    def observe_rank(self, rank: np.ndarray) -> None:
        self.rank = rank

    def _rules(self) -> Proposer:
        if self._proposer is None:
            if self.typical is None:
                raise ValueError(f"{NAME} chooses among FGD's proposals: it needs typical pods")
            self._proposer = default_proposer(self.typical, top=self.agent.settings.env.candidates)
        return self._proposer

    def score(self, pod: Pod, cluster: Cluster, nodes: np.ndarray) -> np.ndarray:
        if not self.agent.proposals:
            rows, context = observe(cluster, pod, nodes, self.tolerance)
            self._check(rows, context)
            return self.agent.scores(rows, context)
        rank = self.rank if self.rank is not None else np.arange(len(cluster), dtype=np.int64)
        seen = observe_candidates(cluster, pod, nodes, self.tolerance, self._rules(), rank)
        candidates, rows, context, _ = seen
        self._check(rows, context)
        chosen = candidates[self.agent.greedy(rows, context)]
        scores: np.ndarray = (nodes == chosen).astype(np.int64)
        return scores

    def _check(self, rows: np.ndarray, context: np.ndarray) -> None:
        if self.check_ranges:
            self.ranges.check("rows", rows)
            self.ranges.check("context", context[None])

    def choose_gpus(self, pod: Pod, cluster: Cluster, node: int) -> tuple[int, ...]:
        if not self.agent.proposals:
            return default_gpus(cluster, pod, node)
        return self._rules().choose_gpus(pod, cluster, node)
