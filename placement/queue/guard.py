"""The guard for a learned queue policy: a rule orders the queue when the agent cannot.

``agent:PATH,fallback=RULE`` in ``--queue`` (``placement.agent_names``) builds a
:class:`GuardedQueuePolicy`. Each head choice (``keys``) and each backfill pick
(``pick_backfill``) is one decision; the rule makes it when the agent's answer is not a
choice (keys that are not one finite value per waiting job, a backfill index outside the
candidates: ``infeasible``), when its input leaves its training ranges (``out_of_range``),
or when it raises (``error``) — counted by reason (:class:`~placement.fallback.FallbackCounts`).

The rule's backfill pick is its own ``pick_backfill`` when it has one, else the first
candidate in submit order: what EASY does without a chooser, job for job.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from placement.fallback import FallbackCounts, OutsideTrainingRange
from placement.queue.base import QueuePolicy, QueueView


def _valid_keys(keys: Any, count: int) -> bool:
    if not isinstance(keys, tuple) or not keys:
        return False
    for key in keys:
        if not isinstance(key, np.ndarray) or key.shape != (count,):
            return False
        if np.issubdtype(key.dtype, np.floating) and not np.isfinite(key).all():
            return False
    return True


class GuardedQueuePolicy:
    """A learned queue policy with a rule behind it (module docstring)."""

    def __init__(self, agent: QueuePolicy, fallback: QueuePolicy, *, label: str) -> None:
        self.agent, self.fallback, self.name = agent, fallback, label
        self.fallback_counts = FallbackCounts()
        self.checks_ranges = bool(getattr(agent, "ranges", None))
        """Whether the agent's file recorded input ranges."""
        if self.checks_ranges:
            agent.check_ranges = True  # type: ignore[attr-defined]

    def keys(self, view: QueueView) -> tuple[np.ndarray, ...]:
        try:
            keys = self.agent.keys(view)
            if _valid_keys(keys, len(view)):
                self.fallback_counts.record(None)
                return keys
            reason = "infeasible"
        except OutsideTrainingRange:
            reason = "out_of_range"
        except Exception:  # the guard's purpose: any failure of the agent goes to the rule
            reason = "error"
        self.fallback_counts.record(reason)
        return self.fallback.keys(view)

    def pick_backfill(self, view: QueueView, candidates: np.ndarray, shadow_s: float) -> int:
        chooser = getattr(self.agent, "pick_backfill", None)
        reason = None
        if chooser is not None:
            try:
                pick = chooser(view, candidates, shadow_s)
                if isinstance(pick, int | np.integer) and 0 <= int(pick) < len(candidates):
                    self.fallback_counts.record(None)
                    return int(pick)
                reason = "infeasible"
            except OutsideTrainingRange:
                reason = "out_of_range"
            except Exception:  # as in keys: the rule decides
                reason = "error"
        self.fallback_counts.record(reason)
        rule = getattr(self.fallback, "pick_backfill", None)
        return int(rule(view, candidates, shadow_s)) if rule is not None else 0
