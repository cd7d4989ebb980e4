"""GPU fault history per node and GPU over a sliding window, for fault-aware policies.

Three sources. On the Node object the scheduler already watches: the ``kale.dev/gpu-faults``
annotation — a JSON list of ``{"gpu": 3, "time": "…Z", "reason": "Xid 79"}`` records that a
node agent appends to — and node conditions named in ``Conventions.fault_conditions`` while
they are ``True`` (a node-wide fault, ``gpu`` = None). And Xid-style **node Events**: a
``core/v1`` Event whose ``involvedObject`` is a Node and whose ``reason`` is one of
``Conventions.fault_event_reasons`` (what node-problem-detector's kernel monitor writes for
an ``NVRM: Xid …`` line), kept as a :class:`FaultSeries` by :class:`EventFaults`.

A policy sees counts, not records: ``per_gpu[node][g]`` faults of GPU ``g`` and
``per_node[node]`` faults of any kind within ``window_s`` before ``now``. Records leave the
window with time alone, so the scheduler re-reads the counts whenever it asks.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from scheduler.objects import Conventions, event_time
from scheduler.view import ClusterView

GPU_IN_MESSAGE = re.compile(r"\bGPU[ _#:=-]?(\d{1,2})\b", re.IGNORECASE)
"""``GPU 3`` / ``gpu=3`` in an Event's message names the GPU (DCGM's wording); an
``NVRM: Xid (PCI:…)`` line names only a PCI address, which counts against the whole node."""


@dataclass(frozen=True, slots=True)
class FaultSeries:
    """``count`` occurrences of one fault, the first at ``first`` and the last at ``last``.

    A recorder aggregates a repeating Event into one object (``count``, ``firstTimestamp``,
    ``lastTimestamp``); when it happened in between is not recorded, so the occurrences are
    taken as evenly spaced from the first to the last."""

    node: str
    gpu: int | None
    first: float
    last: float
    count: int
    reason: str

    def _times(self, since: float) -> tuple[int, float]:
        """(index of the first occurrence at or after ``since``, the spacing)."""
        if self.count <= 1 or self.last <= self.first:
            return (0 if self.last >= since else self.count), 0.0
        step = (self.last - self.first) / (self.count - 1)
        return max(0, math.ceil((since - self.first) / step - 1e-9)), step

    def between(self, since: float, until: float) -> int:
        """Occurrences in ``[since, until]``."""
        if self.count <= 1 or self.last <= self.first:
            return self.count if since <= self.last <= until else 0
        first, step = self._times(since)
        last = min(self.count - 1, math.floor((until - self.first) / step + 1e-9))
        return max(0, last - first + 1)

    def next_after(self, since: float) -> float | None:
        """The earliest occurrence at or after ``since`` (None: none)."""
        index, step = self._times(since)
        if index >= self.count:
            return None
        return self.last if step == 0.0 else self.first + index * step


def parse_fault_event(obj: dict[str, Any], conv: Conventions) -> FaultSeries | None:
    """The fault an Event reports, or None when it is not a GPU fault on a Node."""
    involved = obj.get("involvedObject") or {}
    if involved.get("kind") != "Node" or obj.get("reason") not in conv.fault_event_reasons:
        return None
    node = involved.get("name")
    series = obj.get("series") or {}
    last = event_time(series.get("lastObservedTime")) or event_time(obj.get("lastTimestamp"))
    first = event_time(obj.get("firstTimestamp")) or event_time(obj.get("eventTime")) or last
    if not node or first is None:
        return None
    try:
        count = max(1, int(series.get("count") or obj.get("count") or 1))
    except (TypeError, ValueError):
        count = 1
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    gpu: int | None = None
    if annotations.get(conv.fault_gpu_annotation, "").strip().isdigit():
        gpu = int(annotations[conv.fault_gpu_annotation])
    elif match := GPU_IN_MESSAGE.search(str(obj.get("message") or "")):
        gpu = int(match.group(1))
    return FaultSeries(str(node), gpu, first, max(first, last or first), count, obj["reason"])


@dataclass
class EventFaults:
    """The fault Events seen, by Event UID.

    An Event's deletion does not erase its fault: the API server deletes Events after its
    ``--event-ttl`` (1 h by default), far sooner than a fault window ends. A re-list adds
    what it finds and forgets nothing; :meth:`prune` drops what left the window.
    """

    by_uid: dict[str, FaultSeries] = field(default_factory=dict)

    def apply(self, kind: str, payload: Any, conv: Conventions) -> bool:
        """Take one watch event (or a SYNC list); returns whether a fault changed."""
        objects = payload if kind == "SYNC" else [payload] if kind != "DELETED" else []
        changed = False
        for obj in objects:
            fault = parse_fault_event(obj, conv)
            if fault is None:
                continue
            md = obj.get("metadata") or {}
            uid = str(md.get("uid") or f"{md.get('namespace')}/{md.get('name')}")
            changed |= self.by_uid.get(uid) != fault
            self.by_uid[uid] = fault
        return changed

    def prune(self, *, before: float) -> None:
        self.by_uid = {u: f for u, f in self.by_uid.items() if f.last >= before}


@dataclass(frozen=True)
class FaultCounts:
    """Recent faults: per node (any kind) and per GPU; nodes without faults are absent."""

    window_s: float
    per_node: dict[str, int] = field(default_factory=dict)
    per_gpu: dict[str, dict[int, int]] = field(default_factory=dict)

    def node(self, name: str) -> int:
        return self.per_node.get(name, 0)

    def gpu(self, name: str, index: int) -> int:
        return self.per_gpu.get(name, {}).get(index, 0)


def count_faults(
    view: ClusterView, *, now: float, window_s: float, events: EventFaults | None = None
) -> FaultCounts:
    """Faults within ``window_s`` before ``now`` on every node of ``view``."""
    per_node: dict[str, int] = {}
    per_gpu: dict[str, dict[int, int]] = {}
    since = now - window_s

    def add(node: str, gpu: int | None, n: int) -> None:
        per_node[node] = per_node.get(node, 0) + n
        if gpu is not None:
            gpus = per_gpu.setdefault(node, {})
            gpus[gpu] = gpus.get(gpu, 0) + n

    for name, state in view.nodes.items():
        for f in state.info.faults:
            if since <= f.time <= now:
                add(name, f.gpu, 1)
    for series in events.by_uid.values() if events is not None else ():
        if series.node in view.nodes and (n := series.between(since, now)):
            add(series.node, series.gpu, n)
    return FaultCounts(window_s, per_node, per_gpu)


def next_expiry(
    view: ClusterView, *, now: float, window_s: float, events: EventFaults | None = None
) -> float | None:
    """When the next recent fault leaves the window (a node may become attractive again)."""
    times = [
        f.time + window_s
        for state in view.nodes.values()
        for f in state.info.faults
        if f.time + window_s > now
    ]
    for series in events.by_uid.values() if events is not None else ():
        oldest = series.next_after(now - window_s + 1e-6)  # still in the window after now
        if oldest is not None and oldest <= now:
            times.append(max(oldest + window_s, now))
    return min(times, default=None)
