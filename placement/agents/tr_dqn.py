"""``tr_dqn`` (seed 004, TR-DQN): a two-level DQN that orders a batch queue and backfills it.

The queue is reordered by the rank ``w1·length + w2·wait + w3·deadline`` and the agent
reads a window of the ``w`` first jobs plus the machine's availability profile
(``placement.env.queue_features``). Two networks, each "a convolution layer, two fully
connected layers and an output layer" as the document says:

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
from placement.env.queue_env import QueueEnv, QueueEnvSettings, QueueObservation
from placement.env.queue_features import (
    HORIZONS_S,
    ROW_WIDTH,
    backfill_input,
    head_input,
    rank,
)
from placement.errors import PlacementInputError
from placement.queue.base import QueueView

NAME = "tr_dqn"
EPISODE_SEED_BASE = 200_000


@dataclass(frozen=True)
class TRDQNSettings:
    """Every knob of the agent and its training (the seed included)."""

    seed: int = 0
    channels: int = 8
    """Output channels of each network's convolution (kernel 1 over the rows)."""
    hidden: tuple[int, int] = (128, 64)
    """Widths of the two fully connected layers."""
    lr: float = 5e-4
    gamma: float = 0.7
    """Discount per decision (0.7 learned fastest on the training windows; decision 0125)."""
    batch: int = 64
    replay: int = 30_000
    warmup: int = 500
    train_every: int = 2
    target_sync: int = 500
    candidates: int = 16
    """Level-2 candidates stored per next state (a random subset when there are more)."""
    sequence_jobs: int = 512
    """Jobs per training episode (a window of the log outside the judged sequences)."""
    sequences: int = 256
    """Distinct training windows drawn from the log (episodes cycle through them)."""
    explore: EpsilonSchedule = field(default_factory=lambda: EpsilonSchedule(1.0, 0.05, 0.99985))
    env: QueueEnvSettings = field(default_factory=lambda: QueueEnvSettings(window=8))


