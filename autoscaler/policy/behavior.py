"""A job's behaviour knobs around any policy: fallback, stabilization windows, schedules.

Why one wrapper in the policy layer: ``spec.fallback``, ``spec.behavior`` and
``spec.schedules`` must act the same in ``kale simulate`` and in the controller, so both
wrap their planner in :class:`BehavedPolicy` and nothing else implements them. Platform
teams know the semantics from KEDA and the HPA:

* **fallback** (KEDA's ``fallback``): after ``failureThreshold`` consecutive decisions
  without metrics (a broker that cannot be reached, a measurement past its deadline) the
  job is sized to ``fallback.workers`` instead of holding; before that, and without a
  fallback, it holds. The first decision with metrics ends it.
* **stabilization windows** (the HPA's ``behavior``): every decision's recommendation is
  kept; a scale-down goes only to the *highest* recommendation of the last
  ``scaleDown.stabilizationWindow``, a scale-up only to the *lowest* of the last
  ``scaleUp.stabilizationWindow`` (0, the default: no stabilization). They sit beside the
  planner's own resize budget (``rescale.maxPerHour``), which still applies.
* **schedules** (KEDA's cron scaler, as bounds): while a schedule's window is open — from a
  firing of its ``cron`` in its ``timeZone`` for ``duration`` — the job's size is kept
  within the schedule's ``minWorkers``..``maxWorkers`` (several open windows: the highest
  minimum and the highest maximum). Bounds are applied last, after stabilization, as the
  HPA applies its replica bounds.

A decision without metrics never resizes except to the fallback size. Each knob's acting is
written into the decision's reason (``fallback``, ``stabilization``, ``schedule``) and, for
the simulator's report, listed in :attr:`BehavedPolicy.applied` when it starts acting.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

from autoscaler.policy.types import Decision, JobSizing, Observation, Policy
from common.cron import Cron, zone

STATE_KEY = "behavior"
"""Where the wrapper keeps its state inside the policy's state dict (JSON-able)."""


@dataclass(frozen=True)
class Schedule:
    """One ``spec.schedules`` entry."""

    cron: Cron
    tz: ZoneInfo
    duration_s: float
    min_workers: int | None
    max_workers: int | None

    @property
    def label(self) -> str:
        return f"{self.cron.text} ({self.tz.key})"


@dataclass(frozen=True)
class Behavior:
    """The knobs of one job (all off: a no-op around the policy)."""

    fallback_threshold: int | None = None
    fallback_workers: int | None = None
    up_window_s: float = 0.0
    down_window_s: float = 0.0
    schedules: tuple[Schedule, ...] = ()

    @classmethod
    def from_spec(cls, spec: Any) -> Behavior:
        """The knobs of a job's ``spec`` (an ElasticTrainingJob's, already validated)."""
        fb = getattr(spec, "fallback", None)
        bh = getattr(spec, "behavior", None)
        up = getattr(bh, "scale_up", None) if bh is not None else None
        down = getattr(bh, "scale_down", None) if bh is not None else None
        return cls(
            fallback_threshold=fb.failure_threshold if fb is not None else None,
            fallback_workers=fb.workers if fb is not None else None,
            up_window_s=float(up.stabilization_window) if up is not None else 0.0,
            down_window_s=float(down.stabilization_window) if down is not None else 0.0,
            schedules=tuple(
                Schedule(
                    Cron.parse(s.cron),
                    zone(s.time_zone),
                    float(s.duration),
                    s.min_workers,
                    s.max_workers,
                )
                for s in getattr(spec, "schedules", None) or ()
            ),
        )

    @property
    def active(self) -> bool:
        return bool(
            self.fallback_threshold is not None
            or self.up_window_s > 0
            or self.down_window_s > 0
            or self.schedules
        )

    def bounds(self, epoch_s: float, sizing: JobSizing) -> tuple[int, int, list[str]]:
        """The size bounds at ``epoch_s``: the job's, narrowed by the open schedules."""
        lows, highs, open_ = [], [], []
        for s in self.schedules:
            fired = s.cron.last_at_or_before(epoch_s, s.tz, s.duration_s)
            if fired is not None and epoch_s < fired + s.duration_s:
                open_.append(s.label)
                lows.append(s.min_workers if s.min_workers is not None else sizing.min_workers)
                highs.append(s.max_workers if s.max_workers is not None else sizing.max_workers)
        if not open_:
            return sizing.min_workers, sizing.max_workers, []
        lo = max(sizing.min_workers, max(lows))
        hi = min(sizing.max_workers, max(max(highs), lo))
        return lo, hi, open_


def _window(
    kept: list[list[float]], now: float, workers: int, window_s: float, highest: bool
) -> list[list[float]]:
    """The recommendations of the last ``window_s`` that can still be the window's highest
    (or lowest): an older one that a newer one equals or beats never will be again, so the
    list stays short (distinct sizes, monotonic) however long the window and short the
    interval — it is kept in the job's planner state."""
    out = [r for r in kept if r[0] > now - window_s and r[0] < now]
    while out and (out[-1][1] <= workers if highest else out[-1][1] >= workers):
        out.pop()
    out.append([now, workers])
    return out


def _stabilized(up: list[list[float]], down: list[list[float]], current: int) -> int:
    """The HPA's rule: up to the lowest recommendation of the up window, down to the highest
    of the down window, else stay (both hold this decision's recommendation too)."""
    out = current
    lowest = int(up[0][1])  # the oldest kept is the extreme (the lists are monotonic)
    highest = int(down[0][1])
    if out < lowest:
        out = lowest
    if out > highest:
        out = highest
    return out


