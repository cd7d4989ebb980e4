"""Replay: produce records to Kafka at an arrival-rate trace's pace.

Why this module exists: the autoscaler must be exercised against real traffic shapes
(a day of clicks in a few minutes) on a real broker. Replaying a trace turns a series of
samples/s into records on a topic, so the meter, the trainer and the controller all see the
same traffic a production topic would carry, time-compressed by ``speedup``.

Pacing: trace step i with rate r_i over an interval Δ yields r_i·Δ·scale records, spread
evenly over Δ/speedup wall seconds. Fractional remainders are carried to the next step, so
the total count is exact. The sender is deadline-driven: at each wake-up it sends every
record whose due time has passed (catching up after a stall), then sleeps until the next
one is due, so the achieved rate matches the trace over any window longer than a few ms.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol

import pandas as pd

from autoscaler.kafka import clients

#: Sleeps shorter than this are skipped (the OS cannot honour them; send instead).
_MIN_SLEEP_S = 0.002


class RecordFactory(Protocol):
    """Builds one record's value: ``seq`` counts records from 0, ``event_time`` is the
    record's position in trace time (seconds since the epoch)."""

    def __call__(self, seq: int, event_time: float) -> bytes: ...


def default_record(seq: int, event_time: float) -> bytes:
    """A small JSON payload: the sequence number and the trace time it stands for."""
    return json.dumps({"seq": seq, "t": round(event_time, 3)}, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class ReplaySummary:
    """What a replay did."""

    records_sent: int
    """Records handed to the producer and acknowledged by the broker."""
    records_failed: int
    """Records whose delivery failed."""
    wall_s: float
    """Wall seconds from the first due time to the final flush."""
    achieved_rate: float
    """records_sent / wall_s."""
    target_records: int
    """Records the trace asked for within the replayed span."""
    trace_start: str
    """First trace time replayed (ISO 8601)."""
    trace_end: str
    """Trace time the replay stopped at (ISO 8601)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class _Step:
    count: int
    trace_start: float  # seconds since the epoch
    wall_start: float  # seconds after the replay start
    wall_len: float


def interval_of(series: pd.Series) -> float:
    """The regular spacing (s) of a trace's DatetimeIndex; ValueError when irregular."""
    index = series.index
    if not isinstance(index, pd.DatetimeIndex) or len(index) < 2:
        raise ValueError("a trace needs a DatetimeIndex with at least two points")
    steps = index.to_series().diff().dropna().dt.total_seconds().unique()
    if len(steps) != 1 or steps[0] <= 0:
        raise ValueError("a trace must have a regular, increasing interval")
    return float(steps[0])


def plan_steps(
    series: pd.Series,
    *,
    interval_s: float,
    speedup: float,
    scale: float,
    duration_s: float | None,
) -> list[_Step]:
    """Record counts per trace step, remainders carried; cut at ``duration_s`` wall seconds."""
    if speedup <= 0 or scale < 0:
        raise ValueError(f"speedup must be > 0 and scale >= 0, got {speedup} and {scale}")
    wall_len = interval_s / speedup
    carry = 0.0
    steps: list[_Step] = []
    for i, (stamp, rate) in enumerate(series.items()):
        wall_start = i * wall_len
        if duration_s is not None and wall_start >= duration_s:
            break
        rate_value = float(rate)
        if not math.isfinite(rate_value) or rate_value < 0:
            raise ValueError(f"trace rate at {stamp} must be a finite number >= 0, got {rate}")
        length = wall_len
        exact = rate_value * interval_s * scale
        if duration_s is not None and wall_start + wall_len > duration_s:
            # The last step is cut short: only its share of records is due.
            length = duration_s - wall_start
            exact *= length / wall_len
        exact += carry
        count = math.floor(exact + 1e-9)
        carry = exact - count
        steps.append(_Step(count, pd.Timestamp(stamp).timestamp(), wall_start, length))
    return steps


def _due_times(
    steps: list[_Step], interval_s: float, wall_len: float
) -> Iterator[tuple[float, float]]:
    """(wall offset, trace time) of each record: evenly spread, mid-slot, within its step."""
    for step in steps:
        if step.count == 0:
            continue
        slot = step.wall_len / step.count
        for k in range(step.count):
            offset = step.wall_start + (k + 0.5) * slot
            yield offset, step.trace_start + (offset - step.wall_start) * interval_s / wall_len


def replay(
    trace_series: pd.Series,
    bootstrap: str,
    topic: str,
    speedup: float = 1.0,
    scale: float = 1.0,
    duration_s: float | None = None,
    progress: bool = True,
    record_factory: RecordFactory | None = None,
    *,
    timestamps: Literal["wall", "trace"] = "wall",
    interval_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    producer: Any = None,
) -> ReplaySummary:
    """Produce ``trace_series`` (samples/s, regular UTC DatetimeIndex) to ``topic``.

    ``duration_s`` limits the replay in *wall* seconds (None: the whole trace). Record
    timestamps are the send time (``timestamps="wall"``, the producer's CreateTime) or the
    trace time each record stands for (``"trace"``, for building a topic whose history a
    backfill should find). ``interval_s`` defaults to the index's spacing (a loaded
    ``Trace`` knows it: pass ``trace.interval_s``). ``producer`` lets tests pass their own;
    by default one is created (acks=1, linger_ms=5) and closed. The topic must exist (see
    ``clients.ensure_topic``).
    Raises BrokerUnavailable when Kafka cannot be reached or stops answering.
    """
    if interval_s is None:
        interval_s = interval_of(trace_series)
    steps = plan_steps(
        trace_series, interval_s=interval_s, speedup=speedup, scale=scale, duration_s=duration_s
    )
    target = sum(s.count for s in steps)
    make = record_factory or default_record
    wall_len = interval_s / speedup
    show = progress and sys.stderr.isatty()
    bar = _progress_bar(target, show)
    owned = producer is None
    prod = producer or clients.producer(bootstrap, client_id="kale-replay")
    failed = 0

    def on_error(_exc: BaseException) -> None:
        nonlocal failed
        failed += 1

    seq = 0
    start = clock()
    last_trace = steps[0].trace_start if steps else None
    try:
        with clients.translate_errors(bootstrap):
            pending = 0
            for offset, event_time in _due_times(steps, interval_s, wall_len):
                wait = start + offset - clock()
                if pending and (wait >= _MIN_SLEEP_S or pending >= 1000):
                    bar.update(pending)
                    pending = 0
                if wait >= _MIN_SLEEP_S:
                    sleep(wait)
                stamp = int(event_time * 1000) if timestamps == "trace" else None
                prod.send(topic, value=make(seq, event_time), timestamp_ms=stamp).add_errback(
                    on_error
                )
                seq += 1
                pending += 1
                last_trace = event_time
            bar.update(pending)
            prod.flush(timeout=clients.REQUEST_TIMEOUT_MS / 1000)
    finally:
        bar.close()
        if owned:
            clients.close_quietly(prod)
    wall = max(clock() - start, 1e-9)
    sent = seq - failed
    end_trace = steps[-1].trace_start + steps[-1].wall_len * speedup if steps else last_trace
    return ReplaySummary(
        records_sent=sent,
        records_failed=failed,
        wall_s=wall,
        achieved_rate=sent / wall,
        target_records=target,
        trace_start=_iso(steps[0].trace_start) if steps else "",
        trace_end=_iso(end_trace) if end_trace is not None else "",
    )


def _iso(epoch: float) -> str:
    return pd.Timestamp(epoch, unit="s", tz="UTC").isoformat()


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_bar(total: int, show: bool) -> Any:
    if not show:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, unit="rec", unit_scale=True, desc="replay", file=sys.stderr)
