"""A worker's sample stream: one member of the job's consumer group, exact commits.

Why this module exists: "no sample lost, none trained twice beyond one in-flight batch"
rests on three rules that are easy to break with a Kafka consumer:

1. **Commit exactly what was trained, after the step.** A batch records, per partition, the
   first and last offset it took; :meth:`SampleStream.commit` commits ``last + 1`` for those
   partitions only, after the PS acked the step. Auto-commit is off.
2. **Batches are taken from a local buffer only after polling is over.** A rebalance runs
   inside ``poll()``; buffered records of revoked partitions are dropped in the rebalance
   listener (the next owner reads them again from the committed offset, and an eager
   rebalance resets *every* position to the committed offset, so keeping them would train
   them twice). No ``poll()`` happens between taking a batch and committing it.
3. **Leave the group on exit** (``close()`` sends LeaveGroup), so the next generation's
   group join does not wait a session timeout for members that are gone. tansu 0.6 has a
   catch here: a leader that leaves *after* a follower stays recorded as the group's leader,
   and the next generation then waits 10-60 s for a SyncGroup from a dead member. So the
   leader leaves first (:attr:`SampleStream.is_leader`; ordered by the supervisor).

A commit can still fail when a rebalance starts between the step and its commit; the
records of that batch are then trained again by their next owner (the one in-flight batch
the guarantee allows). Such failures are counted and reported.

Records that are not CTR samples (see :mod:`trainer.records`) are consumed and committed but
not trained; they are counted as ``skipped``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from kafka import ConsumerRebalanceListener, TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from autoscaler.kafka import clients
from trainer.records import decode_records


@dataclass
class Batch:
    """Samples of one step and the offsets they came from."""

    ids: np.ndarray
    labels: np.ndarray
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Partition -> (first, last) offset taken (inclusive); contiguous per partition."""
    records: int = 0
    """Records taken (samples + skipped)."""
    skipped: int = 0

    @property
    def samples(self) -> int:
        return int(self.ids.shape[0])


