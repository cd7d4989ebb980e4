"""Policy names → policy objects, for the simulator and the CLI.

The baselines live in :mod:`autoscaler.sim.baselines`; Kale's planner, the MADU baseline and
the oracle in :mod:`autoscaler.sim.planners` (``make_kale``, ``make_madu``, ``make_oracle``),
each taking keyword arguments among ``sizing``, ``job``, ``forecaster_factory``,
``forecast_cache``, ``trace_start`` (the timestamp of step 0, for seasonal forecasters) and
(oracle only) ``future``. Only the keywords a factory declares are passed (and none that is
``None``, so the factory's own defaults apply), so the planner's signatures may grow without
touching this file.

``future`` is the full true arrival series (warm-up included). It goes to the oracle alone:
its whole point is to measure what perfect forecasts would be worth. Every other policy gets
only the observations the engine builds, which never include the step being decided.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from autoscaler.policy.behavior import behaved, epoch_of
from autoscaler.policy.types import JobSizing, Policy
from autoscaler.sim.baselines import AutopilotPolicy, HpaPolicy, KedaPolicy, StaticPolicy
from autoscaler.sim.planners import make_kale, make_madu, make_oracle
from common.errors import UserError

PLANNERS: dict[str, Callable[..., Policy]] = {
    "kale": make_kale,
    "madu": make_madu,
    "oracle": make_oracle,
}
BASELINES: dict[str, Callable[..., Policy]] = {
    "hpa": HpaPolicy,
    "keda": KedaPolicy,
    "autopilot": AutopilotPolicy,
    "static": StaticPolicy,
}
NAMES = ("kale", "hpa", "keda", "autopilot", "madu", "static", "oracle", "optimal")
"""``optimal`` is not a policy object: :func:`autoscaler.sim.runner.compare` computes it."""
DEFAULT_POLICIES = ("kale", "hpa", "keda", "autopilot", "madu", "static")


def parse_names(text: str) -> list[str]:
    """``"kale,hpa"`` → ``["kale", "hpa"]``; unknown or repeated names are user errors."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if not names:
        raise UserError(f"--policies: expected a comma-separated list of {', '.join(NAMES)}")
    for n in names:
        if n not in NAMES:
            raise UserError(f"--policies: unknown policy {n!r}; valid names: {', '.join(NAMES)}")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UserError(f"--policies: {', '.join(dupes)} given more than once")
    return names


def make_policy(
    name: str,
    *,
    sizing: JobSizing,
    job: Any = None,
    forecaster_factory: Any = None,
    forecast_cache: dict[str, Any] | None = None,
    future: np.ndarray | None = None,
    trace_start: Any = None,
    partitions: int | None = None,
    lag_threshold: float | None = None,
    planner: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> Policy:
    """Build the policy called ``name`` for one job.

    ``partitions`` and ``lag_threshold`` tune KEDA (defaults: ``max_workers`` partitions,
    :func:`~autoscaler.sim.baselines.default_lag_threshold`); ``planner`` picks Kale's
    planner for kale, madu and oracle (``KaleSettings.planner``; None: its default) and
    ``overrides`` other fields of their :class:`~autoscaler.policy.kale.KaleSettings`.
    """
    if name not in NAMES or name == "optimal":
        raise UserError(f"unknown policy {name!r}; valid names: {', '.join(NAMES[:-1])}")
    spec = getattr(getattr(job, "job", job), "spec", None)
    epoch = epoch_of(trace_start)
    if name == "keda":
        keda = KedaPolicy(sizing, lag_threshold=lag_threshold, partitions=partitions)
        return behaved(keda, spec, sizing, epoch_s=epoch)
    if name in BASELINES:
        return behaved(BASELINES[name](sizing), spec, sizing, epoch_s=epoch)
    factory = PLANNERS[name]
    offered: dict[str, Any] = {
        "sizing": sizing,
        "job": job,
        "forecaster_factory": forecaster_factory,
        "forecast_cache": forecast_cache,
        "trace_start": trace_start,
        "planner": planner,
        "overrides": overrides,
    }
    if name == "oracle":
        if future is None:
            raise UserError("policy 'oracle' needs the true future arrival series")
        offered["future"] = np.asarray(future, dtype=float)
    offered = {k: v for k, v in offered.items() if v is not None or k == "sizing"}
    params = inspect.signature(factory).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        kwargs = offered
    else:
        kwargs = {k: v for k, v in offered.items() if k in params}
    # The job's fallback, stabilization windows and schedules, exactly as the controller
    # applies them (autoscaler.policy.behavior); no knobs: the policy itself.
    return behaved(factory(**kwargs), spec, sizing, epoch_s=epoch)
