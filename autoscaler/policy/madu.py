"""MADU, the baseline that plans like Kale but believes throughput grows linearly.

Why a module of its own: it is Kale's planner (:class:`~autoscaler.policy.kale.KalePolicy`)
with a different capacity table, f(w) = a·w fitted through the origin, so the comparison
isolates what the fitted parameter-server model buys over a linear one.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from autoscaler.policy.forecasts import ForecastSource
from autoscaler.policy.kale import KalePolicy, KaleSettings
from autoscaler.policy.types import JobSizing


def linear_sizing(sizing: JobSizing, *, fit_range: tuple[int, int] | None = None) -> JobSizing:
    """The MADU view of capacity: f(w) = a·w, a fitted by least squares through the origin.

    ``fit_range`` is the profiled worker range the fit sees (default: min … max workers).
    """
    lo, hi = fit_range or (sizing.min_workers, sizing.max_workers)
    w = np.arange(lo, hi + 1, dtype=float)
    f = sizing.capacity[lo : hi + 1]
    a = float(np.dot(w, f) / np.dot(w, w))
    cap = a * np.arange(sizing.max_workers + 1, dtype=float)
    return replace(sizing, capacity=cap)  # every bound and duration kept


def madu_policy(
    sizing: JobSizing,
    source: ForecastSource,
    *,
    fit_range: tuple[int, int] | None = None,
    settings: KaleSettings | None = None,
) -> KalePolicy:
    """MADU: the same forecaster and planner, but sizing with a linear throughput fit."""
    return KalePolicy(
        sizing,
        source,
        name="madu",
        settings=settings,
        planning_sizing=linear_sizing(sizing, fit_range=fit_range),
    )
