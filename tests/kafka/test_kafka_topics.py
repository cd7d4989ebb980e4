"""``spec.source.kafka.topics``: the controller's meter factory measures every topic of a job
on a real tansu broker and sums their rates and lags."""

from __future__ import annotations

import pytest

from autoscaler.controller.app import meter_factory
from autoscaler.controller.config import ControllerConfig
from autoscaler.controller.jobs import JobEntry
from autoscaler.controller.metering import KafkaMetricSource, SummedMetricSource
from autoscaler.job.loading import load_job
from autoscaler.kafka import clients
from tests.support.controller_fakes import job_doc, write_job


def entry(tmp_path, doc) -> JobEntry:
    return JobEntry(
        key="ml/ctr", loaded=load_job(write_job(tmp_path / "jobs", doc)), fingerprint=""
    )


pytestmark = pytest.mark.kafka


def produce(bootstrap: str, topic: str, n: int) -> None:
    clients.ensure_topic(bootstrap, topic, 1)
    producer = clients.producer(bootstrap)
    for i in range(n):
        producer.send(topic, value=str(i).encode())
    producer.flush(timeout=30)
    clients.close_quietly(producer)


def test_the_lags_of_every_topic_are_summed(kafka_broker, unique_name, tmp_path):
    bootstrap = kafka_broker.bootstrap
    a, b = unique_name("a"), unique_name("b")
    produce(bootstrap, a, 300)
    produce(bootstrap, b, 200)
    doc = job_doc()
    kafka = doc["spec"]["source"]["kafka"]
    kafka.pop("topic")
    kafka["topics"] = [a, b]
    kafka["bootstrapServers"] = [bootstrap.replace("localhost", "127.0.0.1")]
    cfg = ControllerConfig.model_validate(
        {"jobs": {"directory": str(tmp_path)}, "stateDir": str(tmp_path), "meter": {"window": 0.5}}
    )
    source = meter_factory(cfg, block_first=True)(entry(tmp_path, doc))
    try:
        assert isinstance(source, SummedMetricSource)
        assert [s.topic for s in source.sources] == [a, b]  # type: ignore[attr-defined]
        sample = source.sample()
        assert sample.lag == 500
        assert sample.partitions == 2
    finally:
        source.close()


def test_one_topic_is_measured_as_before(tmp_path):
    cfg = ControllerConfig.model_validate(
        {"jobs": {"directory": str(tmp_path)}, "stateDir": str(tmp_path)}
    )
    source = meter_factory(cfg)(entry(tmp_path, job_doc()))
    assert isinstance(source, KafkaMetricSource) and source.topic == "ctr-t"
    source.close()
