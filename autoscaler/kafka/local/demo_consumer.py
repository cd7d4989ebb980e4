"""A stand-in training worker for the live demo: it consumes at the throughput of its job's size.

Why this module exists: ``kale demo`` runs the controller's Local actuator over real worker
processes that read the job's topic and commit offsets, so the meter sees real lag, real
consumption and a real stop while a resize restarts the workers. A real trainer per worker
would need far more CPU than a 2-core laptop has, so each worker here only *paces* itself:
``w`` workers together consume ``f(w)`` records/s, the fitted throughput of that size (the
``--capacity`` table, already in records/s of the demo's scaled replay), and nothing more.

Placement: worker ``i`` of ``w`` (``KALE_WORKER_INDEX``, ``KALE_WORKERS`` from the actuator)
reads the partitions ``p`` with ``p % w == i`` (``assign()``: no group join, which on tansu
costs seconds) at ``f(w) / P`` records/s per partition, and commits them as the job's consumer
group. A worker with no partition (``w > P``) idles: it holds its GPU and serves nothing, as a
PS job's extra worker past the partition count would.

Downtime: a real resize stops the job for the rescale duration (checkpoint, pod start, image
pull, model load). ``--ready-after D`` makes the worker start consuming only ``D`` seconds
after the resize began (the time in ``--resize-stamp FILE``, which the demo writes before
each resize; else after the process was created), so the demo's downtime matches the job's
``spec.rescale.duration`` whenever a restart is quicker than that.

Run: ``python -m autoscaler.kafka.local.demo_consumer --bootstrap B --topic T --group G
--capacity 120,230,330 [--ready-after 0.5]``. SIGTERM or SIGINT: commit and exit at once.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from kafka import TopicPartition

from autoscaler.kafka import clients

#: Longest a worker waits in one poll (also how quickly it notices SIGTERM).
POLL_MS = 20
#: Commit at most this often (a commit is one request to the broker). The meter reads the
#: oldest unconsumed record from the committed offsets, so late commits look like delay.
COMMIT_EVERY_S = 0.02


def my_partitions(partitions: int, workers: int, index: int) -> list[int]:
    """Partitions of worker ``index`` of ``workers``: round robin, ``p % workers == index``."""
    if workers < 1 or not 0 <= index < workers:
        raise ValueError(f"worker index {index} is outside 0..{workers - 1}")
    return [p for p in range(partitions) if p % workers == index]


def worker_rate(capacity: Sequence[float], workers: int, mine: int, partitions: int) -> float:
    """Records/s this worker may consume: its partitions' share of ``f(workers)``."""
    if not capacity:
        raise ValueError("the capacity table is empty")
    f = float(capacity[min(workers, len(capacity)) - 1])
    return f * mine / partitions if partitions else 0.0