class SampleStream(ConsumerRebalanceListener):
    """Consumes the job's topic as a member of its group; see the module docstring."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        group: str,
        *,
        fields: int,
        client_id: str,
        session_timeout_ms: int = clients.SESSION_TIMEOUT_MS,
        heartbeat_interval_ms: int = clients.HEARTBEAT_INTERVAL_MS,
        check_crcs: bool = False,
        on_assignment: Callable[[str, list[int]], None] | None = None,
        security: Any = None,
    ) -> None:
        self.topic = topic
        self.fields = fields
        self.on_assignment = on_assignment
        self.buffers: dict[int, deque[tuple[int, bytes]]] = {}
        self.received: dict[int, int] = {}  # partition -> last offset polled
        self.assignment: list[int] = []
        self.joining = True
        self.join_wait_s = 2 * session_timeout_ms / 1000
        self.commit_failures = 0
        self.consumer: Any = clients.consumer(
            bootstrap,
            group=group,
            client_id=client_id,
            security=security,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            max_poll_records=2000,
            fetch_max_wait_ms=100,
            # kafka-python verifies record-batch CRCs in Python, which halves a worker's read
            # rate (~80k → ~160k records/s here); TCP already checksums the link.
            check_crcs=check_crcs,
        )
        self.consumer.subscribe([topic], listener=self)

    # -- rebalance listener ----------------------------------------------------------------

    def on_partitions_revoked(self, revoked: Any) -> None:
        for tp in revoked:
            self.buffers.pop(tp.partition, None)
            self.received.pop(tp.partition, None)
        self.assignment = []
        self.joining = True
        if self.on_assignment is not None:
            self.on_assignment("revoked", sorted(tp.partition for tp in revoked))

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.assignment = sorted(tp.partition for tp in assigned)
        self.joining = False
        for p in self.assignment:
            self.buffers.setdefault(p, deque())
        if self.on_assignment is not None:
            self.on_assignment("assigned", list(self.assignment))

    # -- batches ---------------------------------------------------------------------------

    @property
    def buffered(self) -> int:
        return sum(len(b) for b in self.buffers.values())

    def caught_up(self) -> bool:
        """True when every assigned partition has been polled up to its high watermark.

        (The Fetch high watermark, which tansu reports correctly; a partition not polled yet
        counts as caught up once its high watermark is known.)
        """
        if not self.assignment:
            return True
        for p in self.assignment:
            mark = self.consumer.highwater(TopicPartition(self.topic, p))
            if mark is None:
                return False
            last = self.received.get(p)
            if last is not None and last + 1 < mark:
                return False
        return True

    def poll_into_buffer(self, wanted: int, max_wait_s: float, idle_wait_s: float) -> None:
        """Poll until ``wanted`` records are buffered or ``max_wait_s`` has passed.

        A stream that is caught up ends the wait early: at once when something is buffered
        (a sync step must not stall every worker for the one without a backlog), after
        ``idle_wait_s`` when nothing is.
        """
        began = time.monotonic()
        deadline = began + max_wait_s
        while self.buffered < wanted:
            now = time.monotonic()
            if now >= deadline:
                break
            idle_over = self.buffered > 0 or now - began >= idle_wait_s
            if now > began and idle_over and self.caught_up():
                break
            polled = self.consumer.poll(
                timeout_ms=max(1, int(min(deadline - now, max(idle_wait_s, 0.01)) * 1000)),
                max_records=max(1, wanted - self.buffered),
            )
            self._buffer(polled)

    def _buffer(self, polled: dict[Any, list[Any]]) -> None:
        for tp, records in polled.items():
            if tp.partition not in self.assignment or not records:
                continue  # pragma: no cover - kafka-python drops these itself
            buf = self.buffers.setdefault(tp.partition, deque())
            buf.extend((r.offset, r.value) for r in records)
            self.received[tp.partition] = records[-1].offset

    def join(self, stop: Callable[[], bool] | None = None) -> None:
        """While the group (re)balances, poll in slices of up to a second, bounded by twice the
        session timeout, until assigned or ``stop()``: short polls that time out mid-join make
        kafka-python re-send JoinGroup, and tansu restarts its join wait for each."""
        deadline = time.monotonic() + self.join_wait_s
        while self.joining and not (stop is not None and stop()):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            polled = self.consumer.poll(
                timeout_ms=max(1, int(min(left, 1.0) * 1000)), max_records=1
            )
            self._buffer(polled)

    def next_batch(
        self,
        size: int,
        max_wait_s: float,
        idle_wait_s: float = 0.05,
        stop: Callable[[], bool] | None = None,
    ) -> Batch:
        """Up to ``size`` records (fewer when the stream has no more within the waits)."""
        if self.joining:
            self.join(stop)
        self.poll_into_buffer(size, max_wait_s, idle_wait_s)
        taken: list[bytes] = []
        ranges: dict[int, tuple[int, int]] = {}
        need = size
        while need > 0:
            live = [p for p, b in self.buffers.items() if b]
            if not live:
                break
            share = max(1, need // len(live))
            for p in live:
                buf = self.buffers[p]
                k = min(share, len(buf), need)
                if k == 0:
                    continue
                first = buf[0][0]
                last = first
                for _ in range(k):
                    last, value = buf.popleft()
                    taken.append(value)
                prev = ranges.get(p)
                ranges[p] = (prev[0] if prev else first, last)
                need -= k
                if need == 0:
                    break
        decoded = decode_records(taken, self.fields)
        return Batch(decoded.ids, decoded.labels, ranges, len(taken), decoded.skipped)

    def commit(self, batch: Batch) -> bool:
        """Commit ``last + 1`` of every partition in ``batch``; False when the commit failed."""
        if not batch.ranges:
            return True
        offsets = {
            TopicPartition(self.topic, p): OffsetAndMetadata(last + 1, None, -1)
            for p, (_first, last) in batch.ranges.items()
        }
        try:
            self.consumer.commit(offsets)
        except (KafkaError, AssertionError, OSError):
            self.commit_failures += 1
            return False
        return True

    @property
    def is_leader(self) -> bool:
        """Whether this member leads the group (kafka-python keeps it private; False when the
        attribute is not there, and the supervisor then lets every member leave at once)."""
        coordinator = getattr(self.consumer, "_coordinator", None)
        return bool(getattr(coordinator, "_is_leader", False))

    def close(self) -> None:
        """Leave the group promptly (LeaveGroup) without committing anything else."""
        clients.close_quietly(self.consumer, timeout_ms=5_000)
