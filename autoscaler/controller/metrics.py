"""Prometheus metrics of the controller (served by :mod:`common.metrics_server`).

Names follow Prometheus' conventions: base units in the name (``_seconds``,
``_samples_per_second``, ``_records``, ``_workers``), ``_total`` on counters, and each job is
labelled ``namespace`` and ``etj`` — never ``job``, which Prometheus sets itself to the scrape
job (a ``job`` label of ours would be renamed ``exported_job`` or clash with it).

What is not known is not exported as a number: while Kafka cannot be measured the rates,
backlog and age are **NaN** (a gap on a graph, no false zero), and a value that was never
measured has no series at all. Per job the controller exports what an operator compares
(Alibaba AHPA's split): the *proactive* recommendation (workers for the upper-quantile
forecast at *now + rescale duration*, the lead time), the *reactive* one (workers for the
measured rate plus draining the backlog within the SLO), and the *final* one (the planner's
decision), next to the quota-approved and current sizes; the lead-time forecast as p10/p50/
p90; the SLO, so a dashboard draws the line the oldest-sample age must stay under; and each
condition as 0/1 (``kube-state-metrics`` style). The process collector (``process_*``) and
``kale_build_info`` come with every registry.

One private registry per controller (tests run several in one process). The Grafana
dashboard in ``manifests/grafana/`` and the alerts in ``manifests/overlays/metrics/`` read
exactly the names below (tests keep them in step, and ``promtool check metrics`` lints them).
"""

from __future__ import annotations

import contextlib
import math
import platform
import threading
from collections.abc import Callable
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.utils import floatToGoString

from common.version import __version__

JOB_LABELS = ("namespace", "etj")

JOB_GAUGES: dict[str, str] = {
    "kale_job_arrival_samples_per_second": "Measured arrival rate of the job's topic.",
    "kale_job_consumption_samples_per_second": "Measured consumption rate of the job.",
    "kale_job_backlog_records": "Unconsumed records (consumer-group lag).",
    "kale_job_oldest_unconsumed_age_seconds": "Age of the oldest unconsumed record.",
    "kale_job_forecast_peak_samples_per_second": (
        "Peak of the planned-for forecast quantile over the horizon."
    ),
    "kale_job_current_workers": "Workers the target is set to.",
    "kale_job_current_ps": "Parameter servers the target is set to.",
    "kale_job_desired_workers": "Workers the controller wants, after GPU quota approval.",
    "kale_job_desired_ps": "Parameter servers the controller wants.",
    "kale_job_min_workers": "spec.training.minWorkers.",
    "kale_job_max_workers": "spec.training.maxWorkers.",
    "kale_job_slo_max_delay_seconds": "spec.slo.maxDelay: the oldest-sample age to stay under.",
    "kale_job_rescale_duration_seconds": "Downtime of one resize: the forecast's lead time.",
    "kale_job_paused": "1 while a pause or pin bypasses the planner (kale.dev/paused…).",
}
"""Per-job gauges (labels ``namespace``, ``etj``); :meth:`ControllerMetrics.set_job` takes
their names without the ``kale_job_`` prefix."""

RECOMMENDATIONS = ("proactive", "reactive", "final")

_OLD_NAMES = {  # set_job's former keyword names (callers written before the rename)
    "actual_rate": "arrival_samples_per_second",
    "consumption_rate": "consumption_samples_per_second",
    "forecast_peak_rate": "forecast_peak_samples_per_second",
    "oldest_age_seconds": "oldest_unconsumed_age_seconds",
    "planned_workers": "recommended_final",
}


def job_labels(key: str) -> tuple[str, str]:
    """``namespace/name`` → the (namespace, etj) label values."""
    namespace, _, name = key.partition("/")
    return (namespace, name) if name else ("", key)


class _ByJob:
    """A labelled metric whose callers may still say ``labels(job="ns/name", …)``: the key
    is split into ``namespace`` and ``etj`` (the metric never carries a ``job`` label). It
    remembers each job's children so that :meth:`drop` removes them all."""

    def __init__(self, metric: Any, names: tuple[str, ...]) -> None:
        self.metric = metric
        self.names = names
        self._seen: dict[tuple[str, ...], set[tuple[str, ...]]] = {}
        self._lock = threading.Lock()

    def labels(self, *args: str, **kwargs: str) -> Any:
        if "job" in kwargs:
            kwargs["namespace"], kwargs["etj"] = job_labels(kwargs.pop("job"))
        values = tuple(args) if args else tuple(str(kwargs[n]) for n in self.names)
        with self._lock:
            self._seen.setdefault(values[:2], set()).add(values)
        return self.metric.labels(*values)

    def drop(self, labels: tuple[str, str]) -> None:
        with self._lock:
            seen = self._seen.pop(labels, set())
        for values in seen:
            with contextlib.suppress(KeyError):
                self.metric.remove(*values)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.metric, name)


