"""/metrics, /healthz, /readyz, structured logs, and the dashboard reading real metric names."""

from __future__ import annotations

import io
import json
import logging
import math
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.exposition import generate_latest

from autoscaler.controller.grafana import build_dashboard
from autoscaler.controller.job_metrics import JobBasis
from autoscaler.controller.metrics import ControllerMetrics
from autoscaler.policy.types import JobSizing
from common.logs import JsonFormatter, setup_logging
from common.metrics_server import Health, MetricsServer
from scheduler.metrics import SchedulerMetrics

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
        arrival_samples_per_second=1100.0,
        desired_workers=8,
        current_workers=6,
        backlog_records=42,
        oldest_unconsumed_age_seconds=3.5,
        recommended_proactive=9,
        recommended_reactive=5,
        recommended_final=8,
        forecast_lead_p90=1500.0,
        condition_Ready=1.0,
    )
    metrics.decisions.labels(job="ml/ctr", action="scale_up").inc()
    metrics.errors.labels(kind="metrics").inc()
    code, body = get(url + "/metrics")
    assert code == 200
    assert 'kale_job_arrival_samples_per_second{etj="ctr",namespace="ml"} 1100.0' in body
    assert 'kale_job_desired_workers{etj="ctr",namespace="ml"} 8.0' in body
    for rec, n in (("proactive", 9), ("reactive", 5), ("final", 8)):
        assert (
            f'kale_job_recommended_workers{{etj="ctr",namespace="ml",recommendation="{rec}"}}'
            f" {n:.1f}" in body
        )
    assert (
        "kale_job_forecast_lead_samples_per_second"
        '{etj="ctr",forecast_quantile="0.9",namespace="ml"} 1500.0' in body
    )
    assert 'kale_job_condition{condition="Ready",etj="ctr",namespace="ml"} 1.0' in body
    assert 'kale_decisions_total{action="scale_up",etj="ctr",namespace="ml"} 1.0' in body
    assert 'kale_errors_total{kind="metrics"} 1.0' in body
    assert "process_cpu_seconds_total" in body and "kale_build_info{" in body
    assert re.search(r'\bjob="', body) is None  # never Prometheus' own label
    # Unknown this tick (Kafka down): NaN, never a false 0.
    metrics.set_job("ml/ctr", arrival_samples_per_second=None, backlog_records=None)
    body = get(url + "/metrics")[1]
    assert 'kale_job_arrival_samples_per_second{etj="ctr",namespace="ml"} NaN' in body
    assert 'kale_job_backlog_records{etj="ctr",namespace="ml"} NaN' in body
    metrics.forget("ml/ctr")
    body = get(url + "/metrics")[1]
    assert 'etj="ctr"' not in body  # every series of a forgotten job is gone


def test_promtool_accepts_the_exposition(served):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip(
            "promtool is not installed (Debian: apt-get install prometheus; `make test` "
            "installs it when it runs as root with apt-get)"
        )
    metrics, _, _, url = served
    metrics.set_job(
        "ml/ctr",
        arrival_samples_per_second=1100.0,
        recommended_proactive=9,
        forecast_lead_p10=900.0,
        condition_Ready=0.0,
    )
    metrics.decisions.labels(job="ml/ctr", action="hold").inc()
    metrics.resizes.labels(job="ml/ctr", direction="up").inc()
    metrics.job_error("ml/ctr", "plan", "KeyError")
    metrics.tick_seconds.observe(0.2)
    body = get(url + "/metrics")[1]
    out = subprocess.run(
        [promtool, "check", "metrics"], input=body, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0 and not out.stdout.strip(), out.stdout + out.stderr


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
    assert dash == build_dashboard(), "stale dashboard: run `python -m tools.gen_dashboard`"
    names = set()
    registries = (ControllerMetrics().registry, SchedulerMetrics().registry)  # its last row
    for m in (m for r in registries for m in r.collect()):  # with the suffixes Prometheus sees
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}
        names |= {m.name + s for s in suffixes.get(m.type, [""])}
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]  # rows have none
    exprs += [a["expr"] for a in dash["annotations"]["list"]]
    used = {n for e in exprs for n in re.findall(r"\b(?:kale|process)_[a-z_]+", e)}
    assert used, "the dashboard queries nothing"
    assert used <= names, used - names
    assert not [e for e in exprs if re.search(r"\bjob=", e)]  # etj and namespace, never job
    titles = {p["title"] for p in dash["panels"]}
    assert {
        "Arrival rate: predicted vs actual",
        "Workers: desired vs current",
        "Backlog (consumer-group lag)",
        "Oldest unconsumed sample vs SLO",
        "Decisions by action",
        "Errors by kind",
    } <= titles
    slo = next(p for p in dash["panels"] if p["title"] == "Oldest unconsumed sample vs SLO")
    assert any("kale_job_slo_max_delay_seconds" in t["expr"] for t in slo["targets"])
    (resizes,) = dash["annotations"]["list"]
    assert "kale_resizes_total" in resizes["expr"]
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


