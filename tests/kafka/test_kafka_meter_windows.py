"""The meter's rate windows with fake time and fake counters (no broker needed)."""

from __future__ import annotations

import pytest

from autoscaler.kafka.meter import KafkaMeter
from autoscaler.kafka.snapshot import Snapshot
from common.errors import MetricUnavailable


class FakeMeter(KafkaMeter):
    """A meter whose snapshots come from a script of (high watermark, committed) totals."""

    def __init__(self, counters, history_path=None, **kw):
        self.clock = 1_000.0
        self.slept: list[float] = []
        self.counters = list(counters)
        super().__init__(
            "127.0.0.1:1",
            "t",
            "g",
            history_path,
            now=lambda: self.clock,
            sleep=self._sleep_fake,
            backfill=False,
            **kw,
        )

    def _sleep_fake(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.clock += seconds

    def snapshot(self) -> Snapshot:
        end, committed = self.counters.pop(0)
        oldest = self.clock - 3.0 if end > committed else None
        return Snapshot(self.clock, {0: end}, {0: committed}, oldest)


def test_without_a_baseline_the_meter_waits_one_window():
    meter = FakeMeter([(100, 0), (150, 20)], window_s=10)
    sample = meter.sample()
    assert meter.slept == [10]
    assert sample.window_s == 10
    assert sample.arrival_rate == 5.0 and sample.consumption_rate == 2.0
    assert sample.lag == 130 and sample.oldest_unconsumed_age_s == 3.0


def test_a_recent_enough_baseline_is_used_without_waiting():
    meter = FakeMeter([(0, 0), (100, 0), (400, 100)], window_s=10)
    meter.sample()
    meter.clock += 30
    sample = meter.sample()
    assert meter.slept == [10]  # only the first sample waited
    assert sample.window_s == 30 and sample.arrival_rate == 10.0
    assert sample.consumption_rate == pytest.approx(100 / 30)


def test_a_baseline_older_than_the_limit_is_not_used():
    meter = FakeMeter([(0, 0), (100, 0), (400, 0), (500, 0)], window_s=10, max_baseline_age_s=60)
    meter.sample()
    meter.clock += 120
    sample = meter.sample()
    assert meter.slept == [10, 10]
    assert sample.arrival_rate == 10.0


def test_a_restarted_meter_measures_from_its_stored_snapshot(tmp_path):
    path = tmp_path / "h.sqlite"
    first = FakeMeter([(0, 0), (100, 0)], path, window_s=10)
    first.sample()
    first.close()
    second = FakeMeter([(700, 0)], path, window_s=10)
    second.clock = first.clock + 60
    sample = second.sample()
    assert second.slept == []
    assert sample.window_s == 60 and sample.arrival_rate == 10.0


def test_counters_going_backwards_are_unavailable_not_zero(tmp_path):
    meter = FakeMeter([(500, 0), (20, 0), (120, 0)], window_s=10)
    with pytest.raises(MetricUnavailable, match="went backwards"):
        meter.sample()
    meter.clock += 10
    assert meter.sample().arrival_rate == 10.0  # the new counters are the next baseline


def test_a_stored_baseline_from_before_a_broker_restart_is_dropped(tmp_path):
    path = tmp_path / "h.sqlite"
    before = FakeMeter([(0, 0), (5000, 0)], path, window_s=10)
    before.sample()
    before.close()
    after = FakeMeter([(30, 0), (80, 0)], path, window_s=10)
    after.clock = before.clock + 30
    sample = after.sample()
    assert after.slept == [10]
    assert sample.arrival_rate == 5.0
