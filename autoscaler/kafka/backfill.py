"""Backfill: reconstruct a topic's past arrival rate from the records still on the broker.

Why this module exists: the forecaster needs days of history, but a meter that starts today
has none. The broker still holds the records of its retention period, and each record
carries its producer's CreateTime, so the past arrival curve can be read back.

Why not ``offsets_for_times``: tansu answers it from each stored batch's *write* time
(batch-grained, 1 s grained on S3), not from record timestamps, and a time after the last
write answers ``(0, -1)`` instead of None. Records produced with explicit timestamps
(replays, migrations) would all land at their write time. Record timestamps are preserved,
so we read those instead.

Bounded in time too: with ``deadline_s``, reading stops when the deadline passes and the
curve is built from the samples read so far. Rounds go coarse to fine (both ends first, then
midpoints), so a backfill cut short still spans the whole range, only with fewer points.

Method (bounded work, independent of the topic's size): per partition, with log start
``lo`` and high watermark ``hi``, read the first record at ``S`` offsets spread evenly over
``[lo, hi)`` (every offset when there are fewer than ``S``). The pairs (CreateTime, offset)
sample the partition's cumulative count curve C(t) = number of records with timestamp ≤ t;
timestamps are made non-decreasing along offsets (a running maximum) so that the curve is
monotone even when producers' clocks disagree. C is interpolated linearly between samples,
summed over partitions (plus ``lo``, so the total matches the high-watermark counter the
meter stores) at epoch-aligned grid times, and each grid point is stored as a ``backfill``
history row with the interval's rate. Per interval the total count is exact up to the
records in the two partially covered sample segments: the error is at most ``span / S``
records per partition, where the rate changes inside a segment. Sampling evenly in *offset*
puts samples densely where traffic is heavy, which is where the forecaster needs detail.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from kafka import TopicPartition

from autoscaler.kafka import clients
from autoscaler.kafka.heads import fetch_heads, log_starts
from autoscaler.kafka.history import HistoryStore, StoredSnapshot
from autoscaler.kafka.security import KafkaSecurity

#: Offsets read per partition; bounds the work to S fetches per partition.
SAMPLES_PER_PARTITION = 256
#: History older than this is not reconstructed.
LOOKBACK_S = 28 * 86_400.0


@dataclass(frozen=True, slots=True)
class BackfillResult:
    """What a backfill reconstructed."""

    points: int
    """History rows written (grid points)."""
    records: int
    """Records retained on the broker (sum over partitions of hi − lo)."""
    samples: int
    """Records actually read."""
    start: float | None
    """First grid time written (s since the epoch), None when nothing was written."""
    end: float | None
    """Last grid time written."""
    complete: bool = True
    """False when the deadline cut the reading short (the curve has fewer samples)."""


def cumulative_at(
    times: np.ndarray, offsets: np.ndarray, lo: int, hi: int, grid: np.ndarray
) -> np.ndarray:
    """Records of one partition with timestamp ≤ each grid time, from sampled records.

    ``times`` (seconds) and ``offsets`` are the sampled records, sorted by offset. The
    result counts from the log start: add ``lo`` for the absolute offset counter.
    """
    if len(offsets) == 0 or hi <= lo:
        return np.zeros(len(grid))
    times = np.maximum.accumulate(np.asarray(times, dtype=float))
    counts = np.asarray(offsets, dtype=float) - lo + 1  # records up to and incl. each sample
    # The last retained record (hi - 1) closes the curve at the total.
    if offsets[-1] < hi - 1:
        times = np.append(times, times[-1])
        counts = np.append(counts, float(hi - lo))
    # np.interp needs increasing x: for equal timestamps keep the largest count.
    uniq, idx = np.unique(times[::-1], return_index=True)
    last = len(times) - 1 - idx
    return np.interp(grid, uniq, counts[last], left=0.0, right=float(hi - lo))


def sample_offsets(lo: int, hi: int, samples: int) -> list[int]:
    """Up to ``samples`` offsets spread evenly over [lo, hi), always including both ends."""
    if hi <= lo:
        return []
    if hi - lo <= samples:
        return list(range(lo, hi))
    return sorted({round(float(x)) for x in np.linspace(lo, hi - 1, samples)})


def coarse_to_fine(n: int) -> list[int]:
    """Indices 0..n-1, both ends first, then the midpoints of ever smaller gaps.

    Any prefix of the order samples the whole range evenly at a coarser spacing.
    """
    if n <= 0:
        return []
    order, seen = [0], {0}
    if n > 1:
        order.append(n - 1)
        seen.add(n - 1)
    gaps = [(0, n - 1)]
    while gaps:
        nxt = []
        for lo, hi in gaps:
            mid = (lo + hi) // 2
            if mid not in seen:
                seen.add(mid)
                order.append(mid)
            if mid - lo > 1:
                nxt.append((lo, mid))
            if hi - mid > 1:
                nxt.append((mid, hi))
        gaps = nxt
    return order


def _read_samples(
    bootstrap: str,
    plans: dict[TopicPartition, list[int]],
    *,
    timeout_s: float,
    deadline: float | None = None,
    security: KafkaSecurity | None = None,
) -> tuple[dict[TopicPartition, dict[int, float]], bool]:
    """Timestamps (s) of the records at the planned offsets, one seek round per sample.

    One consumer serves all rounds (records are immutable, so buffered fetches cannot be
    stale in a way that matters) with tiny fetches, so a seek does not wait long for the
    fetches in flight. Every record a fetch returns at or after its position is kept: more
    samples at no cost. A round that times out skips the partitions that did not answer.
    Rounds go coarse to fine; at ``deadline`` (monotonic seconds) reading stops. Returns
    the samples and whether every round ran.
    """
    got: dict[TopicPartition, dict[int, float]] = {tp: {} for tp in plans}
    rounds = max((len(plan) for plan in plans.values()), default=0)
    if rounds == 0:
        return got, True
    orders = {tp: coarse_to_fine(len(plan)) for tp, plan in plans.items()}
    consumer = clients.probe_consumer(bootstrap, partition_fetch_bytes=1024, security=security)
    complete = True
    try:
        with clients.translate_errors(bootstrap, timeout_s):
            consumer.assign([tp for tp, plan in plans.items() if plan])
            for i in range(rounds):
                if deadline is not None and time.monotonic() >= deadline:
                    complete = False
                    break
                positions = {tp: plan[orders[tp][i]] for tp, plan in plans.items() if i < len(plan)}
                for tp, offset in positions.items():
                    consumer.seek(tp, offset)
                pending = set(positions)
                round_end = time.monotonic() + timeout_s
                if deadline is not None:
                    round_end = min(round_end, deadline)
                while pending and time.monotonic() < round_end:
                    for tp, records in consumer.poll(timeout_ms=100, max_records=1000).items():
                        if tp not in pending:
                            continue
                        kept = [r for r in records if r.offset >= positions[tp]]
                        for record in kept:
                            got[tp][record.offset] = record.timestamp / 1000.0
                        if kept:
                            pending.discard(tp)
    finally:
        clients.close_quietly(consumer)
    return got, complete


def backfill(
    bootstrap: str,
    topic: str,
    history: HistoryStore,
    *,
    interval_s: float = 60.0,
    lookback_s: float = LOOKBACK_S,
    samples_per_partition: int = SAMPLES_PER_PARTITION,
    now: Callable[[], float] = time.time,
    timeout_s: float = 30.0,
    deadline_s: float | None = None,
    security: KafkaSecurity | None = None,
) -> BackfillResult:
    """Reconstruct ``topic``'s arrival history and store it (group ``""``, ``backfill``).

    Raises BrokerUnavailable / TopicMissing like the meter. Bounded: at most
    ``samples_per_partition`` reads per partition, ``timeout_s`` per read round, and with
    ``deadline_s`` the reading stops after that many seconds (what was read is used).
    """
    deadline = None if deadline_s is None else time.monotonic() + deadline_s
    if interval_s <= 0:
        raise ValueError(f"interval_s must be positive, got {interval_s}")
    admin = clients.admin_client(bootstrap, client_id="kale-backfill", security=security)
    try:
        partitions = clients.topic_partitions(admin, bootstrap, topic)
    finally:
        clients.close_quietly(admin)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    starts = log_starts(bootstrap, tps, timeout_s=timeout_s, security=security)
    # High watermarks from a Fetch (tansu's ListOffsets(latest) is off by a batch).
    heads = fetch_heads(bootstrap, starts, timeout_s=timeout_s, security=security)
    ranges = {tp: (starts[tp], heads[tp].highwater) for tp in tps}
    plans = {tp: sample_offsets(lo, hi, samples_per_partition) for tp, (lo, hi) in ranges.items()}
    got, complete = _read_samples(
        bootstrap, plans, timeout_s=timeout_s, deadline=deadline, security=security
    )

    samples = sum(len(v) for v in got.values())
    records = sum(hi - lo for lo, hi in ranges.values())
    stamps = [t for per in got.values() for t in per.values()]
    if not stamps:
        return BackfillResult(0, records, 0, None, None, complete)
    current = now()
    first = max(min(stamps), current - lookback_s)
    start = math.floor(first / interval_s) * interval_s
    end = math.floor(current / interval_s) * interval_s
    if end <= start:
        return BackfillResult(0, records, samples, None, None, complete)
    grid = np.arange(start, end + interval_s / 2, interval_s)
    total = np.zeros(len(grid))
    for tp, per in got.items():
        lo, hi = ranges[tp]
        offsets = np.array(sorted(per), dtype=float)
        times = np.array([per[int(o)] for o in offsets], dtype=float)
        total += lo + cumulative_at(times, offsets, lo, hi, grid)
    # Partitions with nothing sampled still count their log start.
    total += sum(lo for tp, (lo, _) in ranges.items() if not got[tp])
    rates = np.concatenate([[np.nan], np.diff(total) / interval_s])
    rows = [
        StoredSnapshot(
            topic=topic,
            group="",
            time=float(t),
            end_total=round(float(c)),
            arrival_rate=None if math.isnan(r) else float(r),
            partitions=partitions,
            source="backfill",
        )
        for t, c, r in zip(grid, total, rates, strict=True)
    ]
    history.append(*rows)
    return BackfillResult(len(rows), records, samples, float(grid[0]), float(grid[-1]), complete)