class LevelNet(nn.Module):
    """Conv (kernel 1 over rows) → FC → FC → output, on a ``[rows, 3]`` grid."""

    def __init__(self, rows: int, out: int, channels: int, hidden: tuple[int, int]) -> None:
        super().__init__()
        self.rows, self.out = rows, out
        self.conv = nn.Conv1d(ROW_WIDTH, channels, kernel_size=1)
        self.head = mlp([rows * channels, hidden[0], hidden[1], out])

    def forward(self, grid: torch.Tensor) -> torch.Tensor:
        lead = grid.shape[:-2]
        x = grid.reshape(-1, self.rows, ROW_WIDTH).transpose(1, 2)
        x = torch.relu(self.conv(x)).flatten(1)
        q: torch.Tensor = self.head(x)
        return q.reshape(*lead, self.out)


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
        self.rows1, self.rows2 = 2 * w + p, 2 + p

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
    def _buffer(self) -> ReplayBuffer:
        s, w = self.settings, self.settings.env.window
        k, r1, r2 = s.candidates, self.rows1, self.rows2
        return ReplayBuffer(
            s.replay,
            {
                "level": ((), np.int8),
                "s1": ((r1, ROW_WIDTH), np.float32),
                "a1": ((), np.int64),
                "s2": ((r2, ROW_WIDTH), np.float32),
                "reward": ((), np.float32),
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

    def learn(self, batch: dict[str, np.ndarray]) -> float:
        """One gradient step on a replay batch; returns the loss before the step."""
        t = {k: torch.from_numpy(v).to(self.device) for k, v in batch.items()}
        q1 = self.level1(t["s1"]).gather(1, t["a1"].unsqueeze(1)).squeeze(1)
        q2 = self.level2(t["s2"]).squeeze(-1)
        q = torch.where(t["level"] == 1, q1, q2)
        with torch.no_grad():
            v1 = self.target1(t["n1"]).masked_fill(~t["n1_mask"], -1e9).max(dim=1).values
            v2 = self.target2(t["n2"]).squeeze(-1).masked_fill(~t["n2_mask"], -1e9)
            v2 = v2.max(dim=1).values
            nl = t["next_level"]
            v = torch.where(nl == 1, v1, torch.where(nl == 2, v2, torch.zeros_like(v1)))
            target = t["reward"] + self.settings.gamma * (1.0 - t["done"]) * v
        loss = torch.mean((target - q) ** 2)
        params = [*self.level1.parameters(), *self.level2.parameters()]
        gradient_step(self.optimizer, loss, params, max_norm=10.0)
        self.updates += 1
        if self.updates % self.settings.target_sync == 0:
            sync_target(self.level1, self.target1)
            sync_target(self.level2, self.target2)
        return float(loss.detach())

    def train(
        self,
        env: QueueEnv,
        episodes: int,
        *,
        on_episode: Callable[[dict[str, float]], None] | None = None,
    ) -> TrainingCurve:
        """Run ``episodes`` ε-greedy episodes of ``env``, learning from replay as it goes."""
        s = self.settings
        enable_determinism(self.device.type)
        rng = np.random.default_rng(s.seed)
        buffer = self._buffer()
        started, step = time.perf_counter(), 0
        width = self.rows2
        for episode in range(episodes):
            obs, _ = env.reset(seed=EPISODE_SEED_BASE + 1000 * s.seed + episode)
            total, losses, decisions = 0.0, [], 0
            while obs is not None:
                if rng.random() < s.explore.value(step):
                    action = int(rng.choice(np.flatnonzero(obs.mask)))
                else:
                    action = self.greedy(obs)
                nxt, reward, done, _, _ = env.step(action)
                level1 = obs.level == 1
                buffer.add(
                    level=obs.level,
                    s1=obs.grid if level1 else np.zeros((self.rows1, ROW_WIDTH), np.float32),
                    a1=action if level1 else 0,
                    s2=np.zeros((width, ROW_WIDTH), np.float32) if level1 else obs.grid[action],
                    reward=reward,
                    done=float(done),
                    **self._next_fields(nxt, rng),
                )
                obs, total, step, decisions = nxt, total + reward, step + 1, decisions + 1
                if step % s.train_every == 0 and len(buffer) >= s.warmup:
                    losses.append(self.learn(buffer.sample(s.batch, rng)))
            record = {
                "episode": episode,
                "return": total,
                "loss": float(np.mean(losses)) if losses else float("nan"),
                "epsilon": s.explore.value(step),
                "decisions": decisions,
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
            networks={"level1": self.level1, "level2": self.level2},
            curve=self.curve,
        )

    @classmethod
    def from_payload(cls, payload: dict[str, Any], *, path: str, device: str = "cpu") -> TRDQN:
        settings = settings_from_dict(TRDQNSettings, payload["settings"])
        agent = cls(settings, device=device, deterministic=False)
        for name in ("level1", "level2"):
            load_weights(getattr(agent, name), payload["networks"].get(name), path=path, name=name)
        sync_target(agent.level1, agent.target1)
        sync_target(agent.level2, agent.target2)
        curve = payload.get("curve", {})
        agent.curve = TrainingCurve(list(curve.get("records", [])), float(curve.get("seconds", 0)))
        return agent

    @classmethod
    def load(cls, path: str | Path, *, device: str = "cpu") -> TRDQN:
        return cls.from_payload(load_checkpoint(path), path=str(path), device=device)


class TRDQNPolicy:
    """The agent as a queue policy (``agent:PATH`` in ``kale place timed --queue``).

    ``keys`` puts level 1's pick first (then the rank); ``pick_backfill`` is level 2. Both
    need the simulator to pass the machine state in the view (``QueueView.machine``).
    """

    def __init__(self, agent: TRDQN, name: str = NAME) -> None:
        self.agent, self.name = agent, name
        self.env = agent.settings.env

    def _machine(self, view: QueueView) -> Any:
        if view.machine is None:
            raise PlacementInputError(
                f"{self.name}: this simulator does not give queue policies the machine state"
            )
        return view.machine

    def keys(self, view: QueueView) -> tuple[np.ndarray, ...]:
        machine = self._machine(view)
        grid, mask, positions = head_input(view, machine, self.env.rank, self.env.window)
        slot = self.agent.greedy(QueueObservation(1, grid, mask, positions))
        first = np.ones(len(view), np.int64)
        first[positions[slot]] = 0
        return (first, rank(view, self.env.rank))

    def pick_backfill(self, view: QueueView, candidates: np.ndarray, shadow_s: float) -> int:
        grid = backfill_input(
            view, candidates, self._machine(view), self.env.rank, shadow_s=shadow_s
        )
        mask = np.ones(len(candidates), bool)
        return self.agent.greedy(QueueObservation(2, grid, mask, candidates))
