"""One reading of a topic and a group's counters, and the rates between two readings.

Why a module of its own: the meter's bookkeeping (baselines, breaks, history, backfill) is
stateful, but reading the counters once and turning two readings into rates are not; kept
here, each can be read — and tested — without the other. How a snapshot is read (partition
count, committed offsets, one Fetch per partition for the real high watermark and the
oldest unconsumed record) is explained in :mod:`autoscaler.kafka.meter`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from kafka import TopicPartition

from autoscaler.kafka import clients
from autoscaler.kafka.heads import fetch_heads, log_starts
from autoscaler.kafka.history import StoredSnapshot
from autoscaler.kafka.security import KafkaSecurity


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Raw counters of one topic and group at one instant."""

    time: float
    """Wall time (s since the epoch) just after the high watermarks were read."""
    highwater: dict[int, int]
    """Partition -> high watermark (next offset to be written)."""
    committed: dict[int, int]
    """Partition -> committed offset of the group; the log start where none is committed."""
    oldest_timestamp_s: float | None
    """CreateTime of the oldest unconsumed record over all partitions (None: no lag)."""
    topic_id: str | None = None
    """The topic's id: a new one means the topic was re-created and its offsets restarted."""

    @property
    def partitions(self) -> int:
        return len(self.highwater)

    @property
    def end_total(self) -> int:
        return sum(self.highwater.values())

    @property
    def committed_total(self) -> int:
        return sum(self.committed.values())

    @property
    def lag(self) -> int:
        # Clamped per partition: a commit past the high watermark is not negative lag.
        return sum(max(0, hw - self.committed.get(p, hw)) for p, hw in self.highwater.items())


@dataclass(frozen=True, slots=True)
class MeterSample:
    """One measurement, as the controller and ``kale meter --json`` see it."""

    time: float
    """Wall time of the measurement (s since the epoch)."""
    arrival_rate: float
    """Records/s written to the topic over the window."""
    consumption_rate: float
    """Records/s committed by the group over the window."""
    lag: int
    """Records written but not committed by the group, summed over partitions."""
    oldest_unconsumed_age_s: float
    """Age of the oldest unconsumed record (now − its CreateTime); 0 when there is no lag."""
    partitions: int
    """Partition count of the topic (a consumer group cannot use more workers)."""
    end_offsets_total: int
    """Sum of high watermarks (the cumulative record counter)."""
    committed_total: int
    """Sum of committed offsets (log start for partitions with no commit)."""
    window_s: float
    """Length of the window the rates were measured over."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_snapshot(
    admin: Any,
    bootstrap: str,
    topic: str,
    group: str,
    *,
    timeout_s: float,
    clock: Callable[[], float],
    security: KafkaSecurity | None,
) -> Snapshot:
    """Read partition count, committed offsets, high watermarks and the oldest record."""
    partitions, topic_id = clients.describe_topic(admin, bootstrap, topic)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with clients.translate_errors(bootstrap, timeout_s):
        offsets = admin.list_group_offsets({group: None}).get(group, {})
    committed = {
        tp.partition: int(meta.offset)
        for tp, meta in offsets.items()
        if tp.topic == topic and meta.offset is not None and meta.offset >= 0
    }
    missing = [tp for tp in tps if tp.partition not in committed]
    if missing:
        # No commit yet: count from the log start.
        starts = log_starts(bootstrap, missing, timeout_s=timeout_s, security=security)
        committed.update({tp.partition: off for tp, off in starts.items()})
    heads = fetch_heads(
        bootstrap,
        {tp: committed[tp.partition] for tp in tps},
        timeout_s=timeout_s,
        clock=clock,
        security=security,
    )
    # When the high watermarks were read, not after the probe was closed.
    reads = [h.read_at for h in heads.values() if h.read_at is not None]
    taken = max(reads) if reads else clock()
    stamps = [h.first_timestamp_ms for h in heads.values() if h.first_timestamp_ms is not None]
    lagging = any(h.highwater > committed[tp.partition] for tp, h in heads.items())
    oldest = min(stamps) / 1000.0 if stamps and lagging else None
    return Snapshot(
        time=taken,
        highwater={tp.partition: h.highwater for tp, h in heads.items()},
        committed=committed,
        oldest_timestamp_s=oldest,
        topic_id=topic_id,
    )


def rates_between(baseline: Snapshot | StoredSnapshot, current: Snapshot) -> MeterSample:
    """Arrival and consumption rates as counter differences over the window, lag and the
    oldest age as of ``current`` (rates never below zero)."""
    dt = current.time - baseline.time
    arrival = (current.end_total - baseline.end_total) / dt if dt > 0 else 0.0
    base_committed = baseline.committed_total
    consumption = (
        (current.committed_total - base_committed) / dt
        if dt > 0 and base_committed is not None
        else 0.0
    )
    age = 0.0
    if current.oldest_timestamp_s is not None and current.lag > 0:
        age = max(0.0, current.time - current.oldest_timestamp_s)
    return MeterSample(
        time=current.time,
        arrival_rate=max(0.0, arrival),
        consumption_rate=max(0.0, consumption),
        lag=current.lag,
        oldest_unconsumed_age_s=age,
        partitions=current.partitions,
        end_offsets_total=current.end_total,
        committed_total=current.committed_total,
        window_s=dt,
    )
