"""The Grafana dashboard (``manifests/grafana/kale-dashboard.json``), generated.

Why generated: its queries must name exactly the metrics :mod:`autoscaler.controller.metrics`
exports, and a JSON file of a thousand lines is easy to break by hand; a test fails when the
committed file differs from :func:`render_dashboard` (regenerate with
``python -m tools.gen_dashboard``). Every query selects jobs by the ``namespace`` and ``etj``
variables; the oldest-sample panel draws each job's SLO as a dashed line, and every resize
is an annotation on every panel (from ``kale_resizes_total``). A last row shows ``kale
scheduler`` (``scheduler/metrics.py``'s series, the leader's by ``max``: both replicas are
scraped): pending and unschedulable pods, the longest wait, time to bind, bindings and their
failures, preemptions, GPU allocation and fragmentation.
"""

from __future__ import annotations

import json
from typing import Any

DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'namespace=~"$namespace",etj=~"$etj"'
WHO = "{{namespace}}/{{etj}}"


def _target(ref: str, expr: str, legend: str) -> dict[str, Any]:
    return {"refId": ref, "datasource": DS, "expr": expr, "legendFormat": legend}


def _panel(
    pid: int,
    title: str,
    description: str,
    grid: tuple[int, int, int, int],
    targets: list[tuple[str, str]],
    *,
    unit: str = "short",
    kind: str = "timeseries",
    overrides: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    x, y, w, h = grid
    refs = "ABCDEFGHIJ"
    return {
        "id": pid,
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {
            "defaults": {"unit": unit, "custom": {"lineWidth": 1, "fillOpacity": 0}},
            "overrides": overrides or [],
        },
        "options": {
            "legend": {
                "displayMode": "table",
                "placement": "bottom",
                "calcs": ["lastNotNull", "max"],
            },
            "tooltip": {"mode": "multi"},
        },
        "targets": [_target(refs[i], e, lg) for i, (e, lg) in enumerate(targets)],
    }


def _dashed(pattern: str, color: str = "red") -> dict[str, Any]:
    """Series whose name matches ``pattern`` drawn as a dashed line (an SLO, a bound)."""
    return {
        "matcher": {"id": "byRegexp", "options": pattern},
        "properties": [
            {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
            {"id": "color", "value": {"mode": "fixed", "fixedColor": color}},
        ],
    }


def _variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "type": "query",
        "datasource": DS,
        "label": label,
        "query": {"query": query, "refId": name},
        "definition": query,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "refresh": 2,
        "current": {},
        "hide": 0,
        "sort": 1,
    }


def panels() -> list[dict[str, Any]]:
    j = SEL
    return [
        _panel(
            1,
            "Arrival rate: predicted vs actual",
            "Measured arrival rate against the forecast for now + rescale duration (the "
            "lead time a resize needs), p10/p50/p90, and the planned-for peak.",
            (0, 0, 12, 8),
            [
                (f"kale_job_arrival_samples_per_second{{{j}}}", f"{WHO} actual"),
                (f"kale_job_consumption_samples_per_second{{{j}}}", f"{WHO} consumed"),
                (
                    f"kale_job_forecast_lead_samples_per_second{{{j}}}",
                    f"{WHO} forecast at lead p{{{{forecast_quantile}}}}",
                ),
                (f"kale_job_forecast_peak_samples_per_second{{{j}}}", f"{WHO} planned-for peak"),
            ],
            unit="reqps",
        ),
        _panel(
            2,
            "Workers: desired vs current",
            "Current and quota-approved workers, and the three recommendations: proactive "
            "(forecast at the lead time), reactive (measured rate + backlog), final (planner).",
            (12, 0, 12, 8),
            [
                (f"kale_job_current_workers{{{j}}}", f"{WHO} current"),
                (f"kale_job_desired_workers{{{j}}}", f"{WHO} desired"),
                (
                    f"kale_job_recommended_workers{{{j}}}",
                    f"{WHO} {{{{recommendation}}}}",
                ),
                (f"kale_job_max_workers{{{j}}}", f"{WHO} maxWorkers"),
            ],
            overrides=[_dashed(".*maxWorkers", "gray")],
        ),
        _panel(
            3,
            "Oldest unconsumed sample vs SLO",
            "Age of the oldest unconsumed record; the dashed line is the job's "
            "spec.slo.maxDelay. Above it, the job violates its SLO.",
            (0, 8, 12, 8),
            [
                (f"kale_job_oldest_unconsumed_age_seconds{{{j}}}", f"{WHO} oldest"),
                (f"kale_job_slo_max_delay_seconds{{{j}}}", f"{WHO} SLO"),
            ],
            unit="s",
            overrides=[_dashed(".* SLO")],
        ),
        _panel(
            4,
            "Backlog (consumer-group lag)",
            "Unconsumed records; NaN (a gap) while Kafka cannot be measured.",
            (12, 8, 12, 8),
            [(f"kale_job_backlog_records{{{j}}}", WHO)],
        ),
        _panel(
            5,
            "Decisions by action",
            "",
            (0, 16, 8, 8),
            [
                (
                    f"sum by (action) (increase(kale_decisions_total{{{j}}}[$__rate_interval]))",
                    "{{action}}",
                )
            ],
        ),
        _panel(
            6,
            "Resizes",
            "Resizes per hour by direction.",
            (8, 16, 8, 8),
            [
                (
                    f"sum by (namespace, etj, direction) (increase(kale_resizes_total{{{j}}}[1h]))",
                    f"{WHO} {{{{direction}}}}",
                )
            ],
        ),
        _panel(
            7,
            "Conditions",
            "Each condition as 1 (True) or 0 (False): Ready, MetricsAvailable, "
            "TargetAvailable, ForecastAvailable, QuotaLimited, Resizing, Paused.",
            (16, 16, 8, 8),
            [(f"kale_job_condition{{{j}}}", f"{WHO} {{{{condition}}}}")],
            kind="state-timeline",
        ),
        _panel(
            8,
            "Errors by kind",
            "Controller failures by kind, and per job by stage.",
            (0, 24, 8, 8),
            [
                ("sum by (kind) (rate(kale_errors_total[$__rate_interval]))", "{{kind}}"),
                (
                    f"sum by (namespace, etj, stage) "
                    f"(rate(kale_job_errors_total{{{j}}}[$__rate_interval]))",
                    f"{WHO} {{{{stage}}}}",
                ),
            ],
            unit="ops",
        ),
        _panel(
            9,
            "Tick duration",
            "",
            (8, 24, 8, 8),
            [
                (
                    "histogram_quantile(0.5, sum by (le) "
                    "(rate(kale_tick_duration_seconds_bucket[$__rate_interval])))",
                    "p50",
                ),
                (
                    "histogram_quantile(0.99, sum by (le) "
                    "(rate(kale_tick_duration_seconds_bucket[$__rate_interval])))",
                    "p99",
                ),
            ],
            unit="s",
        ),
        _panel(
            10,
            "GPU quota",
            "",
            (16, 24, 8, 8),
            [("kale_quota_gpus_used", "used"), ("kale_quota_gpus", "quota")],
        ),
        _panel(
            11,
            "Leader and jobs",
            "",
            (0, 32, 12, 8),
            [
                ("kale_leader", "{{pod}} leader"),
                ("kale_shards_held", "{{pod}} shards held"),
                ("kale_forecast_fits_queued", "{{pod}} fits queued"),
                ("kale_jobs", "jobs {{state}}"),
            ],
        ),
        _panel(
            12,
            "Controller process",
            "Resident memory and CPU of each controller replica.",
            (12, 32, 12, 8),
            [
                ("process_resident_memory_bytes and on(instance) kale_build_info", "{{pod}} RSS"),
                (
                    "rate(process_cpu_seconds_total[$__rate_interval]) "
                    "and on(instance) kale_build_info",
                    "{{pod}} CPU",
                ),
            ],
        ),
    ]


def scheduler_panels(top: int) -> list[dict[str, Any]]:
    """The ``kale scheduler`` row, from height ``top`` down."""
    row: dict[str, Any] = {
        "id": 13,
        "type": "row",
        "title": "kale scheduler",
        "collapsed": False,
        "gridPos": {"x": 0, "y": top, "w": 24, "h": 1},
        "panels": [],
    }
    y = top + 1
    latency = "kale_scheduler_scheduling_duration_seconds_bucket"
    return [
        row,
        _panel(
            14,
            "Pending pods",
            "Pods waiting for kale scheduler; those that fit nowhere at their last try "
            "(PodScheduled=False, what Cluster Autoscaler scales up for); preemptors waiting "
            "for their victims to leave.",
            (0, y, 8, 8),
            [
                ("max(kale_scheduler_pending_pods)", "pending"),
                ("max(kale_scheduler_unschedulable_pods)", "unschedulable"),
                ("max(kale_scheduler_nominated_pods)", "nominated (preempting)"),
            ],
        ),
        _panel(
            15,
            "Longest pending pod",
            "How long the longest-waiting pod has waited (KaleSchedulerPodsUnschedulable "
            "fires past 15 minutes).",
            (8, y, 8, 8),
            [("max(kale_scheduler_longest_pending_seconds)", "longest wait")],
            unit="s",
        ),
        _panel(
            16,
            "Time to bind",
            "From a pod first seen pending to its binding.",
            (16, y, 8, 8),
            [
                (
                    f"histogram_quantile(0.5, sum by (le) (rate({latency}[$__rate_interval])))",
                    "p50",
                ),
                (
                    f"histogram_quantile(0.99, sum by (le) (rate({latency}[$__rate_interval])))",
                    "p99",
                ),
            ],
            unit="s",
        ),
        _panel(
            17,
            "Bindings and failures",
            "Bindings per second, and bindings that did not go through by reason (conflict, "
            "gone, error; overcommit: refused before the request).",
            (0, y + 8, 8, 8),
            [
                ("sum(rate(kale_scheduler_bindings_total[$__rate_interval]))", "bound"),
                (
                    "sum by (reason) (rate(kale_scheduler_bind_failures_total[$__rate_interval]))",
                    "{{reason}}",
                ),
            ],
            unit="ops",
        ),
        _panel(
            18,
            "Preemptions",
            "Preemptions carried out, the pods they evicted, and evictions a "
            "PodDisruptionBudget blocked or the API server refused (per hour).",
            (8, y + 8, 8, 8),
            [
                ("sum(increase(kale_scheduler_preemptions_total[1h]))", "preemptions"),
                ("sum(increase(kale_scheduler_preemption_victims_total[1h]))", "pods evicted"),
                (
                    "sum by (reason) (increase(kale_scheduler_eviction_failures_total[1h]))",
                    "evictions {{reason}}",
                ),
            ],
        ),
        _panel(
            19,
            "GPU allocation and fragmentation",
            "Share of the cluster's GPU milli held by pods, and the share free but fragmented "
            "for the workload's typical pods (FGD's measure).",
            (16, y + 8, 8, 8),
            [
                ("max(kale_scheduler_gpu_allocation_ratio)", "allocated"),
                ("max(kale_scheduler_gpu_fragmentation_ratio)", "fragmented"),
            ],
            unit="percentunit",
        ),
    ]


def build_dashboard() -> dict[str, Any]:
    return {
        "__inputs": [],
        "title": "Kale autoscaler",
        "uid": "kale-autoscaler",
        "description": "Forecast-driven elastic GPU autoscaling: lead-time forecast vs actual "
        "traffic, recommendations vs sizes, oldest sample vs SLO, decisions, errors; and kale "
        "scheduler: pending pods, bindings, preemptions, GPU allocation.",
        "tags": ["kale", "autoscaling", "kafka"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 2,
        "editable": True,
        "refresh": "1m",
        "time": {"from": "now-24h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "query": "prometheus",
                    "label": "Data source",
                    "current": {},
                    "hide": 0,
                },
                _variable(
                    "namespace", "Namespace", "label_values(kale_job_current_workers, namespace)"
                ),
                _variable(
                    "etj",
                    "ElasticTrainingJob",
                    'label_values(kale_job_current_workers{namespace=~"$namespace"}, etj)',
                ),
            ]
        },
        "annotations": {
            "list": [
                {
                    "name": "Resizes",
                    "datasource": DS,
                    "enable": True,
                    "iconColor": "orange",
                    "expr": f"changes(kale_resizes_total{{{SEL}}}[2m]) > 0",
                    "step": "60s",
                    "titleFormat": "resize {{direction}}",
                    "textFormat": WHO,
                    "tagKeys": "namespace,etj,direction",
                    "useValueForTime": False,
                }
            ]
        },
        "panels": panels() + scheduler_panels(40),
    }


def render_dashboard() -> str:
    return json.dumps(build_dashboard(), indent=2, ensure_ascii=False) + "\n"
