"""Replay pacing: exact record counts per trace step, and a real replay into tansu."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from autoscaler.kafka import clients
from autoscaler.kafka.local.replay import interval_of, plan_steps, replay
from autoscaler.kafka.meter import KafkaMeter


def trace(rates: list[float], interval_s: int = 60) -> pd.Series:
    index = pd.date_range("2026-01-05", periods=len(rates), freq=f"{interval_s}s", tz="UTC")
    return pd.Series(rates, index=index, dtype=float)


def test_fractional_remainders_are_carried_so_the_total_is_exact():
    # 0.01/s over 60 s = 0.6 records per step: 1, 0, 1, 0, 1 ... and 3 in total over 5 steps.
    steps = plan_steps(trace([0.01] * 5), interval_s=60, speedup=60, scale=1, duration_s=None)
    assert [s.count for s in steps] == [0, 1, 0, 1, 1]
    assert sum(s.count for s in steps) == 3


def test_scale_multiplies_and_speedup_compresses_wall_time():
    steps = plan_steps(trace([2.0, 4.0]), interval_s=60, speedup=30, scale=0.5, duration_s=None)
    assert [s.count for s in steps] == [60, 120]
    assert [s.wall_start for s in steps] == [0.0, 2.0]
    assert all(s.wall_len == 2.0 for s in steps)


def test_duration_cuts_the_replay_in_wall_seconds():
    steps = plan_steps(trace([10.0] * 10), interval_s=60, speedup=60, scale=1, duration_s=2.5)
    assert [s.count for s in steps] == [600, 600, 300]
    assert steps[-1].wall_len == pytest.approx(0.5)


@pytest.mark.parametrize(
    "rates, speedup, problem",
    [
        ([1.0, -1.0], 1.0, "finite number >= 0"),  # a negative rate is a broken trace
        ([1.0, float("nan")], 1.0, "finite number >= 0"),  # so is a NaN
        ([1.0, 1.0], 0.0, "speedup"),  # zero speedup would never finish
    ],
)
def test_bad_traces_and_flags_are_refused(rates, speedup, problem):
    with pytest.raises(ValueError, match=problem):
        plan_steps(trace(rates), interval_s=60, speedup=speedup, scale=1, duration_s=None)


def test_an_irregular_index_is_refused():
    index = pd.DatetimeIndex(["2026-01-01 00:00", "2026-01-01 00:01", "2026-01-01 00:03"], tz="UTC")
    with pytest.raises(ValueError, match="regular"):
        interval_of(pd.Series([1.0, 2.0, 3.0], index=index))


@pytest.mark.kafka
def test_replay_sends_exactly_the_planned_records_with_the_factory_payload(
    kafka_broker, topic_name
):
    clients.ensure_topic(kafka_broker.bootstrap, topic_name, 2)
    seen: list[tuple[int, float]] = []

    def factory(seq: int, event_time: float) -> bytes:
        seen.append((seq, event_time))
        return json.dumps({"seq": seq}).encode()

    # 3 steps of 60 s at 1/s, 2/s, 0.5/s; 600x faster: 210 records in 0.3 s.
    summary = replay(
        trace([1.0, 2.0, 0.5]),
        kafka_broker.bootstrap,
        topic_name,
        speedup=600,
        progress=False,
        record_factory=factory,
        timestamps="trace",
    )
    assert summary.records_sent == summary.target_records == 210
    assert summary.records_failed == 0
    assert [s for s, _ in seen] == list(range(210))
    start = pd.Timestamp("2026-01-05", tz="UTC").timestamp()
    assert start <= seen[0][1] < start + 60 <= seen[60][1] < start + 120 <= seen[-1][1]

    with KafkaMeter(kafka_broker.bootstrap, topic_name, "nobody-reads") as meter:
        snap = meter.snapshot()
    assert snap.end_total == snap.lag == 210
    # Record timestamps are the trace times the records stand for, not the send times.
    assert snap.oldest_timestamp_s == pytest.approx(seen[0][1], abs=0.01)
