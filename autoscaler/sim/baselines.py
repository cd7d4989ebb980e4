"""The reactive and fixed baselines Kale is compared against, each faithful to its anchor.

Every baseline is a :class:`~autoscaler.policy.types.Policy`: a pure ``decide(obs, state)``
with its own JSON-able state. Shared conventions:

* **maxReplicas = the model's peak.** An operator configuring HPA or KEDA for a PS job would
  set ``maxReplicas`` where more workers stop helping; every baseline (and the lower bound)
  is given that cap (``sizing.peak_workers``), so none of them loses by scaling into the
  model's slowdown. ``min_workers`` is ``minReplicas``.
* **Steps, not sync periods.** The HPA controller syncs every 15 s; the simulator decides once
  per trace step Δ. Rate limits defined per 15 s period are applied ``Δ / 15`` times in a row
  (a 60 s step allows what four consecutive syncs would), and stabilisation windows are in
  seconds, exactly as in the controller.

Sources of the rules:

* HPA: Kubernetes ``pkg/controller/podautoscaler`` (``horizontal.go``:
  ``stabilizeRecommendationWithBehaviors``, ``calculateScaleUpLimitWithScalingRules``;
  ``replica_calculator.go``: ``GetResourceReplicas``, ``GetExternalPerPodMetricReplicas``)
  and the HPA documentation ("Algorithm details", "Default Behavior"): tolerance 0.1,
  scale-up policies {100 % / 15 s, 4 pods / 15 s} with ``selectPolicy: Max`` and no
  stabilisation, scale-down 100 % / 15 s with a 300 s stabilisation window.
* KEDA: the Apache Kafka scaler (``pkg/scalers/kafka_scaler.go``): metric = total consumer lag,
  ``lagThreshold`` as an ``AverageValue`` target, lag capped at ``partitions × lagThreshold``
  unless ``allowIdleConsumers``; ``activationLagThreshold`` (default 0) and ``cooldownPeriod``
  (300 s) only govern 0 ↔ 1 replicas, which never happens here (``min_workers ≥ 1``), so
  N → M scaling is the HPA's, with its defaults.
* Autopilot: Rzadca et al., "Autopilot: workload autoscaling at Google", EuroSys 2020, §3:
  moving-window recommenders (the peak of the signal over a trailing window, plus a safety
  margin), so scale-down waits until the peak leaves the window; the ML recommender's
  cost-of-change term is rendered as a small scale-down deadband.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from autoscaler.policy.types import Decision, JobSizing, Observation

HPA_SYNC_PERIOD_S = 15.0
"""``--horizontal-pod-autoscaler-sync-period`` default."""


def _scale_up_limit(current: int, periods: int, percent: float = 100.0, pods: int = 4) -> int:
    """HPA's default scale-up limit, chained over ``periods`` sync periods.

    Per period: ``max(ceil(n · (1 + percent/100)), n + pods)`` (``selectPolicy: Max``).
    """
    limit = current
    for _ in range(max(1, periods)):
        limit = max(math.ceil(limit * (1.0 + percent / 100.0)), limit + pods)
    return limit


@dataclass
class HpaBehaviour:
    """HPA v2 ``behavior`` with the Kubernetes defaults, applied to a raw recommendation."""

    scale_down_window_s: float = 300.0
    """``scaleDown.stabilizationWindowSeconds`` (default 300)."""
    scale_up_window_s: float = 0.0
    """``scaleUp.stabilizationWindowSeconds`` (default 0)."""
    interval_s: float = 60.0
    """The simulator's step: how many 15 s sync periods one decision stands for."""

    def apply(
        self, state: dict[str, Any], now: float, current: int, raw: int, lo: int, hi: int
    ) -> tuple[int, dict[str, Any]]:
        """Stabilise ``raw`` against the stored recommendations, then rate-limit and clamp."""
        recs: list[list[float]] = state.setdefault("recommendations", [])
        recs.append([now, raw])
        keep = max(self.scale_down_window_s, self.scale_up_window_s)
        # Keep what a later window can still see (strictly after now − window, as k8s does).
        while len(recs) > 1 and recs[0][0] <= now - keep:
            recs.pop(0)
        up = min(int(v) for t, v in recs if t > now - self.scale_up_window_s or t == now)
        down = max(int(v) for t, v in recs if t > now - self.scale_down_window_s or t == now)
        desired = current
        if desired < up:
            desired = up
        if desired > down:
            desired = down
        periods = max(1, round(self.interval_s / HPA_SYNC_PERIOD_S))
        limit = _scale_up_limit(current, periods)
        limited = min(desired, limit)
        final = min(max(limited, lo), hi)
        return final, {"stabilised": desired, "scale_up_limit": limit}


