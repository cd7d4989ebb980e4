"""The plan and approve stages: each job's planner wish, then one GPU quota round for all.

Why stages of their own: this is where measurements become sizes. Planning runs the same
:class:`~autoscaler.policy.kale.KalePolicy` the simulator runs (missing metrics mean *hold*,
an unfinished resize is finished first, a pinned or paused job bypasses the planner) on the
forecast this stage makes for the decision, and approval hands every wish to the
:class:`~autoscaler.policy.quota.ResourceManager` in one round before any GPU is given or
taken back.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from autoscaler.actuators.base import Size
from autoscaler.controller.guard import Guard
from autoscaler.controller.isolation import safe_text
from autoscaler.controller.metering import ArrivalHistory, Backfilling, WarmingUp
from autoscaler.controller.metrics import ControllerMetrics
from autoscaler.controller.overrides import pinned_decision
from autoscaler.controller.runtime import JobRuntime
from autoscaler.controller.tick import NO_PLAN, Approvals, Observation, Plan, Tick
from autoscaler.job.overrides import override_of
from autoscaler.policy.quota import Request, ResourceManager
from autoscaler.policy.types import Decision
from autoscaler.policy.types import Observation as PlannerInput

# One logger for the whole tick, whatever module a stage lives in.
log = logging.getLogger("autoscaler.controller.loop")


def plan_job(rt: JobRuntime, seen: Observation, tick: Tick, metrics: ControllerMetrics) -> Plan:
    """The planner's wish for one job (no decision: nothing known about the target)."""
    now = tick.now
    cur = seen.current
    if cur is None or rt.applying is not None:
        return NO_PLAN
    override = override_of(rt.entry.job)
    if override is not None:  # paused or pinned: the planner is bypassed
        return Plan(pinned_decision(override, cur, rt.sizing), override=override)
    pending = _pending_target(rt)
    if pending is not None:  # finish the resize under way before planning anew
        since = float(rt.state.pending.get("since", now))  # type: ignore[union-attr]
        return Plan(
            Decision(
                pending.workers,
                pending.ps,
                {
                    "action": "resize_resumed",
                    "why": f"finishing the resize to {pending} started "
                    f"{max(0.0, now - since):.0f}s ago",
                },
            )
        )
    sample = seen.sample
    if sample is None:
        err = seen.metric_error
        why = f"metrics unavailable: {err}" if err else "metrics unavailable"
        if isinstance(err, (WarmingUp, Backfilling)):  # not failures: hold, count nothing
            return Plan(
                Decision(
                    cur.workers, cur.ps, {"action": "hold", "why": why, "metrics": "unavailable"}
                )
            )
        return Plan(_without_metrics(rt, cur, now, why))
    sz = rt.sizing
    step = int(now // sz.interval_s)
    hist = seen.history
    if hist is None:
        hist = ArrivalHistory.empty(sz.interval_s)
    held = len(hist.rates)
    past = hist.rates[-rt.past_steps :]
    if not held or hist.end_step < step:
        past = np.concatenate((past, (sample.arrival_rate,)))  # the freshest measurement
    window = None
    if held >= 2:
        failures = rt.forecast.failures
        window = rt.forecast.window(now, hist, step)
        if rt.forecast.failures > failures:
            metrics.errors.labels(kind="forecast").inc()
    else:
        rt.forecast.reason = f"history has {held} intervals"
    resizing, left = rt.resizing(now)
    obs = PlannerInput(
        step=step,
        time_s=now,
        arrivals=np.asarray(past, dtype=float),
        workers=cur.workers,
        ps=cur.ps,
        backlog=float(sample.lag),
        oldest_age_s=float(sample.oldest_age_s),
        processed_rate=float(sample.consumption_rate),
        resizing=resizing,
        resize_remaining_s=left,
    )
    saved = dict(rt.state.policy)
    try:
        with rt.forecast_given.given(step, window):
            decision = rt.policy.decide(obs, rt.state.policy)
    except Exception as exc:  # a planner bug holds this job only
        rt.state.policy = saved
        metrics.errors.labels(kind="planner").inc()
        metrics.job_error(rt.key, "plan", type(exc).__name__)
        log.exception("planning %s", rt.key)
        decision = Decision(
            cur.workers, cur.ps, {"action": "hold", "why": f"planner failed: {safe_text(exc)}"}
        )
    return Plan(decision, window=window, saved_policy=saved)


def _without_metrics(rt: JobRuntime, cur: Size, now: float, why: str) -> Decision:
    """The policy's decision on a tick that could not measure: a hold, or after
    ``spec.fallback.failureThreshold`` such ticks the fallback size (the policy layer's
    :class:`~autoscaler.policy.behavior.BehavedPolicy` decides, as in the simulator)."""
    resizing, left = rt.resizing(now)
    obs = PlannerInput(
        step=int(now // rt.sizing.interval_s),
        time_s=now,
        arrivals=np.zeros(0),
        workers=cur.workers,
        ps=cur.ps,
        backlog=0.0,
        oldest_age_s=0.0,
        processed_rate=0.0,
        resizing=resizing,
        resize_remaining_s=left,
        metrics_missing=True,
    )
    decision = rt.policy.decide(obs, rt.state.policy)
    reason = dict(decision.reason)
    reason["why"] = str(reason.get("why", "metrics unavailable")).replace(
        "metrics unavailable", why, 1
    )
    return Decision(decision.workers, decision.ps, reason)


def _pending_target(rt: JobRuntime) -> Size | None:
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


def approve(
    resources: ResourceManager | None,
    runtimes: list[JobRuntime],
    observations: dict[str, Observation],
    plans: dict[str, Plan],
    tick: Tick,
    guard: Guard,
    metrics: ControllerMetrics,
) -> Approvals:
    """Every wish through one quota round (no quota: every wish approved)."""
    if resources is None:
        return {
            k: Size(p.decision.workers, p.decision.ps)
            for k, p in plans.items()
            if p.decision is not None
        }
    requests = []
    by_key = {}
    for rt in runtimes:
        plan = plans.get(rt.key)
        wish = plan.decision if plan is not None else None
        req = guard.run(rt, "approve", _request, rt, observations[rt.key], wish, tick.now)
        if req is not None:
            requests.append(req)
            by_key[rt.key] = rt
    try:
        granted = resources.allocate(requests)
    except Exception as exc:
        metrics.errors.labels(kind="quota").inc()
        log.error("quota round failed, holding every job: %s", safe_text(exc))
        return {}
    out: Approvals = {}
    for req in requests:
        plan = plans.get(req.job)
        wish = plan.decision if plan is not None else None
        if wish is None:
            continue
        rt = by_key[req.job]
        workers = wish.workers if req.unit == 0 else min(wish.workers, granted[req.job] // req.unit)
        out[req.job] = Size(workers, rt.sizing.ps_for(workers) if workers else 0)
    return out


def _request(
    rt: JobRuntime, seen: Observation, wish: Decision | None, now: float
) -> Request | None:
    """The job's quota request (None: nothing known about its size)."""
    gpw = _gpus(rt.sizing.gpus_per_worker, "gpusPerWorker")
    known = seen.current or (Size(*rt.state.last_current) if rt.state.last_current else None)
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
    want = wish.workers if wish is not None else known.workers
    return Request(
        job=rt.key,
        current_gpus=_gpus(held * gpw, "held GPUs"),
        desired_gpus=_gpus(want * gpw, "desired GPUs"),
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
