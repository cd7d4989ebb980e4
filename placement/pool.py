"""The resource-pool interface the timed simulator runs on, and its simplest pool.

The timed simulator (:mod:`placement.timed`) decides *when* jobs start; a pool decides
*whether and where* a job fits and keeps the books. Keeping them apart lets the same event
loop, queue policies, EASY backfilling and fault model run on an SWF log's anonymous
processors (:class:`ProcessorPool`, here) and on a GPU cluster whose node policy picks the
nodes (``placement.node_pool``), and lets tests drive the engine with four processors.

A pool holds *units* — processors, or GPUs — that can fail: a unit that is down takes no new
work until it is repaired, and the simulator kills whatever runs on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np


class ResourcePool(Protocol):
    """Where jobs run. Job ids are positions in the simulated job arrays."""

    unit_names: list[tuple[str, int]]
    """(node, index on the node) of every unit, for fault tables and messages."""

    def fit_mask(self, jobs: np.ndarray) -> np.ndarray:
        """A fast, possibly optimistic test of which ``jobs`` could start now (a filter only)."""
        ...

    def try_start(self, job: int) -> bool:
        """Place ``job`` all-or-nothing on healthy free resources; False (nothing held) if not."""
        ...

    def stop(self, job: int) -> None:
        """Give back everything ``job`` holds (it ended, failed or was undone)."""
        ...

    def could_start_after(self, job: int, released: Sequence[int]) -> bool:
        """Whether ``job`` would fit if the running jobs ``released`` had ended (no change made)."""
        ...

    def fits_after_prefix(self, job: int, ordered: Sequence[int]) -> int | None:
        """The fewest running jobs, taken in ``ordered``'s order, that must end for ``job`` to
        fit (≥ 1), or None if it does not fit even when all have ended (EASY's reservation)."""
        ...

    def ever_fits(self, job: int) -> bool:
        """Whether ``job`` fits the whole, empty, healthy pool (else it can never run)."""
        ...

    def kind(self, job: int) -> object:
        """A hashable key equal for jobs that ask for exactly the same resources (so a failed
        placement of one answers for the others in the same scheduling pass)."""
        ...

    def units_of(self, job: int) -> np.ndarray:
        """The units ``job`` holds while it runs."""
        ...

    def jobs_on(self, unit: int) -> list[int]:
        """The running jobs holding ``unit``."""
        ...

    def set_down(self, unit: int, down: bool) -> None:
        """Mark ``unit`` failed (no new work) or repaired; the simulator stops the jobs on a
        failing unit before marking it down."""
        ...

    def usage(self) -> dict[str, float]:
        """Share of each resource in use now, over the pool's total (``{"gpu": …, "cpu": …}``);
        the first entry is the pool's main resource (the ``util`` of the reports)."""
        ...


class ProcessorPool:
    """Identical processors, first-free allocation (the machine of an SWF log).

    Units are individual processors so that faults can hit one; which processors a job gets
    does not matter for scheduling, only how many are free and healthy.
    """

    def __init__(self, processors: int, sizes: np.ndarray) -> None:
        if processors < 1:
            raise ValueError("a processor pool needs at least one processor")
        self.processors = processors
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.owner = np.full(processors, -1, dtype=np.int64)  # job per processor, -1 = free
        self.down = np.zeros(processors, dtype=bool)
        self.held: dict[int, np.ndarray] = {}
        self.free = processors
        self.unit_names = [(str(i), 0) for i in range(processors)]

    def fit_mask(self, jobs: np.ndarray) -> np.ndarray:
        return self.sizes[jobs] <= self.free

    def try_start(self, job: int) -> bool:
        need = int(self.sizes[job])
        if need > self.free:
            return False
        units = np.flatnonzero((self.owner < 0) & ~self.down)[:need]
        self.owner[units] = job
        self.held[job] = units
        self.free -= need
        return True

    def stop(self, job: int) -> None:
        units = self.held.pop(job)
        self.owner[units] = -1
        self.free += int(np.count_nonzero(~self.down[units]))

    def could_start_after(self, job: int, released: Sequence[int]) -> bool:
        back = sum(int(np.count_nonzero(~self.down[self.held[j]])) for j in released)
        return int(self.sizes[job]) <= self.free + back

    def fits_after_prefix(self, job: int, ordered: Sequence[int]) -> int | None:
        back = np.cumsum([np.count_nonzero(~self.down[self.held[j]]) for j in ordered])
        enough = np.flatnonzero(self.free + back >= int(self.sizes[job]))
        return int(enough[0]) + 1 if len(enough) else None

    def ever_fits(self, job: int) -> bool:
        return int(self.sizes[job]) <= self.processors

    def kind(self, job: int) -> object:
        return int(self.sizes[job])

    def units_of(self, job: int) -> np.ndarray:
        return self.held[job]

    def jobs_on(self, unit: int) -> list[int]:
        owner = int(self.owner[unit])
        return [owner] if owner >= 0 else []

    def set_down(self, unit: int, down: bool) -> None:
        if bool(self.down[unit]) == down:
            return
        self.down[unit] = down
        if self.owner[unit] < 0:
            self.free += -1 if down else 1

    def usage(self) -> dict[str, float]:
        return {"processors": float(np.count_nonzero(self.owner >= 0)) / self.processors}
