"""What the guard of a learned agent checks and counts: input ranges, fallback reasons.

A learned scheduler is trusted only on decisions like those it was trained on. Its saved
file records, per input feature, the least and the greatest value it saw in training
(:class:`FeatureRanges`); when a decision's inputs leave those ranges (by more than
:data:`RANGE_MARGIN` of a feature's span), the agent raises :class:`OutsideTrainingRange`
instead of deciding, and the guard lets its rule decide. Three reasons, counted per decision
(:class:`FallbackCounts`): the agent's choice is ``infeasible`` (or not a choice at all), its
input is ``out_of_range``, or it raised (``error``). An agent file from before ranges were
recorded has none: its guard checks feasibility and errors only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

REASONS = ("infeasible", "out_of_range", "error")
"""Why the rule decided instead of the agent."""
RANGE_MARGIN = 0.05
"""A value may pass a feature's training range by this share of the range's span (plus a
hair for float noise) before it counts as outside: the ranges are a sample's extremes."""
_EPSILON = 1e-6


class OutsideTrainingRange(Exception):
    """An agent's input left the ranges it was trained on (raised only when asked to check)."""

    def __init__(self, group: str, features: Iterable[str]) -> None:
        self.group, self.features = group, tuple(features)
        super().__init__(f"{group} outside the training range: {', '.join(self.features)}")


@dataclass
class FeatureRanges:
    """Per input group (``rows``, ``context``, …), each feature's least and greatest value."""

    names: dict[str, tuple[str, ...]] = field(default_factory=dict)
    low: dict[str, np.ndarray] = field(default_factory=dict)
    high: dict[str, np.ndarray] = field(default_factory=dict)

    def update(self, group: str, values: np.ndarray, names: Iterable[str] | None = None) -> None:
        """Widen ``group``'s ranges to cover ``values`` (``[..., features]``; any leading
        shape). ``names`` label the features the first time (else ``f0``, ``f1``, …)."""
        flat = np.asarray(values, np.float64).reshape(-1, np.shape(values)[-1])
        if not len(flat):
            return
        low, high = flat.min(axis=0), flat.max(axis=0)
        if group not in self.low:
            width = flat.shape[1]
            self.names[group] = (
                tuple(names) if names is not None else tuple(f"f{i}" for i in range(width))
            )
            self.low[group], self.high[group] = low, high
            return
        np.minimum(self.low[group], low, out=self.low[group])
        np.maximum(self.high[group], high, out=self.high[group])

    def outside(self, group: str, values: np.ndarray) -> list[str]:
        """Names of ``group``'s features that some row of ``values`` takes outside the
        recorded range (with the margin); [] when in range or the group was never seen;
        every name when the rows are not as wide as the recorded ones (another input)."""
        if group not in self.low:
            return []
        flat = np.asarray(values, np.float64).reshape(-1, np.shape(values)[-1])
        low, high = self.low[group], self.high[group]
        if flat.shape[1] != len(low):
            return list(self.names[group])
        slack = RANGE_MARGIN * (high - low) + _EPSILON
        bad = ((flat < low - slack) | (flat > high + slack)).any(axis=0)
        return [self.names[group][i] for i in np.flatnonzero(bad)]

    def check(self, group: str, values: np.ndarray) -> None:
        """Raise :class:`OutsideTrainingRange` when :meth:`outside` names any feature."""
        bad = self.outside(group, values)
        if bad:
            raise OutsideTrainingRange(group, bad)

    def __bool__(self) -> bool:
        return bool(self.low)

    def as_dict(self) -> dict[str, Any]:
        """Plain lists, for an agent file."""
        return {
            g: {
                "names": list(self.names[g]),
                "low": self.low[g].tolist(),
                "high": self.high[g].tolist(),
            }
            for g in self.low
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> FeatureRanges:
        """The inverse of :meth:`as_dict` (None or {}: no ranges)."""
        out = cls()
        for group, entry in (values or {}).items():
            out.names[group] = tuple(entry["names"])
            out.low[group] = np.asarray(entry["low"], np.float64)
            out.high[group] = np.asarray(entry["high"], np.float64)
        return out


@dataclass
class FallbackCounts:
    """Decisions a guard oversaw, and those its rule made, by reason."""

    decisions: int = 0
    by_reason: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))

    @property
    def fallbacks(self) -> int:
        return sum(self.by_reason.values())

    def record(self, reason: str | None) -> None:
        """One decision; ``reason`` is why the rule made it (None: the agent did)."""
        self.decisions += 1
        if reason is not None:
            self.by_reason[reason] += 1

    def snapshot(self) -> FallbackCounts:
        return FallbackCounts(self.decisions, dict(self.by_reason))

    def since(self, earlier: FallbackCounts) -> FallbackCounts:
        """What was counted after ``earlier`` (a :meth:`snapshot`)."""
        return FallbackCounts(
            self.decisions - earlier.decisions,
            {r: self.by_reason[r] - earlier.by_reason[r] for r in REASONS},
        )

    def report(self) -> dict[str, Any]:
        """The JSON fields: ``fallback_decisions``, ``fallback_reasons``, ``guarded_decisions``."""
        return {
            "fallback_decisions": self.fallbacks,
            "fallback_reasons": dict(self.by_reason),
            "guarded_decisions": self.decisions,
        }

    def add(self, other: FallbackCounts) -> None:
        self.decisions += other.decisions
        for r in REASONS:
            self.by_reason[r] += other.by_reason[r]


def counts_of(policy: object) -> FallbackCounts | None:
    """A guarded policy's counts (None for any other policy)."""
    counts = getattr(policy, "fallback_counts", None)
    return counts if isinstance(counts, FallbackCounts) else None
