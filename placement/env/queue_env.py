"""Queue-level environment: pick which queued job starts or is reserved next (``tr_dqn``).

An episode is one sequence of batch jobs on an empty machine of interchangeable units,
run by the RLScheduler simulator's own state machine (``placement.queue.rlscheduler``), so
what an agent learns here is exactly what it is judged by:

* **level 1** — whenever the simulator needs a head job, the agent picks a slot of the
  ranked window (``placement.env.queue_features``), or with ``proposals`` a slot of the
  rules' proposals (the head under each rank weighting or heuristic named). The job is
  *ready* if it fits now (it starts) and *reserved* otherwise (the machine holds its
  reservation; it is not reconsidered, as in the reference simulator);
* **level 2** — with ``backfill`` on, while a reserved head waits, the agent picks, one at a
  time, which eligible job backfills (it fits now and ends strictly before the reservation);
  a level-2 observation has one input per candidate.

Rewards (``reward`` setting; the document's two,
docs/decisions/0124-tr-dqn-rewards.md):

* ``wait`` — fast response and short waits: minus the bounded-slowdown the waiting jobs
  accumulate until the next decision, Σ Δt / max(estimate, τ) / 1000; over an episode it
  sums to minus the jobs' (wait / max(run, τ)), the part of the bounded slowdown a scheduler
  controls;
* ``util`` — large jobs first and utilisation: ``u1·size/capacity + u2·busy share −
  u3·mean wait / max wait`` at the decision.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from placement.env.base import Env, FeatureSpec, check_action
from placement.env.queue_features import (
    HORIZONS_S,
    PROPOSALS,
    ROW_WIDTH,
    TAU_S,
    RankWeights,
    backfill_input,
    head_input,
    proposals_input,
)
from placement.errors import PlacementInputError
from placement.queue.easy import reserve
from placement.queue.rlscheduler import _Sim
from placement.workloads.batch import BatchJobs

REWARDS = ("wait", "util")
WAIT_SCALE = 1000.0


@dataclass(frozen=True)
class QueueEnvSettings:
    """Window, rank and reward of the queue environment."""

    window: int = 16
    """w: the jobs the agent chooses among."""
    rank: RankWeights = field(default_factory=RankWeights)
    backfill: bool = True
    """Run level 2 (EASY backfilling chosen by the agent) while a reserved head waits."""
    reward: str = "wait"
    """``wait`` (short waits) or ``util`` (large jobs first + utilisation)."""
    util_weights: tuple[float, float, float] = (0.5, 1.0, 0.5)
    """u1 (chosen size), u2 (busy share), u3 (mean over max wait) of the ``util`` reward."""
    proposals: tuple[str, ...] = ()
    """Level 1 chooses among these rules' heads (``queue_features.PROPOSALS``; the window
    is then one slot per proposal) instead of the ranked window (empty)."""
    queue_row: bool = False
    """With proposals: level 1 also reads how much waits (``queue_features.queue_row``)."""

    def __post_init__(self) -> None:
        if self.reward not in REWARDS:
            raise PlacementInputError(f"reward must be one of {REWARDS}, not {self.reward!r}")
        if self.window < 1:
            raise PlacementInputError("the window needs at least one job")
        unknown = [p for p in self.proposals if p not in PROPOSALS]
        if unknown:
            raise PlacementInputError(f"unknown proposals {unknown}; known: {list(PROPOSALS)}")
        if self.proposals and self.window != len(self.proposals):
            raise PlacementInputError("with proposals the window is one slot per proposal")


def free_blocks(total: int, *, exclude_starts: tuple[int, ...], length: int) -> list[range]:
    """The index ranges of a log of ``total`` jobs that overlap no excluded sequence
    ``[start, start + length)`` — where training may draw from without seeing judged jobs."""
    taken = np.zeros(total, bool)
    for start in exclude_starts:
        taken[max(start, 0) : min(start + length, total)] = True
    blocks, begin = [], None
    for i, used in enumerate([*taken.tolist(), True]):
        if not used and begin is None:
            begin = i
        elif used and begin is not None:
            blocks.append(range(begin, i))
            begin = None
    return blocks


def training_sequences(
    jobs: BatchJobs,
    *,
    exclude_starts: tuple[int, ...],
    exclude_length: int,
    length: int,
    count: int,
    seed: int,
    min_length: int = 64,
) -> list[BatchJobs]:
    """``count`` random windows of up to ``length`` consecutive jobs, each inside one free
    block (a block shorter than ``length`` gives windows of its own length, if at least
    ``min_length``). Raises when no block is long enough."""
    blocks = [
        b
        for b in free_blocks(len(jobs), exclude_starts=exclude_starts, length=exclude_length)
        if len(b) >= min_length
    ]
    if not blocks:
        raise PlacementInputError(
            f"no {min_length} consecutive jobs lie outside the excluded sequences"
        )
    rng = np.random.default_rng(seed)
    weights = np.array([len(b) for b in blocks], float)
    out = []
    for _ in range(count):
        block = blocks[int(rng.choice(len(blocks), p=weights / weights.sum()))]
        size = min(length, len(block))
        start = block.start + int(rng.integers(len(block) - size + 1))
        out.append(jobs.take(slice(start, start + size)))
    return out


def queue_spec(window: int) -> tuple[FeatureSpec, FeatureSpec]:
    """Level 1's and level 2's input sizes (rows × width) for a window of ``window`` jobs."""
    p = len(HORIZONS_S)
    return FeatureSpec(row=ROW_WIDTH, context=2 * window + p), FeatureSpec(
        row=ROW_WIDTH, context=2 + p
    )


@dataclass(frozen=True)
class QueueObservation:
    """One decision. ``level`` 1: ``grid`` is ``[2w + p, 3]`` and ``mask`` has ``w`` slots;
    level 2: ``grid`` is ``[k, 2 + p, 3]`` for ``k`` candidates, all allowed."""

    level: int
    grid: np.ndarray
    mask: np.ndarray
    jobs: np.ndarray
    """The sequence positions the slots / candidates stand for."""


class QueueEnv(Env[QueueObservation | None]):
    """Gymnasium-style queue scheduling over one job sequence per episode."""

    def __init__(
        self,
        sequences: list[BatchJobs],
        *,
        processors: int | list[int],
        settings: QueueEnvSettings | None = None,
    ) -> None:
        if not sequences:
            raise PlacementInputError("the environment needs at least one job sequence")
        sizes = [processors] * len(sequences) if isinstance(processors, int) else processors
        if len(sizes) != len(sequences):
            raise PlacementInputError("give one machine size, or one per sequence")
        self.sequences, self.machines = sequences, list(sizes)
        self.processors = self.machines[0]
        """The machine of the current episode (sequences may come from several sizes)."""
        self.settings = settings or QueueEnvSettings()
        self.spec = queue_spec(self.settings.window)[0]
        self._run: Generator[QueueObservation, int, None] | None = None
        self._obs: QueueObservation | None = None
        self._sim: _Sim | None = None
        self._reward = 0.0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[QueueObservation | None, dict[str, Any]]:
        """Seeded choice of the sequence (``options={"sequence": i}`` picks one)."""
        rng = np.random.default_rng(seed)
        index = (options or {}).get("sequence", int(rng.integers(len(self.sequences))))
        jobs = self.sequences[index]
        self.processors = self.machines[index]
        jobs = jobs.take(np.nonzero(jobs.size <= self.processors)[0])
        self._sim = _Sim(jobs, jobs.size, self.processors)
        self._reward = 0.0
        self._run = self._episode(self._sim)
        self._obs = next(self._run, None)
        return self._obs, {"sequence": index, "jobs": len(jobs)}

    def step(
        self, action: int
    ) -> tuple[QueueObservation | None, float, bool, bool, dict[str, Any]]:
        if self._run is None or self._obs is None:
            raise RuntimeError("step() after the episode ended; call reset()")
        check_action(self._obs.mask, action)
        self._reward = 0.0
        try:
            self._obs = self._run.send(int(action))
        except StopIteration:
            self._obs = None
        info: dict[str, Any] = {}
        if self._obs is None and self._sim is not None:
            info["start_s"] = self._sim.start.copy()
        return self._obs, self._reward, self._obs is None, False, info

    def episode_bsld(self) -> float:
        """Mean bounded slowdown, max((wait + run) / max(run, τ), 1), of the episode just
        finished (the judged metric; true run times, known once the jobs have run)."""
        sim = self._sim
        if sim is None or self._obs is not None:
            raise RuntimeError("episode_bsld() before the episode ended")
        if not len(sim.submit):
            return float("nan")
        wait = sim.start - sim.submit
        return float(np.mean(np.maximum((wait + sim.run) / np.maximum(sim.run, TAU_S), 1.0)))

    # -- the simulator's loop, with the agent's choices as yields --------------------------
    def _advance(self, sim: _Sim) -> None:
        """One simulator event, charging the waiting jobs for the time that passes."""
        before, waiting = sim.now, list(sim.queue)
        sim.step()
        if self.settings.reward == "wait" and waiting:
            weight = float(np.sum(1.0 / np.maximum(sim.est[waiting], TAU_S)))
            self._reward -= (sim.now - before) * weight / WAIT_SCALE

    def _util_reward(self, sim: _Sim, job: int) -> None:
        if self.settings.reward != "util":
            return
        u1, u2, u3 = self.settings.util_weights
        waits = sim.now - sim.submit[sim.queue] if sim.queue else np.zeros(1)
        spread = float(np.mean(waits)) / max(float(np.max(waits)), 1.0)
        busy = 1.0 - sim.free / self.processors
        self._reward += u1 * sim.size[job] / self.processors + u2 * busy - u3 * spread

    def _episode(self, sim: _Sim) -> Generator[QueueObservation, int, None]:
        s = self.settings
        if len(sim.submit) == 0:
            return
        sim.arrive()
        while sim.queue:
            q = np.asarray(sim.queue, dtype=np.int64)
            if s.proposals:
                grid, mask, positions = proposals_input(
                    sim.view(q), sim.machine(q), s.rank, s.proposals, with_queue=s.queue_row
                )
            else:
                grid, mask, positions = head_input(sim.view(q), sim.machine(q), s.rank, s.window)
            slot = yield QueueObservation(1, grid, mask, q[positions])
            head = int(q[positions[slot]])
            self._util_reward(sim, head)
            if sim.size[head] > sim.free:
                if s.backfill:
                    yield from self._backfill_while_waiting(sim, head)
                else:
                    while sim.size[head] > sim.free:
                        self._advance(sim)
            sim.launch(head)
            while not sim.queue and sim.next_arrival < len(sim.submit):
                self._advance(sim)

    def _backfill_while_waiting(
        self, sim: _Sim, head: int
    ) -> Generator[QueueObservation, int, None]:
        running = np.asarray(sim.running, dtype=np.int64)
        shadow = reserve(
            need=float(sim.size[head]),
            free_now=sim.free,
            now_s=sim.now,
            running_end_s=sim.start[running] + sim.est[running],
            running_size=sim.size[running],
        ).start_s
        while sim.size[head] > sim.free:
            while True:
                q = np.asarray(sim.queue, dtype=np.int64)
                q = q[np.argsort(sim.submit[q], kind="stable")]
                sim.queue = q.tolist()
                ok = (q != head) & (sim.size[q] <= sim.free) & (sim.now + sim.est[q] < shadow)
                candidates = np.flatnonzero(ok)
                if candidates.size == 0:
                    break
                grid = backfill_input(
                    sim.view(q), candidates, sim.machine(q), self.settings.rank, shadow_s=shadow
                )
                pick = yield QueueObservation(
                    2, grid, np.ones(len(candidates), bool), q[candidates]
                )
                job = int(q[candidates[pick]])
                self._util_reward(sim, job)
                sim.launch(job)
            self._advance(sim)
