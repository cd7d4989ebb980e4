"""What the controller needs from a job's traffic, and the Kafka-backed source of it.

The loop asks a :class:`MetricSource` two things per tick: a :class:`Sample` (rates, lag,
oldest age now) and the :class:`ArrivalHistory` (arrival rate per interval, for the
forecaster and the planner). Tests and the benchmark plug in synthetic sources; production
uses :class:`KafkaMetricSource`, a thin adapter over :class:`autoscaler.kafka.meter.KafkaMeter`
and its SQLite history (which survives restarts and is backfilled from the broker).

Three details keep a tick bounded:

* the first measurement of a topic (and the first after a broker restart) has no baseline
  and the meter would *sleep* a whole window to take a second snapshot; with hundreds of jobs
  that would stall the tick. Instead the source stores one snapshot and reports
  :class:`WarmingUp` (a ``MetricUnavailable``: the job holds its size for one tick);
* rebuilding a new topic's history from the broker (the backfill: up to 256 read rounds)
  runs on a background pool with a deadline; the job reports :class:`Backfilling` and holds
  — unless the broker cannot be reached: then every tick reports that cause (the
  ``BrokerUnavailable`` of the last try, or of a quick TCP probe), never ``Backfilling``;
* the history is read incrementally: only the intervals since the last read are queried.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from autoscaler.controller.workers import DaemonPool
from common.errors import MetricUnavailable
from common.frozen import quick_init

log = logging.getLogger(__name__)


class WarmingUp(MetricUnavailable):
    """The first snapshot of a topic was taken; rates need a second one a window later."""


class Backfilling(MetricUnavailable):
    """The topic's arrival history is still being rebuilt from the broker (off the tick)."""


class MeasurementTimedOut(MetricUnavailable):
    """The job's measurement did not finish within the tick's deadline (it goes on)."""


@quick_init
@dataclass(frozen=True)
class Sample:
    """One measurement of a job's topic and consumer group."""

    time: float
    arrival_rate: float
    consumption_rate: float
    lag: float
    oldest_age_s: float
    partitions: int = 0


@quick_init
@dataclass(frozen=True)
class ArrivalHistory:
    """Arrival rates (samples/s) on a regular grid: step k covers [start + kΔ, start + (k+1)Δ)."""

    start_s: float
    interval_s: float
    rates: np.ndarray

    def __len__(self) -> int:
        return len(self.rates)

    @property
    def end_step(self) -> int:
        """Grid index (epoch seconds // Δ) of the step after the last one held."""
        return round(self.start_s / self.interval_s) + len(self.rates)

    def series(self) -> pd.Series:
        """The history as the forecasters take it (tz-aware UTC index, regular freq)."""
        index = pd.date_range(
            pd.Timestamp(self.start_s, unit="s", tz="UTC"),
            periods=len(self.rates),
            freq=pd.Timedelta(seconds=self.interval_s),
        )
        return pd.Series(self.rates, index=index, name="arrival_rate")

    @classmethod
    def empty(cls, interval_s: float) -> ArrivalHistory:
        return cls(0.0, interval_s, np.zeros(0))

    @classmethod
    def from_series(cls, series: pd.Series, interval_s: float) -> ArrivalHistory:
        if len(series) == 0:
            return cls.empty(interval_s)
        values = np.nan_to_num(series.to_numpy(dtype=float), nan=0.0)
        return cls(series.index[0].timestamp(), interval_s, np.clip(values, 0.0, None))

    def tail(self, max_steps: int) -> ArrivalHistory:
        if len(self.rates) <= max_steps:
            return self
        drop = len(self.rates) - max_steps
        return ArrivalHistory(
            self.start_s + drop * self.interval_s, self.interval_s, self.rates[drop:]
        )


class MetricSource(Protocol):
    def sample(self) -> Sample:
        """Measure now; raises :class:`MetricUnavailable` when the source cannot answer."""
        ...

    def arrivals(self, now: float, interval_s: float, history_s: float) -> ArrivalHistory:
        """Complete intervals of arrival rate over the last ``history_s`` before ``now``."""
        ...

    def close(self) -> None: ...


