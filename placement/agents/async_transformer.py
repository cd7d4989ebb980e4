"""``async_transformer``: node placement that learns online without blocking.

The document's scheduler, on a GPU cluster with data locality (``placement.locality``):

* **Network** — transformer encoders over the candidate slots, one Q value per slot
  (``placement.agents.async_transformer_net``: the settings and ``QNet``).
* **Decision thread** — the simulator's (or scheduler's) thread: for each pod it builds the
  observation, runs the current *inference* snapshot, and takes the best action, or with
  probability ε another one at random; the experience (observation, action, reward, next
  observation) goes to the shared buffer.
* **Training thread** — trains the *training* network (same structure) on batches from the
  buffer with the TD target ``r + γ · max Q_inference(s′, ·)`` and the document's loss
  ``|p − h| · log(1 + e^{−|p − h|})`` (or MSE); every ``copy_every`` decisions its weights
  are copied into a new inference snapshot (``placement.agents.online``).
* **Reward** — the document's: access latency (read + eviction, in units of
  ``latency_norm_s``) with a negative sign, plus ``rho`` × the GPU utilisation after the
  placement.

The agent acts through :class:`AsyncTransformerPolicy`, a node score plugin: the one chosen
candidate becomes scores the placer ranks, and each placement's data access comes back to
the agent as the document's reward.

**The rules' proposals** (``proposals`` = K, the shipped agent): the slots are the top K
nodes of BestFit, FGD and GpuPacking and the tightest node caching the pod's data and the
tightest on its rack (``placement.env.locality_features.proposal_tokens``), each token the
eight features and what the rules say of the node. The network is warm-started from
BestFit's picks (the rule it must not do worse than: demonstration windows, the TD loss
plus a large-margin term, demonstrations kept in every later batch), and every
``validate_every`` training windows the frozen agent runs validation windows of the
training pods: the weights with the lowest mean wait — without a lower working GPU share
than BestFit's — are kept, the warm start's included.

``synchronous=True`` runs the training steps inline at the same decision counts: the run
is then deterministic (tests, reproducible training). The default threaded mode is not:
when a step lands depends on the machine. ``learn`` on a policy keeps the agent learning
while it is judged (online, as the document runs it); ``agent:PATH`` runs it frozen.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from placement.agents.async_transformer_net import (
    NAME,
    PROPOSAL_TOKEN_FEATURES,
    AsyncTransformerSettings,
    QNet,
    token_width,
)
from placement.agents.common import (
    TrainingCurve,
    configure,
    gradient_step,
    load_checkpoint,
    load_weights,
    save_checkpoint,
    settings_from_dict,
)
from placement.agents.online import ExperienceBuffer, SnapshotPublisher, TrainerThread
from placement.cluster import Cluster, NodeSpec
from placement.env.locality_env import (
    draw_sequence,
    run_sequence,
    split_pods,
    window_utilisation,
)
from placement.env.locality_features import (
    TOKEN_FEATURES,
    Candidates,
    candidate_tokens,
    proposal_tokens,
)
from placement.env.proposals import Proposer, default_proposer
from placement.fallback import FeatureRanges
from placement.frag import TypicalPods, typical_pods
from placement.locality import Access, DataCaches
from placement.pod import Pod
from placement.policies.base import PolicyContext, ScorePolicy
from placement.policies.simple import BestFitPolicy

EPISODE_SEED_BASE = 300_000
DEMO_SEED_BASE = 330_000
"""The warm start's demonstration windows (training pods)."""
VALIDATION_SEED_BASE = 360_000
"""Validation windows (training pods, seeds of their own; never judged)."""

__all__ = [
    "NAME",
    "AsyncTransformerAgent",
    "AsyncTransformerPolicy",
    "AsyncTransformerSettings",
    "QNet",
]


@dataclass
class _Pending:
    tokens: np.ndarray
    mask: np.ndarray
    action: int
    reward: float | None = None


