"""The per-job gauge values of one tick, from what the loop saw and decided.

Kept apart from :mod:`autoscaler.controller.metrics` (which only knows Prometheus) and from
the report stage (which only calls :func:`job_gauges`): the two recommendations an operator
compares with the planner's (AHPA's proactive/reactive split) are computed here with the
job's own throughput table, so they mean "workers needed", not a guess.

* **proactive**: the smallest worker count whose throughput exceeds the planned-for forecast
  quantile at *now + rescale duration* — what a forecast-driven scaler starting a resize
  now must ask for;
* **reactive**: the smallest worker count that keeps up with the measured arrival rate and
  drains the current backlog within the SLO — what a lag- or rate-driven scaler asks for;
* **final**: the planner's decision (before quota); ``desired`` is after quota.

Anything not known this tick is NaN, never 0.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the report stage imports this module
    from autoscaler.controller.runtime import JobRuntime
    from autoscaler.controller.state import Condition
    from autoscaler.controller.status import JobReport
    from autoscaler.job.overrides import Override
    from autoscaler.policy.forecasts import ForecastWindow
    from autoscaler.policy.types import JobSizing


def lead_index(window_len: int, interval_s: float, lead_s: float) -> int:
    """Index of the forecast step that contains now + ``lead_s`` (the window starts now)."""
    return max(0, min(window_len - 1, math.ceil(lead_s / interval_s)))


def job_gauges(
    rt: JobRuntime, rep: JobReport, window: ForecastWindow | None, override: Override | None
) -> dict[str, float]:
    """Every per-job value for :meth:`ControllerMetrics.set_job_gauges`, as exported: a
    float, NaN where not known this tick. ``window`` is the forecast the decision was made
    on, ``override`` the pause or pin in force."""
    return gauges_of(basis_of(rt), rep, window, override, rt.state.conditions)


def basis_of(rt: JobRuntime) -> JobBasis:
    """The job's :class:`JobBasis` (made on first use, kept by its runtime)."""
    basis = rt.gauge_basis
    if not isinstance(basis, JobBasis):
        basis = rt.gauge_basis = JobBasis(rt.sizing, rt.forecast.quantile)
    return basis


def gauges_of(
    basis: JobBasis,
    rep: JobReport,
    window: ForecastWindow | None,
    override: Override | None,
    conditions: list[Condition] | None,
) -> dict[str, float]:
    """:func:`job_gauges` from its parts, none of which changes once the tick has reported
    the job (a new report, window and condition list are made each tick): so the values
    can be worked out later, when they are scraped (:meth:`ControllerMetrics.defer_job_gauges`).

    Each value is converted once, straight into its final form, and what depends on the
    job alone comes from its :class:`JobBasis`.
    """
    w, s = window, rep.sample
    nan = math.nan
    cur, desired, planned = rep.current, rep.desired, rep.planned
    out: dict[str, float] = {
        "arrival_samples_per_second": _finite(s.arrival_rate) if s else nan,
        "consumption_samples_per_second": _finite(s.consumption_rate) if s else nan,
        "backlog_records": _finite(s.lag) if s else nan,
        "oldest_unconsumed_age_seconds": _finite(s.oldest_age_s) if s else nan,
        "current_workers": _finite(cur.workers) if cur else nan,
        "current_ps": _finite(cur.ps) if cur else nan,
        "desired_workers": _finite(desired.workers) if desired else nan,
        "desired_ps": _finite(desired.ps) if desired else nan,
        **basis.constants,
        "paused": 1.0 if override is not None else 0.0,
        "recommended_final": _finite(planned.workers) if planned else nan,
        "recommended_reactive": nan,
        "recommended_proactive": nan,
        "forecast_peak_samples_per_second": nan,
        "forecast_lead_p10": nan,
        "forecast_lead_p50": nan,
    }
    high_key = basis.high_key
    out[high_key] = nan
    if s is not None:
        slo = basis.slo_s
        drain = float(s.lag) / slo if slo > 0 else 0.0
        out["recommended_reactive"] = _finite(basis.workers_for(float(s.arrival_rate) + drain))
    if w is not None and len(w):
        i = basis.lead(len(w))
        high = float(w.high[i])
        out["forecast_lead_p10"] = _finite(w.low[i])
        out["forecast_lead_p50"] = _finite(w.central[i])
        out[high_key] = _finite(high)
        # Python's max, not numpy's (NaN would win there); over a list, at C speed.
        peak = max(w.high.tolist() if isinstance(w.high, np.ndarray) else w.high)
        out["forecast_peak_samples_per_second"] = _finite(peak)
        out["recommended_proactive"] = _finite(basis.workers_for(high))
    keys = basis.condition_keys
    for c in conditions or ():
        status = c.get("status") if isinstance(c, dict) else None
        if status in ("True", "False"):
            kind = c["type"]
            key = keys.get(kind)
            if key is None:
                key = keys[kind] = f"condition_{kind}"
            out[key] = 1.0 if status == "True" else 0.0
    return out


class JobBasis:
    """What a job's gauges take from its sizing and spec alone, worked out once per job.

    The job's :class:`JobRuntime` keeps it (``gauge_basis``) for its life: a new spec builds
    a new runtime, and with it a new basis.
    """

    def __init__(self, sizing: JobSizing, quantile: float) -> None:
        self.sizing = sizing
        self.slo_s = sizing.slo_s
        self.constants: dict[str, float] = {
            "min_workers": _finite(sizing.min_workers),
            "max_workers": _finite(sizing.max_workers),
            "slo_max_delay_seconds": _finite(sizing.slo_s),
            "rescale_duration_seconds": _finite(sizing.rescale_s),
        }
        self.high_key = f"forecast_lead_p{round(quantile * 100)}"
        self.condition_keys: dict[str, str] = {}
        self._leads: dict[int, int] = {}
        # JobSizing.workers_for's table (the running maximum of the throughput from
        # minWorkers to the peak), searched with bisect: numpy's search of one value costs
        # more than the search itself. A table with NaN is left to JobSizing.
        low, peak = sizing.min_workers, sizing.peak_workers
        table = np.maximum.accumulate(np.asarray(sizing.capacity, dtype=float)[low : peak + 1])
        self._table: list[float] | None = None if np.isnan(table).any() else table.tolist()

    def lead(self, window_len: int) -> int:
        """:func:`lead_index` of a window this long."""
        i = self._leads.get(window_len)
        if i is None:
            sz = self.sizing
            i = self._leads[window_len] = lead_index(window_len, sz.interval_s, sz.rescale_s)
        return i

    def workers_for(self, load: float) -> int:
        """``JobSizing.workers_for(load)[0]``."""
        table = self._table
        if table is None:
            return self.sizing.workers_for(load)[0]
        if load < 0 or math.isnan(load):
            load = 0.0
        i = bisect_right(table, load)
        return self.sizing.peak_workers if i >= len(table) else self.sizing.min_workers + i


def _finite(value: float) -> float:
    v = float(value)
    return v if math.isfinite(v) else math.nan
