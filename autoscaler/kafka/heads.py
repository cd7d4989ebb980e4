"""Reading where each partition's log ends — the high watermark — with one Fetch per partition.

Why a module of its own: tansu answers ListOffsets(latest) with the last batch's base offset
+ 1, not the high watermark, so every rate Kale measures rests on this workaround (seek,
poll, ``consumer.highwater``), and on its timing rule (the marks and their read time are
taken together, once). The meter (:mod:`autoscaler.kafka.snapshot`) and the backfill use it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kafka import TopicPartition

from autoscaler.kafka.clients import (
    REQUEST_TIMEOUT_MS,
    BrokerUnavailable,
    close_quietly,
    probe_consumer,
    translate_errors,
)
from autoscaler.kafka.security import KafkaSecurity


@dataclass(frozen=True, slots=True)
class Head:
    """What one Fetch told about a partition from a given position."""

    highwater: int
    """The partition's high watermark (offset of the next record to be written)."""
    first_offset: int | None = None
    """Offset of the first record at or after the position (None: nothing there)."""
    first_timestamp_ms: int | None = None
    """That record's timestamp (the producer's CreateTime)."""
    read_at: float | None = None
    """``clock()`` right after the poll that first knew every high watermark, so
    a rate computed from two reads divides by the time between them, not by how long the
    requests around them happened to take."""


def fetch_heads(
    bootstrap: str,
    positions: Mapping[TopicPartition, int],
    *,
    timeout_s: float = REQUEST_TIMEOUT_MS / 1000,
    clock: Callable[[], float] | None = None,
    security: KafkaSecurity | None = None,
) -> dict[TopicPartition, Head]:
    """Fetch once from each ``position``: the high watermark and the first record there.

    tansu quirk: ListOffsets(latest) -- ``end_offsets()`` -- answers the last batch's base
    offset + 1, not the high watermark, so ``end_offsets() - committed`` can even be
    negative. The high watermark carried by a Fetch response is right, so that is what we
    read: assign, seek, poll, ``consumer.highwater(tp)``. A position at the high watermark
    costs an empty fetch; a position behind it returns at most one small batch (the probe
    consumer caps ``max_partition_fetch_bytes``), whose first record gives the oldest
    unconsumed timestamp for free.

    Each call uses a fresh consumer (a few ms on localhost): a reused one may hold fetch
    responses buffered from an earlier call, whose stale high watermarks it would report as
    new. Raises BrokerUnavailable when some partition's high watermark is not known by the
    deadline; a record that does not arrive in time just leaves ``first_*`` at None.
    """
    if not positions:
        return {}
    probe = probe_consumer(bootstrap, security=security)
    deadline = time.monotonic() + timeout_s
    firsts: dict[TopicPartition, tuple[int, int]] = {}
    taken: dict[TopicPartition, int | None] | None = None
    read_at: float | None = None
    try:
        with translate_errors(bootstrap, timeout_s):
            probe.assign(list(positions))
            for tp, offset in positions.items():
                probe.seek(tp, max(0, offset))
            while True:
                batch = probe.poll(timeout_ms=100, max_records=1000)
                for tp, polled in batch.items():
                    # A position past the log end is reset to the earliest offset
                    # (auto_offset_reset): records before the position are not "first".
                    records = [r for r in polled if r.offset >= positions[tp]]
                    if records and tp not in firsts:
                        first = min(records, key=lambda r: r.offset)
                        firsts[tp] = (first.offset, first.timestamp)
                        probe.pause(tp)  # one record is all we need from it
                marks = {tp: probe.highwater(tp) for tp in positions}
                known = all(mark is not None for mark in marks.values())
                if known and taken is None:
                    # Take the marks and their time together, once: later polls only wait
                    # for first records, and a partition paused by then stops refreshing
                    # its mark, so a later read would put stale marks under a fresh time
                    # (seen as a 4 s window measuring 555/s for 500/s).
                    taken = marks
                    read_at = clock() if clock is not None else None
                if taken is not None:
                    marks = taken
                waiting = [
                    tp
                    for tp, mark in marks.items()
                    if mark is not None and mark > positions[tp] and tp not in firsts
                ]
                if known and not waiting:
                    break
                if time.monotonic() > deadline:
                    if known:
                        break  # all high watermarks known; some first records are late
                    missing = sorted(tp.partition for tp, mark in marks.items() if mark is None)
                    raise BrokerUnavailable(
                        bootstrap, timeout_s, f"no fetch answer for partitions {missing}"
                    )
    finally:
        close_quietly(probe)
    heads: dict[TopicPartition, Head] = {}
    for tp, mark in marks.items():
        assert mark is not None
        first_offset, first_ms = firsts.get(tp, (None, None))
        heads[tp] = Head(
            highwater=int(mark),
            first_offset=first_offset,
            first_timestamp_ms=first_ms,
            read_at=read_at,
        )
    return heads


def log_starts(
    bootstrap: str,
    partitions: list[TopicPartition],
    *,
    timeout_s: float = REQUEST_TIMEOUT_MS / 1000,
    security: KafkaSecurity | None = None,
) -> dict[TopicPartition, int]:
    """Each partition's log start offset (ListOffsets(earliest) is right on tansu; only
    "latest" is off, which is why :func:`fetch_heads` exists)."""
    probe = probe_consumer(bootstrap, security=security)
    try:
        with translate_errors(bootstrap, timeout_s):
            found = probe.beginning_offsets(partitions, timeout_ms=timeout_s * 1000)
    finally:
        close_quietly(probe)
    return {tp: int(off) for tp, off in found.items()}
