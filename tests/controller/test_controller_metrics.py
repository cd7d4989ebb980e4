"""/metrics, /healthz, /readyz, structured logs, and the dashboard reading real metric names."""

from __future__ import annotations

import io
import json
import logging
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from autoscaler.controller.logs import JsonFormatter, setup_logging
from autoscaler.controller.metrics import ControllerMetrics, Health, MetricsServer

ROOT = Path(__file__).resolve().parents[2]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture()
def served():
    metrics = ControllerMetrics()
    clock = [100.0]
    health = Health(stale_after_s=180, clock=lambda: clock[0])
    server = MetricsServer(metrics, health, address="127.0.0.1", port=0).start()
    yield metrics, health, clock, f"http://127.0.0.1:{server.port}"
    server.stop()


def test_metrics_endpoint_serves_per_job_series(served):
    metrics, _, _, url = served
    metrics.set_job(
        "ml/ctr",
        predicted_rate=1200.0,
        actual_rate=1100.0,
        desired_workers=8,
        current_workers=6,
        backlog_records=42,
        oldest_age_seconds=3.5,
    )
    metrics.decisions.labels(job="ml/ctr", action="scale_up").inc()
    metrics.errors.labels(kind="metrics").inc()
    code, body = get(url + "/metrics")
    assert code == 200
    assert 'kale_job_predicted_rate{job="ml/ctr"} 1200.0' in body
    assert 'kale_job_actual_rate{job="ml/ctr"} 1100.0' in body
    assert 'kale_job_desired_workers{job="ml/ctr"} 8.0' in body
    assert 'kale_decisions_total{action="scale_up",job="ml/ctr"} 1.0' in body
    assert 'kale_errors_total{kind="metrics"} 1.0' in body
    metrics.forget("ml/ctr")
    assert 'kale_job_predicted_rate{job="ml/ctr"}' not in get(url + "/metrics")[1]


def test_probes_follow_the_loop(served):
    _, health, clock, url = served
    assert get(url + "/healthz")[0] == 200  # alive before the first beat
    assert get(url + "/readyz")[0] == 503
    health.beat()
    assert get(url + "/readyz")[0] == 200
    clock[0] += 181
    assert get(url + "/healthz") == (503, "loop stalled\n")
    assert get(url + "/nope")[0] == 404


def test_the_dashboard_only_queries_metrics_the_controller_exports():
    dash = json.loads((ROOT / "manifests/grafana/kale-dashboard.json").read_text())
    names = set()
    for m in ControllerMetrics().registry.collect():  # with the suffixes Prometheus sees
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}
        names |= {m.name + s for s in suffixes.get(m.type, [""])}
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {n for e in exprs for n in re.findall(r"\bkale_[a-z_]+", e)}
    assert used, "the dashboard queries nothing"
    assert used <= names, used - names
    titles = {p["title"] for p in dash["panels"]}
    assert {
        "Arrival rate: predicted vs actual",
        "Workers: desired vs current",
        "Backlog (consumer-group lag)",
        "Oldest unconsumed sample",
        "Decisions by action",
        "Errors by kind",
    } <= titles
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


def test_logs_are_one_json_object_per_line():
    stream = io.StringIO()
    setup_logging("json", logging.INFO, stream)
    try:
        logging.getLogger("autoscaler.controller.loop").info(
            "ml/ctr: scale_up",
            extra={"fields": {"event": "decision", "job": "ml/ctr", "desired": [8, 2]}},
        )
    finally:
        setup_logging("text", logging.WARNING)
    line = json.loads(stream.getvalue().strip())
    assert line["event"] == "decision" and line["desired"] == [8, 2]
    assert line["level"] == "info" and line["msg"] == "ml/ctr: scale_up"
    assert line["time"].endswith("Z")
    assert isinstance(JsonFormatter().format(logging.makeLogRecord({"msg": "x"})), str)
