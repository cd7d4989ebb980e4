"""Kale's planner: plan the whole forecast horizon, act on its first move, plan again.

Each step the planner reads the forecast for the next ``horizon`` steps — the upper quantile
(the SLO must hold under it) and the median — and searches plans of sizes and resize times
together (:mod:`autoscaler.policy.horizon`): stay; resize to w₁ at some step; or resize to w₁
and later to w₂. Plans are judged on the fluid FIFO queue, counting each resize's downtime,
the backlog it leaves and its GPUs, within the job's resize budget (``maxPerHour``). The
cheapest feasible plan wins; only its first move, if it is due now, is acted on. With
``KaleSettings(planner="dp")`` the plan is instead the cheapest of every schedule of the
horizon, from a dynamic program (:mod:`autoscaler.policy.mpc`, planner v3); v2 stays the
default (docs/decisions/0044-planner-v3.md). With either, a feasible plan is followed while
nothing it depends on changes (the same forecast, the rate inside its band, the size and the
backlog as planned), for at most ``replan_every_steps``: searching again would mostly find the same
plan (docs/decisions/0045-follow-a-plan.md), and a search costs far more than following.

Sizing for the SLO's window (``window_sizing``, the default;
:mod:`autoscaler.policy.window`, docs/decisions/0046-size-for-the-slo-window.md): the plans'
queue is fed the median plus the band's level part and its noise part shrunk over the SLO's
window, widened in time by the forecast's timing error, so a minute's spike that the backlog
absorbs within ``maxDelay`` buys no capacity; the rules below read window means where they
read a minute before ("the observed rate" is then the mean of the last steps that proved
the forecast wrong).

Safety rules, for both planners:

* **reactive floor** — when the last observed rate exceeds the forecast made for it by more
  than the forecast's own spread, the forecast is wrong right now: the plan is made for
  ``max(forecast, observed × (1 + margin))``; without a forecast, for the recent peak;
* **no scale-in on a forecast alone** — while the observed rate contradicts the forecast (or
  there is none), a resize now may not go to a size serving less than the rate observed last
  step (with the same margin);
* **no scale-in while blind** — without a forecast (or with only the interim model's, made
  while a job's first fit runs) and with less history than the recent peak is read over
  (``fallback_window_s``), nothing shrinks: a just-started controller's first quiet reading
  is not a reason to stop workers;
* **no cascade** — a backlog left by a resize triggers another resize only if the queue says
  staying cannot drain it within the SLO: staying is always one of the plans.

MADU is this planner with a linear capacity model (f = a·w, :mod:`autoscaler.policy.madu`);
the oracle is this planner fed the true future.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from itertools import islice
from typing import Any

import numpy as np

from autoscaler.policy import mpc, window
from autoscaler.policy.forecasts import ForecastSource, ForecastWindow, TrueFuture
from autoscaler.policy.horizon import Plan, PlanSettings, _sizes, search
from autoscaler.policy.types import Decision, JobSizing, Observation

HOUR_S = 3600.0


@dataclass(frozen=True)
class KaleSettings:
    """Tunables of the planner; the defaults are the documented behaviour."""

    horizon_steps: int = 60
    """How many steps ahead the forecast is read (the job's forecast horizon)."""
    slo_margin_steps: float | None = None
    """Keep the planned oldest-sample age this many steps under the SLO (None: one step for
    "moves", whose queue model it was made for; none for "dp", whose fluid queue is the
    simulator's at every step's end, the upper quantile being the margin)."""
    hold_windows_s: tuple[float, ...] = (300.0, 900.0, 1800.0, 2700.0)
    """Candidate times between a plan's first resize ending and its second one starting."""
    resize_cost_factor: float = 1.0
    """A resize is charged this × downtime × the larger size in GPU-seconds (work lost)."""
    surprise_margin: float = 0.05
    """Reactive plan sizes for the observed rate × (1 + margin)."""
    fallback_window_s: float = 3600.0
    """Without a forecast, size for the peak of this much recent history."""
    budget_window_s: float = HOUR_S
    """The window ``maxPerHour`` counts resizes over: an hour, except where time is
    compressed (the demo divides it by its speed-up, like every other window)."""
    tail_s: float = 900.0
    """The size a plan ends at is charged this long past the horizon."""
    planner: str = "moves"
    """"moves": the search over one- and two-move plans (:mod:`autoscaler.policy.horizon`,
    planner v2); "dp": the dynamic program over the horizon (:mod:`autoscaler.policy.mpc`,
    planner v3). "moves" stays the default: the program saves GPU-hours on generated traces
    but keeps the SLO worse and resizes more on a real one (docs/decisions/0044-planner-v3.md)."""
    buckets: int = 40
    """"dp": backlog lattice points per size."""
    max_sizes: int = 16
    """"dp": sizes the program considers per decision."""
    violation_cost_gpu_s: float = math.inf
    """"dp": what a step over the SLO under the upper quantile costs (inf: fewest first)."""
    up_before_rise: bool = False
    """"dp": see :class:`autoscaler.policy.mpc.DpSettings`."""
    up_when_behind: bool = True
    """"dp": while the job serves less than the rate just observed, a scale-up the plan
    makes later is made now (a safety rule: waiting would bet the SLO's slack on the
    forecast's timing). Off is cheaper when the forecast is right, but waits while
    under-provisioned (docs/decisions/0044-planner-v3.md)."""
    replan_every_steps: int = 10
    """A feasible plan is followed for at most this many steps while nothing it depends on
    changes (1: plan every step); see :meth:`KalePolicy._follow`."""
    window_sizing: bool = True
    """Judge sizes over the window the SLO allows, not the minute
    (:mod:`autoscaler.policy.window`): plans are fed the median plus the band's level part
    and its noise part shrunk over the SLO's window, widened in time by ``timing_error_s``;
    the final size sustains the horizon's last window, not its last minute; the rise rule
    reads the median's rolling mean over the window, not its minutes; the reactive
    floor and the band a plan is followed in compare the observed window's mean with the
    window's band. Off: the per-step upper quantile and per-step rules of planner v2
    (docs/decisions/0046-size-for-the-slo-window.md)."""
    timing_error_s: float = 300.0
    """How early a predicted rise (how late a fall) may come: the median's rolling mean is
    raised to its largest value within this much either side (forecasts with a band only)."""
    noise_lookback_s: float = HOUR_S
    """History the arrivals' minute-to-minute scatter is measured over (the controller hands
    the planner ``max(fallback_window_s, maxDelay)`` and the horizon of history: keep it
    within that, or the controller and the simulator measure different histories)."""
    band_quantile: float = 0.9
    """The quantile the forecast's upper band is (the job's ``spec.forecast.quantile``)."""
    calibrate_band: bool = True
    """Sizing for the SLO's window: scale the forecast's band so that the observed window
    means exceed it as often as its quantile says (:meth:`KalePolicy._calibrate`)."""
    calibration_rate: float = 0.05
    """How far one SLO window's outcome moves the band's scale."""
    band_scale_min: float = 0.5
    """The least share of the band charged: a forecast whose band was never exceeded lately
    is still not trusted as exact."""
    band_scale_max: float = 2.0
    onward_moves: str = ""
    """"moves": two-move plans may also continue the way their first move went (a descent
    in two steps), not only go back the other way (:class:`PlanSettings.onward`)."""
    descent_step: float = 1.5
    """"moves": a scale-down now is held while it is smaller than this × the step that
    balances a resize's charge against the workers held too long in the descent the
    forecast's median falls by (:meth:`KalePolicy._descent_step`); 0: off. The plans'
    horizon ends before a descent does, so each re-plan otherwise takes the step that pays
    over the next hour and the descent becomes a staircase of small ones. Above 1 it trades
    some GPU-hours for fewer resizes (the resize target counts them; the charge alone
    weighs them less; docs/decisions/0179-descent-step.md)."""
    rise_when_behind: bool = False
    """Sizing for the SLO's window: keep the rise rule in force whenever the job's capacity
    is under the observed window mean (behind). Off: only while the observed backlog does
    not show that shortfall (under half the backlog the window's arrivals would have built
    at the capacity). The plans start from the observed backlog and keep the SLO under the
    band widened in time from there, so a shortfall the backlog shows is already judged;
    the rule on top forced a scale-up one step ahead of each of the median's crossings, on
    noisy traffic often undone by the next dip (docs/decisions/0180-behind-is-not-a-rise.md)."""
    resize_margin: float = 0.0
    """A resize now must beat staying over the horizon by this × its charge
    (``resize_cost_factor`` × downtime × the larger size) more than the plans' costs say;
    when staying breaks the SLO it is no alternative (scale-ups it needs are exempt). Off:
    it trades GPU-hours for resizes, and at 1 it held back a scale-up a job needed ahead of
    its load (docs/decisions/0047-calibrated-band.md)."""


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
        self.hour_steps = max(1, round(s.budget_window_s / dt))
        self.window_steps = max(1, round(sizing.slo_s / dt))
        """The SLO's window in steps: what a size is judged over."""
        self.timing_steps = max(0, round(s.timing_error_s / dt))
        self.noise_steps = max(2 * self.window_steps, round(s.noise_lookback_s / dt))
        self.z = window.z_of(s.band_quantile)
        margin = s.slo_margin_steps
        if margin is None:
            margin = 1.0 if s.planner == "moves" else 0.0
        self.plan_settings = PlanSettings(
            margin_s=margin * dt,
            hold_steps=tuple(sorted({max(1, round(h / dt)) for h in s.hold_windows_s})),
            resize_cost_factor=s.resize_cost_factor,
            tail_steps=max(0, round(s.tail_s / dt)),
            sustain_steps=self.window_steps if s.window_sizing else 1,
            resize_margin=s.resize_margin,
            onward=s.onward_moves,
        )
        self.ahead_settings = replace(self.plan_settings, rise_tolerance=math.inf)
        """Sizing for the SLO's window, while the job keeps up with a forecast load: no rise
        rule (the planning load's band widened in time charges the forecast's timing)."""
        self.search_settings = self.plan_settings
        """The plan search's settings for the decision being made."""
        self.dp_settings = mpc.DpSettings(
            margin_s=margin * dt,
            resize_cost_factor=s.resize_cost_factor,
            tail_steps=max(0, round(s.tail_s / dt)),
            buckets=s.buckets,
            max_sizes=s.max_sizes,
            violation_cost=s.violation_cost_gpu_s,
            up_before_rise=s.up_before_rise,
        )
        self.sizes = _sizes(self.plan_sizing)
        self.fallback_steps = max(1, int(s.fallback_window_s / dt))
        """History the recent peak is read over when there is no forecast."""
        self.lookback_steps = (
            int(max(s.fallback_window_s, sizing.slo_s, s.noise_lookback_s) / dt) + self.n + 4
        )
        """Arrivals the planner reads back (the controller keeps at least this many)."""
        self.searches = 0
        """Plan searches made: each costs far more than following a plan."""

    # -- the decision ---------------------------------------------------------------------
    def decide(self, obs: Observation, state: dict[str, Any]) -> Decision:
        sz = self.sizing
        cur = min(max(obs.workers, sz.min_workers), sz.max_workers)
        if obs.resizing:
            return Decision(obs.workers, obs.ps, {"action": "hold", "why": "resize in progress"})
        past = obs.arrivals
        fc = self.source.window(obs.step, past, self.n)
        reason: dict[str, Any] = {"lead_s": self.lead_steps * sz.interval_s}
        planning_load, in_band, seen = self._planning_load(fc, past, state, reason, obs.step)
        followed = self._follow(obs, cur, fc, in_band, state, reason)
        if followed is not None:
            return followed
        upper = planning_load()
        missing = fc is None or len(fc) < self.n  # no forecast covering the horizon
        median = (
            upper
            if fc is None or missing
            else np.minimum(np.maximum(np.asarray(fc.central, dtype=float), 0.0), upper)
        )
        last = float(past[-1]) if len(past) else 0.0
        # The observed rate overrules a forecast of less (no scale-in below it) only when it
        # contradicts the forecast made for it, or when there is no forecast.
        floor = seen * (1 + self.settings.surprise_margin) if "reactive" in reason else 0.0
        if missing:
            floor = last * (1 + self.settings.surprise_margin)
        self.search_settings = self.plan_settings
        if self.settings.window_sizing:
            # The rise rule and the band's low end read the median over the SLO's window:
            # a minute's spike above the capacity is not a rise. The rise rule holds while
            # the load is a guess (no forecast, or the reactive floor's) or the job is behind
            # (its capacity under the rate observed over the window): then waiting would bet
            # the SLO's slack on a timing nobody forecast. Without ``rise_when_behind``, a job
            # behind holds it only when the observed backlog does not show the shortfall: the
            # plans start from that backlog and judge its drain under the band themselves.
            # Otherwise the forecast's timing error is charged by its band widened in time
            # (the planning load).
            median = window.rolling_mean(median, self.window_steps)
            recent = past[-self.window_steps :]
            capacity = self.plan_sizing.rate(cur)
            behind = len(recent) > 0 and capacity < float(recent.mean())
            if behind and not self.settings.rise_when_behind:
                behind = float(obs.backlog) < 0.5 * self._shortfall(recent, capacity)
            if not (floor > 0 or behind):
                self.search_settings = self.ahead_settings
        plan = self._plan(
            sz=sz,
            plan_sizing=self.plan_sizing,
            cur=cur,
            backlog=float(obs.backlog),
            upper=upper,
            median=median,
            past=past,
            resizes_left=self._resizes_left(obs.step, state),
            floor_rate=floor,
            hour_steps=self.hour_steps,
            guess=floor > 0 or (self.settings.up_when_behind and self.plan_sizing.rate(cur) < last),
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
        self._remember(obs, cur, fc, plan, state)
        target = cur
        if plan.moves and plan.moves[0][0] == 0:
            target = plan.moves[0][1]
        if target < cur and plan.feasible and cur - target < self._descent_step(cur, median):
            reason.update(action="hold", why="a descent: waiting for a step worth its resize")
            return Decision(cur, sz.ps_for(cur), reason)
        blind = fc is None or missing or fc.interim
        if target < cur and blind and len(past) < self.fallback_steps:
            # No forecast (or the interim one) and less history than the recent peak is read
            # over: one quiet reading (a job not yet fed, a controller just started) shrinks
            # nothing.
            what = "only the interim forecast" if fc is not None and fc.interim else "no forecast"
            reason.update(
                action="hold",
                why=f"{what} and {len(past)} steps of history: no scale-in yet",
            )
            return Decision(cur, sz.ps_for(cur), reason)
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

    # -- following a plan -----------------------------------------------------------------
    def _follow(
        self,
        obs: Observation,
        cur: int,
        fc: ForecastWindow | None,
        in_band: bool,
        state: dict[str, Any],
        reason: dict[str, Any],
    ) -> Decision | None:
        """Hold on the plan of an earlier step instead of planning again, when that is safe.

        Safe because the plan kept the SLO under the upper quantile of this same forecast
        (same key) from the backlog it predicted for now, and the observed backlog is no
        larger: the FIFO queue is monotone in its backlog, so every later step of the plan
        stays within the SLO on that forecast. Anything else it depends on changing makes a
        new plan: a new forecast, the observed rate outside the band predicted for it (or a
        reactive plan), another size than planned, a resize since (it has just ended), a
        move due now, or the plan being ``replan_every_steps`` old.
        """
        memo = state.get("plan")
        if not isinstance(memo, dict) or fc is None or fc.key is None or not in_band:
            return None
        at = obs.step - int(memo.get("at", obs.step))
        path = memo.get("backlog") or []
        moves = [(int(k), int(w)) for k, w in memo.get("moves", [])]
        if (
            memo.get("key") != fc.key
            or "reactive" in reason
            or not 1 <= at <= len(path)
            or memo.get("cur") != cur
            or any(k <= obs.step for k, _ in moves)
            or obs.backlog > float(path[at - 1]) * (1 + 1e-9) + 1e-6
        ):
            return None
        dt = self.sizing.interval_s
        ahead = [[(k - obs.step) * dt, w] for k, w in moves]
        why = f"following the plan made {at * dt:.0f}s ago"
        if ahead:
            why += f"; next move in {ahead[0][0]:.0f}s"
        reason.update(backlog=float(obs.backlog), plan=ahead, action="hold", why=why, followed=at)
        return Decision(cur, self.sizing.ps_for(cur), reason)

    def _remember(
        self,
        obs: Observation,
        cur: int,
        fc: ForecastWindow | None,
        plan: Plan,
        state: dict[str, Any],
    ) -> None:
        """Keep a feasible plan on a known forecast for :meth:`_follow` (JSON, small)."""
        keep = self.settings.replan_every_steps - 1
        first = plan.moves[0][0] if plan.moves else None
        if (
            keep < 1
            or fc is None
            or fc.key is None
            or not plan.feasible
            or first == 0
            or not plan.path
        ):
            state.pop("plan", None)
            return
        state["plan"] = {
            "at": int(obs.step),
            "key": fc.key,
            "cur": int(cur),
            "moves": [[int(obs.step + k), int(w)] for k, w in plan.moves],
            "backlog": [float(b) for b in plan.path[:keep]],
        }

    def _shortfall(self, recent: np.ndarray, capacity: float) -> float:
        """The backlog the observed window's arrivals would have built at ``capacity`` from
        none (samples): what an observed backlog must show for the plans, which start from
        it, to have seen the job fall behind. A job behind with no backlog reported (a lag
        the meter does not see) is judged by the rise rule instead."""
        q = 0.0
        dt = self.sizing.interval_s
        for a in recent.tolist():
            q = max(0.0, q + (a - capacity) * dt)
        return q

    def _descent_step(self, cur: int, median: np.ndarray) -> float:
        """The scale-down worth making now in a descent, in workers (0 outside one).

        A descent of r workers a step, taken in steps of Δ workers, holds Δ/2 workers too
        many on average and makes r/Δ resizes a step, each charged c × the size (c: the
        charge per worker and GPU in seconds, dt the step): the sum is least at
        Δ = √(2 c cur r / dt). r is read from the median over the horizon, the size it needs
        at the start against at the end: a flat or rising forecast has no descent, so nothing
        is held. Holding a scale-down only keeps more capacity: the SLO is kept wherever the
        plan keeps it. "moves" only (the program weighs its resizes over its own lattice)."""
        k = self.settings.descent_step
        if k <= 0 or len(median) < 2 or self.settings.planner != "moves":
            return 0.0
        need = self.plan_sizing.workers_for
        falls = int(need(float(median[0]))[0]) - int(need(float(median[-1]))[0])
        if falls <= 0:
            return 0.0
        sz = self.sizing
        charge_s = self.settings.resize_cost_factor * sz.rescale_s  # per worker and GPU
        return k * math.sqrt(2.0 * charge_s * cur * falls / len(median) / sz.interval_s)

    # -- pieces ---------------------------------------------------------------------------
    def _plan(self, *, sz: JobSizing, guess: bool, **kw: Any) -> Plan:
        """The chosen planner's plan. ``guess``: a scale-up the plan makes later is made now —
        when the load planned for is the reactive floor's or the recent peak's (a guess, not a
        forecast), and when the job already serves less than the rate just observed (behind:
        waiting would spend the SLO's slack on the forecast being right about the timing)."""
        self.searches += 1
        if self.settings.planner == "moves":
            return search(sizing=sz, settings=self.search_settings, **kw)
        kw.pop("hour_steps")
        return mpc.solve(sizing=sz, settings=self.dp_settings, sizes=self.sizes, up_now=guess, **kw)

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
        step: int,
    ) -> tuple[Callable[[], np.ndarray], bool, float]:
        """The rates to plan for, as a function (a followed plan never needs them): the
        upper quantile (or, sizing for the SLO's window, the window load of
        :mod:`autoscaler.policy.window`), lifted by the reactive plan if needed; whether the
        rate just observed was within the band predicted for it; and the observed rate the
        reactive floor stands on (the last step's, or the mean of the SLO's window when
        sizing for it)."""
        last = float(past[-1]) if len(past) else 0.0
        margin = 1 + self.settings.surprise_margin
        if fc is None or len(fc) < self.n:
            recent = float(past[-self.fallback_steps :].max()) if len(past) else 0.0
            reason["forecast"] = "unavailable: sizing for the recent peak"
            return (lambda: np.full(self.n, recent * margin)), False, last
        # The band predicted for the step just observed, from the latest forecast that
        # covered it (a resize skips planning: the band made before it is kept for its steps).
        prev = state.get("last_prediction")
        surprised = in_band = False
        seen = last
        by_window = self.settings.window_sizing
        noise = self._noise(past, state, step) if by_window else 0.0
        if by_window:
            surprised, in_band, seen = self._window_check(prev, past, state, step, noise)
        elif isinstance(prev, list) and len(prev) >= 3 and len(past):
            at = step - 1 - int(prev[0])
            if 0 <= at < len(prev[1]):
                low, hi = float(prev[1][at]), float(prev[2][at])
                surprised = last > hi + max(hi - low, 0.0)
                in_band = low <= last <= hi
        keep = self.lead_steps + 1
        state["last_prediction"] = [
            int(step),
            np.asarray(fc.low[:keep], dtype=float).tolist(),
            np.asarray(fc.high[:keep], dtype=float).tolist(),
            np.asarray(fc.central[:keep], dtype=float).tolist(),
        ]
        reason["forecast"] = fc.source
        if surprised:
            reason["reactive"] = f"observed {seen:.4g}/s above the forecast band"

        def load() -> np.ndarray:
            high = np.maximum(np.asarray(fc.high, dtype=float), 0.0)
            out: np.ndarray = high
            if by_window:
                central = np.minimum(np.maximum(np.asarray(fc.central, dtype=float), 0.0), high)
                if self.settings.calibrate_band:
                    high = central + self._band_scale(state) * (high - central)
                # The forecast's error is the arrivals' scatter less the median's own (a
                # median copied from a noisy day carries that day's): both average out.
                both = math.hypot(
                    noise, window.noise_share(central, self.window_steps, len(central))
                )
                out = window.window_load(
                    central,
                    high,
                    noise=both,
                    z=self.z,
                    window=self.window_steps,
                    timing_steps=self.timing_steps,
                )
            if surprised:
                out = np.maximum(out, seen * margin)
            return out

        return load, in_band, seen

    def _noise(self, past: np.ndarray, state: dict[str, Any], step: int) -> float:
        """The arrivals' scatter (:func:`autoscaler.policy.window.noise_share`), measured
        again once per SLO window: it changes slowly, and a tick that follows a plan should
        cost little."""
        kept = state.get("noise")
        if (
            isinstance(kept, list)
            and len(kept) == 2
            and 0 <= step - int(kept[0]) < self.window_steps
        ):
            return float(kept[1])
        value = window.noise_share(past, self.window_steps, self.noise_steps)
        state["noise"] = [int(step), value]
        return value

    def _window_check(
        self, prev: Any, past: np.ndarray, state: dict[str, Any], step: int, noise: float
    ) -> tuple[bool, bool, float]:
        """The reactive check over the SLO's window: the bands predicted for the last steps
        (each from the latest forecast that covered it) are kept; the observed mean over
        the last few steps and over the whole window are compared with the band of those
        means — the median's mean plus the band's level part and its noise part shrunk by
        the steps averaged (:mod:`autoscaler.policy.window`). Returns (surprised, in the
        band, the observed rate to floor on)."""
        w = self.window_steps
        book = state.get("band_seen")
        if not isinstance(book, list):
            book = []
        while book and book[0][0] < step - w:
            del book[0]
        if book and book[-1][0] >= step:  # a step seen again (a tick repeated)
            book = [b for b in book if b[0] < step]
        if isinstance(prev, list) and len(prev) >= 4:
            origin = int(prev[0])
            first = book[-1][0] + 1 if book else step - w
            lows, highs, meds = prev[1], prev[2], prev[3]
            for s in range(max(first, origin, step - w), min(step, origin + len(lows))):
                at = s - origin
                book.append([s, lows[at], meds[at], highs[at]])
        state["band_seen"] = book
        last = float(past[-1]) if len(past) else 0.0
        usable = book if len(past) >= w else [b for b in book if step - b[0] <= len(past)]
        total = len(usable)
        if not total:
            return False, False, last
        fired = 0.0
        nz = self.z * noise
        short = min(3, total)
        tail = past[-w:].tolist()
        back = len(tail) - step
        # The sums run from the newest step back, the short window's first, then on over the
        # rest: no step asks whether to judge (every job, every tick).
        newest = reversed(usable)
        sums = _add_steps(islice(newest, short), tail, back, (0.0, 0.0, 0.0, 0.0))
        o, m, up, down = _window_band(short, *sums, nz)
        if o > m + 2 * up + down:
            fired = max(fired, o)
        if total > short:
            sums = _add_steps(newest, tail, back, sums)
            o, m, up, down = _window_band(total, *sums, nz)
            if o > m + 2 * up + down:
                fired = max(fired, o)
        in_band = m - down <= o <= m + up
        if total >= w and self.settings.calibrate_band and self._calibration_due(state, step):
            self._calibrate(state, step, o > m + self._band_scale(state) * up)
        return fired > 0, in_band, fired if fired > 0 else last

    def _band_scale(self, state: dict[str, Any]) -> float:
        """How much of the forecast's band the planning load charges (1: all of it); see
        :meth:`_calibrate`."""
        kept = state.get("band_scale")
        if isinstance(kept, list) and len(kept) == 2:
            return float(kept[1])
        return 1.0

    def _calibration_due(self, state: dict[str, Any], step: int) -> bool:
        """Whether a window has passed since the band's scale last moved."""
        kept = state.get("band_scale")
        return not (
            isinstance(kept, list) and len(kept) == 2 and step - int(kept[0]) < self.window_steps
        )

    def _calibrate(self, state: dict[str, Any], step: int, over: bool) -> None:
        """Once per SLO window, move the band's scale toward the one whose window mean the
        arrivals exceed as often as the band's quantile says (``1 − band_quantile``): up
        by ``calibration_rate`` × the quantile when the window just observed went over
        the scaled band, down by ``calibration_rate`` × (1 − quantile) when it did not.

        A forecaster's upper quantile is a per-step statement; what a plan rests on is the
        window's mean, whose error the band's split into noise and level parts only
        estimates. Counting how often the window's mean actually went over the band the
        plan was made with measures it: a band wider than the forecast's errors buys
        capacity no window needed, a narrower one is widened. The scale stays within
        [``band_scale_min``, ``band_scale_max``]; the reactive floor and the check stand
        on the band as forecast."""
        if not self._calibration_due(state, step):
            return
        s = self.settings
        q = s.band_quantile
        step_by = q if over else -(1.0 - q)
        scale = self._band_scale(state) + s.calibration_rate * step_by
        scale = min(max(scale, s.band_scale_min), s.band_scale_max)
        state["band_scale"] = [int(step), float(scale)]


def _add_steps(
    entries: Iterable[list[Any]],
    tail: list[float],
    back: int,
    sums: tuple[float, float, float, float],
) -> tuple[float, float, float, float]:
    """``sums`` (observed, low, median, high) with each book entry's step added, in the
    order given: the observed rate from ``tail`` (index ``back`` + the entry's step)."""
    obs, low, med, high = sums
    for s, lo, me, hi in entries:
        obs += tail[back + s]
        low += lo
        med += me
        high += hi
    return obs, low, med, high


def _window_band(
    count: int, obs: float, low: float, med: float, high: float, nz_per: float
) -> tuple[float, float, float, float]:
    """The observed mean over ``count`` steps and the band of that mean: (observed, median,
    half-width up, half-width down). Each side's per-step band is as wide as it is for the
    mean of ``count`` steps: its noise part (at most ``nz_per`` × the median) shrinks by
    √count, the rest stays. Max and min spelled out as they compare, NaN included."""
    o, lo, m, hi = obs / count, low / count, med / count, high / count
    nz = nz_per * m
    band = hi - m
    band = 0.0 if band < 0.0 else band
    part = band if band < nz else nz
    rest = band * band - part * part
    up = math.sqrt((0.0 if rest < 0.0 else rest) + part * part / count)
    band = m - lo
    band = 0.0 if band < 0.0 else band
    part = band if band < nz else nz
    rest = band * band - part * part
    down = math.sqrt((0.0 if rest < 0.0 else rest) + part * part / count)
    return o, m, up, down


def oracle_policy(
    sizing: JobSizing, true_rates: np.ndarray, *, settings: KaleSettings | None = None
) -> KalePolicy:
    """Kale's planner fed the true future: what a perfect forecast would achieve."""
    return KalePolicy(sizing, TrueFuture(true_rates), name="oracle", settings=settings)
