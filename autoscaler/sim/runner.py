"""Library entry points behind ``kale simulate``: trace preparation and policy comparisons.

The CLI only parses flags, loads files and prints; everything it computes is here, so a
notebook or a test can run the same comparison with ``compare(...)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autoscaler.policy.behavior import behaved
from autoscaler.policy.types import JobSizing
from autoscaler.sim.engine import SimResult, lower_bound_gpu_hours, simulate
from autoscaler.sim.multi import JobInput, MultiResult, simulate_jobs
from autoscaler.sim.optimal import OptimalProgress, OptimalResult, OptimalSettings, optimal
from autoscaler.sim.policies import make_policy
from common.errors import UserError

DAY_S = 86400.0


def resample(values: np.ndarray, interval_s: float, step_s: float | None) -> np.ndarray:
    """Put a trace's rates on another step.

    Finer (``step_s`` divides the interval): the rate is linearly interpolated between the
    trace's points, the last value held to the end. Coarser (a multiple of the interval): the
    mean rate of each block; an incomplete last block is dropped.
    """
    values = np.asarray(values, dtype=float)
    if step_s is None or math.isclose(step_s, interval_s):
        return values
    if step_s <= 0:
        raise UserError("--resample: must be positive")
    if step_s < interval_s:
        m = interval_s / step_s
        if abs(m - round(m)) > 1e-9:
            raise UserError(
                f"--resample: {step_s:g}s must divide the trace's interval {interval_s:g}s"
            )
        m = round(m)
        fine = np.arange(len(values) * m) / m
        finer: np.ndarray = np.interp(fine, np.arange(len(values)), values)
        return finer
    m = step_s / interval_s
    if abs(m - round(m)) > 1e-9:
        raise UserError(
            f"--resample: {step_s:g}s must be a multiple of the trace's interval {interval_s:g}s"
        )
    m = round(m)
    blocks = len(values) // m
    if blocks < 2:
        raise UserError(f"--resample: {step_s:g}s leaves fewer than 2 steps")
    coarser: np.ndarray = values[: blocks * m].reshape(blocks, m).mean(axis=1)
    return coarser


def scale_to_peak(
    values: np.ndarray, k: float | None, peak_throughput: float
) -> tuple[np.ndarray, float]:
    """Rescale so the trace's maximum is ``k`` × the model's peak throughput (``k=None``: 1×)."""
    if k is None:
        return values, 1.0
    top = float(np.max(values))
    if top <= 0:
        raise UserError("--scale-peak: the trace is all zeros, nothing to rescale")
    scale = k * peak_throughput / top
    return values * scale, scale


def warmup_steps_for(days: float, interval_s: float, total_steps: int) -> int:
    """Steps of history before the evaluation starts; a user error if nothing is left."""
    if days < 0:
        raise UserError("--warmup-days: must be ≥ 0")
    steps = round(days * DAY_S / interval_s)
    if steps >= total_steps:
        raise UserError(
            f"--warmup-days: {days:g} days of warm-up is at least the whole trace "
            f"({total_steps * interval_s / DAY_S:.2f} days); nothing would be evaluated"
        )
    return steps


@dataclass
class Comparison:
    """Every policy run on one job and trace, and the offline optimum beside them."""

    results: dict[str, SimResult]
    lower_bound_gpu_hours: float
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    optimal: OptimalResult | None = None


def policy_metrics(
    result: SimResult, lower_bound: float, optimal_gpu_hours: float | None = None
) -> dict[str, Any]:
    """The JSON numbers of one policy, plus ``lower_bound_ratio``, ``regret`` (GPU-hours over
    the optimum's) and the run time."""
    m: dict[str, Any] = dict(result.metrics())
    m["lower_bound_ratio"] = m["gpu_hours"] / lower_bound if lower_bound > 0 else None
    m["regret"] = m["gpu_hours"] / optimal_gpu_hours if optimal_gpu_hours else None
    m["elapsed_s"] = result.elapsed_s
    if result.behavior:  # where the job's fallback, stabilization or schedules acted
        m["behavior"] = [
            {"step": step, "knob": knob, "what": what} for step, knob, what in result.behavior
        ]
    return m


def compare(
    sizing: JobSizing,
    arrivals: np.ndarray,
    names: Sequence[str],
    *,
    warmup_steps: int,
    job: Any = None,
    forecaster_factory: Any = None,
    partitions: int | None = None,
    lag_threshold: float | None = None,
    trace_start: Any = None,
    progress: Callable[[int], None] | None = None,
    optimal_settings: OptimalSettings | None = None,
    planner: str | None = None,
    optimal_progress: OptimalProgress | None = None,
    blind: Sequence[int] | None = None,
    overrides: dict[str, Any] | None = None,
) -> Comparison:
    """Run each named policy over the same arrivals; metrics cover the post-warm-up steps.

    ``planner`` picks Kale's planner for kale, madu and oracle (None: the default);
    ``overrides`` other fields of their ``KaleSettings``.

    The offline optimum (:mod:`autoscaler.sim.optimal`) is computed beside them unless
    ``optimal_settings`` is None and "optimal" is not among ``names``; each policy's
    ``regret`` is its GPU-hours over the optimum's; ``optimal_progress(done, total)`` hears
    of its progress (it takes seconds, with nothing else to show meanwhile).

    ``blind``: steps decided without metrics (a metrics outage): every policy holds there,
    or falls back to the job's ``spec.fallback`` size (:mod:`autoscaler.policy.behavior`).
    """
    arrivals = np.asarray(arrivals, dtype=float)
    cache: dict[str, Any] = {}
    best: OptimalResult | None = None
    listed = "optimal" in names
    if optimal_settings is not None or listed:
        best = optimal(
            sizing,
            arrivals,
            warmup_steps=warmup_steps,
            settings=optimal_settings,
            on_progress=optimal_progress,
        )
    names = [n for n in names if n != "optimal"]
    policies = {
        name: make_policy(
            name,
            sizing=sizing,
            job=job,
            forecaster_factory=forecaster_factory,
            forecast_cache=cache,
            future=arrivals if name == "oracle" else None,
            trace_start=trace_start,
            partitions=partitions,
            lag_threshold=lag_threshold,
            planner=planner,
            overrides=overrides,
        )
        for name in names
    }
    if blind:  # a decision without metrics goes through the knobs' wrapper (hold/fallback)
        policies = {n: behaved(p, None, sizing, always=True) for n, p in policies.items()}
    lb = lower_bound_gpu_hours(sizing, arrivals[warmup_steps:])
    results = {
        name: simulate(
            policy,
            sizing,
            arrivals,
            warmup_steps=warmup_steps,
            progress=progress,
            name=name,
            blind=blind,
        )
        for name, policy in policies.items()
    }
    reference = best.result.gpu_hours if best is not None else None
    metrics = {name: policy_metrics(r, lb, reference) for name, r in results.items()}
    if best is not None:  # in the results (the report draws it) always; listed: in the table
        results["optimal"] = best.result
        if listed:
            metrics["optimal"] = optimal_metrics(best, lb)
    return Comparison(results, lb, metrics, best)


def optimal_metrics(best: OptimalResult, lower_bound: float) -> dict[str, Any]:
    """The optimum's JSON: a policy's numbers, its proven lower bound and the budget."""
    m = policy_metrics(best.result, lower_bound, best.result.gpu_hours)
    m.update(best.metrics())
    return m


@dataclass
class MultiJob:
    """One job of a multi-job comparison, ready to simulate."""

    name: str
    sizing: JobSizing
    arrivals: np.ndarray
    priority: int = 0
    job: Any = None
    forecaster_factory: Any = None
    """This job's forecast sources (its own model and refit schedule); None: the shared one."""
    trace_start: Any = None
    """Timestamp of step 0 of this job's trace (seasonal forecasters read the calendar)."""


def compare_multi(
    jobs: Sequence[MultiJob],
    names: Sequence[str],
    *,
    quota_gpus: int,
    warmup_steps: int,
    forecaster_factory: Any = None,
    partitions: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, MultiResult]:
    """For each policy name: every job runs that policy, all sharing the quota."""
    out: dict[str, MultiResult] = {}
    cache: dict[str, Any] = {}
    for name in [n for n in names if n != "optimal"]:
        inputs = [
            JobInput(
                name=j.name,
                sizing=j.sizing,
                arrivals=j.arrivals,
                policy=make_policy(
                    name,
                    sizing=j.sizing,
                    job=j.job,
                    forecaster_factory=j.forecaster_factory or forecaster_factory,
                    forecast_cache=cache.setdefault(j.name, {}),
                    trace_start=j.trace_start,
                    future=j.arrivals if name == "oracle" else None,
                    partitions=partitions,
                ),
                priority=j.priority,
            )
            for j in jobs
        ]
        try:
            out[name] = simulate_jobs(
                inputs, quota_gpus=quota_gpus, warmup_steps=warmup_steps, progress=progress
            )
        except ValueError as exc:
            raise UserError(f"--jobs: {exc}") from None
    return out


def multi_summary(
    result: MultiResult,
    lower_bounds: dict[str, float],
    optimal_gpu_hours: dict[str, float] | None = None,
) -> dict[str, Any]:
    """JSON of one policy's multi-job run: per job metrics and the totals."""
    best = optimal_gpu_hours or {}
    per_job = {
        name: policy_metrics(r, lower_bounds[name], best.get(name))
        for name, r in result.results.items()
    }
    ms = list(per_job.values())
    return {
        "jobs": per_job,
        "gpu_hours": sum(m["gpu_hours"] for m in ms),
        "downtime_min": sum(m["downtime_min"] for m in ms),
        "rescale_count": sum(m["rescale_count"] for m in ms),
        "regret": (
            sum(m["gpu_hours"] for m in ms) / sum(best.values())
            if best and sum(best.values()) > 0
            else None
        ),
        "cumulative_delay_min": sum(m["cumulative_delay_min"] for m in ms),
        "slo_violation_rate": float(np.mean([m["slo_violation_rate"] for m in ms])),
        "max_delay_min": max(m["max_delay_min"] for m in ms),
        "max_gpus_in_use": result.max_gpus_in_use,
        "quota_exceeded": bool(result.max_gpus_in_use > result.quota_gpus),
        "short_steps": dict(result.short_steps),
        "elapsed_s": result.elapsed_s,
    }
