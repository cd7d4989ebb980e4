"""What the noisy-traffic planner experiments share: the job, the traces, the optimum.

The setting of the project's planner targets (rescale 5 min, SLO 10 min, 1-minute steps,
the example sync job, scale-peak 0.8, 7 warm-up days), ``--set FIELD=VALUE`` planner
overrides, the generated and NASA traces by name, and the offline optimum cached on disk
(it does not depend on the planner). :mod:`experiments.noisy_planner` and
:mod:`experiments.planner_gap` read the same traces the same way through this module, so
their numbers stay comparable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from autoscaler.job.loading import LoadedJob, load_job
from autoscaler.policy.kale import KaleSettings
from autoscaler.policy.sizing import sizing_for
from autoscaler.policy.types import JobSizing
from autoscaler.sim.engine import lower_bound_gpu_hours
from autoscaler.sim.optimal import OptimalSettings, optimal
from autoscaler.sim.planners import settings_for
from autoscaler.sim.runner import scale_to_peak
from autoscaler.sim.tracegen import generate_trace
from autoscaler.sim.traces import load_trace
from benchmarks.paths import ROOT, nasa_trace
from benchmarks.simulate import overrides_of
from throughput.model import ThroughputModel

WARMUP = 7 * 1440
"""Warm-up steps (7 days at 1 minute), simulated but not judged."""


@dataclass(frozen=True)
class Setup:
    """The example job sized for the targets' setting, and its planner settings."""

    loaded: LoadedJob
    sizing: JobSizing
    settings: KaleSettings
    """The job's planner settings with the ``--set`` overrides."""
    changes: dict[str, Any]
    """The overrides, typed (what a row of results records)."""


def setup(overrides: list[str]) -> Setup:
    """The example sync job at rescale 5 min, SLO 10 min, 1-minute steps, with ``overrides``
    (``FIELD=VALUE`` of :class:`KaleSettings`, typed like the field)."""
    loaded = load_job(str(ROOT / "examples" / "ctr-sync.yaml"))
    model = ThroughputModel.load(loaded.throughput_model_path)
    sizing = sizing_for(loaded, model, rescale_s=300, slo_s=600, interval_s=60)
    base = settings_for(sizing, loaded.job)
    changes = overrides_of(overrides)
    return Setup(loaded, sizing, replace(base, **changes), changes)


def traces(
    days: float,
    seeds: str,
    noisy: str,
    noise: float,
    *,
    nasa: bool = False,
    nasa_offset_days: float = 0.0,
) -> list[tuple[str, pd.Series]]:
    """``gen<seed>`` (default noise) and ``noisy<seed>`` (``noise``) generated traces of
    ``days`` (seeds comma-separated), and with ``nasa`` the NASA trace's ``days`` from
    ``nasa_offset_days`` on (``nasa+<offset>``)."""
    out: list[tuple[str, pd.Series]] = []
    for s in [int(x) for x in seeds.split(",") if x]:
        out.append((f"gen{s}", generate_trace(days=days, interval_s=60, seed=s)))
    for s in [int(x) for x in noisy.split(",") if x]:
        out.append((f"noisy{s}", generate_trace(days=days, interval_s=60, seed=s, noise=noise)))
    if nasa:
        series = load_trace(str(nasa_trace(None))).series
        skip = round(nasa_offset_days * 1440)
        out.append((f"nasa+{nasa_offset_days:g}", series.iloc[skip : skip + round(days * 1440)]))
    return out


@dataclass(frozen=True)
class Judged:
    """A trace as the planners see it: its rates scaled to the job, and what to judge by."""

    values: np.ndarray
    lower_bound_gpu_hours: float
    optimal_gpu_hours: float


def judged(
    sizing: JobSizing, name: str, series: pd.Series, days: float, noise: float, cache: Path
) -> Judged:
    """``series`` scaled to 0.8 of the job's peak, its per-step lower bound, and the offline
    optimum (from ``cache``, a JSON file keyed by trace, days and noise; computed and
    written there when missing)."""
    values, _ = scale_to_peak(series.to_numpy(dtype=float), 0.8, sizing.peak_throughput)
    lb = lower_bound_gpu_hours(sizing, values[WARMUP:])
    known = json.loads(cache.read_text()) if cache.exists() else {}
    key = f"{name}/{days:g}/{noise:g}"
    if key not in known:
        best = optimal(sizing, values, warmup_steps=WARMUP, settings=OptimalSettings())
        known[key] = best.result.gpu_hours
        cache.write_text(json.dumps(known))
    return Judged(values, lb, float(known[key]))
