"""Fault patterns: which GPUs of a cluster fail how often (``fault_aware``'s setting, varied).

The fault-aware agent places jobs knowing that GPUs differ in how often they fail.
``--faults default`` (:mod:`placement.faults`) is one such cluster: 5 % flaky GPUs at 50× the
base rate. A *pattern* generalises it so that an agent can be trained on some clusters and
judged on others it never saw:

* every GPU fails at ``base_rate`` per hour;
* a seeded ``flaky_share`` of the GPUs fail at ``flaky_rate`` instead (a bad card);
* a seeded ``flaky_node_share`` of the nodes have *every* GPU at ``flaky_rate`` (a bad
  board, power supply or NVLink: the failures cluster on a node).

Which units are flaky depends on the seed; the rates and shares on the pattern. A pattern
becomes a :class:`~placement.faults.FaultModel` (for the timed simulator) or a rate table
CSV that ``kale place timed --faults FILE`` reads.
"""

from __future__ import annotations

import csv
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from placement.errors import PlacementInputError
from placement.faults import BASE_RATE_PER_HOUR, FaultModel, FaultSettings


@dataclass(frozen=True)
class FaultPattern:
    """Failure rates over a cluster's GPUs (module docstring)."""

    base_rate: float = BASE_RATE_PER_HOUR
    """Failures per hour of a healthy GPU."""
    flaky_share: float = 0.05
    """Share of the GPUs that are flaky on their own."""
    flaky_rate: float = 0.05
    """Failures per hour of a flaky GPU (0.05: one per 20 hours of its life)."""
    flaky_node_share: float = 0.0
    """Share of the nodes whose every GPU is flaky."""
    name: str = "pattern"

    def __post_init__(self) -> None:
        for field_name in ("base_rate", "flaky_rate"):
            value = getattr(self, field_name)
            if not (math.isfinite(value) and value >= 0):
                raise PlacementInputError(f"{field_name}: must be a rate ≥ 0, got {value}")
        for field_name in ("flaky_share", "flaky_node_share"):
            value = getattr(self, field_name)
            if not 0 <= value <= 1:
                raise PlacementInputError(f"{field_name}: must be a share in [0, 1], got {value}")


@dataclass(frozen=True)
class PatternRange:
    """Where training draws its patterns from (uniform shares, log-uniform rates)."""

    flaky_share: tuple[float, float] = (0.02, 0.2)
    flaky_rate: tuple[float, float] = (0.001, 0.5)
    """Down to ``--faults default``'s flaky rate (10⁻³ per hour): a cluster where hardly
    anything failed lately is a state the agent must have seen."""
    flaky_node_share: tuple[float, float] = (0.0, 0.05)
    node_pattern_chance: float = 0.5
    """Chance that a drawn pattern also has flaky nodes."""

    def draw(self, rng: np.random.Generator) -> FaultPattern:
        lo, hi = np.log(self.flaky_rate[0]), np.log(self.flaky_rate[1])
        nodes = 0.0
        if rng.random() < self.node_pattern_chance:
            nodes = float(rng.uniform(*self.flaky_node_share))
        return FaultPattern(
            flaky_share=float(rng.uniform(*self.flaky_share)),
            flaky_rate=float(np.exp(rng.uniform(lo, hi))),
            flaky_node_share=nodes,
            name="drawn",
        )


def pattern_rates(pattern: FaultPattern, unit_node: np.ndarray, *, seed: int) -> np.ndarray:
    """Per-unit failure rates (per hour) of ``pattern``; ``unit_node[u]`` is unit u's node."""
    units = len(unit_node)
    rng = np.random.default_rng([seed, 0xF1A4])
    rate = np.full(units, pattern.base_rate)
    if units == 0:
        return rate
    flaky = rng.choice(units, size=round(pattern.flaky_share * units), replace=False)
    rate[flaky] = max(pattern.flaky_rate, pattern.base_rate)
    node_count = int(unit_node.max()) + 1
    bad_nodes = rng.choice(
        node_count, size=round(pattern.flaky_node_share * node_count), replace=False
    )
    rate[np.isin(unit_node, bad_nodes)] = max(pattern.flaky_rate, pattern.base_rate)
    return rate


def pattern_model(
    pattern: FaultPattern,
    unit_node: np.ndarray,
    *,
    seed: int,
    settings: FaultSettings | None = None,
) -> FaultModel:
    """``pattern`` on these units as the timed simulator's fault model."""
    return FaultModel(
        rate_per_hour=pattern_rates(pattern, unit_node, seed=seed),
        settings=settings or FaultSettings(),
        source=f"{pattern.name}(seed {seed})",
    )


def write_fault_table(
    path: str | Path, rates: np.ndarray, unit_names: list[tuple[str, int]]
) -> None:
    """``rates`` as a ``node,gpu,rate_per_hour`` CSV (``--faults FILE``), written atomically:
    one ``*,*`` row with the most common rate, then one row per unit that differs."""
    if len(rates) != len(unit_names):
        raise ValueError("one rate per unit")
    values, counts = np.unique(rates, return_counts=True)
    common = float(values[np.argmax(counts)]) if len(values) else 0.0
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or ".")
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as handle:
            out = csv.writer(handle)
            out.writerow(["node", "gpu", "rate_per_hour"])
            out.writerow(["*", "*", repr(common)])
            for unit in np.flatnonzero(rates != common).tolist():
                node, gpu = unit_names[unit]
                out.writerow([node, gpu, repr(float(rates[unit]))])
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
