"""The meter against a real broker that restarts, loses its offsets, freezes — on a fake clock.

The broker is tansu (the same binary as the session fixture), started privately here because
these tests stop, restart and SIGSTOP it; it restarts on the same port with memory storage,
so every restart loses topics, records and committed offsets — the "offsets went backwards"
case. Rates are computed on a fake clock from record counts this test produces, so each
expected rate is exact.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
from pathlib import Path

import pytest

from autoscaler.controller.metering import Backfilling, KafkaMetricSource, WarmingUp
from autoscaler.controller.workers import DaemonPool
from autoscaler.kafka import clients
from autoscaler.kafka.backfill import backfill, coarse_to_fine
from autoscaler.kafka.history import HistoryStore
from autoscaler.kafka.local.broker import EmbeddedBroker
from common.errors import MetricUnavailable
from tests.support.fault_fakes import T0, FakeClock

pytestmark = pytest.mark.kafka


class Broker:
    """A private tansu that can be killed, restarted on its port, and frozen."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.runs = 0
        self.proc = self._start(None)
        self.port = self.proc.port

    def _start(self, port: int | None) -> EmbeddedBroker:
        self.runs += 1
        return EmbeddedBroker(port=port, log_path=self.tmp / f"tansu-{self.runs}.log").start()

    @property
    def bootstrap(self) -> str:
        return self.proc.bootstrap

    def kill(self) -> None:
        self.proc.stop()

    def restart(self, topic: str) -> None:
        self.proc.stop()
        self.proc = self._start(self.port)
        clients.ensure_topic(self.bootstrap, topic, 1)

    def produce(self, topic: str, n: int) -> None:
        prod = clients.producer(self.bootstrap)
        try:
            for i in range(n):
                prod.send(topic, b"x%d" % i)
            prod.flush(timeout=30)
        finally:
            clients.close_quietly(prod)

    def stop(self) -> None:
        self.proc.stop()


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path)
    clients.ensure_topic(b.bootstrap, "t", 1)
    yield b
    b.stop()


def source(broker: Broker, clock: FakeClock, tmp_path: Path, **kw) -> KafkaMetricSource:
    src = KafkaMetricSource(
        bootstrap=broker.bootstrap,
        topic="t",
        group="g",
        history_path=tmp_path / "history.sqlite",
        window_s=10,
        timeout_s=3,
        interval_s=60,
        now=clock,
        **kw,
    )

    def never(seconds: float) -> None:
        raise AssertionError(f"the meter slept {seconds}s inside a tick")

    src.meter._sleep = never  # the controller's meter must never wait a window
    return src


def test_after_a_broker_restart_the_old_baseline_is_never_used_again(broker, tmp_path):
    clock = FakeClock(T0)
    src = source(broker, clock, tmp_path)
    with pytest.raises(WarmingUp):
        src.sample()  # first snapshot (the empty topic needs no backfill rows)
    broker.produce("t", 1200)
    clock.advance(60)
    assert src.sample().arrival_rate == pytest.approx(1200 / 60)
    # The broker restarts (memory storage: the topic and its offsets are gone) and is still
    # away when the next tick measures.
    broker.kill()
    clock.advance(60)
    with pytest.raises(MetricUnavailable):
        src.sample()
    broker.restart("t")
    broker.produce("t", 3000)  # already past the old counter (1200) when next measured
    clock.advance(60)
    with pytest.raises(WarmingUp):  # a new baseline, not the pre-restart one
        src.sample()
    broker.produce("t", 1800)
    clock.advance(60)
    sample = src.sample()
    # From the post-restart baseline: 1800 in 60 s. The pre-restart baseline would say
    # (4800 − 1200) / 180 = 20/s instead of 30/s.
    assert sample.arrival_rate == pytest.approx(1800 / 60)
    src.close()


def test_a_restart_between_two_ticks_is_seen_by_the_new_topic_id(broker, tmp_path):
    clock = FakeClock(T0)
    src = source(broker, clock, tmp_path)
    with pytest.raises(WarmingUp):
        src.sample()
    broker.produce("t", 600)
    clock.advance(60)
    assert src.sample().arrival_rate == pytest.approx(10.0)
    broker.restart("t")  # unseen: no tick while it was down
    broker.produce("t", 2400)  # the counter (2400) is past the old one (600)
    clock.advance(60)
    with pytest.raises(WarmingUp):
        src.sample()
    broker.produce("t", 600)
    clock.advance(60)
    assert src.sample().arrival_rate == pytest.approx(10.0)
    src.close()


