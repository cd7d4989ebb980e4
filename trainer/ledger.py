"""What was trained: the merged offset intervals per partition and one record per step.

Why a module of its own: the ledger is the proof behind "a resize loses no sample" (the
intervals cover the stream) and bounds the duplicates a rebalance causes; tests and the
profiler read it without starting any process.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass


class OffsetLedger:
    """Offsets trained per partition, as merged intervals, plus how many were trained twice.

    Workers take contiguous offset ranges per partition; the ledger proves "no sample lost"
    (the intervals cover [start, end)) and bounds duplicates (records trained more than once).
    """

    def __init__(self) -> None:
        self.intervals: dict[int, list[list[int]]] = {}
        self.trained: dict[int, int] = {}
        self.duplicates = 0

    def add(self, partition: int, first: int, last: int) -> None:
        """Record that offsets ``first..last`` (inclusive) of ``partition`` were trained."""
        if last < first:
            return
        self.trained[partition] = self.trained.get(partition, 0) + (last - first + 1)
        spans = self.intervals.setdefault(partition, [])
        lo, hi = first, last + 1
        i = bisect.bisect_left(spans, [lo, lo])
        if i > 0 and spans[i - 1][1] >= lo:
            i -= 1
        j = i
        overlap = 0
        while j < len(spans) and spans[j][0] <= hi:
            overlap += max(0, min(hi, spans[j][1]) - max(lo, spans[j][0]))
            lo, hi = min(lo, spans[j][0]), max(hi, spans[j][1])
            j += 1
        spans[i:j] = [[lo, hi]]
        self.duplicates += overlap

    def covered(self, partition: int) -> list[tuple[int, int]]:
        """Half-open intervals [lo, hi) of offsets trained at least once."""
        return [(a, b) for a, b in self.intervals.get(partition, [])]

    def total(self) -> int:
        return sum(self.trained.values())


@dataclass(frozen=True)
class StepRecord:
    t: float
    worker: int
    samples: int
    loss_sum: float
    partial: bool
    generation: int
    phases: tuple[float, ...] = ()
    """Seconds spent reading, pulling, computing, pushing and committing."""