class AsyncTransformerAgent:
    """The agent: both threads, learning, saving (module docstring)."""

    name = NAME
    settings_type = AsyncTransformerSettings

    def __init__(
        self, settings: AsyncTransformerSettings | None = None, *, device: str = "cpu"
    ) -> None:
        self.settings = s = settings or AsyncTransformerSettings()
        self.device = configure(s.seed, device)
        self.net = QNet(s).to(self.device)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=s.lr)
        self.publisher = SnapshotPublisher(self.net)
        self.buffer = self._buffer()
        self.rng = np.random.default_rng([s.seed, 0xDEC])
        self.train_rng = np.random.default_rng([s.seed, 0x7EA])
        self.curve = TrainingCurve()
        self.decisions = 0
        self.pending: _Pending | None = None
        self.trainer = TrainerThread(self._step, self._publish, synchronous=s.synchronous)
        self.latency_s: list[float] = []
        """Wall seconds per decision (observation, inference, choice, recording)."""
        self.demos: ExperienceBuffer | None = None
        """The warm start's demonstrations (with proposals), kept for every later step."""
        self.kept_episode: int | None = None
        """The window whose weights validation kept (−1: the warm start's)."""
        self.validation_log: list[dict[str, float]] = []
        self.typical: TypicalPods | None = None
        """The training pods' typical pods: FGD's, when the caller has none."""
        self.cpu_s: list[float] = []
        """The deciding thread's CPU seconds per decision (what a loaded machine adds to the
        wall time is waiting for a core)."""
        self.used_versions: list[int] = []
        """Snapshot version behind each decision (recorded while learning)."""
        self.ranges = FeatureRanges()
        """Each token feature's range over the decisions it learned from (the guard's
        out-of-range check)."""

    def _buffer(self, capacity: int | None = None) -> ExperienceBuffer:
        s = self.settings
        return ExperienceBuffer(
            capacity or s.buffer,
            {
                "tokens": ((s.slots, token_width(s)), np.float32),
                "mask": ((s.slots,), bool),
                "action": ((), np.int64),
                "reward": ((), np.float32),
                "next_tokens": ((s.slots, token_width(s)), np.float32),
                "next_mask": ((s.slots,), bool),
                "done": ((), np.float32),
            },
        )

    # -- the decision thread --------------------------------------------------------------
    def _tensor(self, array: np.ndarray, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(array), dtype=dtype, device=self.device)

    def q_values(self, cands: Candidates) -> tuple[np.ndarray, int]:
        """Q of each real candidate under the current inference snapshot, and its version."""
        snap = self.publisher.current()
        with torch.inference_mode():
            q = snap.net(
                self._tensor(cands.tokens[None]), self._tensor(cands.mask[None], torch.bool)
            )
        return q[0, : len(cands.nodes)].cpu().numpy().astype(np.float64), snap.version

    def decide(self, cands: Candidates, *, explore: bool, learn: bool) -> tuple[int, np.ndarray]:
        """(index of the chosen candidate, every candidate's Q); learning records it."""
        q, version = self.q_values(cands)
        index = int(np.argmax(q))
        if explore and len(q) > 1 and self.rng.random() < self.settings.epsilon:
            others = np.delete(np.arange(len(q)), index)  # "another action than the best"
            index = int(self.rng.choice(others))
        return self.commit(cands, index, q, version, learn=learn)

    def commit(
        self, cands: Candidates, index: int, q: np.ndarray, version: int, *, learn: bool
    ) -> tuple[int, np.ndarray]:
        """Record a decision for learning (when ``learn``) and return it."""
        if learn:
            names = PROPOSAL_TOKEN_FEATURES if self.settings.proposals else TOKEN_FEATURES
            self.used_versions.append(version)
            self.ranges.update("tokens", cands.tokens[cands.mask], names)
            self._record(cands, index)
        return index, q

    def _record(self, cands: Candidates, index: int) -> None:
        s = self.settings
        if self.pending is not None:
            self._store(self.pending, cands.tokens, cands.mask, done=False)
        self.pending = _Pending(cands.tokens, cands.mask, index)
        self.decisions += 1
        steps = int(self.decisions % s.train_every == 0 and len(self.buffer) >= s.warmup)
        copy_now = self.decisions % s.copy_every == 0
        if steps or copy_now:
            self.trainer.request(steps=steps, copy_weights=copy_now)

    def _store(self, p: _Pending, tokens: np.ndarray, mask: np.ndarray, *, done: bool) -> None:
        if p.reward is None:
            return  # the placement was undone before its data was read: no outcome
        self.buffer.add(
            tokens=p.tokens,
            mask=p.mask,
            action=p.action,
            reward=p.reward,
            next_tokens=tokens,
            next_mask=mask,
            done=float(done),
        )

    def reward(self, access: Access, utilisation: float) -> float:
        """The document's reward: −access latency (normalised) and the utilisation term."""
        s = self.settings
        return s.rho * utilisation - (1.0 - s.rho) * access.latency_s / s.latency_norm_s

    def observe_reward(self, reward: float) -> None:
        if self.pending is not None and self.pending.reward is None:
            self.pending.reward = reward

    def end_episode(self) -> None:
        """The sequence ended: the last decision's experience is terminal."""
        if self.pending is not None:
            self._store(self.pending, self.pending.tokens, self.pending.mask, done=True)
        self.pending = None

    # -- the training thread ----------------------------------------------------------------
    def losses(self, batch: dict[str, np.ndarray]) -> torch.Tensor:
        """The TD loss on a batch (the document's critical-factor loss or MSE)."""
        s = self.settings
        t = {k: torch.from_numpy(v).to(self.device) for k, v in batch.items()}
        q = self.net(t["tokens"], t["mask"]).gather(1, t["action"].unsqueeze(1)).squeeze(1)
        with torch.inference_mode():
            nq = self.publisher.current().net(t["next_tokens"], t["next_mask"]).max(dim=1).values
            nq = torch.where(t["next_mask"].any(dim=1), nq, torch.zeros_like(nq))
        target = t["reward"] + s.gamma * (1.0 - t["done"]) * nq.clone()
        delta = (q - target).abs()
        if s.loss == "mse":
            return torch.mean(delta**2)
        return torch.mean(delta * torch.log1p(torch.exp(-delta)))

    def margin_loss(self, batch: dict[str, np.ndarray]) -> torch.Tensor:
        """The large-margin term on demonstrations: the rule's action must out-value every
        other slot by ``margin`` (``max_a [Q(a) + m·(a ≠ a_E)] − Q(a_E)``)."""
        t = {k: torch.from_numpy(v).to(self.device) for k, v in batch.items()}
        q = self.net(t["tokens"], t["mask"])
        action = t["action"].unsqueeze(1)
        penalty = torch.full_like(q, self.settings.margin).scatter(1, action, 0.0)
        best = (q + penalty).masked_fill(~t["mask"], -1e9).max(dim=1).values
        return torch.mean(best - q.gather(1, action).squeeze(1))

    def _step(self) -> float | None:
        s = self.settings
        if len(self.buffer) < min(s.warmup, s.buffer):
            return None
        self.net.train()
        total = 0.0
        for _ in range(s.batches_per_step):
            loss = self.losses(self.buffer.sample(s.batch, self.train_rng))
            if self.demos is not None and s.demo_batch:
                demo = self.demos.sample(s.demo_batch, self.train_rng)
                loss = loss + self.losses(demo) + self.margin_loss(demo)
            gradient_step(self.optimizer, loss, self.net.parameters(), max_norm=1.0)
            total += float(loss.detach())
        return total / s.batches_per_step

    def _publish(self) -> None:
        self.publisher.publish(self.net)

    # -- training ---------------------------------------------------------------------------
    def policy(
        self,
        context: PolicyContext | None = None,
        *,
        explore: bool = False,
        learn: bool = False,
        teacher: bool = False,
    ) -> AsyncTransformerPolicy:
        return AsyncTransformerPolicy(self, context, explore=explore, learn=learn, teacher=teacher)

    def start(self) -> None:
        """Start the training thread (threaded mode; a no-op when synchronous)."""
        self.trainer.start()

    def go_online(self, **changes: Any) -> AsyncTransformerAgent:
        """Switch to the threaded trainer (and apply setting ``changes``, e.g. how often to
        train and copy): the document's online mode, for a deployed agent."""
        from dataclasses import replace

        self.trainer.stop()
        self.settings = replace(self.settings, synchronous=False, **changes)
        self.trainer = TrainerThread(self._step, self._publish, synchronous=False)
        return self

    def stop(self) -> None:
        """Finish requested steps, copy the weights one last time, end the thread."""
        self.trainer.request(copy_weights=True)
        self.trainer.stop()

    def train(
        self,
        data: tuple[Sequence[NodeSpec], Sequence[Pod]],
        episodes: int,
        *,
        on_episode: Callable[[dict[str, float]], None] | None = None,
    ) -> TrainingCurve:
        """Run ``episodes`` training sequences (``data``: nodes and *training* pods) online."""
        nodes, pods = data
        s = self.settings
        torch.manual_seed(s.seed)  # dropout draws from torch's global generator
        started = time.perf_counter()
        typical = self.typical = typical_pods(pods)
        if s.proposals and s.imitate and s.imitation_windows > 0:
            self._warm_start(nodes, pods, typical)
        best: tuple[float, int, dict[str, torch.Tensor]] | None = None
        if s.proposals and s.validate_every > 0 and s.validation_windows > 0:
            best = (self.validate(nodes, pods, typical), -1, self._weights())
        self.start()
        try:
            for episode in range(episodes):
                seq = draw_sequence(
                    nodes, pods, s.env, seed=EPISODE_SEED_BASE + 1000 * s.seed + episode
                )
                first = len(self.latency_s)
                run, pool = run_sequence(
                    seq,
                    lambda ctx: self.policy(ctx, explore=True, learn=True),
                    s.env,
                    typical=typical,
                )
                self.end_episode()
                done = ~np.isnan(run.end_s)
                lat = np.array(self.latency_s[first:]) * 1000.0
                record = {
                    "episode": episode,
                    "return": -pool.locality_summary()["mean_access_s"],
                    "loss": float(np.mean(self.trainer.losses[-20:]))
                    if self.trainer.losses
                    else float("nan"),
                    "mean_wait_s": _mean_wait(run),
                    "mean_jct_s": float(np.mean(run.end_s[done] - seq.jobs.submit_s[done]))
                    if done.any()
                    else 0.0,
                    **pool.locality_summary(),
                    "decisions": self.decisions,
                    "train_steps": self.trainer.steps,
                    "decision_ms_p50": float(np.percentile(lat, 50)) if len(lat) else 0.0,
                    "decision_ms_p95": float(np.percentile(lat, 95)) if len(lat) else 0.0,
                    "seconds": time.perf_counter() - started,
                    "cpu_seconds": time.process_time(),
                }
                if best is not None and (episode + 1) % s.validate_every == 0:
                    self.trainer.request(copy_weights=True)
                    record["validation_score"] = score = self.validate(nodes, pods, typical)
                    if score < best[0]:
                        best = (score, episode, self._weights())
                self.curve.add(**record)
                if on_episode is not None:
                    on_episode(record)
        finally:
            self.stop()
        if best is not None:
            self.net.load_state_dict(best[2])
            self.publisher.publish(self.net)
            self.kept_episode = best[1]
        self.curve.seconds += time.perf_counter() - started
        return self.curve

    def _weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.net.state_dict().items()}

    def _warm_start(self, nodes: Sequence[NodeSpec], pods: Sequence[Pod], typical: Any) -> None:
        """Demonstration windows run by the rule (its experience, with the document's
        reward, kept apart from the online buffer), then TD + margin steps on them alone."""
        s = self.settings
        online, self.buffer = self.buffer, self._buffer(capacity=200_000)
        for i in range(s.imitation_windows):
            seq = draw_sequence(nodes, pods, s.env, seed=DEMO_SEED_BASE + 1000 * s.seed + i)
            teacher = functools.partial(self.policy, learn=True, teacher=True)
            run_sequence(seq, teacher, s.env, typical=typical)
            self.end_episode()
        self.demos, self.buffer = self.buffer, online
        self.decisions = 0
        self.net.train()
        for _ in range(s.imitation_steps if len(self.demos) else 0):
            demo = self.demos.sample(s.batch, self.train_rng)
            loss = self.losses(demo) + self.margin_loss(demo)
            gradient_step(self.optimizer, loss, self.net.parameters(), max_norm=1.0)
        self.publisher.publish(self.net)

    def validate(self, nodes: Sequence[NodeSpec], pods: Sequence[Pod], typical: Any) -> float:
        """The frozen agent on validation windows of the training pods, beside BestFit: its
        mean wait over BestFit's, plus a heavy charge when its working GPU share falls below
        BestFit's, plus a hundredth of its access latency over BestFit's — the document's
        objective decides only between weights that wait alike (lower is better)."""
        s = self.settings
        waits, short, access = [], [], []
        for k in range(s.validation_windows):
            seq = draw_sequence(nodes, pods, s.env, seed=VALIDATION_SEED_BASE + k)
            mine, mine_pool = run_sequence(seq, self.policy, s.env, typical=typical)
            ref, ref_pool = run_sequence(seq, BestFitPolicy, s.env, typical=typical)
            waits.append((_mean_wait(mine) + 1.0) / (_mean_wait(ref) + 1.0))
            working = window_utilisation(mine, mine_pool)[1]
            short.append(window_utilisation(ref, ref_pool)[1] - working)
            latency = mine_pool.locality_summary()["mean_access_s"]
            access.append((latency + 1.0) / (ref_pool.locality_summary()["mean_access_s"] + 1.0))
        wait_ratio, shortfall = float(np.mean(waits)), float(np.mean(short))
        access_ratio = float(np.mean(access))
        self.validation_log.append(
            {"wait_ratio": wait_ratio, "working_short": shortfall, "access_ratio": access_ratio}
        )
        return wait_ratio + 100.0 * max(0.0, shortfall) + 0.01 * access_ratio

    @classmethod
    def training_env(
        cls, settings: AsyncTransformerSettings, *, nodes: list[NodeSpec], pods: list[Pod]
    ) -> tuple[list[NodeSpec], list[Pod]]:
        """The nodes and the training share of ``pods`` (``kale place train``)."""
        train, _ = split_pods(pods, settings.env.train_share)
        if not train:
            from placement.errors import PlacementInputError

            raise PlacementInputError("no pod with creation, scheduled and deletion times")
        return nodes, train

    # -- files --------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        save_checkpoint(
            path,
            agent=NAME,
            settings=self.settings,
            networks={"net": self.net},
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
    ) -> AsyncTransformerAgent:
        values = {"proposals": 0, **payload["settings"]}  # files from before: no proposals
        settings = settings_from_dict(AsyncTransformerSettings, values)
        agent = cls(settings, device=device)
        load_weights(agent.net, payload["networks"].get("net"), path=path, name="net")
        agent.publisher = SnapshotPublisher(agent.net)
        agent.curve = TrainingCurve.from_dict(payload.get("curve", {}))
        extra = payload.get("extra", {})
        agent.ranges = FeatureRanges.from_dict(extra.get("ranges"))
        agent.kept_episode = extra.get("kept_episode")
        agent.validation_log = list(extra.get("validation", []))
        if extra.get("typical"):
            agent.typical = TypicalPods.from_dict(extra["typical"])
        return agent

    @classmethod
    def load(cls, path: str | Path, *, device: str = "cpu") -> AsyncTransformerAgent:
        return cls.from_payload(load_checkpoint(path), path=str(path), device=device)