class KafkaMetricSource:
    """A job's Kafka topic and consumer group, measured by :class:`KafkaMeter`.

    Nothing here waits inside a tick: a first snapshot (and the first one after a broker
    restart) is stored and reported as :class:`WarmingUp`; the backfill of a topic the
    history has never seen runs on ``background`` (a shared, bounded pool) with a hard
    deadline while :meth:`sample` reports :class:`Backfilling`, and ends by storing the first
    snapshot, so the tick after it measures at once. Without a pool (``kale plan``) the
    backfill runs inline and ``block_first`` waits a window, as a one-shot command should.
    """

    def __init__(
        self,
        *,
        bootstrap: str,
        topic: str,
        group: str,
        history_path: str | Path,
        window_s: float = 10.0,
        timeout_s: float = 10.0,
        interval_s: float = 60.0,
        now: Callable[[], float] = time.time,
        block_first: bool = False,
        backfill_samples: int | None = None,
        background: DaemonPool | None = None,
        backfill_deadline_s: float | None = None,
        security: Any = None,
    ) -> None:
        from autoscaler.kafka.meter import KafkaMeter

        self.topic, self.group = topic, group
        self.window_s = window_s
        self.interval_s = interval_s
        self.now = now
        self.meter = KafkaMeter(
            bootstrap,
            topic,
            group,
            history_path,
            window_s,
            now=now,
            timeout_s=timeout_s,
            backfill=False,  # done here, off the tick
            max_baseline_age_s=max(10 * window_s, 3 * interval_s),
            security=security,  # the job's SASL/TLS (autoscaler.kafka.credentials)
        )
        self._hist: ArrivalHistory | None = None
        self.block_first = block_first
        """Wait a window on the first sample instead of reporting WarmingUp (``kale plan``)."""
        self.backfill_samples = backfill_samples
        """Records read per partition to rebuild the history (None: the backfill default)."""
        self.background = background
        self.backfill_deadline_s = backfill_deadline_s
        """Longest a backfill reads before it builds the history from what it has."""
        self._ready = False
        self._backfill: Future[Any] | None = None
        self._backfill_started = 0.0
        self._unreachable: MetricUnavailable | None = None
        """Why the last backfill could not reach the broker (reported while it is retried)."""

    def sample(self) -> Sample:
        from autoscaler.kafka.meter import BaselineMissing

        self._history_ready()
        try:
            s = self.meter.sample(wait=self.block_first)
        except BaselineMissing as exc:
            raise WarmingUp(str(exc)) from None
        return Sample(
            time=s.time,
            arrival_rate=s.arrival_rate,
            consumption_rate=s.consumption_rate,
            lag=float(s.lag),
            oldest_age_s=s.oldest_unconsumed_age_s,
            partitions=s.partitions,
        )

    def _history_ready(self) -> None:
        """Return once the topic's history exists; raise :class:`Backfilling` meanwhile."""
        if self._ready:
            return
        history = self.meter.history
        assert history is not None
        if history.has_topic(self.topic):
            self._ready = True
            return
        if self.background is None:
            self._rebuild()
            self._ready = True
            return
        fut = self._backfill
        deadline = self.backfill_deadline_s
        limit = f" (at most {deadline:g}s)" if deadline is not None else ""
        if fut is None:
            self._probe()
            self._backfill = self.background.submit(self._rebuild)
            self._backfill_started = time.monotonic()
            if self._unreachable is not None:
                raise self._unreachable  # retrying, but the cause is still the broker
            raise Backfilling(
                f"{self.topic}: rebuilding the arrival history from the broker{limit}"
            )
        if not fut.done():
            if self._unreachable is not None:
                raise self._unreachable
            running = time.monotonic() - self._backfill_started
            raise Backfilling(
                f"{self.topic}: rebuilding the arrival history from the broker, "
                f"{running:.0f}s so far{limit}"
            )
        self._backfill = None
        exc = fut.exception()
        if isinstance(exc, MetricUnavailable):
            self._unreachable = exc
            raise exc  # the broker is away: try again on a later tick
        self._unreachable = None
        if exc is not None:
            log.warning("backfill of %s failed, measuring without it: %s", self.topic, exc)
        self._ready = True

    def _probe(self) -> None:
        """Report a broker that refuses connections now, not after a background try."""
        from autoscaler.kafka.clients import check_reachable

        try:
            check_reachable(self.meter.bootstrap)
        except MetricUnavailable as exc:
            self._unreachable = exc
            raise

    def _rebuild(self) -> None:
        """Backfill the topic's history, then store the first snapshot (the next sample's
        baseline); before any row exists, so a crash part-way backfills again."""
        from autoscaler.kafka.backfill import backfill

        history = self.meter.history
        assert history is not None
        extra: dict[str, int] = {}
        if self.backfill_samples is not None:
            extra["samples_per_partition"] = self.backfill_samples
        result = backfill(
            self.meter.bootstrap,
            self.topic,
            history,
            interval_s=self.interval_s,
            now=self.now,
            timeout_s=max(self.meter.timeout_s, 30.0),
            deadline_s=self.backfill_deadline_s,
            security=self.meter.security,
            **extra,
        )
        log.info("backfilled %s: %s", self.topic, result)
        self.meter.prime()

    def arrivals(self, now: float, interval_s: float, history_s: float) -> ArrivalHistory:
        history = self.meter.history
        assert history is not None

        def read(since: float) -> ArrivalHistory:
            series = history.arrival_series(self.topic, since, interval_s, until=now)
            return ArrivalHistory.from_series(series, interval_s)

        cached = self._hist
        if cached is None or cached.interval_s != interval_s or not len(cached):
            fresh = read(now - history_s)
        else:
            # Re-read the last two intervals (the newest may have been partial) and append.
            fresh = read(max(now - history_s, (cached.end_step - 2) * interval_s))
            first = round(fresh.start_s / interval_s)
            if not len(fresh):
                fresh = cached
            elif first <= cached.end_step:
                keep = max(0, first - round(cached.start_s / interval_s))
                fresh = ArrivalHistory(
                    cached.start_s, interval_s, np.concatenate([cached.rates[:keep], fresh.rates])
                )
            else:  # a gap since the last read: read everything again
                fresh = read(now - history_s)
        self._hist = fresh.tail(math.ceil(history_s / interval_s))
        return self._hist

    def close(self) -> None:
        self.meter.close()


