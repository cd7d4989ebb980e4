"""The controller's outer loop: hold the lease, tick every interval, beat the health probe.

Separate from :class:`Controller` (one tick, no time of its own) so that tests drive ticks
with a fake clock, and so that leader election wraps any controller. Ticks are aligned to
interval boundaries plus a small offset, so the interval that just ended is complete in the
arrival history when the planner reads it. ``wait(seconds) -> bool`` (True: stop) is the
only way time passes here; production passes ``threading.Event.wait``.
"""

from __future__ import annotations

import gc
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Protocol

from autoscaler.controller.loop import Controller
from common.metrics_server import Health

log = logging.getLogger(__name__)


class Elector(Protocol):
    retry_period_s: float
    identity: str

    def try_acquire_or_renew(self) -> bool: ...

    def is_leader(self) -> bool: ...

    def release(self) -> bool: ...


#: Allocations between young-generation collections once the jobs are built (default 700).
GC_THRESHOLD = (20_000, 20, 20)

#: The young generation may grow to this share of the settled heap's objects before it is
#: collected (when that is more than ``GC_THRESHOLD[0]``).
GC_YOUNG_SHARE = 0.1


def settle_heap() -> None:
    """Keep the cyclic garbage collector off the controller's long-lived state.

    After the first tick the heap holds every job's runtime, model and caches — millions of
    objects with 10,000 jobs — and every full collection would walk them all, a large share
    of a tick's time. Freezing them moves them out of the collector's generations (they are
    still freed by reference counting when a job is forgotten), and a higher young-generation
    threshold collects a tick's short-lived garbage in fewer, cheaper passes.

    The young threshold grows with the heap (:data:`GC_YOUNG_SHARE` of the frozen
    objects): a tick makes a few containers per job that live until the next tick
    replaces them, so with many jobs a fixed threshold is passed by every tick, and each
    collection walks one tick's worth of live objects to find no garbage. Above the tick's
    own allocations, the collector runs once cyclic garbage can have piled up to a tenth
    of the heap, as it does for any program.
    """
    gc.collect()
    gc.freeze()
    young = max(GC_THRESHOLD[0], int(gc.get_freeze_count() * GC_YOUNG_SHARE))
    gc.set_threshold(young, *GC_THRESHOLD[1:])


class Runner:
    """Runs ``controller.tick()`` every ``interval_s`` while this replica leads."""

    def __init__(
        self,
        controller: Controller,
        *,
        interval_s: float,
        elector: Elector | None = None,
        health: Health | None = None,
        clock: Callable[[], float] = time.time,
        wait: Callable[[float], bool] | None = None,
        align_offset_s: float | None = None,
        settle: bool = False,
    ) -> None:
        self.controller = controller
        self.settle = settle
        """Call :func:`settle_heap` after the first tick (the controller process does)."""
        self.interval_s = interval_s
        self.elector = elector
        self.health = health
        self.clock = clock
        self.stop_event = threading.Event()
        self.wait = wait or self.stop_event.wait
        self.align_offset_s = (
            min(2.0, interval_s / 10) if align_offset_s is None else align_offset_s
        )
        self.ticks = 0
        self.leader = False
        """Set by :meth:`elect` (the lease thread in :meth:`run`)."""
        self.next_tick = clock()
        """When the next tick is due (the first one runs at once)."""
        if health is not None and getattr(controller, "on_progress", None) is None:
            controller.on_progress = health.beat  # slow work finishing is the loop alive

    def next_boundary(self, now: float) -> float:
        """The next interval boundary (plus the offset) at least half an interval away."""
        k = math.floor((now - self.align_offset_s) / self.interval_s) + 1
        at = k * self.interval_s + self.align_offset_s
        return at + self.interval_s if at - now < self.interval_s / 2 else at

    def stop(self) -> None:
        self.stop_event.set()

    def elect(self) -> bool:
        """One round of leader election (always leader without an elector)."""
        if self.elector is None:
            self.leader = True
            return True
        now = self.clock()
        metrics = self.controller.metrics
        was = self.leader
        self.leader = self.elector.try_acquire_or_renew()
        if getattr(self.elector, "last_error", None):
            metrics.errors.labels(kind="lease").inc()
        metrics.leader.set(1 if self.leader else 0)
        if self.leader != was:
            log.info(
                "%s is now %s",
                self.elector.identity,
                "the leader" if self.leader else "a standby",
                extra={"fields": {"event": "leadership", "leader": self.leader}},
            )
            if self.leader:
                self.next_tick = now  # act at once on taking over
        return self.leader

    def _leading(self) -> bool:
        if self.elector is None:
            return True
        is_leader = getattr(self.elector, "is_leader", None)
        return self.leader and (is_leader() if callable(is_leader) else True)

    def _tick_if_due(self) -> float:
        """Tick when due and leading; returns seconds until something is due again."""
        if self.health is not None:
            self.health.beat()
        if self._leading() and self.clock() >= self.next_tick:
            try:
                self.controller.tick()
            except Exception:  # the loop outlives any tick: jobs are isolated inside it,
                # and whatever still gets here (a bug between jobs) waits for the next tick
                self.controller.metrics.errors.labels(kind="tick").inc()
                log.exception("the tick failed; the loop goes on")
            self.ticks += 1
            if self.ticks == 1 and self.settle:
                settle_heap()
            self.next_tick = self.next_boundary(self.clock())
            if self.health is not None:
                self.health.beat()
        now = self.clock()
        until = self.next_tick if self._leading() else now + self.interval_s
        if self.elector is not None:
            until = min(until, now + self.elector.retry_period_s)
        return max(0.0, until - now)

    def step(self) -> float:
        """Elect, then tick if due (one thread: for fake-clock tests); returns the wait."""
        self.elect()
        return self._tick_if_due()

    def _renew_loop(self) -> None:
        assert self.elector is not None
        while not self.stop_event.is_set():
            self.elect()
            if self.wait(self.elector.retry_period_s):
                return

    def run(self, *, max_ticks: int | None = None, release: bool = True) -> int:
        """Loop until stopped (or ``max_ticks`` ticks); returns the ticks run.

        With an elector the lease is renewed on its own thread, as client-go does, so a
        long tick never lets it lapse. ``release=False`` leaves the lease as it is on exit
        (what a crash does).
        """
        renewer = None
        if self.elector is not None:
            self.elect()
            renewer = threading.Thread(target=self._renew_loop, daemon=True, name="kale-lease")
            renewer.start()
        try:
            while not self.stop_event.is_set():
                delay = self._tick_if_due()
                if max_ticks is not None and self.ticks >= max_ticks:
                    break
                if self.wait(delay):
                    break
        finally:
            self.stop_event.set()
            if renewer is not None:
                renewer.join(timeout=30)
            if self.elector is not None and release:
                self.elector.release()
                self.controller.metrics.leader.set(0)
        return self.ticks
