"""Stages 3 and 4 of the tick: each job's planner wish, then one GPU quota round for all.

Why a module of its own: this is where measurements become sizes. Planning runs the same
:class:`~autoscaler.policy.kale.KalePolicy` the simulator runs (missing metrics mean *hold*,
an unfinished resize is finished first, a pinned or paused job bypasses the planner), and
approval hands every wish to the :class:`~autoscaler.policy.quota.ResourceManager` in one round
before any GPU is given or taken back. Mixed into
:class:`~autoscaler.controller.loop.Controller`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from autoscaler.actuators.base import Size
from autoscaler.controller.isolation import safe_text
from autoscaler.controller.metering import ArrivalHistory
from autoscaler.controller.metrics import ControllerMetrics
from autoscaler.controller.overrides import pinned_decision
from autoscaler.controller.runtime import JobRuntime
from autoscaler.job.overrides import override_of
from autoscaler.policy.quota import Request, ResourceManager
from autoscaler.policy.types import Decision, Observation

# One logger for the whole tick, whatever module a stage lives in.
log = logging.getLogger("autoscaler.controller.loop")


class PlanningStages:
    """Mixed into :class:`~autoscaler.controller.loop.Controller` (its attributes are used)."""

    metrics: ControllerMetrics
    resources: ResourceManager | None
    _guarded: Callable[..., Any]

    # -- 3. plan -------------------------------------------------------------------------
    def _plan(self, rt: JobRuntime, now: float) -> Decision | None:
        """The planner's wish (None: nothing known about the target, nothing to plan)."""
        rt.window = None
        cur = rt.current
        if cur is None or rt.applying is not None:
            return None
        rt.override = override_of(rt.entry.job)
        if rt.override is not None:  # paused or pinned: the planner is bypassed
            return pinned_decision(rt.override, cur, rt.sizing)
        pending = self._pending_target(rt)
        if pending is not None:  # finish the resize under way before planning anew
            since = float(rt.state.pending.get("since", now))  # type: ignore[union-attr]
            return Decision(
                pending.workers,
                pending.ps,
                {
                    "action": "resize_resumed",
                    "why": f"finishing the resize to {pending} started "
                    f"{max(0.0, now - since):.0f}s ago",
                },
            )
        if rt.sample is None:
            err = rt.metric_error
            why = f"metrics unavailable: {err}" if err else "metrics unavailable"
            return Decision(
                cur.workers, cur.ps, {"action": "hold", "why": why, "metrics": "unavailable"}
            )
        sz = rt.sizing
        step = int(now // sz.interval_s)
        hist = rt.history or ArrivalHistory.empty(sz.interval_s)
        past = hist.rates[-rt.past_steps :]
        if not len(hist) or hist.end_step < step:
            past = np.append(past, rt.sample.arrival_rate)  # the freshest measurement
        if len(hist) >= 2:
            failures = rt.forecast.failures
            rt.window = rt.forecast.window(now, hist, step)
            if rt.forecast.failures > failures:
                self.metrics.errors.labels(kind="forecast").inc()
        else:
            rt.forecast.reason = f"history has {len(hist)} intervals"
        resizing, left = rt.resizing(now)
        obs = Observation(
            step=step,
            time_s=now,
            arrivals=np.asarray(past, dtype=float),
            workers=cur.workers,
            ps=cur.ps,
            backlog=float(rt.sample.lag),
            oldest_age_s=float(rt.sample.oldest_age_s),
            processed_rate=float(rt.sample.consumption_rate),
            resizing=resizing,
            resize_remaining_s=left,
        )
        saved = rt.saved_policy = dict(rt.state.policy)
        try:
            return rt.policy.decide(obs, rt.state.policy)
        except Exception as exc:  # a planner bug holds this job only
            self.metrics.errors.labels(kind="planner").inc()
            self.metrics.job_error(rt.key, "plan", type(exc).__name__)
            log.exception("planning %s", rt.key)
            rt.state.policy = saved
            return Decision(
                cur.workers, cur.ps, {"action": "hold", "why": f"planner failed: {safe_text(exc)}"}
            )

    def _pending_target(self, rt: JobRuntime) -> Size | None:
        """The size an unfinished resize goes to (None: none, or one the spec now forbids)."""
        pending = rt.state.pending
        if pending is None:
            return None
        to = Size(*pending["to"])
        sz = rt.sizing
        if not sz.min_workers <= to.workers <= sz.max_workers:
            log.warning(
                "%s: dropping the unfinished resize to %s: outside %d..%d workers now",
                rt.key,
                to,
                sz.min_workers,
                sz.max_workers,
            )
            rt.state.pending = None
            return None
        return to

    # -- 4. approve ----------------------------------------------------------------------
    def _approve(
        self, runtimes: list[JobRuntime], plans: dict[str, Decision | None], now: float
    ) -> dict[str, Size]:
        if self.resources is None:
            return {k: Size(d.workers, d.ps) for k, d in plans.items() if d is not None}
        requests = []
        by_key = {}
        for rt in runtimes:
            req = self._guarded(rt, "approve", self._request, rt, plans.get(rt.key), now)
            if req is not None:
                requests.append(req)
                by_key[rt.key] = rt
        try:
            granted = self.resources.allocate(requests)
        except Exception as exc:
            self.metrics.errors.labels(kind="quota").inc()
            log.error("quota round failed, holding every job: %s", safe_text(exc))
            return {}
        out: dict[str, Size] = {}
        for req in requests:
            plan = plans.get(req.job)
            if plan is None:
                continue
            rt = by_key[req.job]
            workers = (
                plan.workers if req.unit == 0 else min(plan.workers, granted[req.job] // req.unit)
            )
            out[req.job] = Size(workers, rt.sizing.ps_for(workers) if workers else 0)
        return out

    def _request(self, rt: JobRuntime, plan: Decision | None, now: float) -> Request | None:
        """The job's quota request (None: nothing known about its size)."""
        gpw = _gpus(rt.sizing.gpus_per_worker, "gpusPerWorker")
        known = rt.current or (Size(*rt.state.last_current) if rt.state.last_current else None)
        if known is None:
            return None
        held = known.workers
        resizing, _ = rt.resizing(now)
        sizes = [rt.state.resize_from, rt.state.resize_to] if resizing else []
        if rt.state.pending is not None:  # an unfinished resize holds both sizes too
            sizes += [rt.state.pending.get("from"), rt.state.pending.get("to")]
        for size in sizes:
            if size:
                held = max(held, int(size[0]))
        wish = plan.workers if plan is not None else known.workers
        return Request(
            job=rt.key,
            current_gpus=_gpus(held * gpw, "held GPUs"),
            desired_gpus=_gpus(wish * gpw, "desired GPUs"),
            priority=int(rt.entry.job.spec.priority),
            min_gpus=_gpus(rt.sizing.min_workers * gpw, "minimum GPUs"),
            unit=gpw,
        )


def _gpus(value: Any, what: str) -> int:
    """A GPU amount the quota round can take (a whole number ≥ 0, not absurd)."""
    n = int(value)
    if not 0 <= n <= 10**9:
        raise ValueError(f"{what} is {n}")
    return n