def process_start_time() -> float:
    """Epoch seconds when this process was created (Linux ``/proc``; else now)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        started_after_boot = int(fields[19]) / ticks  # field 22 of stat(5)
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return time.time() - uptime + started_after_boot
    except (OSError, ValueError, IndexError):
        return time.time()


class Pacer:
    """A token bucket: ``take(n)`` says how many of ``n`` records may be consumed now."""

    def __init__(self, rate: float, *, burst_s: float = 0.2, now: float | None = None) -> None:
        self.rate = max(0.0, rate)
        self.burst = max(1.0, self.rate * burst_s)
        self.tokens = 0.0
        self.last = time.monotonic() if now is None else now

    def allowance(self, now: float) -> int:
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        return int(self.tokens)

    def spend(self, n: int) -> None:
        self.tokens -= n


def ready_time(
    ready_after_s: float, *, stamp_file: str | None = None, started: float | None = None
) -> float:
    """When to start consuming: ``ready_after_s`` after the resize began (the time in
    ``stamp_file``, written by whoever resizes), else after this process started."""
    started = process_start_time() if started is None else started
    if stamp_file:
        try:
            with open(stamp_file, encoding="ascii") as f:
                stamp = float(f.read().strip())
        except (OSError, ValueError):
            stamp = None
        if stamp is not None and started - 10.0 <= stamp <= started + 1.0:
            return stamp + ready_after_s
    return started + ready_after_s


def run(
    *,
    bootstrap: str,
    topic: str,
    group: str,
    capacity: Sequence[float],
    workers: int,
    index: int,
    ready_after_s: float,
    stop: threading.Event,
    stamp_file: str | None = None,
) -> int:
    """Consume until ``stop`` is set; returns the records consumed."""
    started = process_start_time()
    ready_at = ready_time(ready_after_s, stamp_file=stamp_file, started=started)
    consumer = clients.consumer(
        bootstrap,
        group=group,
        client_id=f"kale-demo-worker-{index}",
        max_poll_records=500,
        fetch_max_wait_ms=20,
        check_crcs=False,
    )
    consumed = 0
    try:
        partitions = _partition_count(consumer, bootstrap, topic, stop)
        mine = my_partitions(partitions, workers, index)
        rate = worker_rate(capacity, workers, len(mine), partitions)
        if stop.wait(max(0.0, ready_at - time.time())):
            return 0
        if not mine:
            stop.wait()
            return 0
        consumer.assign([TopicPartition(topic, p) for p in mine])
        pacer = Pacer(rate)
        first = True
        last_commit = time.monotonic()
        dirty = False
        while not stop.is_set():
            n = pacer.allowance(time.monotonic())
            if n < 1:
                stop.wait(min(0.02, 1.0 / rate) if rate > 0 else 0.02)
                continue
            batch = consumer.poll(timeout_ms=POLL_MS, max_records=n)
            got = sum(len(records) for records in batch.values())
            if got:
                if first:
                    first = False
                    print(
                        f"worker {index}/{workers}: consuming partitions {mine} at "
                        f"{rate:.4g} records/s, {time.time() - started:.2f}s after start",
                        file=sys.stderr,
                        flush=True,
                    )
                pacer.spend(got)
                consumed += got
                dirty = True
            now = time.monotonic()
            if dirty and now - last_commit >= COMMIT_EVERY_S:
                consumer.commit()
                last_commit, dirty = now, False
        if dirty:
            with contextlib.suppress(Exception):
                consumer.commit()
    finally:
        if not stop.is_set():
            clients.close_quietly(consumer, timeout_ms=500)
        # Stopping (a resize): the offsets are committed; the process exits at once and the
        # OS closes the sockets, so the job's downtime is the restart, not a polite goodbye.
    return consumed


def _partition_count(consumer: Any, bootstrap: str, topic: str, stop: threading.Event) -> int:
    """The topic's partition count from the consumer's metadata (bounded wait)."""
    deadline = time.monotonic() + clients.REQUEST_TIMEOUT_MS / 1000
    while True:
        with clients.translate_errors(bootstrap):
            found = consumer.partitions_for_topic(topic)
        if found:
            return len(found)
        if time.monotonic() > deadline or stop.wait(0.1):
            raise clients.TopicMissing(bootstrap, topic)


def parse_capacity(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}"
        ) from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError("expected at least one non-negative number")
    return values


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m autoscaler.kafka.local.demo_consumer", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument(
        "--capacity",
        required=True,
        type=parse_capacity,
        help="f(w) in records/s for w = 1, 2, …, comma-separated",
    )
    parser.add_argument(
        "--ready-after",
        type=float,
        default=0.0,
        help="seconds after process start before consuming (rescale downtime)",
    )
    parser.add_argument(
        "--resize-stamp",
        default=None,
        metavar="FILE",
        help="file holding the epoch time the resize began (--ready-after "
        "counts from it when it is recent)",
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="job size (default: $KALE_WORKERS)"
    )
    parser.add_argument(
        "--index", type=int, default=None, help="this worker's index (default: $KALE_WORKER_INDEX)"
    )
    args = parser.parse_args(argv)
    workers = args.workers if args.workers is not None else int(os.environ.get("KALE_WORKERS", "1"))
    index = args.index if args.index is not None else int(os.environ.get("KALE_WORKER_INDEX", "0"))
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        run(
            bootstrap=args.bootstrap,
            topic=args.topic,
            group=args.group,
            capacity=args.capacity,
            workers=workers,
            index=index,
            ready_after_s=args.ready_after,
            stop=stop,
            stamp_file=args.resize_stamp,
        )
    except (clients.BrokerUnavailable, clients.TopicMissing) as exc:
        if not stop.is_set():
            print(f"demo worker {index}: {exc}", file=sys.stderr)
            return 1
    if stop.is_set():
        sys.stderr.flush()
        os._exit(0)  # skip the interpreter's teardown: a resize waits for this exit
    return 0


if __name__ == "__main__":
    sys.exit(main())
