"""Kale's planner: size ahead of the forecast peak, drain backlog within the SLO, no sawtooth.

At every step the planner looks at the forecast (upper quantile) for the next ``horizon``
steps and judges candidate plans with the fluid FIFO model of :mod:`autoscaler.policy.queue`,
counting each resize's downtime and the backlog it leaves:

* **stay** — keep the current size. If that keeps the oldest sample younger than the SLO (minus
  one step of margin) over the whole horizon, nothing needs to happen now.
* **scale up now** — when staying would violate the SLO within the lead time (rescale duration
  + one interval, plus a slack) or waiting any longer would leave no feasible resize. The new
  size is the smallest that keeps the SLO for a hold window, with the window chosen among a
  few lengths to minimise GPU-seconds per second including the next resize's cost: a longer
  hold on a steep ramp over-provisions, a shorter one resizes too often.
* **scale down now** — only to a size that keeps the SLO over a whole hold window (so never
  right before a forecast rise) and only when the GPU-seconds saved over that window exceed
  the resize's own cost (downtime work to re-serve, and the scale-back it implies).

Safety: when the last observed rate exceeds the forecast made for it by more than the
forecast's own spread, the forecast is wrong right now, and the plan is sized for
``max(forecast, observed)`` (the reactive plan). No cascade: a backlog left by a resize only
triggers another resize if staying cannot drain it within the SLO, because "stay" is judged
on the queue, not on the backlog's mere existence.

MADU is this planner with a linear capacity model (f = a·w); the oracle is this planner fed
the true future.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from autoscaler.policy.forecasts import ForecastSource, ForecastWindow, TrueFuture
from autoscaler.policy.queue import allowed_backlog, backlog_path
from autoscaler.policy.types import Decision, JobSizing, Observation


@dataclass(frozen=True)
class KaleSettings:
    """Tunables of the planner; the defaults are the documented behaviour."""

    horizon_steps: int = 60
    """How many steps ahead the forecast is read (the job's forecast horizon)."""
    slo_margin_steps: float = 1.0
    """Keep the planned oldest-sample age this many steps under the SLO."""
    up_slack_steps: int = 2
    """Scale up when staying violates within lead + this many steps."""
    hold_windows_s: tuple[float, ...] = (900.0, 1800.0, 2700.0, 3600.0)
    """Candidate hold windows (after the resize) for choosing a new size."""
    resize_cost_factor: float = 1.0
    """A resize costs this × downtime × workers in GPU-seconds (lost work re-served)."""
    surprise_margin: float = 0.05
    """Reactive plan sizes for the observed rate × (1 + margin)."""
    rise_tolerance: float = 0.1
    """A forecast rise counts once the central forecast exceeds capacity by this share."""
    hold_fraction: float = 0.5
    """After a scale-up, scale-in waits this share of the hold window it was sized for."""
    fallback_window_s: float = 3600.0
    """Without a forecast, size for the peak of this much recent history."""


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
        self.settings = settings or KaleSettings()
        dt = sizing.interval_s
        self.n = self.settings.horizon_steps
        self.d_steps = sizing.rescale_s / dt
        k = np.arange(self.n, dtype=float)
        # Fraction of step k (relative to a resize started now) after the resize has ended.
        self.avail = np.clip((k + 1.0) - self.d_steps, 0.0, 1.0)
        self.lead_steps = math.ceil(self.d_steps) + 1
        margin = self.settings.slo_margin_steps * dt
        # Two limits on the planned oldest-sample age. In steady state the job must keep room
        # for a resize (which adds its downtime to the age), so the age stays under
        # SLO − D; while a resize and its drain are under way the whole SLO may be used.
        self.threshold_s = max(0.0, sizing.slo_s - margin)
        self.steady_threshold_s = max(0.0, sizing.slo_s - sizing.rescale_s - margin)
        self.settle_steps = math.ceil(2 * self.d_steps) + 1
        # Candidate windows a new size must keep the SLO over: the shortest is this resize plus
        # its drain plus the next resize and its drain (one step when resizes are free), then a
        # few longer holds.
        self.windows = sorted(
            {min(self.n, 4 * math.ceil(self.d_steps) + 1)}
            | {min(self.n, math.ceil(self.d_steps + h / dt)) for h in self.settings.hold_windows_s}
        )

    # -- the decision ---------------------------------------------------------------------
    def decide(self, obs: Observation, state: dict[str, Any]) -> Decision:
        sz, psz = self.sizing, self.plan_sizing
        cur = obs.workers
        if obs.resizing:
            state["draining"] = True
            return Decision(cur, obs.ps, {"action": "hold", "why": "resize in progress"})
        past = obs.arrivals
        fc = self.source.window(obs.step, past, self.n)
        reason: dict[str, Any] = {"lead_s": self.lead_steps * sz.interval_s}
        load = self._planning_load(fc, past, obs, state, reason)
        # The central forecast says when the load actually rises (the upper band is noisier).
        central = (
            load
            if fc is None or len(fc) < self.n
            else np.minimum(np.maximum(np.asarray(fc.mean, dtype=float), 0.0), load)
        )
        # A resize's own backlog may use the whole SLO while it drains: answering it with
        # another resize is the cascade the seed warns about. Draining ends once the age is
        # back under the steady limit.
        if obs.oldest_age_s <= self.steady_threshold_s:
            state.pop("draining", None)
        allowed = self._allowed(past, load, resize_at=-self.n if state.get("draining") else None)
        reason["forecast_peak"] = float(load.max())
        reason["backlog"] = float(obs.backlog)
        cur = min(max(cur, sz.min_workers), sz.max_workers)

        stay_v = self._violation(obs.backlog, load, np.full(self.n, psz.rate(cur)), allowed)
        decision: Decision | None = None
        if stay_v is not None:
            decision = self._scale_up(obs, cur, load, central, stay_v, reason)
        if decision is None and cur > sz.min_workers:
            if obs.step < state.get("hold_until", -1):
                reason["scale_in_held"] = "inside the hold window the last scale-up sized for"
            else:
                decision = self._scale_down(obs, cur, load, reason)
        if decision is None:
            reason.update(
                action="hold",
                why=reason.pop("waiting", "current size keeps the SLO over the horizon"),
            )
            decision = Decision(cur, sz.ps_for(cur), reason)
        if decision.workers != obs.workers:
            state["draining"] = True
            if decision.workers > obs.workers and sz.rescale_s > 0:  # free resizes can't saw
                hold = decision.reason.get("hold_s", 0.0) + sz.rescale_s
                state["hold_until"] = obs.step + int(
                    hold * self.settings.hold_fraction / sz.interval_s
                )
        return decision

    # -- pieces ---------------------------------------------------------------------------
    def _planning_load(
        self,
        fc: ForecastWindow | None,
        past: np.ndarray,
        obs: Observation,
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

    def _allowed(self, past: np.ndarray, load: np.ndarray, resize_at: int | None) -> np.ndarray:
        """Backlog allowed at the end of each step: steady limit, relaxed around a resize."""
        dt = self.sizing.interval_s
        steady = allowed_backlog(past, load, dt, self.steady_threshold_s)
        if resize_at is None:
            return steady
        relaxed = allowed_backlog(past, load, dt, self.threshold_s)
        end = self.n if resize_at < 0 else min(self.n, resize_at + self.settle_steps)
        steady[:end] = relaxed[:end]
        return steady

    def _violation(
        self,
        backlog0: float,
        load: np.ndarray,
        capacity: np.ndarray,
        allowed: np.ndarray,
        upto: int | None = None,
    ) -> int | None:
        path = backlog_path(backlog0, load, capacity, self.sizing.interval_s)
        end = self.n if upto is None else upto
        over = np.flatnonzero(path[:end] > allowed[:end] + 1e-9)
        return int(over[0]) if over.size else None

    def _resize_capacity(self, w_to: int, start: int = 0) -> np.ndarray:
        avail = (
            self.avail
            if start == 0
            else np.concatenate([np.zeros(start), self.avail[: self.n - start]])
        )
        return self.plan_sizing.rate(w_to) * avail

    def _gpu_seconds(self, w_from: int, w_to: int, upto: int) -> float:
        """Worker-GPU-seconds of "resize now from w_from to w_to" over ``upto`` steps."""
        a = self.avail[:upto]
        held = max(w_from, w_to) * (1.0 - a) + w_to * a
        return float(held.sum() * self.sizing.interval_s)

    def _smallest_feasible(
        self,
        obs: Observation,
        load: np.ndarray,
        lo: int,
        hi: int,
        upto: int,
        *,
        start: int = 0,
        cur: int = 0,
    ) -> int | None:
        """Smallest w in [lo, hi] whose "resize to w" keeps the SLO up to ``upto``.

        The resize starts now, or after ``start`` more steps at the current size ``cur``.
        """
        if lo > hi:
            return None
        allowed = self._allowed(obs.arrivals, load, resize_at=start)

        def ok(w: int) -> bool:
            cap = self._resize_capacity(w, start)
            if start:
                cap[:start] = self.plan_sizing.rate(cur)
            # Sustainable at the window's end: a size that only survives its window by filling
            # the SLO's slack would force the next resize with no room left for it.
            if cap[upto - 1] <= load[upto - 1] and load[upto - 1] > 0:
                return False
            return self._violation(obs.backlog, load, cap, allowed, upto) is None

        if not ok(hi):
            return None
        while lo < hi:  # capacity grows with w up to the peak, so feasibility is monotone
            mid = (lo + hi) // 2
            if ok(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _scale_up(
        self,
        obs: Observation,
        cur: int,
        load: np.ndarray,
        central: np.ndarray,
        stay_v: int,
        reason: dict[str, Any],
    ) -> Decision | None:
        """Resize up now, or None when waiting is still safe (a rise is further out)."""
        sz = self.sizing
        peak = self.plan_sizing.peak_workers
        reason["stay_violates_at_s"] = stay_v * sz.interval_s
        if cur >= peak:
            reason.update(
                action="hold", why="at the throughput peak: more workers cannot help", bound="peak"
            )
            return Decision(cur, sz.ps_for(cur), reason)
        # Slack for timing errors of the forecast; free resizes need none.
        slack = min(self.settings.up_slack_steps, math.ceil(self.d_steps))
        # The new size must be in force when the load rises above the current capacity, not
        # merely before the backlog becomes a violation: waiting for the latter spends the
        # SLO's slack on the forecast being right.
        above = np.flatnonzero(
            central > self.plan_sizing.rate(cur) * (1.0 + self.settings.rise_tolerance)
        )
        rise_at = int(above[0]) if above.size else self.n
        reason["rise_in_s"] = rise_at * sz.interval_s
        if min(stay_v, rise_at) >= self.lead_steps + slack:
            # Not urgent: act now only if a resize started a little later could not cope.
            later = self._smallest_feasible(obs, load, cur + 1, peak, self.n, start=slack, cur=cur)
            if later is not None:
                reason["waiting"] = "a rise is forecast; resizing later still keeps the SLO"
                return None
        best: tuple[float, int, int] | None = None
        for upto in self.windows:
            w = self._smallest_feasible(obs, load, cur + 1, peak, upto)
            if w is None:
                continue
            cost = self._gpu_seconds(cur, w, upto) + self._resize_cost(w)
            rate = cost / (upto * sz.interval_s)
            if best is None or rate < best[0] - 1e-9 or (abs(rate - best[0]) <= 1e-9):
                best = (rate, w, upto)
        if best is None:
            # Nothing keeps the SLO: take the size with the fewest violating steps, and stay
            # put unless a resize actually does better than staying.
            target, fewest = self._fewest_violations(obs, cur, load, peak)
            if target == cur:
                reason.update(
                    action="hold",
                    why="no resize keeps the SLO better than staying",
                    violating_steps=fewest,
                )
                return Decision(cur, sz.ps_for(cur), reason)
            reason.update(
                action="scale_up",
                why="no size keeps the SLO: fewest violations",
                violating_steps=fewest,
                hold_s=0.0,
            )
            if target == peak:
                reason["bound"] = "peak"
        else:
            _, target, upto = best
            reason.update(
                action="scale_up",
                why="staying would violate the SLO",
                hold_s=(upto - self.d_steps) * sz.interval_s,
            )
        if target >= sz.max_workers:
            reason["bound"] = "maxWorkers"
        reason["needed_rate"] = float(load[: self.lead_steps + 1].max())
        return Decision(target, sz.ps_for(target), reason)

    def _fewest_violations(
        self, obs: Observation, cur: int, load: np.ndarray, peak: int
    ) -> tuple[int, int]:
        """(size, violating steps) minimising violations; staying wins ties."""
        relaxed = self._allowed(obs.arrivals, load, resize_at=-self.n)

        def count(cap: np.ndarray) -> int:
            path = backlog_path(obs.backlog, load, cap, self.sizing.interval_s)
            return int(np.count_nonzero(path > relaxed + 1e-9))

        best_w, best_n = cur, count(np.full(self.n, self.plan_sizing.rate(cur)))
        for w in range(cur + 1, peak + 1):
            n = count(self._resize_capacity(w))
            if n < best_n:
                best_w, best_n = w, n
            if n == 0:
                break
        return best_w, best_n

    def _resize_cost(self, workers: int) -> float:
        return self.settings.resize_cost_factor * self.sizing.rescale_s * workers

    def _scale_down(
        self, obs: Observation, cur: int, load: np.ndarray, reason: dict[str, Any]
    ) -> Decision | None:
        sz = self.sizing
        best: tuple[float, int, int] | None = None
        for upto in self.windows:
            w = self._smallest_feasible(obs, load, sz.min_workers, cur - 1, upto)
            if w is None:
                continue
            saved = cur * upto * sz.interval_s - self._gpu_seconds(cur, w, upto)
            # A rise inside the horizon means a scale-back: count that resize too. Gains are
            # compared per second of the window, so a short dip must pay for its resizes fast.
            rise = upto < self.n
            gain = saved - self._resize_cost(w) - (self._resize_cost(cur) if rise else 0.0)
            rate = gain / (upto * sz.interval_s)
            if best is None or rate > best[0]:
                best = (rate, w, upto)
        if best is None or best[0] <= 0:
            if best is not None:
                reason["scale_in_held"] = "saving smaller than the resize's downtime cost"
            return None
        rate, target, upto = best
        reason.update(
            action="scale_down",
            why="forecast stays below the smaller size",
            hold_s=(upto - self.d_steps) * sz.interval_s,
            gain_gpu_s=rate * upto * sz.interval_s,
        )
        if target == sz.min_workers:
            reason["bound"] = "minWorkers"
        return Decision(target, sz.ps_for(target), reason)


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
