"""What the controller's surroundings show to others: the dashboard's Host check and paths,
and the Kafka client's log noise."""

from __future__ import annotations

import http.client
import json
import logging

import pytest

from kale.dashboard.app import create_app
from kale.dashboard.hosts import allowed_hosts, host_name
from kale.dashboard.server import DashboardServer


def fetch(port: int, path: str, host: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest("GET", path, skip_host=True)
        conn.putheader("Host", host)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@pytest.fixture
def dashboard(tmp_path):
    state = tmp_path / "very" / "secret" / ".kale-state"
    app = create_app(state_dir=state, hosts=allowed_hosts("127.0.0.1", ["kale.example.org"]))
    with DashboardServer(app, port=0) as server:
        yield server.port


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "localhost",
        "LOCALHOST:8080",
        "127.0.0.1:{port}",
        "[::1]:8080",
        "kale.example.org",
    ],
)
def test_the_dashboard_answers_its_own_names(dashboard, host):
    status, _ = fetch(dashboard, "/api/health", host.format(port=dashboard))
    assert status == 200


@pytest.mark.parametrize(
    "host",
    ["evil.example.com", "evil.example.com:{port}", "127.0.0.1.evil.example.com", "", "kale"],
)
def test_a_rebinding_page_gets_421_for_every_path(dashboard, host):
    for path in ("/api/meta", "/api/jobs", "/", "/static/plotly.min.js", "/docs"):
        status, body = fetch(dashboard, path, host.format(port=dashboard))
        assert status == 421, (host, path)
        assert b"misdirected" in body


def test_meta_shows_no_absolute_path(dashboard):
    status, body = fetch(dashboard, "/api/meta", "localhost")
    assert status == 200
    meta = json.loads(body)
    assert meta["state_dir"] == ".kale-state"
    assert "/" not in json.dumps({k: v for k, v in meta.items() if k != "display"})


def test_host_parsing_and_the_bound_address():
    assert (
        host_name("[::1]:8080") == "::1"
        and host_name("Kale.Example.org.:443") == "kale.example.org"
    )
    assert "10.0.0.5" in allowed_hosts("10.0.0.5")
    assert allowed_hosts("0.0.0.0") == allowed_hosts()  # "any address" names nothing


def test_routine_kafka_client_errors_are_demoted_to_debug(caplog):
    import autoscaler.kafka.clients  # noqa: F401  (installs the filter)

    cluster = logging.getLogger("kafka.cluster")
    with caplog.at_level(logging.INFO):
        cluster.error("Metadata refresh: failed %s", "Cancelled")
        logging.getLogger("kafka.net.manager").error("Connection failed: %s", "ECONNREFUSED")
        cluster.error("something else entirely")
    assert [r.getMessage() for r in caplog.records] == ["something else entirely"]
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="kafka.cluster"):
        cluster.error("Metadata refresh: failed %s", "Cancelled")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("DEBUG", "Metadata refresh: failed Cancelled")
    ]
