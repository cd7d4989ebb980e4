"""Backfill: the past arrival rate is rebuilt from record timestamps on the broker."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from autoscaler.kafka import clients
from autoscaler.kafka.backfill import backfill, cumulative_at, sample_offsets
from autoscaler.kafka.history import HistoryStore
from autoscaler.kafka.meter import KafkaMeter

SLOW, FAST = 4.0, 12.0  # records/s in the first and the second quarter hour


def test_sample_offsets_spread_over_the_range_and_keep_both_ends():
    assert sample_offsets(10, 10, 5) == []
    assert sample_offsets(10, 13, 5) == [10, 11, 12]
    picked = sample_offsets(0, 1000, 5)
    assert picked == [0, 250, 500, 749, 999]


def test_cumulative_curve_interpolates_between_samples_and_closes_at_the_total():
    # Records 0..99 at one per second from t=1000; sampled every 10 offsets.
    offsets = np.arange(0, 100, 10)
    times = 1000.0 + offsets
    grid = np.array([990.0, 1000.0, 1049.5, 1099.0, 2000.0])
    counts = cumulative_at(times, offsets, lo=0, hi=100, grid=grid)
    np.testing.assert_allclose(counts, [0, 1, 50.5, 100, 100])


def test_out_of_order_timestamps_still_give_a_monotone_curve():
    offsets = np.array([0, 1, 2, 3])
    times = np.array([10.0, 12.0, 11.0, 13.0])  # two producers with skewed clocks
    counts = cumulative_at(times, offsets, lo=0, hi=4, grid=np.arange(9.0, 15.0, 0.5))
    assert np.all(np.diff(counts) >= 0)
    assert counts[-1] == 4


@pytest.fixture(scope="module")
def past_topic(kafka_broker):
    """A topic whose records carry timestamps over the last 30 minutes at two known rates."""
    topic = f"backfill-{time.time_ns()}"
    clients.ensure_topic(kafka_broker.bootstrap, topic, 3)
    start = math.floor(time.time() / 60) * 60 - 30 * 60
    producer = clients.producer(kafka_broker.bootstrap)
    try:
        for minute in range(30):
            per_minute = int((SLOW if minute < 15 else FAST) * 60)
            for k in range(per_minute):
                stamp = start + minute * 60 + (k + 0.5) * 60 / per_minute
                producer.send(topic, value=b"x" * 16, timestamp_ms=int(stamp * 1000))
        producer.flush(timeout=30)
    finally:
        clients.close_quietly(producer)
    return topic, start


def _check_per_minute_rates(series, start):
    by_minute = {int((ts.timestamp() - start) // 60): rate for ts, rate in series.items()}
    assert set(range(30)) <= set(by_minute), sorted(by_minute)
    for minute in range(30):
        if minute in (14, 15):
            continue  # the step between the two rates may be smeared over one sample segment
        expected = SLOW if minute < 15 else FAST
        assert by_minute[minute] == pytest.approx(expected, rel=0.10), (minute, by_minute[minute])
    # Whatever the smearing, the total is exact.
    total = sum(by_minute[m] * 60 for m in range(30))
    assert total == pytest.approx(15 * 60 * (SLOW + FAST), rel=0.01)


@pytest.mark.kafka
def test_backfill_reconstructs_the_past_per_minute_rate(kafka_broker, past_topic, tmp_path):
    topic, start = past_topic
    with HistoryStore(tmp_path / "h.sqlite") as store:
        result = backfill(kafka_broker.bootstrap, topic, store, samples_per_partition=128)
        series = store.arrival_series(topic, start, 60)
    assert result.records == int(15 * 60 * (SLOW + FAST))
    assert result.samples <= result.records
    # How long it takes is a benchmark's business: a wall-clock bound here failed whenever
    # the machine was busy, and said nothing about correctness.
    _check_per_minute_rates(series, start)


@pytest.mark.kafka
def test_a_meter_backfills_on_first_start_only(kafka_broker, past_topic, tmp_path):
    topic, start = past_topic
    path = tmp_path / "meter.sqlite"
    first = KafkaMeter(
        kafka_broker.bootstrap, topic, "g1", history_path=path, window_s=0.2, backfill_samples=96
    )
    with first as meter:
        meter.sample()
        assert meter.history is not None
        backfilled = [r for r in meter.history.rows(topic) if r.source == "backfill"]
        _check_per_minute_rates(meter.history.arrival_series(topic, start, 60), start)
    assert len(backfilled) >= 30
    with KafkaMeter(kafka_broker.bootstrap, topic, "g1", history_path=path, window_s=0.2) as meter:
        meter.sample()
        assert meter.history is not None
        again = [r for r in meter.history.rows(topic) if r.source == "backfill"]
    assert again == backfilled
