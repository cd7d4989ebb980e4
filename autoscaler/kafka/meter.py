"""The Kafka meter: what a topic's traffic and one consumer group's progress look like now.

Why this module exists: the controller sizes a job from the *arrival rate* (what the
forecaster learns from), and checks it against what the job actually *consumes*, how far
behind it is (*lag*) and how old the oldest unconsumed record is (the SLO's delay). KEDA's
rule holds here: the meter only measures; deciding is the policy's job.

How a snapshot is taken (:mod:`autoscaler.kafka.snapshot`; all bounded by timeouts, see
``docs/kafka.md``):

* partition count from the topic metadata (a missing topic is :class:`TopicMissing`, because
  Kafka would answer zeros for it rather than an error);
* committed offsets of the group from the admin API (``list_group_offsets``); a partition
  with no commit counts from its log start, i.e. everything retained is unconsumed;
* one Fetch per partition from the committed position: its response carries the real high
  watermark (tansu's ListOffsets(latest) does not, see :func:`heads.fetch_heads`) and,
  when there is lag, the first unconsumed record, whose CreateTime gives the oldest age.

Rates are counter differences over a window: Δ(sum of high watermarks)/Δt is the arrival
rate, Δ(sum of committed offsets)/Δt the consumption rate. The baseline is the newest stored
snapshot at least ``window_s`` old (from the SQLite history, so it survives restarts, or from
memory); when there is none, or it is older than ``max_baseline_age_s``, ``sample()`` takes a
snapshot, waits ``window_s`` and takes another — or, with ``wait=False`` (the controller,
whose tick must not sleep), stores the snapshot and raises :class:`BaselineMissing`.

A baseline from before a *break* is never used: a break is recorded when the counters went
backwards (an in-memory broker restarted, the topic was re-created) and when the broker could
not be reached (it may have restarted unseen). Without that, once the new counters passed the
old ones, the pre-restart snapshot would be a valid-looking baseline and the rate would be
understated by everything written before the restart.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from autoscaler.kafka import clients
from autoscaler.kafka.history import HistoryStore, StoredSnapshot
from autoscaler.kafka.security import KafkaSecurity
from autoscaler.kafka.snapshot import MeterSample, Snapshot, rates_between, read_snapshot
from common.errors import MetricUnavailable

log = logging.getLogger(__name__)


class BaselineMissing(MetricUnavailable):
    """No snapshot to measure from yet (first use, or a break); one was just stored."""


Clock = Callable[[], float]
Sleep = Callable[[float], None]


class KafkaMeter:
    """Measures one topic for one consumer group; keeps a history if given a path.

    ``now`` and ``sleep`` are injectable so tests (and the simulator) control time. With a
    history file, the first use backfills the topic's past arrival rate from the records
    still on the broker (see :mod:`autoscaler.kafka.backfill`) when the file knows nothing
    of the topic yet.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        group: str,
        history_path: str | Path | None = None,
        window_s: float = 10.0,
        *,
        now: Clock = time.time,
        sleep: Sleep = time.sleep,
        max_baseline_age_s: float | None = None,
        backfill: bool = True,
        backfill_interval_s: float = 60.0,
        backfill_samples: int | None = None,
        timeout_s: float = clients.REQUEST_TIMEOUT_MS / 1000,
        security: KafkaSecurity | None = None,
    ) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, got {window_s}")
        self.bootstrap = bootstrap
        self.topic = topic
        self.group = group
        self.window_s = float(window_s)
        self.max_baseline_age_s = (
            float(max_baseline_age_s) if max_baseline_age_s is not None else 10 * self.window_s
        )
        self.timeout_s = timeout_s
        self.security = security
        """SASL/TLS of the job's brokers (None: plaintext)."""
        self._now = now
        self._sleep = sleep
        self._backfill_wanted = backfill
        self._backfill_interval_s = backfill_interval_s
        self._backfill_samples = backfill_samples
        self.history: HistoryStore | None = (
            HistoryStore(history_path) if history_path is not None else None
        )
        self._admin: Any = None
        self._last: Snapshot | None = None  # baseline when there is no history
        self._break_at: float | None = None  # the newest break this meter saw
        self._topic_id: str | None = None  # the topic id of the last snapshot

    # -- measuring -----------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """Read partition count, committed offsets, high watermarks and the oldest record."""
        try:
            return self._snapshot()
        except clients.BrokerUnavailable:
            # Start over with a fresh admin client next time (the broker may come back
            # on another connection state than the one this client is stuck in).
            clients.close_quietly(self._admin)
            self._admin = None
            raise

    def _snapshot(self) -> Snapshot:
        return read_snapshot(
            self._admin_client(),
            self.bootstrap,
            self.topic,
            self.group,
            timeout_s=self.timeout_s,
            clock=self._now,
            security=self.security,
        )

    def sample(self, *, wait: bool = True) -> MeterSample:
        """One measurement: rates over the window, lag and oldest age now.

        Raises :class:`clients.BrokerUnavailable` or :class:`clients.TopicMissing` (both
        ``MetricUnavailable``) instead of hanging or reporting zeros; a plain
        ``MetricUnavailable`` when the offsets went backwards within the window; with
        ``wait=False``, :class:`BaselineMissing` instead of sleeping a window.
        """
        self._maybe_backfill()
        current = self._checked_snapshot()
        baseline = self._baseline(current)
        if baseline is None:
            self._store(current, None)
            self._last = current
            if not wait:
                raise BaselineMissing(
                    f"{self.topic}: snapshot stored, no earlier one to measure from; rates "
                    f"need another one at least {self.window_s:g}s later"
                )
            self._sleep(max(0.0, current.time + self.window_s - self._now()))
            baseline, current = current, self._checked_snapshot()
            if (
                current.end_total < baseline.end_total
                or current.committed_total < baseline.committed_total
            ):
                # The counters went backwards within one window (an in-memory broker
                # restarted, or the topic was re-created): no rate can be known. Keep the
                # new snapshot as the next baseline and say so; never report zero load.
                self._store(current, None)
                self._last = current
                raise MetricUnavailable(
                    f"offsets of {self.topic} went backwards during the window "
                    f"(broker restarted or topic re-created); measure again"
                )
        measured = rates_between(baseline, current)
        self._store(current, measured)
        self._last = current
        return measured

    def prime(self) -> Snapshot:
        """Take and store a snapshot, so that a sample a window later has its baseline."""
        snap = self._checked_snapshot()
        self._store(snap, None)
        self._last = snap
        return snap

    def _checked_snapshot(self) -> Snapshot:
        """A snapshot; a break is recorded when it fails or when the counters went back."""
        try:
            snap = self.snapshot()
        except (clients.BrokerUnavailable, clients.TopicMissing):
            self._break(self._now(), "unavailable")
            raise
        newest: Snapshot | StoredSnapshot | None = self._last
        if self.history is not None:
            newest = self.history.latest(self.topic, self.group)
        known_id = self._topic_id
        if self.history is not None and snap.topic_id is not None:
            known_id = self.history.topic_id(self.topic, self.group)
            if known_id != snap.topic_id:
                self.history.set_topic_id(self.topic, self.group, snap.topic_id, snap.time)
        self._topic_id = snap.topic_id or self._topic_id
        if known_id is not None and snap.topic_id is not None and known_id != snap.topic_id:
            log.info("%s was re-created (new topic id): a new baseline", self.topic)
            self._break(snap.time, "recreated")
        elif newest is not None and (
            snap.end_total < newest.end_total
            or (
                newest.committed_total is not None and snap.committed_total < newest.committed_total
            )
        ):
            log.info(
                "%s/%s: offsets went backwards (%d -> %d records written): a new baseline",
                self.topic,
                self.group,
                newest.end_total,
                snap.end_total,
            )
            self._break(snap.time, "backwards")
        return snap

    def _break(self, t: float, why: str) -> None:
        """Record that no snapshot before ``t`` may serve as a baseline again."""
        self._last = None
        self._break_at = max(self._break_at or -math.inf, t)
        if self.history is None:
            return
        newest = self.history.latest(self.topic, self.group)
        last = self.history.last_break(self.topic, self.group)
        if why == "unavailable" and (newest is None or (last is not None and newest.time <= last)):
            return  # nothing stored since the last break: nothing to invalidate
        self.history.mark_break(self.topic, self.group, t, why)

    def _baseline(self, current: Snapshot) -> Snapshot | StoredSnapshot | None:
        """The newest snapshot at least window_s old and at most max_baseline_age_s old."""
        newest_allowed = current.time - self.window_s
        candidate: Snapshot | StoredSnapshot | None = None
        if self.history is not None:
            since = self.history.last_break(self.topic, self.group)
            candidate = self.history.latest(
                self.topic, self.group, at_or_before=newest_allowed, since=since
            )
        elif self._last is not None and self._last.time <= newest_allowed:
            candidate = self._last
        if candidate is not None and self._break_at is not None and candidate.time < self._break_at:
            return None
        if candidate is None or current.time - candidate.time > self.max_baseline_age_s:
            return None
        committed = candidate.committed_total
        if candidate.end_total > current.end_total or (
            committed is not None and committed > current.committed_total
        ):
            # Counters went backwards: the topic was re-created or an in-memory broker
            # restarted (tansu memory:// loses offsets). The old baseline means nothing now.
            return None
        return candidate

    # -- history -------------------------------------------------------------------------

    def _store(self, snap: Snapshot, measured: MeterSample | None) -> None:
        if self.history is None:
            return
        age = measured.oldest_unconsumed_age_s if measured is not None else None
        self.history.append(
            StoredSnapshot(
                topic=self.topic,
                group=self.group,
                time=snap.time,
                end_total=snap.end_total,
                committed_total=snap.committed_total,
                arrival_rate=measured.arrival_rate if measured is not None else None,
                consumption_rate=measured.consumption_rate if measured is not None else None,
                lag=snap.lag,
                oldest_age_s=age,
                partitions=snap.partitions,
                source="meter",
            )
        )

    def _maybe_backfill(self) -> None:
        if not self._backfill_wanted or self.history is None:
            return
        self._backfill_wanted = False  # once per meter, whatever happens
        if self.history.has_topic(self.topic):
            return
        from autoscaler.kafka.backfill import SAMPLES_PER_PARTITION, backfill

        result = backfill(
            self.bootstrap,
            self.topic,
            self.history,
            interval_s=self._backfill_interval_s,
            samples_per_partition=self._backfill_samples or SAMPLES_PER_PARTITION,
            now=self._now,
            timeout_s=max(self.timeout_s, 30.0),
            security=self.security,
        )
        log.info("backfilled %s: %s", self.topic, result)

    # -- lifecycle -----------------------------------------------------------------------

    def _admin_client(self) -> Any:
        if self._admin is None:
            self._admin = clients.admin_client(
                self.bootstrap, client_id="kale-meter", security=self.security
            )
        return self._admin

    def close(self) -> None:
        clients.close_quietly(self._admin)
        self._admin = None
        if self.history is not None:
            self.history.close()

    def __enter__(self) -> KafkaMeter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
