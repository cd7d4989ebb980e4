"""The Kafka meter against a real tansu broker: rates, lag, oldest age, history."""

from __future__ import annotations

import threading
import time

import pandas as pd
import pytest

from autoscaler.kafka import clients
from autoscaler.kafka.local.replay import ReplaySummary, replay
from autoscaler.kafka.meter import KafkaMeter

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


class FakeTime:
    """A clock the meter and the replay share: sleeping advances it, nothing else does."""

    def __init__(self, start: float) -> None:
        self.t = start

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += max(0.0, seconds)


def test_a_replay_at_a_known_rate_is_measured_exactly(kafka_broker, topic_name):
    # The meter waits one window between its two snapshots of the real broker; on a fake
    # clock that wait *is* the replay: 4 s of 50 samples/s replayed 10x faster (500/s on the
    # wire) sent synchronously on the same clock. Wall-clock load cannot move the numbers
    # (a ±10 % version on real time failed whenever the machine was busy).
    bootstrap = kafka_broker.bootstrap
    clients.ensure_topic(bootstrap, topic_name, 3)
    fake = FakeTime(time.time())
    summaries: list[ReplaySummary] = []

    def replay_one_window(seconds: float) -> None:
        began = fake.now()
        summaries.append(
            replay(
                flat_trace(50),
                bootstrap,
                topic_name,
                speedup=10,
                duration_s=seconds,
                progress=False,
                clock=fake.now,
                sleep=fake.sleep,
            )
        )
        fake.t = began + seconds  # the window ends on time, whatever the last record's slot

    with KafkaMeter(
        bootstrap, topic_name, "idle", window_s=4, now=fake.now, sleep=replay_one_window
    ) as meter:
        sample = meter.sample()
    (summary,) = summaries
    assert summary.records_sent == summary.target_records == 500 * 4
    assert sample.window_s == 4
    assert sample.arrival_rate == 500
    assert sample.lag == sample.end_offsets_total == 2000  # the group never committed
    assert sample.partitions == 3
    assert sample.consumption_rate == 0


def test_lag_counts_every_record_even_when_tansu_end_offsets_lag_a_batch(kafka_broker, topic_name):
    clients.ensure_topic(kafka_broker.bootstrap, topic_name, 2)
    producer = clients.producer(kafka_broker.bootstrap)
    for i in range(1234):
        producer.send(topic_name, value=str(i).encode())
    producer.flush(timeout=30)
    clients.close_quietly(producer)
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
    clients.ensure_topic(bootstrap, topic_name, 2)
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
        consumer = clients.consumer(bootstrap, group=group, client_id="test-catch-up")
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
            clients.close_quietly(consumer)
    last = seen[-1]
    assert last.lag == 0 and last.oldest_unconsumed_age_s == 0
    assert last.committed_total == last.end_offsets_total == replayer.summary.records_sent
    assert max(s.consumption_rate for s in seen) > 0
    assert len(consumed) >= last.committed_total


def test_a_restarted_meter_keeps_its_history_and_rates(kafka_broker, topic_name, tmp_path):
    clients.ensure_topic(kafka_broker.bootstrap, topic_name, 1)
    path = tmp_path / "history.sqlite"
    producer = clients.producer(kafka_broker.bootstrap)
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
        clients.close_quietly(producer)
    assert slept == [], "the restarted meter should measure from its stored snapshot"
    assert after[: len(before)] == before and len(after) == len(before) + 1
    assert second.end_offsets_total - first.end_offsets_total == 300
    assert second.arrival_rate == pytest.approx(300 / second.window_s)
    assert second.window_s == pytest.approx(second.time - before[-1].time)