@dataclass
class HpaPolicy:
    """Kubernetes HPA v2 on worker utilisation = processed / capacity, target 80 %.

    ``desired = ceil(current × utilisation / target)`` unless ``|utilisation/target − 1| ≤ 0.1``
    (then ``current``). Utilisation saturates at 100 % while a backlog exists: the workers are
    busy all the time, which is what a CPU/GPU-utilisation metric would report, so under a
    backlog HPA grows by at most ``1 / 0.8 = +25 %`` per step; the default scale-up limit
    (×2 or +4 per 15 s) never binds on this metric.

    **Readiness, as ``replica_calculator.go`` (``groupPods``) has it.** A resize restarts every
    pod of the job: while it runs they are Pending, and once Ready a pod's sample is ignored
    until one full metric window (``metric_window_s``) has been collected since it became
    Ready (the rule inside the CPU initialisation period, which for a restarted training job
    covers its restart). With no sample from any ready pod the controller's sync fails ("did
    not receive metrics for any ready pods"): no recommendation is made *or recorded*, so the
    downtime never enters the stabilisation window (a recorded "0 % busy" there would pull the
    next scale-down to the floor). Pods missing a metric would count as 100 % busy on a
    scale-down and 0 % on a scale-up; a stop-the-world resize restarts all pods together, so
    here either all samples count or none does.

    With resizes that stop the job for minutes this rule still has a limit cycle, and the
    simulator shows it rather than hiding it: every resize leaves a backlog, the backlog
    reads as 100 % utilisation, HPA scales up again (another resize, more backlog) until
    capacity far exceeds the load, then scales down once the 300 s window has passed.
    """

    sizing: JobSizing
    target_utilization: float = 0.8
    tolerance: float = 0.1
    scale_down_window_s: float = 300.0
    max_replicas: int | None = None
    metric_window_s: float = 60.0
    """The metrics pipeline's averaging window (metrics-server; one step by default)."""
    name: str = "hpa"

    def _sample_ready(self, obs: Observation, state: dict[str, Any]) -> bool:
        """Whether the pods' latest samples count (see the class docstring)."""
        if obs.resizing:  # pods Pending: remember when they will be Ready
            state["ready_at"] = obs.time_s + obs.resize_remaining_s
            return False
        ready_at = float(state.get("ready_at", -math.inf))
        return obs.time_s - ready_at >= self.metric_window_s - 1e-9

    def decide(self, obs: Observation, state: dict[str, Any]) -> Decision:
        s = self.sizing
        w = obs.workers
        hi = self.max_replicas or s.peak_workers
        if not self._sample_ready(obs, state):
            return Decision(
                w, s.ps_for(w), {"rule": "hold: no metrics from ready pods (not ready yet)"}
            )
        # The window is the last step: the processed rate the engine reports for it.
        cap = s.rate(w)
        util = min(obs.processed_rate / cap, 1.0) if cap > 0 else 1.0
        ratio = util / self.target_utilization
        raw = w if abs(ratio - 1.0) <= self.tolerance else math.ceil(ratio * w - 1e-9)
        behaviour = HpaBehaviour(self.scale_down_window_s, 0.0, s.interval_s)
        final, info = behaviour.apply(state, obs.time_s, w, raw, s.min_workers, hi)
        if final != w:  # the resize restarts every pod now: Ready when its downtime ends
            state["ready_at"] = obs.time_s + s.rescale_s
        reason = {"rule": "hpa", "utilization": util, "ratio": ratio, "raw": raw, **info}
        return Decision(final, s.ps_for(final), reason)


