"""Kale's planner: plan the whole forecast horizon, act on its first move, plan again.

Each step the planner reads the forecast for the next ``horizon`` steps — the upper quantile
(the SLO must hold under it) and the median — and searches plans of sizes and resize times
together (:mod:`autoscaler.policy.horizon`): stay; resize to w₁ at some step; or resize to w₁
and later to w₂. Plans are judged on the fluid FIFO queue, counting each resize's downtime,
the backlog it leaves and its GPUs, within the job's resize budget (``maxPerHour``). The
cheapest feasible plan wins; only its first move, if it is due now, is acted on.

Safety, kept from the first planner:

* **reactive floor** — when the last observed rate exceeds the forecast made for it by more
  than the forecast's own spread, the forecast is wrong right now: the plan is made for
  ``max(forecast, observed × (1 + margin))``; without a forecast, for the recent peak;
* **no scale-in on a forecast alone** — while the observed rate contradicts the forecast (or
  there is none), a resize now may not go to a size serving less than the rate observed last
  step (with the same margin);
* **no cascade** — a backlog left by a resize triggers another resize only if the queue says
  staying cannot drain it within the SLO: staying is always one of the plans.

MADU is this planner with a linear capacity model (f = a·w); the oracle is this planner fed
the true future.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from autoscaler.policy.forecasts import ForecastSource, ForecastWindow, TrueFuture
from autoscaler.policy.horizon import PlanSettings, search
from autoscaler.policy.types import Decision, JobSizing, Observation

HOUR_S = 3600.0


@dataclass(frozen=True)
class KaleSettings:
    """Tunables of the planner; the defaults are the documented behaviour."""

    horizon_steps: int = 60
    """How many steps ahead the forecast is read (the job's forecast horizon)."""
    slo_margin_steps: float = 1.0
    """Keep the planned oldest-sample age this many steps under the SLO."""
    hold_windows_s: tuple[float, ...] = (300.0, 900.0, 1800.0, 2700.0)
    """Candidate times between a plan's first resize ending and its second one starting."""
    resize_cost_factor: float = 1.0
    """A resize is charged this × downtime × the larger size in GPU-seconds (work lost)."""
    surprise_margin: float = 0.05
    """Reactive plan sizes for the observed rate × (1 + margin)."""
    fallback_window_s: float = 3600.0
    """Without a forecast, size for the peak of this much recent history."""
    tail_s: float = 900.0
    """The size a plan ends at is charged this long past the horizon."""


class KalePolicy:
    """The forecast-driven planner (see the module docstring)."""

    def __init__(
        self,
        sizing: JobSizing,
        source: ForecastSource,
        *,
        name: str = "kale",
        settings: KaleSettings | None = None,
        planning_sizing: JobSizing | None = None,
    ) -> None:
        self.sizing = sizing
        # The capacity model used for planning; MADU plans with a linear one.
        self.plan_sizing = planning_sizing or sizing
        self.source = source
        self.name = name
        self.settings = s = settings or KaleSettings()
        dt = sizing.interval_s
        self.n = s.horizon_steps
        self.d_steps = sizing.rescale_s / dt
        self.lead_steps = math.ceil(self.d_steps) + 1
        self.hour_steps = max(1, round(HOUR_S / dt))
        self.plan_settings = PlanSettings(
            margin_s=s.slo_margin_steps * dt,
            hold_steps=tuple(sorted({max(1, round(h / dt)) for h in s.hold_windows_s})),
            resize_cost_factor=s.resize_cost_factor,
            tail_steps=max(0, round(s.tail_s / dt)),
        )
        self.lookback_steps = int(max(s.fallback_window_s, sizing.slo_s) / dt) + self.n + 4
        """Arrivals the planner reads back (the controller keeps at least this many)."""

    # -- the decision ---------------------------------------------------------------------
    def decide(self, obs: Observation, state: dict[str, Any]) -> Decision:
        sz = self.sizing
        cur = min(max(obs.workers, sz.min_workers), sz.max_workers)
        if obs.resizing:
            return Decision(obs.workers, obs.ps, {"action": "hold", "why": "resize in progress"})
        past = obs.arrivals
        fc = self.source.window(obs.step, past, self.n)
        reason: dict[str, Any] = {"lead_s": self.lead_steps * sz.interval_s}
        upper = self._planning_load(fc, past, state, reason)
        median = (
            upper
            if fc is None or len(fc) < self.n
            else np.minimum(np.maximum(np.asarray(fc.central, dtype=float), 0.0), upper)
        )
        last = float(past[-1]) if len(past) else 0.0
        # The observed rate overrules a forecast of less (no scale-in below it) only when it
        # contradicts the forecast made for it, or when there is no forecast.
        floor = last * (1 + self.settings.surprise_margin) if "reactive" in reason else 0.0
        if fc is None or len(fc) < self.n:
            floor = last * (1 + self.settings.surprise_margin)
        plan = search(
            sizing=sz,
            plan_sizing=self.plan_sizing,
            cur=cur,
            backlog=float(obs.backlog),
            upper=upper,
            median=median,
            past=past,
            settings=self.plan_settings,
            resizes_left=self._resizes_left(obs.step, state),
            floor_rate=floor,
            hour_steps=self.hour_steps,
        )
        reason.update(
            forecast_peak=float(upper.max()),
            backlog=float(obs.backlog),
            plan=[[k * sz.interval_s, w] for k, w in plan.moves],
            plan_cost_gpu_s=plan.cost_gpu_s,
            violating_steps=plan.violating_steps,
            plans=plan.candidates,
        )
        if not plan.feasible:
            reason["infeasible"] = "no plan keeps the SLO: fewest violating steps"
        target = cur
        if plan.moves and plan.moves[0][0] == 0:
            target = plan.moves[0][1]
        if target == cur:
            why = "current size keeps the SLO over the horizon"
            if plan.moves:
                why = f"next move in {plan.moves[0][0] * sz.interval_s:.0f}s"
            if not plan.feasible and not plan.moves:
                why = "no resize keeps the SLO better than staying"
            reason.update(action="hold", why=why)
            return Decision(cur, sz.ps_for(cur), reason)
        up = target > cur
        reason.update(
            action="scale_up" if up else "scale_down",
            why="the plan resizes now" + ("" if plan.feasible else " (fewest violations)"),
        )
        if target >= self.plan_sizing.peak_workers:
            reason["bound"] = "peak"
        if target >= sz.max_workers:
            reason["bound"] = "maxWorkers"
        state.setdefault("resizes", []).append(int(obs.step))
        return Decision(target, sz.ps_for(target), reason)

    # -- pieces ---------------------------------------------------------------------------
    def _resizes_left(self, step: int, state: dict[str, Any]) -> np.ndarray:
        """Resizes each step of the horizon may still start under ``maxPerHour``."""
        budget = self.sizing.max_resizes_per_hour
        if budget is None:
            return np.full(self.n, 10**6)
        done = [int(r) for r in state.get("resizes", []) if r > step - self.hour_steps]
        state["resizes"] = done
        k = np.arange(self.n)
        recent = np.array(done, dtype=int)
        counts = (recent[None, :] > (step + k - self.hour_steps)[:, None]).sum(axis=1)
        out: np.ndarray = math.floor(budget + 1e-9) - counts
        return out

    def _planning_load(
        self,
        fc: ForecastWindow | None,
        past: np.ndarray,
        state: dict[str, Any],
        reason: dict[str, Any],
    ) -> np.ndarray:
        """The rates to plan for: the upper quantile, lifted by the reactive plan if needed."""
        last = float(past[-1]) if len(past) else 0.0
        if fc is None or len(fc) < self.n:
            k = max(1, int(self.settings.fallback_window_s / self.sizing.interval_s))
            recent = float(past[-k:].max()) if len(past) else 0.0
            reason["forecast"] = "unavailable: sizing for the recent peak"
            return np.full(self.n, recent * (1 + self.settings.surprise_margin))
        load = np.maximum(np.asarray(fc.high, dtype=float), 0.0)
        prev = state.get("last_prediction")
        surprised = False
        if prev is not None and len(past):
            low, high = prev
            surprised = last > high + max(high - low, 0.0)
        state["last_prediction"] = (float(fc.low[0]), float(fc.high[0]))
        reason["forecast"] = fc.source
        if surprised:
            reason["reactive"] = f"observed {last:.4g}/s above the forecast band"
            load = np.maximum(load, last * (1 + self.settings.surprise_margin))
        out: np.ndarray = load
        return out


def oracle_policy(
    sizing: JobSizing, true_rates: np.ndarray, *, settings: KaleSettings | None = None
) -> KalePolicy:
    """Kale's planner fed the true future: what a perfect forecast would achieve."""
    return KalePolicy(sizing, TrueFuture(true_rates), name="oracle", settings=settings)


def linear_sizing(sizing: JobSizing, *, fit_range: tuple[int, int] | None = None) -> JobSizing:
    """The MADU view of capacity: f(w) = a·w, a fitted by least squares through the origin.

    ``fit_range`` is the profiled worker range the fit sees (default: min … max workers).
    """
    lo, hi = fit_range or (sizing.min_workers, sizing.max_workers)
    w = np.arange(lo, hi + 1, dtype=float)
    f = sizing.capacity[lo : hi + 1]
    a = float(np.dot(w, f) / np.dot(w, w))
    cap = a * np.arange(sizing.max_workers + 1, dtype=float)
    return JobSizing(
        capacity=cap,
        min_workers=sizing.min_workers,
        max_workers=sizing.max_workers,
        ratio=sizing.ratio,
        interval_s=sizing.interval_s,
        rescale_s=sizing.rescale_s,
        slo_s=sizing.slo_s,
        gpus_per_worker=sizing.gpus_per_worker,
        max_resizes_per_hour=sizing.max_resizes_per_hour,
    )


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
