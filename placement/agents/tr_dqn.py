"""``tr_dqn`` (TR-DQN): a two-level DQN that orders a batch queue and backfills it.

The queue is reordered by the rank ``w1·length + w2·wait + w3·deadline`` and the agent
reads a window of the ``w`` first jobs plus the machine's availability profile
(``placement.env.queue_features``). Two networks, each "a convolution layer, two fully
connected layers and an output layer" as the document says (``placement.agents.tr_dqn_net``:
the settings and ``LevelNet``):

* **level 1** reads the whole ``[2w + p, 3]`` grid and gives one Q value per window slot;
  the chosen job is *ready* (it fits: it starts) or *reserved* (the machine keeps its
  reservation while it waits);
* **level 2** reads one candidate's ``[2 + p, 3]`` grid and gives its Q value; while a
  reservation waits the best-valued eligible job backfills, again and again until none is
  left (then control returns to level 1).

Training is DQN: ε-greedy with ε decaying geometrically, a replay buffer, a target network
per level copied every ``target_sync`` updates, and the loss ``(r + γ max Q_target(s′, ·)
− Q(s, a))²`` — the next state is a level-1 or a level-2 decision, and its max is taken with
that level's target network. Rewards are the environment's (``wait`` or ``util``).
Optional, all off by default: a warm start from demonstrations of a rule with a
large-margin term, n-step returns, double-DQN targets (the online network picks the next
action, the target network values it), and keeping the weights that scored best on
validation sequences (``placement.agents.tr_dqn_warm``;
docs/decisions/0126-tr-dqn-warm-start-and-why-it-does-not-move.md). The agent decides as a
queue policy through :class:`TRDQNPolicy`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from placement.agents.common import (
    ReplayBuffer,
    TrainingCurve,
    configure,
    enable_determinism,
    gradient_step,
    load_checkpoint,
    load_weights,
    save_checkpoint,
    settings_from_dict,
    sync_target,
)
from placement.agents.tr_dqn_net import NAME, LevelNet, TRDQNSettings
from placement.agents.tr_dqn_warm import (
    NStepWriter,
    demo_fields,
    demonstrator,
    margin_loss,
)
from placement.env.queue_env import QueueEnv, QueueObservation
from placement.env.queue_features import (
    HORIZONS_S,
    ROW_WIDTH,
    backfill_input,
    head_input,
    proposals_input,
    rank,
)
from placement.errors import PlacementInputError
from placement.fallback import FeatureRanges
from placement.queue.base import QueueView

EPISODE_SEED_BASE = 200_000
DEMO_SEED_BASE = 300_000

__all__ = ["NAME", "TRDQN", "LevelNet", "TRDQNPolicy", "TRDQNSettings"]


class TRDQN:
    """The agent: two levels of online and target networks, acting, learning, saving."""

    name = NAME
    settings_type = TRDQNSettings

    def __init__(
        self,
        settings: TRDQNSettings | None = None,
        *,
        device: str = "cpu",
        deterministic: bool = True,
    ) -> None:
        self.settings = s = settings or TRDQNSettings()
        self.device = configure(s.seed, device, deterministic=deterministic)
        w, p = s.env.window, len(HORIZONS_S)
        extra = int(bool(s.env.proposals) and s.env.queue_row)
        self.rows1, self.rows2 = 2 * w + p + extra, 2 + p

        def nets(rows: int, out: int) -> tuple[LevelNet, LevelNet]:
            online = LevelNet(rows, out, s.channels, s.hidden).to(self.device)
            target = LevelNet(rows, out, s.channels, s.hidden).to(self.device)
            sync_target(online, target)
            return online, target

        self.level1, self.target1 = nets(self.rows1, w)
        self.level2, self.target2 = nets(self.rows2, 1)
        params = [*self.level1.parameters(), *self.level2.parameters()]
        self.optimizer = torch.optim.Adam(params, lr=s.lr)
        self.curve = TrainingCurve()
        self.updates = 0
        self.warm_start: dict[str, float] = {}
        self.warm_weights: dict[str, dict[str, torch.Tensor]] = {}
        """The networks right after the warm start (for the ablation; not saved)."""
        self.kept_episode: int | None = None
        """The episode whose weights were kept by validation (−1: the warm start's)."""
        self.ranges = FeatureRanges()
        """Each input feature's range over training (the guard's out-of-range check)."""

    def note_inputs(self, obs: QueueObservation) -> None:
        """Widen the training ranges to ``obs`` (its grid, one row per candidate)."""
        group = "head" if obs.level == 1 else "backfill"
        self.ranges.update(group, obs.grid.reshape(1 if obs.level == 1 else len(obs.grid), -1))

    # -- acting -----------------------------------------------------------------------------
    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array, np.float32)).to(self.device)

    @torch.no_grad()
    def q_values(self, obs: QueueObservation) -> np.ndarray:
        """Q per slot (level 1, masked slots −inf) or per candidate (level 2)."""
        if obs.level == 1:
            q1: torch.Tensor = self.level1(self._tensor(obs.grid))
            return np.where(obs.mask, q1.cpu().numpy().astype(np.float64), -np.inf)
        q2: torch.Tensor = self.level2(self._tensor(obs.grid))
        return q2.squeeze(-1).cpu().numpy().astype(np.float64)

    def greedy(self, obs: QueueObservation) -> int:
        return int(np.argmax(self.q_values(obs)))

    def policy(self, name: str = NAME) -> TRDQNPolicy:
        return TRDQNPolicy(self, name)

    # -- learning ---------------------------------------------------------------------------
    def _buffer(self, *, demo: bool = False, capacity: int | None = None) -> ReplayBuffer:
        """The replay ring (``demo``: with the fields the margin term needs)."""
        s, w = self.settings, self.settings.env.window
        k, r1, r2 = s.candidates, self.rows1, self.rows2
        extra: dict[str, tuple[tuple[int, ...], Any]] = {}
        if demo:
            extra = {
                "mask1": ((w,), bool),
                "c2": ((k, r2, ROW_WIDTH), np.float32),
                "c2_mask": ((k,), bool),
                "a2": ((), np.int64),
            }
        return ReplayBuffer(
            capacity or s.replay,
            {
                **extra,
                "level": ((), np.int8),
                "s1": ((r1, ROW_WIDTH), np.float32),
                "a1": ((), np.int64),
                "s2": ((r2, ROW_WIDTH), np.float32),
                "reward": ((), np.float32),
                "discount": ((), np.float32),
                "done": ((), np.float32),
                "next_level": ((), np.int8),
                "n1": ((r1, ROW_WIDTH), np.float32),
                "n1_mask": ((w,), bool),
                "n2": ((k, r2, ROW_WIDTH), np.float32),
                "n2_mask": ((k,), bool),
            },
        )

    def _next_fields(
        self, obs: QueueObservation | None, rng: np.random.Generator
    ) -> dict[str, Any]:
        s, w = self.settings, self.settings.env.window
        out: dict[str, Any] = {
            "next_level": 0,
            "n1": np.zeros((self.rows1, ROW_WIDTH), np.float32),
            "n1_mask": np.zeros(w, bool),
            "n2": np.zeros((s.candidates, self.rows2, ROW_WIDTH), np.float32),
            "n2_mask": np.zeros(s.candidates, bool),
        }
        if obs is None:
            return out
        out["next_level"] = obs.level
        if obs.level == 1:
            out["n1"], out["n1_mask"] = obs.grid, obs.mask
        else:
            pick = np.arange(len(obs.grid))
            if len(pick) > s.candidates:
                pick = np.sort(rng.choice(pick, s.candidates, replace=False))
            out["n2"][: len(pick)] = obs.grid[pick]
            out["n2_mask"][: len(pick)] = True
        return out

    def _next_value(self, t: dict[str, torch.Tensor]) -> torch.Tensor:
        """max_a Q_target(s′, a) per row (double DQN: at the online network's argmax)."""
        n1, m1, n2, m2 = t["n1"], t["n1_mask"], t["n2"], t["n2_mask"]
        v1 = self.target1(n1).masked_fill(~m1, -1e9)
        v2 = self.target2(n2).squeeze(-1).masked_fill(~m2, -1e9)
        if self.settings.double:
            a1 = self.level1(n1).masked_fill(~m1, -1e9).argmax(dim=1, keepdim=True)
            a2 = self.level2(n2).squeeze(-1).masked_fill(~m2, -1e9).argmax(dim=1, keepdim=True)
            v1, v2 = v1.gather(1, a1).squeeze(1), v2.gather(1, a2).squeeze(1)
        else:
            v1, v2 = v1.max(dim=1).values, v2.max(dim=1).values
        nl = t["next_level"]
        return torch.where(nl == 1, v1, torch.where(nl == 2, v2, torch.zeros_like(v1)))

    def _td_loss(self, t: dict[str, torch.Tensor]) -> torch.Tensor:
        q1 = self.level1(t["s1"]).gather(1, t["a1"].unsqueeze(1)).squeeze(1)
        q2 = self.level2(t["s2"]).squeeze(-1)
        q = torch.where(t["level"] == 1, q1, q2)
        with torch.no_grad():
            # one step: γ itself (as the document writes it); n steps: γ^k as stored
            n_step = self.settings.n_step > 1 and "discount" in t
            discount = t["discount"] if n_step else self.settings.gamma
            target = t["reward"] + discount * (1.0 - t["done"]) * self._next_value(t)
        return torch.mean((target - q) ** 2)

    def _margin(self, t: dict[str, torch.Tensor]) -> torch.Tensor:
        imitation = self.settings.imitation
        q1 = self.level1(t["s1"])
        q2 = self.level2(t["c2"]).squeeze(-1)
        args = (t["level"], q1, t["mask1"], t["a1"], q2, t["c2_mask"], t["a2"])
        return margin_loss(*args, imitation.margin)

    @torch.no_grad()
    def imitation_check(self, demo: dict[str, np.ndarray]) -> dict[str, float]:
        """On demonstrations: the margin term and the share of decisions where the greedy
        choice is the rule's."""
        t = {k: torch.from_numpy(v).to(self.device) for k, v in demo.items()}
        q1 = self.level1(t["s1"]).masked_fill(~t["mask1"], -1e9)
        q2 = self.level2(t["c2"]).squeeze(-1).masked_fill(~t["c2_mask"], -1e9)
        same = torch.where(
            t["level"] == 1, q1.argmax(dim=1) == t["a1"], q2.argmax(dim=1) == t["a2"]
        )
        return {"margin": float(self._margin(t)), "agreement": float(same.float().mean())}

    def learn(
        self, batch: dict[str, np.ndarray] | None, demo: dict[str, np.ndarray] | None = None
    ) -> float:
        """One gradient step on a replay batch (TD loss) and/or a demonstration batch (TD
        loss + the weighted margin term); returns the loss before the step."""
        total = torch.zeros((), device=self.device)
        for part, with_margin in ((batch, False), (demo, True)):
            if part is None:
                continue
            t = {k: torch.from_numpy(v).to(self.device) for k, v in part.items()}
            total = total + self._td_loss(t)
            if with_margin:
                total = total + self.settings.imitation.weight * self._margin(t)
        params = [*self.level1.parameters(), *self.level2.parameters()]
        gradient_step(self.optimizer, total, params, max_norm=10.0)
        self.updates += 1
        if self.updates % self.settings.target_sync == 0:
            sync_target(self.level1, self.target1)
            sync_target(self.level2, self.target2)
        return float(total.detach())

    def _transition(self, obs: QueueObservation, action: int) -> dict[str, Any]:
        """A decision's own replay fields (the other level's state is zeros)."""
        level1 = obs.level == 1
        return {
            "level": obs.level,
            "s1": obs.grid if level1 else np.zeros((self.rows1, ROW_WIDTH), np.float32),
            "a1": action if level1 else 0,
            "s2": np.zeros((self.rows2, ROW_WIDTH), np.float32) if level1 else obs.grid[action],
        }

    def demonstrate(self, env: QueueEnv, rng: np.random.Generator) -> ReplayBuffer | None:
        """The demonstration buffer (None: no warm start): episodes of the rule
        (:func:`~placement.agents.tr_dqn_warm.demonstrator`) on ``env``, as n-step
        transitions with the margin term's fields."""
        s, imitation = self.settings, self.settings.imitation
        if imitation.episodes <= 0:
            return None
        longest = max(len(seq) for seq in env.sequences)
        buffer = self._buffer(demo=True, capacity=imitation.episodes * longest)
        writer = NStepWriter(buffer, s.n_step, s.gamma)
        seed_base = DEMO_SEED_BASE + 1000 * s.seed
        rule = demonstrator(s.env.proposals, s.imitate)
        for episode in range(imitation.episodes):
            obs, _ = env.reset(seed=seed_base + episode)
            while obs is not None:
                self.note_inputs(obs)
                action = rule(obs)
                extra = demo_fields(
                    obs,
                    action,
                    window=s.env.window,
                    candidates=s.candidates,
                    rows2=self.rows2,
                    rng=rng,
                )
                nxt, reward, done, _, _ = env.step(action)
                fields = {**self._transition(obs, action), **extra}
                writer.add(fields, reward, self._next_fields(nxt, rng), done)
                obs = nxt
        return buffer

    def evaluate(self, env: QueueEnv) -> float:
        """Mean bounded slowdown of the greedy policy over every sequence of ``env``."""
        scores = []
        for index in range(len(env.sequences)):
            obs, _ = env.reset(options={"sequence": index})
            while obs is not None:
                obs, *_ = env.step(self.greedy(obs))
            scores.append(env.episode_bsld())
        return float(np.mean(scores))

    def _weights(self) -> dict[str, dict[str, torch.Tensor]]:
        return {
            name: {k: v.detach().clone() for k, v in getattr(self, name).state_dict().items()}
            for name in ("level1", "level2")
        }

    def train(
        self,
        env: QueueEnv,
        episodes: int,
        *,
        on_episode: Callable[[dict[str, float]], None] | None = None,
        validation: QueueEnv | None = None,
    ) -> TrainingCurve:
        """Warm-start from demonstrations (if set), then run ``episodes`` ε-greedy episodes
        of ``env``, learning from replay as it goes; with ``validation`` and
        ``validate_every``, keep the weights with the lowest validation slowdown (the warm
        start's included)."""
        s = self.settings
        enable_determinism(self.device.type)
        rng = np.random.default_rng(s.seed)
        started, step = time.perf_counter(), 0
        demos = self.demonstrate(env, rng)
        if demos is not None:
            probe = demos.sample(min(len(demos), 1024), rng)
            before = self.imitation_check(probe)
            for _ in range(s.imitation.steps):
                self.learn(None, demos.sample(s.batch, rng))
            after = self.imitation_check(probe)
            self.warm_start = {f"{k}_before": v for k, v in before.items()}
            self.warm_start.update({f"{k}_after": v for k, v in after.items()})
            self.warm_weights = self._weights()
        best = None
        if validation is not None and s.validate_every > 0:
            best = (self.evaluate(validation), -1, self._weights())
        buffer = self._buffer()
        writer = NStepWriter(buffer, s.n_step, s.gamma)
        demo_batch = s.imitation.demo_batch if demos is not None else 0
        for episode in range(episodes):
            obs, _ = env.reset(seed=EPISODE_SEED_BASE + 1000 * s.seed + episode)
            total, losses, decisions = 0.0, [], 0
            while obs is not None:
                self.note_inputs(obs)
                if rng.random() < s.explore.value(step):
                    action = int(rng.choice(np.flatnonzero(obs.mask)))
                else:
                    action = self.greedy(obs)
                nxt, reward, done, _, _ = env.step(action)
                writer.add(self._transition(obs, action), reward, self._next_fields(nxt, rng), done)
                obs, total, step, decisions = nxt, total + reward, step + 1, decisions + 1
                if step % s.train_every == 0 and len(buffer) >= s.warmup:
                    demo = demos.sample(demo_batch, rng) if demos and demo_batch else None
                    losses.append(self.learn(buffer.sample(s.batch, rng), demo))
            record = {
                "episode": episode,
                "return": total,
                "loss": float(np.mean(losses)) if losses else float("nan"),
                "epsilon": s.explore.value(step),
                "decisions": decisions,
                "seconds": time.perf_counter() - started,
                "validation_bsld": float("nan"),
            }
            if best and validation and (episode + 1) % s.validate_every == 0:
                record["validation_bsld"] = score = self.evaluate(validation)
                if score < best[0]:
                    best = (score, episode, self._weights())
            self.curve.add(**record)
            if on_episode is not None:
                on_episode(record)
        if best is not None:
            for name, state in best[2].items():
                getattr(self, name).load_state_dict(state)
            sync_target(self.level1, self.target1)
            sync_target(self.level2, self.target2)
            self.kept_episode = best[1]
        self.curve.seconds += time.perf_counter() - started
        return self.curve

    # -- files --------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        save_checkpoint(
            path,
            agent=NAME,
            settings=self.settings,
            networks={"level1": self.level1, "level2": self.level2},
            curve=self.curve,
            extra={"ranges": self.ranges.as_dict(), "kept_episode": self.kept_episode},
        )

    @classmethod
    def from_payload(cls, payload: dict[str, Any], *, path: str, device: str = "cpu") -> TRDQN:
        settings = settings_from_dict(TRDQNSettings, payload["settings"])
        agent = cls(settings, device=device, deterministic=False)
        for name in ("level1", "level2"):
            load_weights(getattr(agent, name), payload["networks"].get(name), path=path, name=name)
        sync_target(agent.level1, agent.target1)
        sync_target(agent.level2, agent.target2)
        agent.curve = TrainingCurve.from_dict(payload.get("curve", {}))
        agent.ranges = FeatureRanges.from_dict(payload.get("extra", {}).get("ranges"))
        agent.kept_episode = payload.get("extra", {}).get("kept_episode")
        return agent

    @classmethod
    def load(cls, path: str | Path, *, device: str = "cpu") -> TRDQN:
        return cls.from_payload(load_checkpoint(path), path=str(path), device=device)