def default_lag_threshold(sizing: JobSizing) -> float:
    """Samples one worker consumes in SLO/2, at the per-worker rate of the peak size.

    Lag-based scaling holds ``lag ≈ w · lagThreshold`` while keeping up, i.e. a delay of about
    ``w · lagThreshold / f(w)``; with the per-worker rate at the peak (the lowest one in sync
    mode, where f(w)/w falls with w) that delay stays near or under SLO/2.
    """
    per_worker = sizing.peak_throughput / sizing.peak_workers
    return max(1.0, per_worker * sizing.slo_s / 2.0)


@dataclass
class KedaPolicy:
    """KEDA's Kafka scaler feeding the HPA: ``desired = ceil(lag / lagThreshold)``.

    The lag (the backlog in samples) is capped at ``partitions × lagThreshold`` (KEDA does so
    unless ``allowIdleConsumers``: a consumer beyond the partition count would idle). The HPA
    then applies its ``AverageValue`` rule with the 0.1 tolerance on
    ``lag / (lagThreshold × current)``, its 300 s scale-down stabilisation and its scale-up
    rate limit (which does bind here: from 1 worker one 60 s step reaches at most 80).
    """

    sizing: JobSizing
    lag_threshold: float | None = None
    partitions: int | None = None
    tolerance: float = 0.1
    scale_down_window_s: float = 300.0
    max_replicas: int | None = None
    name: str = "keda"

    def decide(self, obs: Observation, state: dict[str, Any]) -> Decision:
        s = self.sizing
        w = obs.workers
        hi = self.max_replicas or s.peak_workers
        threshold = self.lag_threshold or default_lag_threshold(s)
        partitions = self.partitions or s.max_workers
        lag = min(obs.backlog, partitions * threshold)
        usage_ratio = lag / (threshold * w)
        within = abs(1.0 - usage_ratio) <= self.tolerance
        raw = w if within else math.ceil(lag / threshold - 1e-9)
        behaviour = HpaBehaviour(self.scale_down_window_s, 0.0, s.interval_s)
        final, info = behaviour.apply(state, obs.time_s, w, raw, s.min_workers, hi)
        reason = {
            "rule": "keda-kafka",
            "lag": obs.backlog,
            "capped_lag": lag,
            "lag_threshold": threshold,
            "raw": raw,
            **info,
        }
        return Decision(final, s.ps_for(final), reason)


@dataclass
class AutopilotPolicy:
    """Autopilot-style moving-window recommender on the arrival rate.

    ``load = max(rate over the last window) × (1 + margin)``; workers = the smallest w with
    f(w) > load. Scale-up follows the recommendation at once; scale-down happens only when the
    peak has left the window and the recommendation is at least ``down_deadband`` below the
    current size (the paper's cost-of-change idea: small cuts are not worth a resize).
    """

    sizing: JobSizing
    window_s: float = 3600.0
    margin: float = 0.15
    down_deadband: float = 0.1
    name: str = "autopilot"

    def decide(self, obs: Observation, state: dict[str, Any]) -> Decision:
        s = self.sizing
        w = obs.workers
        k = max(1, math.ceil(self.window_s / s.interval_s))
        hist = obs.arrivals[-k:]
        peak = float(hist.max()) if len(hist) else 0.0
        load = peak * (1.0 + self.margin)
        rec, saturated = s.workers_for(load)
        target = rec
        if rec < w and rec > w * (1.0 - self.down_deadband):
            target = w
        reason = {
            "rule": "autopilot-window",
            "window_peak": peak,
            "load": load,
            "recommended": rec,
            "saturated": saturated,
        }
        return Decision(target, s.ps_for(target), reason)


@dataclass
class StaticPolicy:
    """The peak of the warm-up history, provisioned all the time.

    ``w`` = the smallest size with f(w) > max(warm-up rates) (the model's peak when saturated,
    and also without any warm-up to look at), fixed at the first decision.
    """

    sizing: JobSizing
    name: str = "static"

    def decide(self, obs: Observation, state: dict[str, Any]) -> Decision:
        s = self.sizing
        if "workers" not in state:
            if len(obs.arrivals):
                peak = float(obs.arrivals.max())
                state["workers"] = s.workers_for(peak)[0]
                state["history_peak"] = peak
            else:
                state["workers"] = s.peak_workers
                state["history_peak"] = None
        w = int(state["workers"])
        return Decision(w, s.ps_for(w), {"rule": "static", "history_peak": state["history_peak"]})
