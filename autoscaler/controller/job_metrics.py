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

Anything not known this tick is None (exported as NaN), never 0.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the report stage imports this module
    from autoscaler.controller.runtime import JobRuntime
    from autoscaler.controller.status import JobReport
    from autoscaler.job.overrides import Override
    from autoscaler.policy.forecasts import ForecastWindow


def lead_index(window_len: int, interval_s: float, lead_s: float) -> int:
    """Index of the forecast step that contains now + ``lead_s`` (the window starts now)."""
    return max(0, min(window_len - 1, math.ceil(lead_s / interval_s)))


def job_gauges(
    rt: JobRuntime, rep: JobReport, window: ForecastWindow | None, override: Override | None
) -> dict[str, float | None]:
    """Every per-job value for :meth:`ControllerMetrics.set_job`: ``window`` is the forecast
    the decision was made on, ``override`` the pause or pin in force."""
    sz, w, s = rt.sizing, window, rep.sample
    out: dict[str, float | None] = {
        "arrival_samples_per_second": s.arrival_rate if s else None,
        "consumption_samples_per_second": s.consumption_rate if s else None,
        "backlog_records": s.lag if s else None,
        "oldest_unconsumed_age_seconds": s.oldest_age_s if s else None,
        "current_workers": rep.current.workers if rep.current else None,
        "current_ps": rep.current.ps if rep.current else None,
        "desired_workers": rep.desired.workers if rep.desired else None,
        "desired_ps": rep.desired.ps if rep.desired else None,
        "min_workers": sz.min_workers,
        "max_workers": sz.max_workers,
        "slo_max_delay_seconds": sz.slo_s,
        "rescale_duration_seconds": sz.rescale_s,
        "paused": 1.0 if override is not None else 0.0,
        "recommended_final": rep.planned.workers if rep.planned else None,
        "recommended_reactive": None,
        "recommended_proactive": None,
        "forecast_peak_samples_per_second": None,
        "forecast_lead_p10": None,
        "forecast_lead_p50": None,
    }
    quantile = float(rt.entry.job.spec.forecast.quantile)
    high_key = f"forecast_lead_p{round(quantile * 100)}"
    out[high_key] = None
    if s is not None:
        drain = float(s.lag) / sz.slo_s if sz.slo_s > 0 else 0.0
        out["recommended_reactive"] = sz.workers_for(float(s.arrival_rate) + drain)[0]
    if w is not None and len(w):
        i = lead_index(len(w), sz.interval_s, sz.rescale_s)
        out["forecast_lead_p10"] = float(w.low[i])
        out["forecast_lead_p50"] = float(w.central[i])
        out[high_key] = float(w.high[i])
        out["forecast_peak_samples_per_second"] = float(max(w.high))
        out["recommended_proactive"] = sz.workers_for(float(w.high[i]))[0]
    for c in rt.state.conditions or ():
        status = c.get("status") if isinstance(c, dict) else None
        if status in ("True", "False"):
            out[f"condition_{c['type']}"] = 1.0 if status == "True" else 0.0
    return {k: _finite(v) for k, v in out.items()}


def _finite(value: float | None) -> float | None:
    if value is None:
        return None
    v = float(value)
    return v if math.isfinite(v) else None
