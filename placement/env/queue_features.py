"""What a queue-level agent sees (``tr_dqn``, TR-DQN): a ranked window of jobs and the machine.

* **Rank** (the document's ``rank_n = w1·l_n + w2·t_n + w3·s_n``): the queue is reordered by
  a weighted sum of each job's length (run-time estimate), its wait so far and its deadline
  term; the *lowest* rank comes first and ties keep the queue order. SWF logs carry no
  deadlines, so the deadline term is the time left until a soft deadline ``submit +
  D · max(estimate, τ)`` (the moment its bounded slowdown would reach ``D``). All terms in
  hours; the weights are :class:`RankWeights`.
* **Window**: the ``w`` lowest-ranked jobs. Each job is a ``[2, 3]`` block —
  ``[size share, log estimate, fits now]`` and ``[rank, log wait, backfill-eligible]`` —
  the document's size, estimate, priority and queued time plus the two facts that decide
  its class (ready / reserved / backfill). Empty slots are zeros and masked.
* **Proposals** (instead of a window): the head each of several rules would pick — the
  rank under other weights (FCFS as −wait, the soft deadline, length minus wait) and the
  heuristics RLScheduler compares (F1, WFP3, UNICEP) — one block each, so choosing a slot is
  choosing the rank's weights, or a rule, for this queue state
  (:data:`PROPOSALS`, :func:`proposals_input`).
* **Machine**: ``p`` availability rows ``[log horizon, free share then, 1]`` — the share of
  processors free now and after the running jobs that end (by their estimates) within
  each horizon. The document encodes every node; this profile carries the same facts for
  interchangeable processors in a size that does not grow with the machine
(docs/decisions/0123-tr-dqn-state-and-levels.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from placement.queue.base import MachineView, QueueView
from placement.queue.priorities import QUEUE_POLICIES

TAU_S = 10.0
HORIZONS_S: tuple[float, ...] = (
    0.0,
    300.0,
    900.0,
    3600.0,
    3 * 3600.0,
    8 * 3600.0,
    86400.0,
    3 * 86400.0,
)
"""Availability horizons of the machine rows (p = 8)."""
ROW_WIDTH = 3
LOG_SCALE = 6.0
"""log10 of the longest time worth telling apart (about 11 days)."""


@dataclass(frozen=True)
class RankWeights:
    """w1 (length), w2 (wait), w3 (deadline slack) and the slowdown target D of the deadline."""

    length: float = 1.0
    wait: float = 0.0
    deadline: float = 0.0
    slowdown_target: float = 50.0


def rank(view: QueueView, weights: RankWeights) -> np.ndarray:
    """``w1·length + w2·wait + w3·slack`` per waiting job, in hours (lower = first)."""
    est = view.estimate_s.astype(np.float64)
    deadline = view.submit_s + weights.slowdown_target * np.maximum(est, TAU_S)
    slack = deadline - view.now_s
    return (weights.length * est + weights.wait * view.wait_s + weights.deadline * slack) / 3600.0


PROPOSALS: dict[str, RankWeights | str] = {
    "sjf": RankWeights(1.0, 0.0, 0.0),
    "fcfs": RankWeights(0.0, -1.0, 0.0),
    "deadline": RankWeights(0.0, 0.0, 1.0),
    "aging": RankWeights(1.0, -1.0, 0.0),
    "f1": "f1",
    "wfp3": "wfp3",
    "unicep": "unicep",
    "sjf-deadline": RankWeights(1.0, 0.0, 0.02),
}
"""What a proposal slot may stand for: the rank under these weights (length, wait, deadline,
in hours; ties to the earlier submit, so ``sjf`` is SJF exactly and ``fcfs`` FCFS), or the
head of a heuristic of ``placement.queue.priorities``."""


def proposal_heads(view: QueueView, names: tuple[str, ...]) -> np.ndarray:
    """Position (in ``view``) of the head each named proposal would pick."""
    heads = np.empty(len(names), np.int64)
    for i, name in enumerate(names):
        rule = PROPOSALS[name]
        if isinstance(rule, RankWeights):
            keys: tuple[np.ndarray, ...] = (rank(view, rule), view.submit_s)
        else:
            keys = QUEUE_POLICIES[rule].keys(view)
        heads[i] = int(np.lexsort(tuple(reversed(keys)))[0])
    return heads


def queue_row(view: QueueView, machine: MachineView) -> np.ndarray:
    """``[1, 3]``: how much waits — log jobs waiting, log backlog (their processor-hours over
    the machine), 1. The load is what decides which rule's head is best (SJF at light load,
    F1 when the queue is long), and neither the heads nor the machine rows show it."""
    units = view.size if machine.job_units is None else machine.job_units
    backlog = float(np.sum(units * view.estimate_s)) / max(machine.capacity, 1.0) / 3600.0
    row = [math.log10(1.0 + len(view)) / 3.0, math.log10(1.0 + backlog) / 3.0, 1.0]
    return np.array([row], np.float32)


def proposals_input(
    view: QueueView,
    machine: MachineView,
    weights: RankWeights,
    names: tuple[str, ...],
    *,
    with_queue: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Level 1's ``[2m + p (+ 1), 3]`` input over the ``m`` proposals' heads (and the
    :func:`queue_row` with ``with_queue``), its slot mask (every slot, when a job waits) and
    the heads' positions (a job several rules agree on fills several slots)."""
    ranks = rank(view, weights)
    positions = proposal_heads(view, names) if len(view) else np.zeros(0, np.int64)
    size = len(names)
    blocks = np.zeros((size, 2, ROW_WIDTH), np.float32)
    blocks[: len(positions)] = job_blocks(view, positions, machine, ranks)
    mask = np.zeros(size, bool)
    mask[: len(positions)] = True
    parts = [blocks.reshape(2 * size, ROW_WIDTH), machine_rows(machine, view.now_s)]
    if with_queue:
        parts.append(queue_row(view, machine))
    return np.concatenate(parts), mask, positions


