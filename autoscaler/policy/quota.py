"""The cluster resource manager: approves GPU requests of jobs sharing one quota.

docs/design.md's system flow puts every resize through the resource manager before GPUs are given
to a job or taken back into the pool. The multi-job simulator calls it once per step with
every job's wish; the controller will call it the same way. It is pure bookkeeping (no I/O).

One approval round (:meth:`ResourceManager.allocate`):

1. **Shrinks are always approved**, never below the job's minimum. The GPUs they give back are
   *not* handed out in the same round: a resizing job holds ``max(old, new)`` until the resize
   ends, so the caller reports the lower holding in a later round. Approvals therefore never
   push the sum of holdings over the quota, resize or not.
2. **Minimum guarantees first.** A job holding less than its minimum (a job being placed) gets
   its minimum before anyone grows, higher priority first, all or nothing (a job cannot run on
   part of its minimum).
3. **Then growth by priority**, highest first. Within one priority the free GPUs are shared
   max-min fairly (water-filling): whole workers (``unit`` GPUs) go one at a time to the job
   holding the fewest GPUs that still wants more, so when GPUs are short equal-priority jobs
   end up with equal holdings, and a small request is met in full before large ones split
   the rest.
4. **No preemption**: a job never loses GPUs it holds and still wants. Together with 2 this is
   what "nobody starves" means here: every job keeps at least its minimum, always.
5. **Never above the quota**: growth only comes out of ``quota − Σ holdings``.

A ``unit`` of 0 (workers without GPUs) is approved as asked and uses no quota.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from common.frozen import quick_init


@quick_init
@dataclass(frozen=True)
class Request:
    """One job's wish in one approval round (all amounts in GPUs)."""

    job: str
    """Job name (unique within a round)."""
    current_gpus: int
    """GPUs the job holds now (``max(old, new)`` while it is resizing)."""
    desired_gpus: int
    """GPUs it would like to hold."""
    priority: int = 0
    """Higher wins when GPUs are short."""
    min_gpus: int = 0
    """Guaranteed minimum (minWorkers × GPUs per worker)."""
    unit: int = 1
    """GPUs per worker: grants come in whole workers."""


class ResourceManager:
    """A GPU quota shared by jobs; see the module docstring for the approval rules."""

    def __init__(self, quota_gpus: int) -> None:
        if quota_gpus < 0:
            raise ValueError("the GPU quota must be ≥ 0")
        self.quota_gpus = int(quota_gpus)
        self.held: dict[str, int] = {}
        """What each job holds after the last round (used by :meth:`request`)."""

    def allocate(self, requests: Sequence[Request]) -> dict[str, int]:
        """One approval round over every job; returns the GPUs granted to each."""
        names = [r.job for r in requests]
        if len(set(names)) != len(names):
            raise ValueError("job names must be unique within a round")
        granted: dict[str, int] = {}
        growing: list[Request] = []
        for r in requests:
            if r.current_gpus < 0 or r.desired_gpus < 0 or r.min_gpus < 0 or r.unit < 0:
                raise ValueError(f"{r.job}: GPU amounts must be ≥ 0")
            floor = max(r.desired_gpus, r.min_gpus)
            if r.unit == 0 or floor <= r.current_gpus:
                granted[r.job] = floor
            else:
                granted[r.job] = r.current_gpus
                growing.append(r)
        used = sum(r.current_gpus for r in requests if r.unit)
        free = max(0, self.quota_gpus - used)
        # 2. minimum guarantees, higher priority first, all or nothing.
        for r in sorted(growing, key=lambda r: (-r.priority, r.job)):
            need = _round_up(r.min_gpus, r.unit) - granted[r.job]
            if need > 0 and need <= free:
                granted[r.job] += need
                free -= need
        # 3. growth by priority, max-min fair within a priority.
        for prio in sorted({r.priority for r in growing}, reverse=True):
            cls = [r for r in growing if r.priority == prio]
            free = self._water_fill(cls, granted, free)
        for r in requests:
            self.held[r.job] = max(granted[r.job], r.current_gpus) if r.unit else 0
        return granted

    @staticmethod
    def _water_fill(cls: list[Request], granted: dict[str, int], free: int) -> int:
        wants = {r.job: _round_down(r.desired_gpus, r.unit) - granted[r.job] for r in cls}
        if sum(max(0, v) for v in wants.values()) <= free:
            for r in cls:
                if wants[r.job] > 0:
                    granted[r.job] += wants[r.job]
                    free -= wants[r.job]
            return free
        units = {r.job: r.unit for r in cls}
        while True:
            open_ = [j for j in units if wants[j] >= units[j] and units[j] <= free]
            if not open_:
                return free
            j = min(open_, key=lambda j: (granted[j], j))
            granted[j] += units[j]
            wants[j] -= units[j]
            free -= units[j]

    def request(
        self,
        job: str,
        current_gpus: int,
        desired_gpus: int,
        priority: int = 0,
        min_gpus: int = 0,
        unit: int = 1,
    ) -> int:
        """Approve one job's request against what the others hold now; returns the grant."""
        others = [Request(name, gpus, gpus) for name, gpus in self.held.items() if name != job]
        mine = Request(job, current_gpus, desired_gpus, priority, min_gpus, unit)
        return self.allocate([*others, mine])[job]

    def release(self, job: str) -> None:
        """Forget a finished job; its GPUs return to the pool."""
        self.held.pop(job, None)


def _round_up(gpus: int, unit: int) -> int:
    return -(-gpus // unit) * unit if unit else gpus


def _round_down(gpus: int, unit: int) -> int:
    return gpus // unit * unit if unit else gpus
