"""GPU faults for timed runs (the fault-aware agent's setting): every GPU fails at its own rate.

Large training clusters do not fail uniformly: most GPUs almost never fail, and a minority
of flaky ones cause most interruptions, which is why the fault-aware agent
makes placement fault-aware.
Here each unit (GPU, or processor for an SWF log) fails as a Poisson process with its own
rate; a failed unit is out of service for ``repair_s``; every job holding it is killed, keeps
the work up to its last checkpoint (every ``checkpoint_s`` of its run), and re-enters the
queue ``restart_s`` later for the rest of its run.

``default_fault_model`` is a documented heterogeneous model; ``load_fault_table`` reads a
per-node/per-GPU rate table (CSV ``node,gpu,rate_per_hour``; ``*`` matches every node or
every GPU; later rows override earlier ones; units no row names never fail).
"""

from __future__ import annotations

import csv
import heapq
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from placement.errors import PlacementInputError

BASE_RATE_PER_HOUR = 2e-5
"""Default failure rate of a healthy GPU: one per 50,000 GPU-hours. Meta's Llama 3 run saw
419 unexpected interruptions in 54 days on 16,384 GPUs (≈ 2.0e-5 per GPU-hour)."""
FLAKY_SHARE = 0.05
"""Default share of flaky GPUs (drawn with the run's seed)."""
FLAKY_FACTOR = 50.0
"""How much more often a flaky GPU fails (1e-3 per hour: one per ~6 weeks); with the defaults
the 5 % flaky GPUs cause about 70 % of all failures."""


