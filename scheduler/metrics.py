"""Prometheus metrics of the scheduler (one registry per scheduler; served like the
controller's, on ``/metrics`` next to ``/healthz`` and ``/readyz``).

Names follow the Prometheus conventions: a ``kale_scheduler_`` prefix, base units in the
name (``_seconds``, ``_ratio``), counters ending in ``_total``; no label is called ``job``
(Prometheus attaches its own).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class SchedulerMetrics:
    """Every metric the scheduler exports."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        self.pending = Gauge(
            "kale_scheduler_pending_pods", "Pods waiting for this scheduler.", registry=r
        )
        self.latency = Histogram(
            "kale_scheduler_scheduling_duration_seconds",
            "From the pod first seen pending to its binding.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.decision_seconds = Histogram(
            "kale_scheduler_decision_duration_seconds",
            "Time of one placement decision (a pod or a whole gang).",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.decisions = Counter(
            "kale_scheduler_decisions",
            "Placement decisions by policy and result (scheduled, unschedulable).",
            ["policy", "result"],
            registry=r,
        )
        self.fallback_decisions = Counter(
            "kale_scheduler_fallback_decisions",
            "Decisions a guarded agent (agent:PATH,fallback=RULE) left to its rule, by policy "
            "and reason (infeasible, out_of_range, error).",
            ["policy", "reason"],
            registry=r,
        )
        self.bindings = Counter("kale_scheduler_bindings", "Pods bound.", registry=r)
        self.bind_failures = Counter(
            "kale_scheduler_bind_failures",
            "Bindings that did not go through, by reason (conflict, gone, error; overcommit: "
            "refused before the request, the choice would over-commit a GPU).",
            ["reason"],
            registry=r,
        )
        self.unschedulable = Gauge(
            "kale_scheduler_unschedulable_pods",
            "Pending pods that fit nowhere at their last try (PodScheduled=False).",
            registry=r,
        )
        self.longest_pending = Gauge(
            "kale_scheduler_longest_pending_seconds",
            "Time the longest-waiting pending pod has waited since this replica saw it.",
            registry=r,
        )
        self.nominated = Gauge(
            "kale_scheduler_nominated_pods",
            "Preemptors waiting on their nominated node for evicted pods to leave.",
            registry=r,
        )
        self.preemptions = Counter(
            "kale_scheduler_preemptions",
            "Preemptions carried out (a pod or a gang that evicted lower-priority pods).",
            registry=r,
        )
        self.preemption_victims = Counter(
            "kale_scheduler_preemption_victims",
            "Pods evicted to make room for higher-priority ones.",
            registry=r,
        )
        self.eviction_failures = Counter(
            "kale_scheduler_eviction_failures",
            "Evictions of preemption victims that did not go through, by reason (blocked: a "
            "PodDisruptionBudget; failed: the API server).",
            ["reason"],
            registry=r,
        )
        self.status_updates = Counter(
            "kale_scheduler_pod_status_updates",
            "PodScheduled=False conditions written (one per new message, never per retry).",
            registry=r,
        )
        self.allocation = Gauge(
            "kale_scheduler_gpu_allocation_ratio",
            "Share of the cluster's GPU capacity (milli-GPUs) held by pods.",
            registry=r,
        )
        self.fragmentation = Gauge(
            "kale_scheduler_gpu_fragmentation_ratio",
            "Share of the cluster's GPU capacity that is free but fragmented (see "
            "docs/scheduler.md).",
            registry=r,
        )
        self.gpu_faults = Gauge(
            "kale_scheduler_gpu_faults_recent",
            "GPU faults within the fault window, over all nodes.",
            registry=r,
        )
        self.leader = Gauge("kale_scheduler_leader", "1 while this replica leads.", registry=r)
        self.relists = Counter(
            "kale_scheduler_watch_relists",
            "Full lists of a watched resource (start, and after 410 Gone).",
            ["resource"],
            registry=r,
        )
        self.errors = Counter(
            "kale_scheduler_errors",
            "Failures by kind (watch, lease, event, status).",
            ["kind"],
            registry=r,
        )
        for reason in ("conflict", "gone", "error", "overcommit"):
            self.bind_failures.labels(reason=reason)
        for reason in ("blocked", "failed"):
            self.eviction_failures.labels(reason=reason)

    def render(self) -> bytes:
        return generate_latest(self.registry)
