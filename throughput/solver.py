"""The minimum-worker solver: the smallest w whose predicted throughput exceeds the load.

    minimise w ∈ [min_workers, max_workers]   subject to   f(w, ceil(w/ratio)) > L

A pure function of (model, load, range): no clock, no I/O, no state beyond the model's cached
capacity table, so the simulator, the controller and the tests all get the same answer.
When no allowed w serves L, the answer is the peak configuration with ``saturated=True``: more
workers past the peak only slow a synchronous job down, so the solver never returns them.

The backlog-aware variant sizes for the load *plus* draining a backlog b within a time
budget: the needed rate is L + b / budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from throughput.model import ThroughputModel


@dataclass(frozen=True, slots=True)
class Plan:
    """The solver's answer."""

    workers: int
    """Worker count to run."""
    ps: int
    """Parameter servers: always ceil(workers / ratio)."""
    throughput: float
    """Predicted samples/s of (workers, ps)."""
    saturated: bool
    """True when no allowed configuration exceeds the needed rate: this is the peak."""
    needed_rate: float
    """The rate sized for: load + backlog / drain budget (samples/s)."""

    def as_dict(self) -> dict[str, object]:
        """JSON-ready dict (the CLI's ``plan --json`` shape)."""
        return {
            "workers": self.workers,
            "ps": self.ps,
            "throughput": self.throughput,
            "saturated": self.saturated,
            "needed_rate": self.needed_rate,
        }


def needed_rate(load: float, *, backlog: float = 0.0, drain_within_s: float | None = None) -> float:
    """Rate that serves ``load`` and drains ``backlog`` samples within ``drain_within_s``."""
    if not math.isfinite(load) and load != math.inf:
        raise ValueError(f"load must be a number of samples/s, got {load!r}")
    if load < 0:
        raise ValueError(f"load must be ≥ 0 samples/s, got {load!r}")
    if backlog == 0:
        return float(load)
    if not (backlog > 0 and math.isfinite(backlog)):
        raise ValueError(f"backlog must be ≥ 0 samples, got {backlog!r}")
    if drain_within_s is None or not (drain_within_s > 0):
        raise ValueError(
            f"a backlog of {backlog:g} samples needs a positive drain time, got {drain_within_s!r}"
        )
    return float(load) + backlog / drain_within_s


def plan(
    model: ThroughputModel,
    load: float,
    *,
    min_workers: int | None = None,
    max_workers: int | None = None,
    backlog: float = 0.0,
    drain_within_s: float | None = None,
) -> Plan:
    """Smallest w in [min_workers, max_workers] with f(w, ceil(w/ratio)) > needed rate.

    The range defaults to the model's. Exact: the comparison is strict and made against the
    same floats :meth:`ThroughputModel.throughput` returns, so a load equal to f(w) gets the
    next w that serves more. Cost: one bisect on a cached table (a few µs).
    """
    rate = needed_rate(load, backlog=backlog, drain_within_s=drain_within_s)
    table = model.capacity_table(min_workers, max_workers)
    i = table.first_index_above(rate)
    if i is None:
        i = table.peak_index
        saturated = True
    else:
        saturated = False
    return Plan(table.lo + i, table.ps[i], table.throughput[i], saturated, rate)


def plan_backlog(
    model: ThroughputModel,
    load: float,
    backlog: float,
    drain_within_s: float,
    *,
    min_workers: int | None = None,
    max_workers: int | None = None,
) -> Plan:
    """:func:`plan` sized to serve ``load`` and drain ``backlog`` within ``drain_within_s``."""
    return plan(
        model,
        load,
        min_workers=min_workers,
        max_workers=max_workers,
        backlog=backlog,
        drain_within_s=drain_within_s,
    )