class SummedMetricSource:
    """A job's several topics (``spec.source.kafka.topics``), one source each, as one.

    Rates, lags and partitions are summed and the oldest unconsumed sample is the oldest of
    any topic: the trainer's one consumer group drains them all, so its capacity is judged
    against their sum. Every topic is measured on every call (a topic warming up must take
    its first snapshot even while another one fails); the first real failure wins over a
    quiet one (:class:`WarmingUp`, :class:`Backfilling`), so the cause an operator sees is
    the actionable one. The arrival history is the sum over the intervals every topic has.
    """

    def __init__(self, sources: list[MetricSource]) -> None:
        if not sources:
            raise ValueError("a summed source needs at least one topic")
        self.sources = sources

    def sample(self) -> Sample:
        samples: list[Sample] = []
        errors: list[MetricUnavailable] = []
        for source in self.sources:
            try:
                samples.append(source.sample())
            except MetricUnavailable as exc:
                errors.append(exc)
        if errors:
            loud = [e for e in errors if not isinstance(e, (WarmingUp, Backfilling))]
            raise (loud or errors)[0]
        return Sample(
            time=max(s.time for s in samples),
            arrival_rate=sum(s.arrival_rate for s in samples),
            consumption_rate=sum(s.consumption_rate for s in samples),
            lag=sum(s.lag for s in samples),
            oldest_age_s=max(s.oldest_age_s for s in samples),
            partitions=sum(s.partitions for s in samples),
        )

    def arrivals(self, now: float, interval_s: float, history_s: float) -> ArrivalHistory:
        parts = [s.arrivals(now, interval_s, history_s) for s in self.sources]
        if any(not len(p) for p in parts):
            return ArrivalHistory.empty(interval_s)
        first = max(round(p.start_s / interval_s) for p in parts)
        end = min(p.end_step for p in parts)
        if end <= first:
            return ArrivalHistory.empty(interval_s)
        total = np.zeros(end - first)
        for p in parts:
            offset = first - round(p.start_s / interval_s)
            total += p.rates[offset : offset + len(total)]
        return ArrivalHistory(first * interval_s, interval_s, total)

    def close(self) -> None:
        for source in self.sources:
            source.close()
