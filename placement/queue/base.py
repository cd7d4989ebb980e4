"""The queue-policy interface: which waiting job should start next.

A queue policy is a pure function of the waiting jobs (their submit times, run-time
estimates and sizes) and the current time, and answers with sort keys: the job with the
smallest keys goes first. Keys rather than a comparison function because the simulators
hold the queue as numpy arrays (a Lublin FCFS queue grows past a thousand jobs, and the
head is chosen at every event), and because a stable sort on keys reproduces exactly how
RLScheduler's reference code orders the queue: jobs whose keys tie keep the order the queue
already had. The EASY backfilling that may start jobs *around* the head lives apart
(:mod:`placement.queue.easy`), so every priority works with and without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class QueueView:
    """The waiting jobs as aligned arrays, in the queue's current order, at time ``now_s``."""

    submit_s: np.ndarray
    """Absolute submit time of each waiting job (the log's clock, seconds)."""
    estimate_s: np.ndarray
    """The run-time estimate the scheduler may use (requested time; never the true run time
    unless the log gives no request)."""
    size: np.ndarray
    """Processors (SWF) or GPUs (openb) the job asks for."""
    now_s: float
    """The simulated time of the decision."""

    @property
    def wait_s(self) -> np.ndarray:
        """How long each job has waited so far."""
        return self.now_s - self.submit_s

    def __len__(self) -> int:
        return len(self.submit_s)


class QueuePolicy(Protocol):
    """Orders waiting jobs; the job with the smallest keys starts first."""

    name: str
    """The name the CLI and JSON use (``fcfs``, ``sjf``, …)."""

    def keys(self, view: QueueView) -> tuple[np.ndarray, ...]:
        """Sort keys for every waiting job, most significant first (lower = sooner)."""
        ...


def order(policy: QueuePolicy, view: QueueView) -> np.ndarray:
    """Positions of ``view``'s jobs from first to start to last; ties keep the queue order."""
    if len(view) == 0:
        return np.zeros(0, dtype=np.int64)
    keys = policy.keys(view)
    # np.lexsort sorts by its *last* key first and is stable, as the reference code's
    # list.sort is: tied jobs keep the order the queue already had.
    return np.lexsort(tuple(reversed(keys)))


def head(policy: QueuePolicy, view: QueueView) -> int:
    """Position of the job the policy would start next (the queue must not be empty)."""
    if len(view) == 0:
        raise ValueError("head() of an empty queue")
    return int(order(policy, view)[0])
