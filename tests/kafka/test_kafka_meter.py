"""The Kafka meter against a real tansu broker: rates, lag, oldest age, history."""

from __future__ import annotations

import threading
import time

import pandas as pd
import pytest
from kafka import TopicPartition

from autoscaler.sources import kafka_io
from autoscaler.sources.meter import KafkaMeter
from autoscaler.sources.replay import ReplaySummary, replay

pytestmark = pytest.mark.kafka


def flat_trace(rate: float, steps: int = 30) -> pd.Series:
    index = pd.date_range("2026-01-05", periods=steps, freq="60s", tz="UTC")
    return pd.Series(rate, index=index, dtype=float)


class Replayer(threading.Thread):
    """Runs a replay in the background; ``summary`` is set when it ends."""

    def __init__(self, bootstrap: str, topic: str, *, rate: float, speedup: float, seconds: float):
        super().__init__(daemon=True)
        self.args = (flat_trace(rate), bootstrap, topic)
        self.kwargs = {"speedup": speedup, "duration_s": seconds, "progress": False}
        self.summary: ReplaySummary | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.summary = replay(*self.args, **self.kwargs)
        except BaseException as exc:  # surfaced by the test
            self.error = exc

    def finish(self, timeout: float = 60) -> ReplaySummary:
        self.join(timeout)
        assert not self.is_alive(), "replay did not finish"
        if self.error is not None:
            raise self.error
        assert self.summary is not None
        return self.summary


def record_times(bootstrap: str, topic: str, partitions: int) -> list[float]:
    """The CreateTime (seconds) of every record on the topic, read from the start."""
    consumer = kafka_io.consumer(bootstrap, client_id="test-ground-truth")
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    times: list[float] = []
    try:
        idle = 0
        while idle < 3:
            batch = consumer.poll(timeout_ms=500, max_records=5000)
            idle = 0 if batch else idle + 1
            times.extend(r.timestamp / 1000.0 for records in batch.values() for r in records)
    finally:
        kafka_io.close_quietly(consumer)
    return times


def test_a_replay_at_a_known_rate_is_measured_within_10_percent(kafka_broker, topic_name):
    # 50 samples/s in the trace, 10x faster: 500 records/s on the wire for 9 s.
    kafka_io.ensure_topic(kafka_broker.bootstrap, topic_name, 3)
    expected = 50 * 10
    replayer = Replayer(kafka_broker.bootstrap, topic_name, rate=50, speedup=10, seconds=9)
    started = time.monotonic()
    replayer.start()
    with KafkaMeter(kafka_broker.bootstrap, topic_name, "idle", window_s=4) as meter:
        time.sleep(max(0.0, started + 2.0 - time.monotonic()))  # let the replay settle
        sample = meter.sample()
    summary = replayer.finish()
    assert summary.records_sent == summary.target_records == expected * 9
    assert summary.achieved_rate == pytest.approx(expected, rel=0.10)
    assert sample.window_s >= 4
    # The truth for the meter's own window: the records whose send time lies in it. On a
    # loaded machine the producer falls behind and catches up in bursts, so a 4 s window
    # need not hold 4 s worth of the nominal rate; the meter must still count what came.
    stamps = record_times(kafka_broker.bootstrap, topic_name, 3)
    assert len(stamps) == expected * 9
    opened = sample.time - sample.window_s
    truth = sum(opened <= t < sample.time for t in stamps) / sample.window_s
    print(f"window {truth:.1f}/s, meter {sample.arrival_rate:.1f}/s")
    assert truth > 0
    assert sample.arrival_rate == pytest.approx(truth, rel=0.10)
    assert sample.partitions == 3
    assert sample.consumption_rate == 0


