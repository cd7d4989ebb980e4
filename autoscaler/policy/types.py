"""The vocabulary every policy shares: what it knows of the job, what it observes, what it says.

Kept free of I/O and of the throughput/forecasting packages' concrete classes, so policies are
pure functions of these values and tests can build them by hand.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from common.frozen import quick_init


@dataclass(frozen=True)
class JobSizing:
    """How a job's capacity depends on its size, and the bounds it must stay in.

    ``capacity[w]`` is the throughput (samples/s) of ``w`` workers with
    ``p = ceil(w / ratio)`` PS, for ``w = 0 … max_workers`` (``capacity[0] == 0``).
    """

    capacity: np.ndarray
    min_workers: int
    max_workers: int
    ratio: int
    interval_s: float
    rescale_s: float
    slo_s: float
    gpus_per_worker: int = 1
    max_resizes_per_hour: float | None = None
    """``spec.rescale.maxPerHour``: resizes a planner may start in any hour (None: any)."""
    _running_max: np.ndarray = field(init=False, repr=False, compare=False)
    _peak: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        cap = np.asarray(self.capacity, dtype=float)
        if cap.ndim != 1 or len(cap) != self.max_workers + 1:
            raise ValueError("capacity must hold f(w) for w = 0 … max_workers")
        if not 1 <= self.min_workers <= self.max_workers:
            raise ValueError("need 1 ≤ min_workers ≤ max_workers")
        object.__setattr__(self, "capacity", cap)
        window = cap[self.min_workers :]
        peak = self.min_workers + int(np.argmax(window))
        object.__setattr__(self, "_peak", peak)
        object.__setattr__(
            self, "_running_max", np.maximum.accumulate(window[: peak - self.min_workers + 1])
        )

    @classmethod
    def from_function(
        cls,
        f: Callable[[int], float],
        *,
        min_workers: int,
        max_workers: int,
        ratio: int,
        interval_s: float,
        rescale_s: float,
        slo_s: float,
        gpus_per_worker: int = 1,
    ) -> JobSizing:
        """Tabulate ``f(w)`` (p tied by the ratio) once for every w in range."""
        cap = np.array([0.0] + [float(f(w)) for w in range(1, max_workers + 1)])
        return cls(
            capacity=cap,
            min_workers=min_workers,
            max_workers=max_workers,
            ratio=ratio,
            interval_s=interval_s,
            rescale_s=rescale_s,
            slo_s=slo_s,
            gpus_per_worker=gpus_per_worker,
        )

    @property
    def peak_workers(self) -> int:
        """Argmax of f over [min_workers, max_workers]: more workers never help past it."""
        return self._peak

    @property
    def peak_throughput(self) -> float:
        return float(self.capacity[self._peak])

    def ps_for(self, workers: int) -> int:
        """PS count kept at the job's ratio: ``ceil(w / ratio)``."""
        return math.ceil(workers / self.ratio)

    def rate(self, workers: int) -> float:
        """Throughput (samples/s) of ``workers`` workers."""
        return float(self.capacity[workers])

    def workers_for(self, load: float) -> tuple[int, bool]:
        """Smallest w in [min, peak] with f(w) > load, else (peak, saturated=True)."""
        if load < 0 or math.isnan(load):
            load = 0.0
        i = int(np.searchsorted(self._running_max, load, side="right"))
        if i >= len(self._running_max):
            return self._peak, True
        return self.min_workers + i, False

    def workers_for_many(self, loads: np.ndarray) -> np.ndarray:
        """:meth:`workers_for` of each load (without the saturation flag), vectorised."""
        loads = np.nan_to_num(np.maximum(np.asarray(loads, dtype=float), 0.0))
        i = np.searchsorted(self._running_max, loads, side="right")
        out: np.ndarray = self.min_workers + np.minimum(i, len(self._running_max) - 1)
        return out


@quick_init
@dataclass(frozen=True)
class Observation:
    """What a policy may see when it decides for step ``step`` (only the past)."""

    step: int
    """Index of the step being decided for; decisions take effect at its start."""
    time_s: float
    """Start of that step, seconds since the trace's first timestamp."""
    arrivals: np.ndarray
    """Arrival rates (samples/s) of every step before ``step``: never the step itself."""
    workers: int
    ps: int
    backlog: float
    """Samples not yet consumed at the start of the step."""
    oldest_age_s: float
    """Age of the oldest unconsumed sample at the start of the step (0 without backlog)."""
    processed_rate: float
    """Samples/s consumed during the previous step."""
    resizing: bool
    """A resize is in progress (capacity 0); its decision stands until it ends."""
    resize_remaining_s: float = 0.0
    metrics_missing: bool = False
    """The job could not be measured for this decision (the controller: Kafka unreachable;
    the simulator: an outage): the arrivals, backlog and rates say nothing new, and
    :class:`~autoscaler.policy.behavior.BehavedPolicy` holds or falls back without asking
    the planner."""


@quick_init
@dataclass(frozen=True)
class Decision:
    """The size a policy wants, and why (structured, shown to operators)."""

    workers: int
    ps: int
    reason: dict[str, Any] = field(default_factory=dict)


class Policy(Protocol):
    """A sizing policy: pure apart from its own JSON-able ``state`` dict."""

    name: str

    def decide(self, obs: Observation, state: dict[str, Any]) -> Decision: ...


Arrivals = Sequence[float] | np.ndarray
