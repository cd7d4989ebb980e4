"""Kafka down or topic missing: typed errors fast, never a hang, never a zero load."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from autoscaler.kafka import clients
from autoscaler.kafka.local.broker import EmbeddedBroker, free_port
from autoscaler.kafka.meter import KafkaMeter
from common.errors import MetricUnavailable

pytestmark = pytest.mark.kafka

# The clients give up after BOOTSTRAP_TIMEOUT_MS (5 s); allow a loaded CI machine slack.
FAST_ENOUGH_S = 20.0


def dead_bootstrap() -> str:
    return f"127.0.0.1:{free_port()}"


def test_a_meter_on_a_dead_broker_raises_broker_unavailable_quickly():
    bootstrap = dead_bootstrap()
    began = time.monotonic()
    with pytest.raises(clients.BrokerUnavailable) as info:
        KafkaMeter(bootstrap, "t", "g").sample()
    assert time.monotonic() - began < FAST_ENOUGH_S
    assert isinstance(info.value, MetricUnavailable)
    assert str(info.value).startswith(f"cannot reach Kafka at {bootstrap} within 5s:")


def test_creating_a_topic_on_a_dead_broker_raises_broker_unavailable():
    began = time.monotonic()
    with pytest.raises(clients.BrokerUnavailable):
        clients.ensure_topic(dead_bootstrap(), "t", 1)
    assert time.monotonic() - began < FAST_ENOUGH_S


def test_a_missing_topic_raises_topic_missing_not_zeros(kafka_broker, topic_name):
    meter = KafkaMeter(kafka_broker.bootstrap, topic_name, "g")
    with meter, pytest.raises(clients.TopicMissing) as info:
        meter.sample()
    assert isinstance(info.value, MetricUnavailable)
    assert str(info.value) == f"topic {topic_name} does not exist on {kafka_broker.bootstrap}"


def test_a_broker_that_dies_under_a_meter_is_reported_and_its_return_noticed(tmp_path):
    broker = EmbeddedBroker(log_path=tmp_path / "tansu.log").start()
    port = broker.port
    try:
        clients.ensure_topic(broker.bootstrap, "t", 1)
        meter = KafkaMeter(broker.bootstrap, "t", "g", window_s=0.2)
        meter.sample()
        broker.stop()
        began = time.monotonic()
        with pytest.raises(clients.BrokerUnavailable):
            meter.sample()
        assert time.monotonic() - began < FAST_ENOUGH_S
        # Same port again (memory storage: the topic must be created anew).
        broker = EmbeddedBroker(port=port, log_path=tmp_path / "tansu2.log").start()
        clients.ensure_topic(broker.bootstrap, "t", 1)
        assert meter.sample().lag == 0
        meter.close()
    finally:
        broker.stop()


def test_a_frozen_broker_is_reported_within_the_request_timeout(tmp_path):
    # A broker that accepts connections but never answers (SIGSTOP) is the case a
    # refused-connection check cannot catch: only the clients' bounded timeouts can.
    with EmbeddedBroker(log_path=tmp_path / "tansu.log") as broker:
        clients.ensure_topic(broker.bootstrap, "t", 1)
        meter = KafkaMeter(broker.bootstrap, "t", "g", window_s=0.2)
        meter.sample()
        assert broker.pid is not None
        os.kill(broker.pid, signal.SIGSTOP)
        try:
            began = time.monotonic()
            with pytest.raises(clients.BrokerUnavailable, match=r"timed out|Unable to bootstrap"):
                meter.sample()
            assert time.monotonic() - began < clients.REQUEST_TIMEOUT_MS / 1000 + 12
        finally:
            os.kill(broker.pid, signal.SIGCONT)
        assert meter.sample().lag == 0  # and it is seen again once it answers
        meter.close()


def run_kale(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``kale ARGS`` in a fresh interpreter; ``timeout`` only guards against a hang."""
    return subprocess.run(
        [sys.executable, "-m", "kale.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_kale_meter_on_a_dead_broker_exits_2_with_one_line():
    # How fast it gives up is checked in-process above; a subprocess adds interpreter
    # start-up, which a loaded machine can stretch to anything, so only the outcome is here.
    bootstrap = dead_bootstrap()
    done = run_kale("meter", "--bootstrap", bootstrap, "--topic", "t", "--group", "g")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"kale: error: cannot reach Kafka at {bootstrap} within 5s")
    assert done.stdout == ""


def test_kale_meter_on_a_missing_topic_exits_2_naming_it(kafka_broker, topic_name):
    done = run_kale(
        "meter", "--bootstrap", kafka_broker.bootstrap, "--topic", topic_name, "--group", "g"
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"kale: error: topic {topic_name} does not exist on {kafka_broker.bootstrap}"
    )
