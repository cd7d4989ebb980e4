"""Bounded pools of daemon threads, and waiting for their work with a deadline.

Why this module exists: the controller's slow work — Kafka snapshots, backfills, forecaster
fits, API writes — must never hold up the loop for longer than a deadline, and one job's
slow call must never hold up another job's. A Python thread cannot be interrupted, so the
loop does not wait *for* a call: it waits *until a deadline* and moves on; the call finishes
(or times out by its own client timeout) on its thread and its result is picked up later.

Daemon threads rather than a ``ThreadPoolExecutor``: a process that is stopping must not
wait for a wedged Kafka request or a minute-long fit whose result nobody will read (the
executor's threads are joined at interpreter exit).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any, TypeVar

K = TypeVar("K", bound=Hashable)

IoResult = tuple[str, Any]
"""How one pooled call ended: ``("ok", result)``, ``("error", exception)`` or
``("running", future)`` (still running at the deadline)."""


class DaemonPool:
    """Up to ``threads`` daemon threads running submitted callables in FIFO order."""

    def __init__(self, threads: int = 1, *, name: str = "kale-work") -> None:
        if threads < 1:
            raise ValueError("a pool needs at least one thread")
        self.threads = threads
        self.name = name
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = (
            queue.SimpleQueue()
        )
        self._started: list[threading.Thread] = []
        self._idle = 0
        self._closed = False
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        """Run ``fn()`` on a pool thread; its result or exception lands in the future."""
        fut: Future[Any] = Future()
        with self._lock:
            if self._closed:
                fut.set_exception(RuntimeError(f"the {self.name} pool is closed"))
                return fut
            if self._idle == 0 and len(self._started) < self.threads:
                t = threading.Thread(
                    target=self._work, name=f"{self.name}-{len(self._started)}", daemon=True
                )
                self._started.append(t)
                t.start()
            self._queue.put((fut, fn))
        return fut

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            item = self._queue.get()
            with self._lock:
                self._idle -= 1
            if item is None:
                return
            fut, fn = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn())
            except BaseException as exc:  # the future carries it to whoever reads it
                fut.set_exception(exc)

    def close(self) -> None:
        """Stop taking work; queued work is cancelled, running work finishes unobserved."""
        with self._lock:
            self._closed = True
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
            for _ in self._started:
                self._queue.put(None)


def wait_until(
    futures: Iterable[Future[Any]],
    deadline_s: float | None,
    *,
    on_done: Callable[[Future[Any]], None] | None = None,
) -> set[Future[Any]]:
    """Wait for ``futures`` until they are all done or ``deadline_s`` (wall seconds from now)
    has passed; returns those still running. ``on_done`` sees each future as it finishes
    (the loop's liveness beat, so a long wait is not mistaken for a stalled loop)."""
    pending = set(futures)
    end = None if deadline_s is None else time.monotonic() + deadline_s
    while pending:
        left = None if end is None else max(0.0, end - time.monotonic())
        done, pending = wait(pending, timeout=left, return_when=FIRST_COMPLETED)
        if on_done is not None:
            for fut in done:
                on_done(fut)
        if not done:  # the deadline passed
            break
    return pending


def run_all(
    items: Iterable[K],
    task: Callable[[K], Callable[[], Any]],
    pool: DaemonPool | None,
    deadline_s: float | None,
    *,
    on_done: Callable[[Future[Any]], None] | None = None,
) -> dict[K, IoResult]:
    """Run ``task(item)()`` for each item: inline, one after another, without a pool (no
    deadline); else on the pool, waiting until ``deadline_s``. An exception of type
    ``Exception`` (building the call included) is the item's result, never raised; a call
    still running at the deadline comes back as ``("running", future)`` for the caller to
    collect later."""
    out: dict[K, IoResult] = {}
    if pool is None:
        for item in items:
            try:
                out[item] = ("ok", task(item)())
            except Exception as exc:
                out[item] = ("error", exc)
        return out
    futures: dict[Future[Any], K] = {}
    for item in items:
        try:
            futures[pool.submit(task(item))] = item
        except Exception as exc:
            out[item] = ("error", exc)
    wait_until(futures, deadline_s, on_done=on_done)
    for fut, item in futures.items():
        if not fut.done():
            out[item] = ("running", fut)
        elif fut.exception() is not None:
            out[item] = ("error", fut.exception())
        else:
            out[item] = ("ok", fut.result())
    return out