@pytest.mark.parametrize("broken", [None, 3])
def test_the_recommendations_count_workers_as_the_jobs_sizing_does(broken):
    capacity = np.array([0.0, 100.0, 180.0, 250.0, 240.0, 300.0, 290.0])  # the peak is 5
    if broken is not None:
        capacity[broken] = math.nan  # a damaged model: the sizing's own lookup answers
    sizing = JobSizing(
        capacity=capacity,
        min_workers=2,
        max_workers=6,
        ratio=2,
        interval_s=60.0,
        rescale_s=300.0,
        slo_s=600.0,
    )
    basis = JobBasis(sizing, 0.9)
    loads = [-5.0, -0.0, 0.0, 99.0, 180.0, 180.5, 250.0, 260.0, 300.0, 1e9, math.inf, math.nan]
    assert [basis.workers_for(x) for x in loads] == [sizing.workers_for(x)[0] for x in loads]


def test_deferred_job_gauges_are_worked_out_when_scraped_once_per_tick():
    """The report stage hands each job's values over as a function of its tick's report:
    called at the scrape (not in the tick), once per tick however often scraped; the
    latest tick wins, a function that raises leaves its job's row as it was and the others
    served, and a forgotten job's values are gone."""
    metrics = ControllerMetrics()
    calls: list[str] = []

    def tick_values(job: str, workers: float, ready: float | None = None):
        def make():
            calls.append(job)
            out = {"current_workers": workers}
            if ready is not None:
                out["condition_Ready"] = ready
            return out

        return make

    def scraped() -> str:
        return generate_latest(metrics.registry).decode()

    metrics.defer_job_gauges("ml/a", tick_values("ml/a", 3.0, ready=1.0))
    metrics.defer_job_gauges("ml/b", tick_values("ml/b", 5.0))
    assert calls == []  # nothing worked out in the tick
    body = scraped()
    assert 'kale_job_current_workers{etj="a",namespace="ml"} 3.0' in body
    assert 'kale_job_current_workers{etj="b",namespace="ml"} 5.0' in body
    assert sorted(calls) == ["ml/a", "ml/b"]
    scraped()
    assert len(calls) == 2  # the same tick's values: not worked out again
    # Two ticks between scrapes: the latest one's values, worked out once.
    metrics.defer_job_gauges("ml/a", tick_values("ml/a", 4.0))
    metrics.defer_job_gauges("ml/a", tick_values("ml/a", 6.0))
    body = scraped()
    assert 'kale_job_current_workers{etj="a",namespace="ml"} 6.0' in body
    assert 'kale_job_condition{condition="Ready",etj="a",namespace="ml"} 1.0' in body
    assert calls.count("ml/a") == 2
    # A function that raises: its job keeps the values last scraped, the others go on.

    def broken():
        raise OverflowError("hostile")

    metrics.defer_job_gauges("ml/a", broken)
    metrics.defer_job_gauges("ml/b", tick_values("ml/b", 7.0))
    body = scraped()
    assert 'kale_job_current_workers{etj="a",namespace="ml"} 6.0' in body
    assert 'kale_job_current_workers{etj="b",namespace="ml"} 7.0' in body
    assert metrics.job.failures == 1
    metrics.forget("ml/a")
    body = scraped()
    assert 'etj="a"' not in body and 'etj="b"' in body


def test_the_served_exposition_has_the_lines_the_generic_one_has():
    """``render`` writes the per-job gauges itself (most of a scrape at thousands of jobs):
    every line is the one ``generate_latest`` writes for the same families — label names
    sorted, label values escaped, NaN, infinities and large values as Prometheus writes
    them — each family's samples after its HELP and TYPE, and a forgotten job is gone from
    both."""
    from prometheus_client.parser import text_string_to_metric_families

    metrics = ControllerMetrics()
    odd = 'we"ird\\team/job\nname'
    for key, workers in (("ml/a", 3.0), ("ml-2/b", math.nan), (odd, 12_345_678.0), ("c", -0.0)):
        metrics.set_job(
            key,
            current_workers=workers,
            desired_workers=math.inf,
            arrival_samples_per_second=1e-7,
            recommended_proactive=4.0,
            recommended_final=None,
            forecast_lead_p90=123.5,
            forecast_lead_p10=-math.inf,
            condition_Ready=1.0,
            condition_MetricsAvailable=0.0,
        )
        metrics.decided(key, "hold")
    metrics.defer_job_gauges("ml/d", lambda: {"current_workers": 2.0, "condition_Paused": 1.0})

    def generic() -> list[str]:
        return generate_latest(metrics.registry).decode().splitlines()

    served = metrics.render().decode()
    assert sorted(served.splitlines()) == sorted(generic())
    assert 'kale_job_forecast_lead_samples_per_second{etj="a",forecast_quantile="0.9"' in served
    escaped = 'etj="job\\nname",namespace="we\\"ird\\\\team"'
    assert f"kale_job_current_workers{{{escaped}}} 1.2345678e+07" in served
    families = {f.name: f for f in text_string_to_metric_families(served)}
    assert {s.labels["etj"] for s in families["kale_job_condition"].samples} == {
        "a",
        "b",
        "job\nname",
        "c",
        "d",
    }
    metrics.forget("ml/a")
    served = metrics.render().decode()
    assert 'etj="a"' not in served
    assert sorted(served.splitlines()) == sorted(generic())