@dataclass(frozen=True)
class FaultSettings:
    """How failures hurt a job; the defaults suit multi-hour deep-learning training."""

    checkpoint_s: float = 3600.0
    """A running job saves its progress every ``checkpoint_s`` seconds of its run."""
    restart_s: float = 600.0
    """Delay between a failure and the killed job re-entering the queue (reschedule, reload)."""
    repair_s: float = 7200.0
    """How long a failed unit stays out of service."""
    history_s: float = 0.0
    """Failures drawn for this long *before* the first submit: a history that fault-aware
    policies have observed when the run starts (it costs no job anything)."""
    window_s: float = 86_400.0
    """How far back fault-aware policies count a unit's failures (the scheduler's
    ``faults.window``)."""

    def __post_init__(self) -> None:
        if not self.checkpoint_s > 0:
            raise PlacementInputError(f"checkpoint interval must be > 0 s, got {self.checkpoint_s}")
        if not self.window_s > 0:
            raise PlacementInputError(f"fault window must be > 0 s, got {self.window_s}")
        for name in ("restart_s", "repair_s", "history_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise PlacementInputError(f"{name}: must be a finite number ≥ 0, got {value}")


@dataclass(frozen=True)
class FaultModel:
    """Per-unit failure rates (per hour) and the settings of what a failure costs."""

    rate_per_hour: np.ndarray
    settings: FaultSettings = FaultSettings()
    source: str = "default"
    scripted: tuple[tuple[float, int], ...] = ()
    """Failures at fixed (time, unit) instead of random draws (replaying a failure log, or a
    test that needs to know exactly when a unit fails); the rates are then ignored."""

    def flaky_units(self) -> np.ndarray:
        """Units failing faster than the median unit (the "minority of flaky GPUs")."""
        return np.flatnonzero(self.rate_per_hour > np.median(self.rate_per_hour))


def default_fault_model(
    units: int, *, seed: int, settings: FaultSettings | None = None
) -> FaultModel:
    """The default heterogeneous model: :data:`FLAKY_SHARE` of the units are flaky."""
    rng = np.random.default_rng([seed, 0xFA017])
    rate = np.full(units, BASE_RATE_PER_HOUR)
    flaky = rng.choice(units, size=round(FLAKY_SHARE * units), replace=False)
    rate[flaky] *= FLAKY_FACTOR
    return FaultModel(rate_per_hour=rate, settings=settings or FaultSettings(), source="default")


def load_fault_table(
    path: str | Path, unit_names: list[tuple[str, int]], *, settings: FaultSettings | None = None
) -> FaultModel:
    """Rates from a CSV table ``node,gpu,rate_per_hour``; a bad row raises ``FILE:LINE: reason``."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlacementInputError("no such file", path=name) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlacementInputError(f"cannot read: {exc}", path=name) from None
    lines = text.splitlines()
    reader = csv.reader(lines)
    header = [h.strip() for h in next(reader, [])]
    if header != ["node", "gpu", "rate_per_hour"]:
        raise PlacementInputError(
            f"header must be 'node,gpu,rate_per_hour', found {','.join(header)!r}",
            path=name,
            line=1,
        )
    by_node: dict[str, list[int]] = {}
    for unit, (node, _) in enumerate(unit_names):
        by_node.setdefault(node, []).append(unit)
    rate = np.zeros(len(unit_names))
    for row in reader:
        line = reader.line_num
        if not row or all(not c.strip() for c in row):
            continue
        units = _units_of_row(row, by_node, unit_names, path=name, line=line)
        rate[units] = _rate(row, name, line)
    return FaultModel(rate_per_hour=rate, settings=settings or FaultSettings(), source=name)


def _rate(row: list[str], path: str, line: int) -> float:
    token = row[2].strip()
    try:
        value = float(token)
    except ValueError:
        raise PlacementInputError(
            f"rate_per_hour: {token!r} is not a number", path=path, line=line
        ) from None
    if not math.isfinite(value) or value < 0:
        raise PlacementInputError(
            f"rate_per_hour: {token} must be a finite number ≥ 0", path=path, line=line
        )
    return value


def _units_of_row(
    row: list[str],
    by_node: dict[str, list[int]],
    unit_names: list[tuple[str, int]],
    *,
    path: str,
    line: int,
) -> list[int]:
    if len(row) != 3:
        raise PlacementInputError(f"expected 3 fields, found {len(row)}", path=path, line=line)
    node, gpu = row[0].strip(), row[1].strip()
    if node == "*":
        units = list(range(len(unit_names)))
    elif node in by_node:
        units = by_node[node]
    else:
        raise PlacementInputError(
            f"node: {node!r} is not a node of the cluster", path=path, line=line
        )
    if gpu == "*":
        return units
    if not gpu.isdigit():
        raise PlacementInputError(f"gpu: {gpu!r} must be an index or '*'", path=path, line=line)
    picked = [u for u in units if unit_names[u][1] == int(gpu)]
    if not picked:
        raise PlacementInputError(f"gpu: node {node!r} has no GPU {gpu}", path=path, line=line)
    return picked


class FaultClock:
    """The next failure of every unit, drawn lazily (a unit's clock restarts after repair)."""

    def __init__(self, model: FaultModel, *, start_s: float, seed: int) -> None:
        self.model = model
        self.rng = np.random.default_rng([seed, 0xC10C])
        self.heap: list[tuple[float, int]] = []
        if model.scripted:
            self.heap = sorted(model.scripted)
            return
        for unit in np.flatnonzero(model.rate_per_hour > 0).tolist():
            heapq.heappush(self.heap, (self._next_after(unit, start_s), unit))

    def _next_after(self, unit: int, time_s: float) -> float:
        mean_s = 3600.0 / float(self.model.rate_per_hour[unit])
        return time_s + float(self.rng.exponential(mean_s))

    def peek(self) -> float:
        """Time of the next failure (``inf`` if no unit can fail)."""
        return self.heap[0][0] if self.heap else math.inf

    def pop(self) -> tuple[float, int]:
        """The next failure; the unit's following one is drawn from the end of its repair."""
        time_s, unit = heapq.heappop(self.heap)
        if self.model.scripted:
            return time_s, unit
        repaired = time_s + self.model.settings.repair_s
        heapq.heappush(self.heap, (self._next_after(unit, repaired), unit))
        return time_s, unit
