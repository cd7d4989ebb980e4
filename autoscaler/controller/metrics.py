"""Prometheus metrics of the controller, and the small HTTP server that serves them.

One private registry per controller (tests run several in one process). Per job: predicted
vs actual arrival rate, desired/current workers, backlog and the oldest sample's age; per
decision: a counter by action; per failure: a counter by kind. The same server answers the
Deployment's probes: ``/healthz`` (the loop is alive: it ran an iteration recently) and
``/readyz`` (it has done its first round, as leader or standby). The Grafana dashboard in
``manifests/grafana/`` reads exactly the names below (a test keeps the two in step).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

JOB_GAUGES = {
    "kale_job_predicted_rate": "Forecast arrival rate for the current interval (samples/s).",
    "kale_job_actual_rate": "Measured arrival rate (samples/s).",
    "kale_job_consumption_rate": "Measured consumption rate of the job (samples/s).",
    "kale_job_desired_workers": "Workers the controller wants (after quota approval).",
    "kale_job_planned_workers": "Workers the planner asked for (before quota approval).",
    "kale_job_current_workers": "Workers the target is set to.",
    "kale_job_desired_ps": "Parameter servers the controller wants.",
    "kale_job_current_ps": "Parameter servers the target is set to.",
    "kale_job_backlog_records": "Unconsumed records (consumer-group lag).",
    "kale_job_oldest_age_seconds": "Age of the oldest unconsumed record.",
    "kale_job_forecast_peak_rate": "Peak of the planned-for forecast over the horizon.",
}


class ControllerMetrics:
    """Every metric the controller exports, in one registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.job: dict[str, Gauge] = {
            name: Gauge(name, doc, ["job"], registry=r) for name, doc in JOB_GAUGES.items()
        }
        self.decisions = Counter(
            "kale_decisions",
            "Decisions by action (scale_up, scale_down, hold, hold_metrics_unavailable, …).",
            ["job", "action"],
            registry=r,
        )
        self.resizes = Counter("kale_resizes", "Resizes applied.", ["job", "direction"], registry=r)
        self.errors = Counter(
            "kale_errors",
            "Failures by kind (metrics, forecast, planner, "
            "actuator, status, event, list, build, quota, lease).",
            ["kind"],
            registry=r,
        )
        self.tick_seconds = Histogram(
            "kale_tick_duration_seconds",
            "Time of one tick.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.jobs = Gauge(
            "kale_jobs", "Jobs managed (valid) and rejected (invalid).", ["state"], registry=r
        )
        self.leader = Gauge("kale_leader", "1 while this replica holds the lease.", registry=r)
        self.quota_total = Gauge(
            "kale_quota_gpus", "GPU quota shared by the jobs (-1: none).", registry=r
        )
        self.quota_used = Gauge("kale_quota_gpus_used", "GPUs held by the jobs.", registry=r)
        self.last_tick = Gauge(
            "kale_last_tick_timestamp_seconds", "When the last tick finished.", registry=r
        )
        self.job_errors = Counter(
            "kale_job_errors",
            "Unexpected exceptions while handling one job (the job holds; the others go on), "
            "by the tick's stage and the exception's class.",
            ["namespace", "etj", "stage", "error"],
            registry=r,
        )
        self.errors.labels(kind="metrics")  # the series exist from the start
        self._children: dict[str, dict[str, Any]] = {}
        self._job_error_labels: dict[str, set[tuple[str, str, str, str]]] = {}
        self._lock = threading.Lock()

    def job_error(self, job: str, stage: str, error: str) -> None:
        """Count one failure of ``job`` (``namespace/name``) in ``stage``."""
        namespace, _, name = job.partition("/")
        labels = (namespace, name or job, stage, error)
        with self._lock:
            self._job_error_labels.setdefault(job, set()).add(labels)
        self.job_errors.labels(*labels).inc()

    def set_job(self, job: str, **values: float | None) -> None:
        children = self._children.get(job)
        if children is None:  # label lookups cost more than the sets: do them once per job
            children = self._children[job] = {
                name.removeprefix("kale_job_"): g.labels(job=job) for name, g in self.job.items()
            }
        for key, value in values.items():
            if value is not None:
                children[key].set(float(value))

    def forget(self, job: str) -> None:
        self._children.pop(job, None)
        with self._lock:
            labels = self._job_error_labels.pop(job, set())
        for values in labels:
            with contextlib.suppress(KeyError):
                self.job_errors.remove(*values)
        for gauge in self.job.values():
            with contextlib.suppress(KeyError):
                gauge.remove(job)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class Health:
    """What the probes report; the runner updates it."""

    def __init__(self, *, stale_after_s: float, clock: Callable[[], float] = time.time) -> None:
        self.stale_after_s = stale_after_s
        self.clock = clock
        self.last_beat: float | None = None
        self.ready = False

    def beat(self) -> None:
        self.last_beat = self.clock()
        self.ready = True

    def alive(self) -> bool:
        return self.last_beat is None or self.clock() - self.last_beat < self.stale_after_s


class MetricsServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` on a background thread."""

    def __init__(
        self,
        metrics: ControllerMetrics,
        health: Health | None = None,
        *,
        address: str = "0.0.0.0",
        port: int = 9100,
    ) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer._serve(self)

        self.metrics = metrics
        self.health = health
        self.server = ThreadingHTTPServer((address, port), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(
            target=self.server.serve_forever,
            name="kale-metrics",
            kwargs={"poll_interval": 0.2},
            daemon=True,
        )

    def _serve(self, req: BaseHTTPRequestHandler) -> None:
        path = req.path.split("?")[0]
        ctype = "text/plain; charset=utf-8"
        if path == "/metrics":
            code, body, ctype = 200, self.metrics.render(), CONTENT_TYPE_LATEST
        elif path == "/healthz":
            ok = self.health is None or self.health.alive()
            code, body = (200, b"ok\n") if ok else (503, b"loop stalled\n")
        elif path == "/readyz":
            ok = self.health is None or self.health.ready
            code, body = (200, b"ready\n") if ok else (503, b"starting\n")
        else:
            code, body = 404, b"not found\n"
        req.send_response(code)
        req.send_header("Content-Type", ctype)
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        req.wfile.write(body)

    def start(self) -> MetricsServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