class BehavedPolicy:
    """``inner`` with a job's :class:`Behavior` around it (the one implementation of the
    knobs, for the simulator and the controller alike).

    ``epoch_s`` is the wall-clock time of ``time_s == 0`` (the simulator's trace start; 0 in
    the controller, whose observations carry epoch seconds): schedules read the calendar.
    """

    def __init__(
        self, inner: Policy, behavior: Behavior, sizing: JobSizing, *, epoch_s: float = 0.0
    ) -> None:
        self.inner = inner
        self.behavior = behavior
        self.sizing = sizing
        self.epoch_s = epoch_s
        self.name = inner.name
        self.applied: list[tuple[int, str, str]] = []
        """(step, knob, what) each time a knob starts acting (the simulator reports it)."""
        self._acting: set[str] = set()

    def __getattr__(self, name: str) -> Any:  # the inner policy's own attributes
        return getattr(self.inner, name)

    def _mark(self, step: int, acting: dict[str, str]) -> None:
        for knob, what in acting.items():
            if knob not in self._acting:
                self.applied.append((step, knob, what))
        self._acting = set(acting)

    def decide(self, obs: Observation, state: dict[str, Any]) -> Decision:
        b = self.behavior
        if obs.metrics_missing:
            return self._without_metrics(obs, state)
        if isinstance(state.get(STATE_KEY), dict):
            state[STATE_KEY].pop("missing", None)  # metrics again: the count starts over
        if not b.active:
            return self.inner.decide(obs, state)
        before = copy.deepcopy(state)  # JSON-able and small; a planner may mutate in place
        decision = self.inner.decide(obs, state)
        mine = state.setdefault(STATE_KEY, {})
        reason = dict(decision.reason)
        acting: dict[str, str] = {}
        workers = decision.workers
        now = obs.time_s
        if b.up_window_s > 0 or b.down_window_s > 0:
            up = _window(mine.get("up", []), now, workers, b.up_window_s, highest=False)
            down = _window(mine.get("down", []), now, workers, b.down_window_s, highest=True)
            mine["up"], mine["down"] = up, down
            if not obs.resizing:
                held = _stabilized(up, down, obs.workers)
                if held != workers:
                    way = "up" if workers > obs.workers else "down"
                    window = b.up_window_s if way == "up" else b.down_window_s
                    what = (
                        f"scale-{way} to {workers} stabilized to {held} "
                        f"(the {window:g}s window's {'lowest' if way == 'up' else 'highest'} "
                        "recommendation)"
                    )
                    reason["stabilization"] = acting["stabilization"] = what
                    workers = held
        if b.schedules:
            lo, hi, open_ = b.bounds(self.epoch_s + now, self.sizing)
            if open_:
                bounded = min(max(workers, lo), hi)
                if bounded != workers:
                    what = f"{workers} workers kept within {lo}..{hi} by {', '.join(open_)}"
                    reason["schedule"] = acting["schedule"] = what
                    workers = bounded
        self._mark(obs.step, acting)
        if workers == decision.workers:
            return Decision(decision.workers, decision.ps, reason)
        # The planner's move did not happen: forget it (its resize budget, the plan it
        # follows), as the controller does when a resize is not applied; keep our record.
        mine = state[STATE_KEY]
        state.clear()
        state.update(before)
        state[STATE_KEY] = mine
        if workers == obs.workers and not obs.resizing:
            reason["action"] = "hold_stabilizing" if "schedule" not in acting else "hold"
        elif "schedule" in acting:
            reason["action"] = "schedule"
        reason.setdefault("why", "")
        return Decision(workers, self.sizing.ps_for(workers), reason)

    def _without_metrics(self, obs: Observation, state: dict[str, Any]) -> Decision:
        """Hold, or after ``failureThreshold`` such decisions, the fallback size."""
        b = self.behavior
        threshold = b.fallback_threshold
        hold = {"action": "hold", "why": "metrics unavailable", "metrics": "unavailable"}
        if threshold is None or b.fallback_workers is None:  # nothing to count: hold
            self._mark(obs.step, {})
            return Decision(obs.workers, obs.ps, hold)
        mine = state.setdefault(STATE_KEY, {})
        missing = int(mine.get("missing", 0)) + 1
        mine["missing"] = missing
        if missing < threshold:
            self._mark(obs.step, {})
            hold["why"] += f" ({missing} of {threshold} before the fallback)"
            return Decision(obs.workers, obs.ps, hold)
        s = self.sizing
        workers = min(max(b.fallback_workers, s.min_workers), s.max_workers)
        what = f"{missing} decisions without metrics (threshold {threshold}): {workers} workers"
        self._mark(obs.step, {"fallback": what})
        return Decision(
            workers,
            s.ps_for(workers),
            {
                "action": "fallback",
                "why": f"metrics unavailable for {missing} decisions; fallback size",
                "fallback": what,
                "metrics": "unavailable",
            },
        )


def behaved(
    policy: Policy, spec: Any, sizing: JobSizing, *, epoch_s: float = 0.0, always: bool = False
) -> Policy:
    """``policy`` wrapped with the knobs of ``spec`` (unchanged when it has none, unless
    ``always``: the simulator's metrics outages need the wrapper's hold)."""
    if spec is None and isinstance(policy, BehavedPolicy):
        return policy  # already wrapped (with its job's knobs)
    behavior = Behavior.from_spec(spec) if spec is not None else Behavior()
    if not behavior.active and not always:
        return policy
    return BehavedPolicy(policy, behavior, sizing, epoch_s=epoch_s)


def epoch_of(timestamp: Any) -> float:
    """Epoch seconds of a trace's start (a pandas Timestamp, a datetime, a number or None)."""
    if timestamp is None:
        return 0.0
    if hasattr(timestamp, "timestamp"):
        return float(timestamp.timestamp())
    value = float(timestamp)
    return value if math.isfinite(value) else 0.0