class AsyncTransformerPolicy(ScorePolicy):
    """The agent as a node score plugin: the chosen candidate scores highest, the other
    candidates by their Q rank, every other feasible node 0."""

    name = NAME
    uses_locality = True
    uses_rank = True

    def __init__(
        self,
        agent: AsyncTransformerAgent,
        context: PolicyContext | None = None,
        *,
        explore: bool = False,
        learn: bool = False,
        teacher: bool = False,
    ) -> None:
        self.agent, self.explore, self.learn, self.teacher = agent, explore, learn, teacher
        self.caches: DataCaches | None = None
        self.rank: np.ndarray | None = None
        self.proposer: Proposer | None = None
        if agent.settings.proposals:
            typical = (context.typical if context is not None else None) or agent.typical
            if typical is None:
                raise ValueError(f"{NAME} chooses among FGD's proposals: it needs typical pods")
            self.proposer = default_proposer(typical, top=agent.settings.proposals)
        self.ranges = agent.ranges
        self.check_ranges = False
        """Set by the guard: raise ``OutsideTrainingRange`` instead of deciding on inputs
        outside the training ranges."""
        self._cluster: Cluster | None = None

    def observe_locality(self, caches: DataCaches) -> None:
        self.caches = caches

    def observe_rank(self, rank: np.ndarray) -> None:
        self.rank = rank

    def observe_access(self, pod: Pod, node: int, access: Access) -> None:
        if self.learn and self._cluster is not None:
            c = self._cluster
            util = c.allocated_gpu_milli / max(c.total_gpu_milli, 1)
            self.agent.observe_reward(self.agent.reward(access, util))

    def score(self, pod: Pod, cluster: Cluster, nodes: np.ndarray) -> np.ndarray:
        wall, cpu = time.perf_counter(), time.thread_time()
        self._cluster = cluster
        slots = self.agent.settings.slots
        if self.proposer is not None:
            rank = self.rank if self.rank is not None else np.arange(len(cluster), dtype=np.int64)
            cands = proposal_tokens(
                pod, cluster, nodes, self.caches, self.proposer, rank, slots=slots
            )
        else:
            cands = candidate_tokens(pod, cluster, nodes, self.caches, slots=slots)
        if self.check_ranges:
            self.ranges.check("tokens", cands.tokens[cands.mask])
        if self.teacher:
            q, version = self.agent.q_values(cands)
            rule = cands.picks.get(self.agent.settings.imitate, 0)
            index, q = self.agent.commit(cands, rule, q, version, learn=self.learn)
        else:
            index, q = self.agent.decide(cands, explore=self.explore, learn=self.learn)
        self.agent.latency_s.append(time.perf_counter() - wall)
        self.agent.cpu_s.append(time.thread_time() - cpu)
        order = np.argsort(nodes, kind="stable")
        position = order[np.searchsorted(nodes[order], cands.nodes)]
        scores = np.zeros(len(nodes), np.int64)
        scores[position] = np.unique(q, return_inverse=True)[1].reshape(-1) + 1
        scores[position[index]] = scores.max() + 1
        return scores


def _mean_wait(run: Any) -> float:
    done = ~np.isnan(run.end_s)
    return float(np.mean(run.wait_s[done])) if done.any() else 0.0