class TRDQNPolicy:
    """The agent as a queue policy (``agent:PATH`` in ``kale place timed --queue``).

    ``keys`` puts level 1's pick first (then the rank); ``pick_backfill`` is level 2. Both
    need the simulator to pass the machine state in the view (``QueueView.machine``).
    """

    def __init__(self, agent: TRDQN, name: str = "tr_dqn") -> None:
        self.agent, self.name = agent, name
        self.env = agent.settings.env
        self.ranges = agent.ranges
        self.check_ranges = False
        """Set by the guard: raise ``OutsideTrainingRange`` instead of deciding on inputs
        outside the training ranges."""

    def _machine(self, view: QueueView) -> Any:
        if view.machine is None:
            raise PlacementInputError(
                f"{self.name}: this simulator does not give queue policies the machine state"
            )
        return view.machine

    def keys(self, view: QueueView) -> tuple[np.ndarray, ...]:
        machine = self._machine(view)
        if self.env.proposals:
            grid, mask, positions = proposals_input(
                view, machine, self.env.rank, self.env.proposals, with_queue=self.env.queue_row
            )
        else:
            grid, mask, positions = head_input(view, machine, self.env.rank, self.env.window)
        if self.check_ranges:
            self.ranges.check("head", grid.reshape(1, -1))
        slot = self.agent.greedy(QueueObservation(1, grid, mask, positions))
        first = np.ones(len(view), np.int64)
        first[positions[slot]] = 0
        return (first, rank(view, self.env.rank))

    def pick_backfill(self, view: QueueView, candidates: np.ndarray, shadow_s: float) -> int:
        grid = backfill_input(
            view, candidates, self._machine(view), self.env.rank, shadow_s=shadow_s
        )
        if self.check_ranges:
            self.ranges.check("backfill", grid.reshape(len(grid), -1))
        mask = np.ones(len(candidates), bool)
        return self.agent.greedy(QueueObservation(2, grid, mask, candidates))
