"""A precomputed capacity table: f(w, ceil(w/ratio)) for every integer w in a range.

Why a table: the planner asks "smallest w with f(w) > L" every control step, and the answer
must be exact at the boundary (a load equal to f(w) needs w + 1, never w because of float
drift) and cheap (≤ 50 µs). Evaluating the model once per range, keeping the values as Python
floats, and bisecting the running maximum gives both: the running maximum is monotone even
where f is not (f is jagged where ceil(w/ratio) steps, and falls after the peak), and the first
index where the running maximum exceeds L is exactly the first w with f(w) > L.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class CapacityTable:
    """Throughput of each integer worker count in ``[lo, hi]`` with p tied by the ratio."""

    lo: int
    """Smallest worker count in the table."""
    hi: int
    """Largest worker count in the table."""
    throughput: tuple[float, ...]
    """f(w) for w = lo … hi (samples/s), bit-identical to the model's vectorised prediction."""
    ps: tuple[int, ...]
    """ceil(w / ratio) for w = lo … hi."""
    running_max: list[float]
    """max(f(lo … w)): monotone, so it can be bisected."""
    peak_index: int
    """Index of the first maximum of f in the table."""

    @classmethod
    def build(cls, lo: int, hi: int, throughput: np.ndarray, ps: np.ndarray) -> CapacityTable:
        """Assemble a table from per-w arrays (``throughput[i]`` is f(lo + i))."""
        f = np.asarray(throughput, dtype=np.float64)
        running = np.maximum.accumulate(f)
        peak = int(np.argmax(f))  # first maximum: ties go to fewer workers
        return cls(
            lo, hi, tuple(f.tolist()), tuple(np.asarray(ps).tolist()), running.tolist(), peak
        )

    @property
    def peak_workers(self) -> int:
        """First argmax of f over the table: more workers never help past it."""
        return self.lo + self.peak_index

    @property
    def peak_throughput(self) -> float:
        """f at :attr:`peak_workers`."""
        return self.throughput[self.peak_index]

    def first_index_above(self, load: float) -> int | None:
        """Index of the smallest w with f(w) > ``load`` (strictly), ``None`` past the peak."""
        i = bisect_right(self.running_max, load, 0, self.peak_index + 1)
        return i if i <= self.peak_index else None
