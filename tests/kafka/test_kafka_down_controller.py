"""The controller on a Kafka that refuses connections, or that stops under it: the job's
status and the controller's log name the connection error within two ticks, once per
transition, and the return of the broker is logged too."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from autoscaler.actuators.base import Size
from autoscaler.actuators.dryrun import DryRunActuator
from autoscaler.controller.jobs import DirectoryJobs
from autoscaler.controller.loop import Controller
from autoscaler.controller.metering import KafkaMetricSource
from autoscaler.controller.settings import ControllerSettings
from autoscaler.controller.sinks import FileStatusSink, LogEventSink
from autoscaler.controller.workers import DaemonPool
from autoscaler.kafka import clients
from autoscaler.kafka.local.broker import EmbeddedBroker, free_port
from forecasting.registry import make_forecaster
from tests.support.controller_fakes import job_doc, write_job

pytestmark = pytest.mark.kafka

LOGGER = "autoscaler.controller.loop"


class Rig:
    def __init__(self, tmp: Path, bootstrap: str) -> None:
        self.tmp = tmp
        write_job(tmp / "jobs", job_doc())
        self.pool = DaemonPool(2, name="test-backfill")
        self.status = FileStatusSink(tmp / "status")
        self.events = LogEventSink()
        self.controller = Controller(
            jobs_source=DirectoryJobs(tmp / "jobs"),
            meter_factory=lambda e: KafkaMetricSource(
                bootstrap=bootstrap,
                topic="ctr-t",
                group="ctr-g",
                history_path=tmp / "history.sqlite",
                window_s=0.2,
                interval_s=60.0,
                background=self.pool,
                backfill_deadline_s=20.0,
            ),
            forecaster_factory=lambda e: make_forecaster("seasonal_naive", period=240),
            actuator_factory=lambda e: DryRunActuator(Size(3, 1)),
            status_sink=self.status,
            event_sink=self.events,
            settings=ControllerSettings(identity="test"),
        )

    def until_measured(self, seconds: float = 90.0):
        """Tick (on the real clock: the backfill runs in the background) until measured."""
        deadline = time.monotonic() + seconds
        while True:
            (rep,) = self.controller.tick()
            if rep.sample is not None or time.monotonic() > deadline:
                return rep
            time.sleep(0.3)

    def conditions(self) -> dict[str, dict]:
        doc = json.loads(self.status.path("ml", "ctr").read_text())
        return {c["type"]: c for c in doc["conditions"]}

    def close(self) -> None:
        self.controller.close()
        self.pool.close()


def down_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == LOGGER and "metrics of ml/ctr unavailable" in r.getMessage()
    ]


def test_a_refused_kafka_is_named_in_the_status_and_logged_once(tmp_path, caplog):
    bootstrap = f"127.0.0.1:{free_port()}"
    rig = Rig(tmp_path, bootstrap)
    caplog.set_level(logging.INFO, logger=LOGGER)
    try:
        for _ in range(2):
            (rep,) = rig.controller.tick()
        assert rep.action == "hold_metrics_unavailable"
        assert rep.desired == Size(3, 1) and not rep.resized
        cond = rig.conditions()
        assert cond["Ready"]["reason"] == "MetricsUnavailable"
        assert f"cannot reach Kafka at {bootstrap}" in cond["Ready"]["message"]
        assert "connection refused" in cond["Ready"]["message"]
        assert cond["MetricsAvailable"]["reason"] == "KafkaUnavailable"
        (line,) = down_lines(caplog)
        assert f"cannot reach Kafka at {bootstrap}" in line and "connection refused" in line
        for _ in range(3):  # every tick names the cause; the log says it once
            (rep,) = rig.controller.tick()
            assert rep.action == "hold_metrics_unavailable"
            assert "connection refused" in rep.reason["why"]
        assert len(down_lines(caplog)) == 1
        assert [e["reason"] for e in rig.events.events].count("MetricsUnavailable") == 1
    finally:
        rig.close()


def test_a_stopped_broker_is_named_then_its_return_logged(tmp_path, caplog):
    broker = EmbeddedBroker(log_path=tmp_path / "tansu.log").start()
    port = broker.port
    rig = Rig(tmp_path, broker.bootstrap)
    caplog.set_level(logging.INFO, logger=LOGGER)
    try:
        clients.ensure_topic(broker.bootstrap, "ctr-t", 1)
        rep = rig.until_measured()  # backfill, warm-up, then measured
        assert rep.sample is not None, rep.action
        broker.stop()
        for _ in range(2):
            (rep,) = rig.controller.tick()
        assert rep.action == "hold_metrics_unavailable"
        cond = rig.conditions()
        assert cond["Ready"]["reason"] == "MetricsUnavailable"
        assert f"cannot reach Kafka at {broker.bootstrap}" in cond["Ready"]["message"]
        assert "connection refused" in cond["Ready"]["message"]
        (line,) = down_lines(caplog)
        assert "connection refused" in line
        assert len(down_lines(caplog)) == 1
        rig.controller.tick()
        assert len(down_lines(caplog)) == 1
        # The broker comes back on the same port (memory storage: the topic anew).
        broker = EmbeddedBroker(port=port, log_path=tmp_path / "tansu2.log").start()
        clients.ensure_topic(broker.bootstrap, "ctr-t", 1)
        rep = rig.until_measured()
        assert rep.sample is not None, rep.action
        assert rig.conditions()["MetricsAvailable"]["status"] == "True"
        back = [r.getMessage() for r in caplog.records if "reachable again" in r.getMessage()]
        assert len(back) == 1 and back[0].startswith("Kafka reachable again for ml/ctr")
    finally:
        rig.close()
        broker.stop()
