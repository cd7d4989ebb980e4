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
from typing import TYPE_CHECKING

import numpy as np

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
) -> dict[str, float]:
    """Every per-job value for :meth:`ControllerMetrics.set_job_gauges`, as exported: a
    float, NaN where not known this tick. ``window`` is the forecast the decision was made
    on, ``override`` the pause or pin in force.

    Built every tick for every job, so each value is converted once, straight into its final
    form (no intermediate None, no second pass over the dict).
    """
    sz, w, s = rt.sizing, window, rep.sample
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
        "min_workers": _finite(sz.min_workers),
        "max_workers": _finite(sz.max_workers),
        "slo_max_delay_seconds": _finite(sz.slo_s),
        "rescale_duration_seconds": _finite(sz.rescale_s),
        "paused": 1.0 if override is not None else 0.0,
        "recommended_final": _finite(planned.workers) if planned else nan,
        "recommended_reactive": nan,
        "recommended_proactive": nan,
        "forecast_peak_samples_per_second": nan,
        "forecast_lead_p10": nan,
        "forecast_lead_p50": nan,
    }
    high_key = _high_key(rt.forecast.quantile)
    out[high_key] = nan
    if s is not None:
        drain = float(s.lag) / sz.slo_s if sz.slo_s > 0 else 0.0
        out["recommended_reactive"] = _finite(sz.workers_for(float(s.arrival_rate) + drain)[0])
    if w is not None and len(w):
        i = lead_index(len(w), sz.interval_s, sz.rescale_s)
        high = float(w.high[i])
        out["forecast_lead_p10"] = _finite(w.low[i])
        out["forecast_lead_p50"] = _finite(w.central[i])
        out[high_key] = _finite(high)
        # Python's max, not numpy's (NaN would win there); over a list, at C speed.
        peak = max(w.high.tolist() if isinstance(w.high, np.ndarray) else w.high)
        out["forecast_peak_samples_per_second"] = _finite(peak)
        out["recommended_proactive"] = _finite(sz.workers_for(high)[0])
    for c in rt.state.conditions or ():
        status = c.get("status") if isinstance(c, dict) else None
        if status in ("True", "False"):
            out[f"condition_{c['type']}"] = 1.0 if status == "True" else 0.0
    return out


_HIGH_KEYS: dict[float, str] = {}


def _high_key(quantile: float) -> str:
    """``forecast_lead_p90`` for the job's upper quantile 0.9 (a handful of values: kept)."""
    key = _HIGH_KEYS.get(quantile)
    if key is None:
        key = _HIGH_KEYS[quantile] = f"forecast_lead_p{round(quantile * 100)}"
    return key


def _finite(value: float) -> float:
    v = float(value)
    return v if math.isfinite(v) else math.nan
