"""Which pending pod to try next, and when to try a pod again (kube-scheduler's queues).

Three places a pending pod can be:

* **active** — ready to try, ordered by priority (higher first), then arrival;
* **backoff** — tried and failed; ready again after ``initial_s · 2^(attempts−1)`` (capped
  at ``max_s``), like kube-scheduler's 1 s … 10 s;
* **unschedulable** — no node fits; it leaves only when the cluster changed in a way that
  can make room (``freed_version`` moved: a pod left, a node was added, grew, became
  schedulable or lost a fault) — and then still respects its backoff — or after
  ``flush_s`` at the latest. Retrying on every binding would be waste: a binding only
  takes room.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass


@dataclass(slots=True)
class Entry:
    uid: str
    priority: int
    seq: int
    first_seen: float
    attempts: int = 0
    ready_at: float = 0.0
    state: str = "active"
    tried_version: int = -1
    parked_at: float = 0.0


class SchedulingQueue:
    """Pending pods by uid; :meth:`pop` hands out the next one that is due."""

    def __init__(self, *, initial_s: float = 1.0, max_s: float = 10.0, flush_s: float = 60.0):
        self.initial_s, self.max_s, self.flush_s = initial_s, max_s, flush_s
        self.entries: dict[str, Entry] = {}
        self._active: list[tuple[int, int, str]] = []
        self._backoff: list[tuple[float, int, str]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, uid: str) -> bool:
        return uid in self.entries

    def add(self, uid: str, *, priority: int = 0, now: float) -> None:
        """A new pending pod (a no-op if it is already queued)."""
        if uid in self.entries:
            return
        e = Entry(uid, priority, next(self._seq), now)
        self.entries[uid] = e
        heapq.heappush(self._active, (-priority, e.seq, uid))

    def remove(self, uid: str) -> Entry | None:
        """Forget a pod (bound, deleted); stale heap items are skipped lazily."""
        return self.entries.pop(uid, None)

    def activate(self, uid: str) -> None:
        """Make a queued pod due now (a gang member that just got its peers)."""
        e = self.entries.get(uid)
        if e is not None and e.state != "active":
            e.state = "active"
            heapq.heappush(self._active, (-e.priority, e.seq, uid))

    def pop(self, now: float) -> str | None:
        """The next due pod (removed from the active set, still queued), or None."""
        while self._backoff and self._backoff[0][0] <= now:
            _, _, uid = heapq.heappop(self._backoff)
            e = self.entries.get(uid)
            if e is not None and e.state == "backoff":
                e.state = "active"
                heapq.heappush(self._active, (-e.priority, e.seq, uid))
        while self._active:
            _, seq, uid = heapq.heappop(self._active)
            e = self.entries.get(uid)
            if e is not None and e.state == "active" and e.seq == seq:
                e.state = "trying"
                return uid
        return None

    def _backoff_s(self, attempts: int) -> float:
        # Hand-written, not tenacity: no loop waits here; a pod's backoff is a time in a queue.
        return min(self.max_s, self.initial_s * 2 ** max(0, attempts - 1))

    def unschedulable(self, uid: str, *, now: float, version: int) -> None:
        """No node fits: wait for the cluster to change (``version`` is what was tried)."""
        e = self.entries.get(uid)
        if e is None:
            return
        e.attempts += 1
        e.ready_at = now + self._backoff_s(e.attempts)
        e.state, e.tried_version, e.parked_at = "unschedulable", version, now

    def retry_later(self, uid: str, *, now: float) -> None:
        """A transient failure (the API server): try again after the backoff."""
        e = self.entries.get(uid)
        if e is None:
            return
        e.attempts += 1
        e.ready_at = now + self._backoff_s(e.attempts)
        e.state = "backoff"
        heapq.heappush(self._backoff, (e.ready_at, e.seq, uid))

    def cluster_changed(self, *, now: float, version: int) -> int:
        """Move pods parked before ``version`` (or parked too long) to backoff; returns how many."""
        moved = 0
        for e in self.entries.values():
            if e.state == "unschedulable" and (
                e.tried_version < version or now - e.parked_at >= self.flush_s
            ):
                e.state = "backoff"
                heapq.heappush(self._backoff, (e.ready_at, e.seq, e.uid))
                moved += 1
        return moved

    def next_due(self, now: float) -> float | None:
        """Seconds until something may be due (0: now; None: only a cluster change helps)."""
        if any(self.entries[u].state == "active" for _, _, u in self._active if u in self.entries):
            return 0.0
        times = [t for t, _, u in self._backoff if u in self.entries]
        parked = [
            e.parked_at + self.flush_s for e in self.entries.values() if e.state == "unschedulable"
        ]
        due = min(times + parked, default=None)
        return None if due is None else max(0.0, due - now)