def window(view: QueueView, weights: RankWeights, size: int) -> np.ndarray:
    """Positions (in ``view``) of the ``size`` lowest-ranked jobs, first first."""
    return np.argsort(rank(view, weights), kind="stable")[:size]


def _log_time(seconds: np.ndarray | float) -> np.ndarray:
    return np.log10(1.0 + np.maximum(np.asarray(seconds, np.float64), 0.0)) / LOG_SCALE


def machine_rows(machine: MachineView, now_s: float) -> np.ndarray:
    """The ``[p, 3]`` availability profile (see the module docstring)."""
    ends = np.maximum(np.asarray(machine.running_end_s, np.float64), now_s)
    sizes = np.asarray(machine.running_size, np.float64)
    horizons = np.asarray(HORIZONS_S)
    freed = ((ends[None, :] <= now_s + horizons[:, None]) * sizes[None, :]).sum(axis=1)
    free = (machine.free + freed) / max(machine.capacity, 1.0)
    return np.stack([_log_time(horizons), free, np.ones_like(free)], axis=1).astype(np.float32)


def job_blocks(
    view: QueueView,
    positions: np.ndarray,
    machine: MachineView,
    ranks: np.ndarray,
    *,
    shadow_s: float = np.inf,
) -> np.ndarray:
    """``[len(positions), 2, 3]`` job blocks (module docstring); ``shadow_s`` is the head's
    reservation when backfilling (``inf``: no reservation, nothing is backfill-eligible)."""
    units = view.size if machine.job_units is None else machine.job_units
    size = units[positions].astype(np.float64)
    est = view.estimate_s[positions].astype(np.float64)
    fits = size <= machine.free
    eligible = fits & (view.now_s + est < shadow_s)
    spread = max(float(np.ptp(ranks)), 1e-9) if len(ranks) else 1.0
    rank_norm = (ranks[positions] - ranks.min()) / spread if len(ranks) else ranks[positions]
    first = np.stack([size / max(machine.capacity, 1.0), _log_time(est), fits], axis=1)
    second = np.stack([rank_norm, _log_time(view.wait_s[positions]), eligible], axis=1)
    return np.stack([first, second], axis=1).astype(np.float32)


def head_input(
    view: QueueView, machine: MachineView, weights: RankWeights, size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Level 1's ``[2w + p, 3]`` input, its slot mask and the window positions."""
    ranks = rank(view, weights)
    positions = np.argsort(ranks, kind="stable")[:size]
    blocks = np.zeros((size, 2, ROW_WIDTH), np.float32)
    blocks[: len(positions)] = job_blocks(view, positions, machine, ranks)
    mask = np.zeros(size, bool)
    mask[: len(positions)] = True
    grid = np.concatenate([blocks.reshape(2 * size, ROW_WIDTH), machine_rows(machine, view.now_s)])
    return grid, mask, positions


def backfill_input(
    view: QueueView,
    candidates: np.ndarray,
    machine: MachineView,
    weights: RankWeights,
    *,
    shadow_s: float,
) -> np.ndarray:
    """Level 2's ``[len(candidates), 2 + p, 3]`` inputs, one per backfill candidate."""
    ranks = rank(view, weights)
    blocks = job_blocks(view, candidates, machine, ranks, shadow_s=shadow_s)
    rows = np.broadcast_to(
        machine_rows(machine, view.now_s), (len(candidates), len(HORIZONS_S), ROW_WIDTH)
    )
    return np.concatenate([blocks, rows], axis=1).astype(np.float32)
