"""Helpers for the trainer tests: CTR records on a topic, committed offsets, job files.

The broker is the session's shared ``kafka_broker`` (tests/conftest.py); every test uses its
own topic and consumer group (``unique_name``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from autoscaler.kafka import clients
from trainer.records import CTRTask

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def produce_ctr(
    bootstrap: str, topic: str, n: int, *, partitions: int, seed: int = 0, start: int = 0
) -> dict[int, int]:
    """Produce ``n`` CTR samples round-robin over ``partitions``; records per partition."""
    clients.ensure_topic(bootstrap, topic, partitions)
    values = CTRTask(seed=0).records(n, np.random.default_rng(seed))
    counts = dict.fromkeys(range(partitions), 0)
    producer = clients.producer(bootstrap, linger_ms=20, batch_size=256 * 1024)
    try:
        for i, value in enumerate(values):
            p = (start + i) % partitions
            producer.send(topic, value, partition=p)
            counts[p] += 1
        producer.flush(timeout=30)
    finally:
        clients.close_quietly(producer)
    return counts


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offset per partition of ``topic``."""
    admin = clients.admin_client(bootstrap)
    try:
        offsets = admin.list_group_offsets({group: None}).get(group, {})
    finally:
        clients.close_quietly(admin)
    return {tp.partition: int(m.offset) for tp, m in offsets.items() if tp.topic == topic}


def write_job(path: Path, *, bootstrap: str, topic: str, group: str, **training: Any) -> Path:
    """An ElasticTrainingJob like examples/ctr-sync.yaml on the test's broker and topic."""
    doc = yaml.safe_load((EXAMPLES / "ctr-sync.yaml").read_text())
    doc["metadata"]["name"] = "test-" + topic.lower()[-20:].strip("-")
    doc["spec"]["source"]["kafka"] = {
        "bootstrapServers": [bootstrap],
        "topic": topic,
        "consumerGroup": group,
    }
    doc["spec"]["training"].update(training)
    doc["spec"]["throughput"]["model"] = str(EXAMPLES / "models" / "ctr-sync.json")
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def ctr_topic(kafka_broker: Any, unique_name: Callable[[str], str]) -> Callable[..., Any]:
    """``ctr_topic(n, partitions=4)`` -> (topic, per-partition counts) on the shared broker."""

    def make(n: int, partitions: int = 4, seed: int = 0) -> tuple[str, dict[int, int]]:
        topic = unique_name("ctr")
        return topic, produce_ctr(
            kafka_broker.bootstrap, topic, n, partitions=partitions, seed=seed
        )

    return make


@pytest.fixture
def produce() -> Callable[..., dict[int, int]]:
    """``produce(bootstrap, topic, n, partitions=..., seed=..., start=...)``."""
    return produce_ctr


@pytest.fixture
def committed() -> Callable[[str, str, str], dict[int, int]]:
    """``committed(bootstrap, group, topic)`` -> committed offset per partition."""
    return committed_offsets


@pytest.fixture
def job_file(tmp_path: Path) -> Callable[..., Path]:
    """``job_file(bootstrap=..., topic=..., group=..., **training)`` -> a job YAML path."""

    def make(**kwargs: Any) -> Path:
        return write_job(tmp_path / "job.yaml", **kwargs)

    return make
