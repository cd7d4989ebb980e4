"""The warning for a comparison that cannot say anything: a trace the job serves at minWorkers.

A generated trace and the example job are on different scales: left unscaled, the job never
needs more than its smallest size, every policy holds ``minWorkers`` and the comparison is
flat and identical — after minutes of forecaster fits. ``kale simulate`` says so before it
starts, and suggests ``--scale-peak``, which puts the trace's peak at a share of what the
job's largest size serves.
"""

from __future__ import annotations

import numpy as np

from autoscaler.policy.types import JobSizing
from common.numbers import format_percent, format_rate


def flat_trace_warning(name: str, sizing: JobSizing, evaluated: np.ndarray) -> str | None:
    """A one-line warning when no evaluated step needs more than ``minWorkers``, else None."""
    if len(evaluated) == 0:
        return None
    peak = float(np.max(evaluated))
    if sizing.workers_for(peak)[0] > sizing.min_workers:
        return None
    return (
        f"{name}: the trace never needs more than minWorkers ({sizing.min_workers}): its "
        f"peak {format_rate(peak)} is {format_percent(peak / sizing.peak_throughput)} of the "
        f"job's peak throughput ({format_rate(sizing.peak_throughput)}), so every policy holds "
        "the smallest size and the comparison says nothing; --scale-peak 0.8 puts the "
        "trace's peak at 80 % of it"
    )