LABELLED: dict[str, tuple[str, str, str]] = {
    # set_job key prefix -> (metric name, extra label, help)
    "recommended_": (
        "kale_job_recommended_workers",
        "recommendation",
        "Workers recommended: proactive (upper-quantile forecast at the lead time), "
        "reactive (measured rate + backlog drained within the SLO), final (the planner).",
    ),
    "forecast_lead_p": (
        "kale_job_forecast_lead_samples_per_second",
        "forecast_quantile",
        "Forecast arrival rate at now + rescale duration (the lead time), by quantile "
        "(label forecast_quantile: promtool keeps quantile for summaries).",
    ),
    "condition_": (
        "kale_job_condition",
        "condition",
        "1 while the job's condition is True, 0 while False (Ready, MetricsAvailable, …).",
    ),
}
"""Per-job gauges with one more label; :meth:`ControllerMetrics.set_job` keys are the prefix
plus the label's value (``recommended_proactive``, ``forecast_lead_p90``,
``condition_Ready``)."""


def _label_value(prefix: str, rest: str) -> str:
    if prefix == "forecast_lead_p":
        return f"{int(rest) / 100:g}"  # p90 -> "0.9"
    return rest


class JobGauges:
    """The per-job gauges, kept as plain numbers and turned into metric families when
    scraped: a tick sets about two dozen values per job, and a dict assignment costs a
    small fraction of a ``Gauge`` child's lock and checks (see
    docs/decisions/0135-metrics-names-and-unknown-values.md). None is kept as NaN (unknown
    this tick, never a false 0).

    The report stage does not even work the values out: it hands over, per job, a function
    of what the tick reported (:meth:`defer`), called when a scrape asks (once per tick's
    values, however often scraped). Values are worked out per scrape, not per tick, and not
    at all where nothing scrapes. A scrape shows each job's latest tick; values of keys the
    latest tick no longer gives (a condition gone) stay as they were last scraped.
    """

    def __init__(self) -> None:
        self.values: dict[str, dict[str, float]] = {}
        """Values set directly (:meth:`set`, :meth:`update`)."""
        self._labels: dict[str, tuple[str, str]] = {}
        self._deferred: dict[str, Callable[[], dict[str, float]]] = {}
        """Each job's latest values, still to be worked out (written by the tick only)."""
        self._worked: dict[str, tuple[Callable[[], dict[str, float]], dict[str, float]]] = {}
        """Per job, the deferred values last worked out and the row they were merged into
        (read and written under the lock only)."""
        self.failures = 0
        """Deferred values that raised when worked out (the job's row is kept as it was)."""
        self._lock = threading.Lock()
        self._apart = threading.local()
        """Set while :meth:`ControllerMetrics.render` writes these gauges itself."""
        self._label_text: dict[str, dict[str, str]] = {}
        """Per job, each job label as exposed (``etj="a"``): escaped once, not per sample."""

    def _row(self, job: str) -> dict[str, float]:
        row = self.values.get(job)
        if row is None:
            with self._lock:
                self._labels[job] = job_labels(job)
                row = self.values.setdefault(job, {})
        return row

    def set(self, job: str, values: dict[str, float | None]) -> None:
        row = self._row(job)
        nan = math.nan
        for key, value in values.items():
            row[_OLD_NAMES.get(key, key)] = nan if value is None else float(value)

    def update(self, job: str, values: dict[str, float]) -> None:
        """:meth:`set` for values already as exported (floats, NaN for unknown) under the
        current names."""
        self._row(job).update(values)

    def defer(self, job: str, make: Callable[[], dict[str, float]]) -> None:
        """``job``'s values of this tick are ``make()`` (values as :meth:`update` takes
        them), called when scraped: ``make`` must read only what no later tick changes."""
        if job not in self._labels:
            with self._lock:
                self._labels[job] = job_labels(job)
        self._deferred[job] = make

    def remove(self, job: str) -> None:
        with self._lock:
            self.values.pop(job, None)
            self._labels.pop(job, None)
            self._deferred.pop(job, None)
            self._worked.pop(job, None)
            self._label_text.pop(job, None)

    def rows(self) -> dict[str, dict[str, float]]:
        """Every job's values as a scrape shows them (the deferred ones worked out)."""
        with self._lock:
            deferred = dict(self._deferred)  # one C-level copy: the tick may add meanwhile
            for job, make in deferred.items():
                if job not in self._labels:
                    continue  # forgotten
                done = self._worked.get(job)
                if done is not None and done[0] is make:
                    continue
                row = done[1] if done is not None else {}
                try:
                    row.update(make())
                except Exception:  # a job's values must not break the scrape
                    self.failures += 1
                self._worked[job] = (make, row)
            out: dict[str, dict[str, float]] = {}
            for job in self._labels:
                set_ = self.values.get(job)
                done = self._worked.get(job)
                if done is None:
                    out[job] = dict(set_ or {})
                else:
                    out[job] = {**set_, **done[1]} if set_ else dict(done[1])
            return out

    def collect(self) -> Any:
        if getattr(self._apart, "active", False):
            return  # written by :meth:`exposition` instead
        values = self.rows()
        with self._lock:
            rows = [(self._labels[job], row) for job, row in values.items() if job in self._labels]
        for name, doc in JOB_GAUGES.items():
            family = GaugeMetricFamily(name, doc, labels=list(JOB_LABELS))
            key = name.removeprefix("kale_job_")
            for labels, row in rows:
                if key in row:
                    family.add_metric(list(labels), row[key])
            yield family
        for prefix, (name, extra, doc) in LABELLED.items():
            family = GaugeMetricFamily(name, doc, labels=[*JOB_LABELS, extra])
            for labels, row in rows:
                for key, value in row.items():
                    if key.startswith(prefix):
                        rest = key[len(prefix) :]
                        family.add_metric([*labels, _label_value(prefix, rest)], value)
            yield family

    @contextlib.contextmanager
    def apart(self) -> Any:
        """While in this block, :meth:`collect` (in this thread) yields nothing: the
        caller exposes these gauges with :meth:`exposition`."""
        self._apart.active = True
        try:
            yield
        finally:
            self._apart.active = False

    def exposition(self) -> bytes:
        """The families :meth:`collect` yields, in Prometheus' text format, written
        directly: the same lines ``generate_latest`` writes for them (label names sorted,
        label values and help escaped alike, values as ``floatToGoString`` gives them),
        without a sample object, a label check and a sort per sample. They are most of a
        scrape (a few dozen series a job), which at thousands of jobs cost more CPU than a
        tick when each went through the generic path."""
        values = self.rows()
        with self._lock:
            rows = [
                (self._labels_of(job), row) for job, row in values.items() if job in self._labels
            ]
        out: list[str] = []
        for name, doc in JOB_GAUGES.items():
            out.append(_help_and_type(name, doc))
            key = name.removeprefix("kale_job_")
            for labels, row in rows:
                value = row.get(key, _ABSENT)
                if value is not _ABSENT:
                    out.append(f"{name}{{{labels['']}}} {floatToGoString(value)}\n")
        for prefix, (name, extra, doc) in LABELLED.items():
            out.append(_help_and_type(name, doc))
            cut = len(prefix)
            before = extra < "etj"  # label names in sorted order, as generate_latest writes
            after_ns = extra > "namespace"
            for labels, row in rows:
                for key, value in row.items():
                    if not key.startswith(prefix):
                        continue
                    pair = f'{extra}="{_escaped(_label_value(prefix, key[cut:]))}"'
                    if before:
                        text = f"{pair},{labels['']}"
                    elif after_ns:
                        text = f"{labels['']},{pair}"
                    else:
                        text = f"{labels['etj']},{pair},{labels['namespace']}"
                    out.append(f"{name}{{{text}}} {floatToGoString(value)}\n")
        return "".join(out).encode("utf-8")

    def _labels_of(self, job: str) -> dict[str, str]:
        """``job``'s labels as exposed, made once per job (under the lock)."""
        text = self._label_text.get(job)
        if text is None:
            namespace, etj = self._labels[job]
            text = {
                "etj": f'etj="{_escaped(etj)}"',
                "namespace": f'namespace="{_escaped(namespace)}"',
            }
            text[""] = f"{text['etj']},{text['namespace']}"
            self._label_text[job] = text
        return text


