"""Kale's planner, MADU and the oracle as simulator policies: one job, one shared forecast.

Kept in ``sim`` (not ``policy``): choosing a forecaster for a trace, the trace's calendar and
the sharing of one forecast feed between the policies of a job are the simulator's business;
the planner itself stays a pure function of what it is shown.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from autoscaler.policy.forecasts import ForecastSource
from autoscaler.policy.kale import KalePolicy, KaleSettings, oracle_policy
from autoscaler.policy.madu import madu_policy
from autoscaler.policy.types import JobSizing

UNIX_EPOCH = pd.Timestamp(0, unit="s", tz="UTC")
"""Step 0's time for a trace given without timestamps (a calendar has to start somewhere)."""


def _spec(job: Any) -> Any:
    return getattr(getattr(job, "job", job), "spec", None)


def settings_for(
    sizing: JobSizing,
    job: Any,
    planner: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> KaleSettings:
    """The planner's settings for a job: the horizon and the band's quantile are the job's
    forecast's (the controller's runtime takes the same two); ``planner`` picks
    :attr:`KaleSettings.planner` (None: its default); ``overrides`` replaces any other field
    (benchmarks comparing settings)."""
    spec = _spec(job)
    horizon_s = float(spec.forecast.horizon) if spec is not None else 3600.0
    out = KaleSettings(horizon_steps=max(1, round(horizon_s / sizing.interval_s)))
    if spec is not None:  # the band the forecaster is asked for is the band it produces
        out = replace(out, band_quantile=float(spec.forecast.quantile))
    if planner is not None:
        out = replace(out, planner=planner)
    return replace(out, **(overrides or {}))


def shared_source(
    sizing: JobSizing,
    *,
    job: Any = None,
    forecaster_factory: Any = None,
    forecast_cache: dict[str, Any] | None = None,
    trace_start: Any = None,
) -> ForecastSource:
    """One forecast source per job, shared by every policy that forecasts (kale, madu).

    ``forecaster_factory`` is a zero-argument callable returning a source; without one, the
    job's refit and quantile drive a seasonal-naive forecaster (with a fallback for short
    history), its calendar starting at ``trace_start``.
    """
    cache = forecast_cache if forecast_cache is not None else {}
    if "source" not in cache:
        if forecaster_factory is not None:
            cache["source"] = forecaster_factory()
        else:
            from autoscaler.sim.forecasting import source_factory

            spec = _spec(job)
            fc = spec.forecast if spec is not None else None
            cache["source"] = source_factory(
                "seasonal_naive",
                start=trace_start if trace_start is not None else UNIX_EPOCH,
                interval_s=sizing.interval_s,
                horizon_steps=settings_for(sizing, job).horizon_steps,
                refit_s=float(fc.refit) if fc is not None else 86400.0,
                quantile=float(fc.quantile) if fc is not None else 0.9,
            )()
    source: ForecastSource = cache["source"]
    return source


def make_kale(
    *,
    sizing: JobSizing,
    job: Any = None,
    forecaster_factory: Any = None,
    forecast_cache: dict[str, Any] | None = None,
    trace_start: Any = None,
    planner: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> KalePolicy:
    source = shared_source(
        sizing,
        job=job,
        forecaster_factory=forecaster_factory,
        forecast_cache=forecast_cache,
        trace_start=trace_start,
    )
    return KalePolicy(sizing, source, settings=settings_for(sizing, job, planner, overrides))


def make_madu(
    *,
    sizing: JobSizing,
    job: Any = None,
    forecaster_factory: Any = None,
    forecast_cache: dict[str, Any] | None = None,
    trace_start: Any = None,
    planner: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> KalePolicy:
    source = shared_source(
        sizing,
        job=job,
        forecaster_factory=forecaster_factory,
        forecast_cache=forecast_cache,
        trace_start=trace_start,
    )
    return madu_policy(sizing, source, settings=settings_for(sizing, job, planner, overrides))


def make_oracle(
    *,
    sizing: JobSizing,
    future: np.ndarray,
    job: Any = None,
    planner: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> KalePolicy:
    return oracle_policy(sizing, future, settings=settings_for(sizing, job, planner, overrides))