def test_lag_counts_every_record_even_when_tansu_end_offsets_lag_a_batch(kafka_broker, topic_name):
    kafka_io.ensure_topic(kafka_broker.bootstrap, topic_name, 2)
    producer = kafka_io.producer(kafka_broker.bootstrap)
    for i in range(1234):
        producer.send(topic_name, value=str(i).encode())
    producer.flush(timeout=30)
    kafka_io.close_quietly(producer)
    with KafkaMeter(kafka_broker.bootstrap, topic_name, "nobody") as meter:
        snap = meter.snapshot()
    # ListOffsets(latest) on tansu answers the last batch's base + 1; a Fetch's high
    # watermark is exact, and the meter uses that.
    assert snap.end_total == snap.lag == 1234
    assert snap.committed_total == 0


def test_lag_and_oldest_age_grow_unconsumed_and_fall_when_a_consumer_catches_up(
    kafka_broker, topic_name, unique_name, wait_until
):
    bootstrap = kafka_broker.bootstrap
    group = unique_name("group")
    kafka_io.ensure_topic(bootstrap, topic_name, 2)
    replayer = Replayer(bootstrap, topic_name, rate=20, speedup=10, seconds=5)  # 200/s
    replayer.start()
    with KafkaMeter(bootstrap, topic_name, group, window_s=1) as meter:
        wait_until(lambda: meter.snapshot().lag > 0, timeout=20, message="first records")
        first = meter.sample()
        time.sleep(1.0)
        second = meter.sample()
        assert second.lag > first.lag > 0
        assert second.oldest_unconsumed_age_s > first.oldest_unconsumed_age_s > 0
        assert first.consumption_rate == second.consumption_rate == 0
        assert second.arrival_rate > 0
        replayer.finish()

        stop = threading.Event()
        consumer = kafka_io.consumer(bootstrap, group=group, client_id="test-catch-up")
        consumed = []

        def consume() -> None:
            consumer.subscribe([topic_name])
            while not stop.is_set():
                batch = consumer.poll(timeout_ms=200, max_records=100)
                if batch:
                    consumed.extend(r for records in batch.values() for r in records)
                    consumer.commit()
                    time.sleep(0.05)  # a slow-ish consumer: catching up takes a few windows

        thread = threading.Thread(target=consume, daemon=True)
        thread.start()
        try:
            seen = []

            def caught_up() -> bool:
                sample = meter.sample()
                seen.append(sample)
                return sample.lag == 0

            wait_until(caught_up, timeout=60, interval=0.2, message="consumer catching up")
        finally:
            stop.set()
            thread.join(15)
            kafka_io.close_quietly(consumer)
    last = seen[-1]
    assert last.lag == 0 and last.oldest_unconsumed_age_s == 0
    assert last.committed_total == last.end_offsets_total == replayer.summary.records_sent
    assert max(s.consumption_rate for s in seen) > 0
    assert len(consumed) >= last.committed_total


def test_a_restarted_meter_keeps_its_history_and_rates(kafka_broker, topic_name, tmp_path):
    kafka_io.ensure_topic(kafka_broker.bootstrap, topic_name, 1)
    path = tmp_path / "history.sqlite"
    producer = kafka_io.producer(kafka_broker.bootstrap)
    try:
        with KafkaMeter(kafka_broker.bootstrap, topic_name, "g", path, window_s=0.5) as meter:
            first = meter.sample()  # no history: waits one window
            assert first.window_s >= 0.5
            assert meter.history is not None
            before = meter.history.rows(topic_name, "g")
        assert len(before) == 2

        for i in range(300):
            producer.send(topic_name, value=str(i).encode())
        producer.flush(timeout=30)
        time.sleep(0.6)  # the stored snapshot is now older than one window

        slept: list[float] = []
        with KafkaMeter(
            kafka_broker.bootstrap, topic_name, "g", path, window_s=0.5, sleep=slept.append
        ) as again:
            second = again.sample()
            assert again.history is not None
            after = again.history.rows(topic_name, "g")
    finally:
        kafka_io.close_quietly(producer)
    assert slept == [], "the restarted meter should measure from its stored snapshot"
    assert after[: len(before)] == before and len(after) == len(before) + 1
    assert second.end_offsets_total - first.end_offsets_total == 300
    assert second.arrival_rate == pytest.approx(300 / second.window_s)
    assert second.window_s == pytest.approx(second.time - before[-1].time)