def test_offsets_going_backwards_reset_the_baseline_for_a_restarted_controller(broker, tmp_path):
    clock = FakeClock(T0)
    src = source(broker, clock, tmp_path)
    with pytest.raises(WarmingUp):
        src.sample()
    broker.produce("t", 900)
    clock.advance(60)
    src.sample()
    src.close()
    broker.restart("t")
    broker.produce("t", 300)
    # A new controller process (same history file): no topic id in memory, the counters
    # went down, the stored snapshot is from before the restart.
    again = source(broker, clock, tmp_path)
    clock.advance(60)
    with pytest.raises(WarmingUp):
        again.sample()
    broker.produce("t", 120)
    clock.advance(60)
    assert again.sample().arrival_rate == pytest.approx(2.0)
    with HistoryStore(tmp_path / "history.sqlite") as h:
        assert h.last_break("t", "g") is not None
    again.close()


def test_a_frozen_broker_costs_the_tick_only_its_deadline(broker, tmp_path, monkeypatch):
    """SIGSTOP: the broker accepts connections and never answers. The controller's
    measurement runs on the pool; the tick waits at most its deadline, the job holds, and
    once the broker answers again the job is measured within two ticks."""
    from autoscaler.controller.settings import ControllerSettings
    from tests.support.fault_fakes import HostileRig

    settings = ControllerSettings(
        identity="test", observe_threads=4, observe_deadline_s=1.0, history_s=4 * 3600
    )
    rig = HostileRig(tmp_path / "rig", settings=settings)
    real = rig.controller.meter_factory

    def meter(entry):  # ml/a measures the real broker, the others stay synthetic
        if entry.key != "ml/a":
            return real(entry)
        return source(broker, rig.clock, tmp_path)

    rig.controller.meter_factory = meter
    rig.tick()  # warming up
    broker.produce("t", 60)
    reports = rig.tick()
    assert reports["ml/a"].sample is not None
    os.kill(broker.proc.pid, signal.SIGSTOP)
    try:
        for _ in range(2):
            reports = rig.tick()
            assert reports["ml/a"].action == "hold_metrics_unavailable"
            assert "deadline" in str(rig.controller.runtimes["ml/a"].metric_error) or (
                "unavailable" in reports["ml/a"].reason.get("why", "")
            )
            for key in ("ml/b", "ml/c"):
                assert reports[key].sample is not None
    finally:
        os.kill(broker.proc.pid, signal.SIGCONT)
    measured_after = None
    for tick in range(1, 6):
        rt = rig.controller.runtimes["ml/a"]
        if rt.measuring is not None:  # the frozen call is still draining (client timeout)
            rt.measuring.exception(timeout=30)
        reports = rig.tick()
        if reports["ml/a"].sample is not None:
            measured_after = tick
            break
    assert measured_after is not None and measured_after <= 2
    rig.controller.close()


def test_a_backfill_runs_off_the_tick_and_the_job_holds_meanwhile(broker, tmp_path, monkeypatch):
    broker.produce("t", 500)
    gate = threading.Event()
    import autoscaler.kafka.backfill as bf

    real = bf.backfill

    def slow(*args, **kw):  # a 265k-record topic's backfill, as long as the test wants
        assert gate.wait(30)
        return real(*args, **kw)

    monkeypatch.setattr(bf, "backfill", slow)
    pool = DaemonPool(1, name="test-backfill")
    clock = FakeClock(T0)
    src = source(
        broker, clock, tmp_path, background=pool, backfill_deadline_s=20, backfill_samples=16
    )
    for _ in range(3):  # ticks go on; each says the history is being rebuilt
        with pytest.raises(Backfilling, match="rebuilding the arrival history"):
            src.sample()
        clock.advance(60)
    gate.set()
    src._backfill.result(timeout=30)  # type: ignore[union-attr]
    broker.produce("t", 600)
    clock.advance(60)
    assert src.sample().arrival_rate == pytest.approx(10.0)  # measured at once after it
    src.close()
    pool.close()


def test_a_backfill_past_its_deadline_keeps_what_it_read(broker, tmp_path):
    broker.produce("t", 50)
    with HistoryStore(tmp_path / "h.sqlite") as history:
        result = backfill(broker.bootstrap, "t", history, interval_s=60, deadline_s=0.0)
        assert not result.complete and result.points == 0
        result = backfill(broker.bootstrap, "t", history, interval_s=60, deadline_s=30.0)
        assert result.complete


def test_coarse_to_fine_order_spans_the_range_at_every_prefix():
    order = coarse_to_fine(256)
    assert sorted(order) == list(range(256))
    assert order[:3] == [0, 255, 127]
    first8 = sorted(order[:9])
    gaps = [b - a for a, b in itertools.pairwise(first8)]
    assert max(gaps) <= 2 * min(gaps) + 1  # evenly spread, not the oldest end only