_ABSENT = object()


def _escaped(value: str) -> str:
    """A label value as the text format writes it."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _help_and_type(name: str, doc: str) -> str:
    text = doc.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {text}\n# TYPE {name} gauge\n"


class ControllerMetrics:
    """Every metric the controller exports, in one registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        build = Gauge(
            "kale_build_info",
            "Kale's version and Python's; always 1.",
            ["version", "python_version"],
            registry=r,
        )
        build.labels(version=__version__, python_version=platform.python_version()).set(1)
        self.job = JobGauges()
        r.register(self.job)
        decision_labels = (*JOB_LABELS, "action")
        self.decisions = _ByJob(
            Counter(
                "kale_decisions",
                "Decisions by action (scale_up, scale_down, hold, paused, pinned, …).",
                decision_labels,
                registry=r,
            ),
            decision_labels,
        )
        resize_labels = (*JOB_LABELS, "direction")
        self.resizes = _ByJob(
            Counter("kale_resizes", "Resizes applied.", resize_labels, registry=r), resize_labels
        )
        self.errors = Counter(
            "kale_errors",
            "Failures by kind (metrics, forecast, planner, "
            "actuator, status, event, list, build, quota, lease, fence).",
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
        self.shards_held = Gauge(
            "kale_shards_held",
            "Shards whose Lease this replica holds (jobs spread over replicas).",
            registry=r,
        )
        self.shards_total = Gauge(
            "kale_shards", "Shards the jobs are spread over (1: not sharded).", registry=r
        )
        self.owner = Gauge(
            "kale_job_owner_info",
            "1 for each job this replica plans, labelled with the replica and the job's shard.",
            [*JOB_LABELS, "replica", "shard"],
            registry=r,
        )
        self.fits_queued = Gauge(
            "kale_forecast_fits_queued",
            "Forecaster fits waiting for a thread of this replica's fit pool (stalest first).",
            registry=r,
        )
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
        self._decided: dict[tuple[str, str], Any] = {}
        self._owners: dict[str, tuple[str, ...]] = {}
        self._owner_said: dict[str, tuple[str, int | None]] = {}
        self._job_error_labels: dict[str, set[tuple[str, str, str, str]]] = {}
        self._lock = threading.Lock()

    def job_error(self, job: str, stage: str, error: str) -> None:
        """Count one failure of ``job`` (``namespace/name``) in ``stage``."""
        namespace, name = job_labels(job)
        labels = (namespace, name, stage, error)
        with self._lock:
            self._job_error_labels.setdefault(job, set()).add(labels)
        self.job_errors.labels(*labels).inc()

    def set_job(self, job: str, **values: float | None) -> None:
        """Set ``job``'s gauges; a value of None (not known this tick) becomes NaN.

        Keys are the gauge names without ``kale_job_`` (``arrival_samples_per_second``…), or
        a :data:`LABELLED` prefix and the label's value (``recommended_final``,
        ``forecast_lead_p90``, ``condition_Ready``).
        """
        self.job.set(job, values)

    def owned(self, job: str, replica: str, shard: int | None) -> None:
        """Say that ``replica`` plans ``job`` (in ``shard``; "" when jobs are not sharded)."""
        said = (replica, shard)
        if self._owner_said.get(job) == said:  # the usual case: as last tick
            return
        self._owner_said[job] = said
        labels = (*job_labels(job), replica, "" if shard is None else str(shard))
        if self._owners.get(job) == labels:
            return
        old = self._owners.get(job)
        if old is not None:
            with contextlib.suppress(KeyError):
                self.owner.remove(*old)
        self._owners[job] = labels
        self.owner.labels(*labels).set(1)

    def set_job_gauges(self, job: str, values: dict[str, float]) -> None:
        """Set ``job``'s gauges from values already as exported (floats, NaN for unknown;
        the names :meth:`set_job` takes, without the former ones)."""
        self.job.update(job, values)

    def defer_job_gauges(self, job: str, make: Callable[[], dict[str, float]]) -> None:
        """:meth:`set_job_gauges` with ``make()``, worked out when scraped
        (:meth:`JobGauges.defer`)."""
        self.job.defer(job, make)

    def decided(self, job: str, action: str) -> None:
        """Count one decision (the labelled child is looked up once per job and action)."""
        child = self._decided.get((job, action))
        if child is None:
            child = self._decided[(job, action)] = self.decisions.labels(job=job, action=action)
        child.inc()

    def forget(self, job: str) -> None:
        """Drop every series of ``job`` (it is no longer managed)."""
        self.job.remove(job)
        self._owner_said.pop(job, None)
        owner = self._owners.pop(job, None)
        if owner is not None:
            with contextlib.suppress(KeyError):
                self.owner.remove(*owner)
        for key in [k for k in self._decided if k[0] == job]:
            del self._decided[key]
        labels = job_labels(job)
        self.decisions.drop(labels)
        self.resizes.drop(labels)
        with self._lock:
            errors = self._job_error_labels.pop(job, set())
        for values in errors:
            with contextlib.suppress(KeyError):
                self.job_errors.remove(*values)

    def render(self) -> bytes:
        """``/metrics``: the registry in the text format, its per-job gauges written by
        :meth:`JobGauges.exposition` (after the other families)."""
        with self.job.apart():
            head = generate_latest(self.registry)
        return head + self.job.exposition()
