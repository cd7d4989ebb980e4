"""``kale replay`` and ``kale meter`` end to end, in process, against the session broker."""

from __future__ import annotations

import json
import shlex

import pandas as pd
import pytest

from autoscaler.sim.traces import save_trace
from kale.cli.main import main

pytestmark = pytest.mark.kafka


@pytest.fixture
def trace_file(tmp_path):
    index = pd.date_range("2026-01-05", periods=4, freq="60s", tz="UTC")
    path = tmp_path / "trace.csv"
    save_trace(pd.Series([1.0, 2.0, 3.0, 4.0], index=index), path)
    return path


def run(capsys, command: str) -> tuple[int, str, str]:
    code = main(shlex.split(command))
    out, err = capsys.readouterr()
    return code, out, err


def test_replay_creates_the_topic_and_meter_sees_every_record(
    kafka_broker, topic_name, trace_file, capsys
):
    bootstrap = kafka_broker.bootstrap
    code, out, err = run(
        capsys,
        f"replay --trace {trace_file} --bootstrap {bootstrap} --topic {topic_name} "
        "--speedup 600 --scale 0.5 --partitions 2 --json",
    )
    assert code == 0, err
    summary = json.loads(out)
    assert summary["records_sent"] == summary["target_records"] == 300  # (1+2+3+4)·60·0.5
    assert summary["records_failed"] == 0

    code, out, err = run(
        capsys,
        f"meter --bootstrap {bootstrap} --topic {topic_name} --group cli --window 200ms --json",
    )
    assert code == 0, err
    sample = json.loads(out)
    required = ("arrival_rate", "consumption_rate", "lag", "oldest_unconsumed_age_s", "partitions")
    assert set(required) <= set(sample)
    assert sample["partitions"] == 2
    assert sample["lag"] == sample["end_offsets_total"] == 300
    assert sample["oldest_unconsumed_age_s"] > 0


def test_meter_prints_a_table_for_people(kafka_broker, topic_name, capsys):
    from autoscaler.kafka import clients

    clients.ensure_topic(kafka_broker.bootstrap, topic_name, 1)
    code, out, _ = run(
        capsys,
        f"meter --bootstrap {kafka_broker.bootstrap} --topic {topic_name} --group g --window 0.1",
    )
    assert code == 0
    assert "arrival_rate" in out and "oldest_unconsumed_age_s" in out


@pytest.mark.parametrize(
    "flag, value, problem",
    [
        ("--window", "soon", "--window"),  # not a duration
        ("--window", "0", "--window"),  # a zero window measures nothing
        ("--bootstrap", "nonsense", "HOST:PORT"),  # no port
        ("--bootstrap", "127.0.0.1:99999", "HOST:PORT"),  # port out of range
        ("--bootstrap", "127.0.0.1:9092,", "HOST:PORT"),  # an empty second server
    ],
)
def test_meter_refuses_bad_flags_with_exit_2(kafka_broker, capsys, flag, value, problem):
    flags = {"--bootstrap": kafka_broker.bootstrap, "--window": "1s", flag: value}
    given = " ".join(f"{k} {shlex.quote(v)}" for k, v in flags.items())
    code, _, err = run(capsys, f"meter --topic t --group g {given}")
    assert code == 2
    assert problem in err and len(err.strip().splitlines()) == 1


def test_replay_of_a_missing_trace_file_exits_2(kafka_broker, tmp_path, capsys):
    missing = tmp_path / "nope.csv"
    code, _, err = run(
        capsys, f"replay --trace {missing} --bootstrap {kafka_broker.bootstrap} --topic t"
    )
    assert code == 2
    assert "nope.csv" in err


def test_replay_of_ctr_records_carries_decodable_training_samples(
    kafka_broker, topic_name, trace_file, capsys
):
    from kafka import KafkaConsumer, TopicPartition

    from trainer.records import decode_records

    code, out, err = run(
        capsys,
        f"replay --trace {trace_file} --bootstrap {kafka_broker.bootstrap} --topic {topic_name} "
        "--speedup 600 --scale 0.5 --records ctr --fields 5 --seed 3 --json",
    )
    assert code == 0, err
    assert json.loads(out)["records_sent"] == 300
    consumer = KafkaConsumer(
        bootstrap_servers=kafka_broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000
    )
    try:
        tp = TopicPartition(topic_name, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        values = [m.value for m in consumer]
    finally:
        consumer.close()
    assert len(values) == 300
    batch = decode_records(values, fields=5)
    assert batch.ids.shape == (300, 5)
    assert set(batch.labels.tolist()) <= {0.0, 1.0}
    assert 0 < batch.labels.mean() < 1  # both clicks and non-clicks
