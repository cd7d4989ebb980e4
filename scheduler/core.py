"""One scheduler replica's state and decisions, with no threads and no Kubernetes client.

Watch events come in through :meth:`Scheduler.on_pod` / :meth:`Scheduler.on_node` (the
app feeds them from the reflectors on one thread); :meth:`Scheduler.schedule` then places
every due pod: eligible nodes (cordon, NotReady, taints, selectors, GPU model) → the
placer's choice → the choice held in the view ("assumed") → a Binding through the
:class:`Binder`. Gangs are decided whole: every pending member is placed on a trial basis
and bound only if all fit (with the members already bound, at least ``gang-size``).

Why binding is safe to retry: the API server binds a pod at most once (a second Binding
answers 409), so after a 409 — ours got through but the answer was lost, or someone else
was faster — the binder reads the pod and reports where it really is; the view then
accounts the pod where it is, never twice. After a crash the new process rebuilds the view
from the pods (their ``spec.nodeName`` and GPU annotation) and places only pods that are
still unbound.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kube.binding import BindOutcome
from scheduler.faults import EventFaults, FaultCounts, count_faults, next_expiry
from scheduler.metrics import SchedulerMetrics
from scheduler.objects import Conventions, PodInfo, ineligible, parse_node, parse_pod
from scheduler.placers import Choice, Placer
from scheduler.queue import SchedulingQueue
from scheduler.view import ClusterView

log = logging.getLogger(__name__)


class Binder(Protocol):
    def bind(self, pod: PodInfo, node: str, annotations: dict[str, str]) -> BindOutcome: ...


class PodEvents(Protocol):
    def pod_event(self, pod: PodInfo, *, reason: str, message: str, type: str) -> None: ...


@dataclass
class SchedulerSettings:
    """How the scheduler behaves (the parts of ``scheduler.yaml`` it needs)."""

    conventions: Conventions = field(default_factory=Conventions)
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 10.0
    flush_s: float = 60.0
    """Retry an unschedulable pod at least this often even if nothing seemed to change."""
    fault_window_s: float = 86_400.0
    event_repeat_s: float = 60.0
    """Repeat an unchanged FailedScheduling Event at most this often per pod."""
    scheduled_events: bool = True
    """Record a ``Scheduled`` Event per binding (as the default scheduler does)."""
    report_every_s: float = 0.5
    """Least time between two refreshes of the cluster-wide gauges."""


class Scheduler:
    """The view, the queue and the decisions of one replica."""

    def __init__(
        self,
        *,
        placer: Placer,
        binder: Binder,
        events: PodEvents,
        settings: SchedulerSettings | None = None,
        metrics: SchedulerMetrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = s = settings or SchedulerSettings()
        self.conv = s.conventions
        self.placer, self.binder, self.events = placer, binder, events
        self.metrics = metrics or SchedulerMetrics()
        self.clock = clock
        self.view = ClusterView()
        self.placer.attach(self.view)
        self.pods: dict[str, PodInfo] = {}
        self.queue = SchedulingQueue(
            initial_s=s.backoff_initial_s, max_s=s.backoff_max_s, flush_s=s.flush_s
        )
        self.assumed: dict[str, str] = {}
        """uid → node of bindings made but not yet seen in the watch."""
        self._seen_version = 0
        self._last_event: dict[str, tuple[str, float]] = {}
        self._eligible: dict[Any, list[str]] = {}
        self._eligible_version = -1
        self.bound = 0
        self._fault_expiry: float | None = None
        self.fault_events = EventFaults()
        """Xid-style Node Events seen (they outlive the Events themselves; see faults.py)."""
        self._reported_at = -float("inf")

    # -- watch events ---------------------------------------------------------------------
    def on_node(self, kind: str, payload: Any) -> None:
        if kind == "SYNC":
            self.view.sync_nodes([parse_node(o, self.conv) for o in payload])
        elif kind == "DELETED":
            self.view.remove_node(payload["metadata"]["name"])
        else:
            self.view.set_node(parse_node(payload, self.conv))

    def on_event(self, kind: str, payload: Any) -> None:
        """A core/v1 Event (the watch selects those on Nodes); GPU faults are kept."""
        if self.fault_events.apply(kind, payload, self.conv):
            self.view.freed_version += 1  # as a fault annotation: decisions may differ now

    def on_pod(self, kind: str, payload: Any) -> None:
        if kind == "SYNC":
            infos = [parse_pod(o, self.conv) for o in payload]
            present = {p.uid for p in infos}
            for uid in [u for u in self.pods if u not in present]:
                self._forget(uid)
            for info in infos:
                self._apply(info)
        elif kind == "DELETED":
            self._forget(parse_pod(payload, self.conv).uid)
        else:
            self._apply(parse_pod(payload, self.conv))

    def _apply(self, pod: PodInfo) -> None:
        self.pods[pod.uid] = pod
        if pod.holds_resources:
            assert pod.node_name is not None
            self.queue.remove(pod.uid)
            self.assumed.pop(pod.uid, None)
            held = self.view.placements.get(pod.uid)
            if (
                held is None
                or held.node != pod.node_name
                or (pod.assigned_gpus is not None and held.gpus != pod.assigned_gpus)
            ):
                self.view.hold(pod.uid, pod.node_name, pod.assigned_gpus, pod.demand)
        elif pod.node_name is not None:  # finished: its resources are free again
            self.view.release(pod.uid)
            self.queue.remove(pod.uid)
            self.assumed.pop(pod.uid, None)
        elif pod.wants_scheduling(self.conv.scheduler_name):
            if pod.uid not in self.assumed:
                self.queue.add(pod.uid, priority=pod.priority, now=self.clock())
        else:
            self.queue.remove(pod.uid)

    def _forget(self, uid: str) -> None:
        self.pods.pop(uid, None)
        self.queue.remove(uid)
        self.assumed.pop(uid, None)
        self._last_event.pop(uid, None)
        self.view.release(uid)

    # -- decisions ------------------------------------------------------------------------
    def eligible(self, pod: PodInfo) -> list[str]:
        """Nodes ``pod`` may use (resources aside), in the view's order; cached per shape."""
        if self._eligible_version != self.view.node_version:
            self._eligible, self._eligible_version = {}, self.view.node_version
        key = (
            json.dumps(pod.tolerations, sort_keys=True),
            tuple(sorted(pod.node_selector.items())),
            pod.node_affinity,
            pod.demand.gpu_models if pod.demand.gpu_count else None,
        )
        names = self._eligible.get(key)
        if names is None:
            nodes = self.view.nodes
            names = [n for n in self.view.order if ineligible(pod, nodes[n].info) is None]
            self._eligible[key] = names
        return names

    def schedule(self, *, limit: int | None = None) -> int:
        """Try every due pod (or gang) once; returns the pods bound."""
        now = self.clock()
        if self._fault_expiry is not None and now >= self._fault_expiry:
            self.view.freed_version += 1  # a fault aged out: a node may be attractive again
        window = self.settings.fault_window_s
        if self.fault_events.by_uid:
            self.fault_events.prune(before=now - window)
        self._fault_expiry = next_expiry(
            self.view, now=now, window_s=window, events=self.fault_events
        )
        if self.view.freed_version != self._seen_version:
            self._seen_version = self.view.freed_version
            self.queue.cluster_changed(now=now, version=self._seen_version)
        else:
            self.queue.cluster_changed(now=now, version=-1)  # flush long-parked pods only
        bound = tried = 0
        while limit is None or tried < limit:
            uid = self.queue.pop(now)
            if uid is None:
                break
            tried += 1
            pod = self.pods.get(uid)
            if pod is None:
                self.queue.remove(uid)
                continue
            members = self._gang(pod) if pod.gang else [pod]
            if members:
                bound += self._schedule_unit(members, now)
            now = self.clock()
        self._report()
        return bound

    def _gang(self, pod: PodInfo) -> list[PodInfo]:
        """Pending members of ``pod``'s gang if, with the bound ones, there are enough."""
        members = [
            p
            for p in self.pods.values()
            if p.gang == pod.gang and p.wants_scheduling(self.conv.scheduler_name)
        ]
        members = [p for p in members if p.uid not in self.assumed]
        running = sum(1 for p in self.pods.values() if p.gang == pod.gang and p.holds_resources)
        running += sum(1 for u in self.assumed if u in self.pods and self.pods[u].gang == pod.gang)
        if len(members) + running < pod.gang_size:
            msg = (
                f"gang {pod.gang}: {len(members) + running} of {pod.gang_size} pods exist; "
                "waiting for the rest"
            )
            for p in members:
                self._unschedulable(p, msg)
            return []
        return sorted(members, key=lambda p: p.name)

    def _schedule_unit(self, members: list[PodInfo], now: float) -> int:
        problem = next((p for p in members if p.problem), None)
        if problem is not None:
            for p in members:
                self._unschedulable(p, f"{problem.key}: {problem.problem}")
            return 0
        faults = self.faults(now)
        started = time.perf_counter()
        choices: list[tuple[PodInfo, Choice]] = []
        failed: PodInfo | None = None
        for pod in members:  # trial: hold each choice so the next member sees it
            choice = self.placer.place(pod, self.eligible(pod), faults)
            if choice is not None and choice.fallback is not None:
                reason = choice.fallback
                self.metrics.fallback_decisions.labels(policy=self.placer.name, reason=reason).inc()
            if choice is None:
                failed = pod
                break
            self.view.hold(pod.uid, choice.node, choice.gpus, pod.demand)
            choices.append((pod, choice))
        self.metrics.decision_seconds.observe(time.perf_counter() - started)
        policy = self.placer.name
        if failed is not None:
            for pod, _ in choices:
                self.view.release(pod.uid, freed=False)
            why = self.view.diagnose(failed)
            if len(members) > 1:
                fit = f"{len(choices)} of {len(members)} pending pods fit"
                why = f"gang {failed.gang}: {fit}; {why}"
            self.metrics.decisions.labels(policy=policy, result="unschedulable").inc()
            for pod in members:
                self._unschedulable(pod, why)
            return 0
        self.metrics.decisions.labels(policy=policy, result="scheduled").inc()
        return sum(self._bind(pod, choice) for pod, choice in choices)

    def _bind(self, pod: PodInfo, choice: Choice) -> int:
        self.assumed[pod.uid] = choice.node
        annotations = {
            self.conv.assigned_gpus_annotation: ",".join(str(g) for g in choice.gpus),
            "kale.dev/placement-policy": self.placer.name,
        }
        out = self.binder.bind(pod, choice.node, annotations)
        now = self.clock()
        if out.status == "bound" or (out.status == "elsewhere" and out.node == choice.node):
            entry = self.queue.remove(pod.uid)
            if entry is not None:
                self.metrics.latency.observe(max(0.0, now - entry.first_seen))
            self.metrics.bindings.inc()
            self.bound += 1
            self._last_event.pop(pod.uid, None)
            if self.settings.scheduled_events:
                msg = f"Successfully assigned {pod.key} to {choice.node}"
                if choice.gpus:
                    msg += f" (GPUs {','.join(map(str, choice.gpus))}, {self.placer.name})"
                self.events.pod_event(pod, reason="Scheduled", message=msg, type="Normal")
            return 1
        self.assumed.pop(pod.uid, None)
        self.view.release(pod.uid, freed=False)
        if out.status == "elsewhere" and out.node:
            self.metrics.bind_failures.labels(reason="conflict").inc()
            self.queue.remove(pod.uid)
            self.view.hold(pod.uid, out.node, out.gpus, pod.demand)
        elif out.status == "gone":
            self.metrics.bind_failures.labels(reason="gone").inc()
            self._forget(pod.uid)
        else:
            self.metrics.bind_failures.labels(reason="error").inc()
            log.warning("binding %s to %s failed: %s", pod.key, choice.node, out.message)
            self.queue.retry_later(pod.uid, now=now)
        return 0

    def _unschedulable(self, pod: PodInfo, why: str) -> None:
        now = self.clock()
        self.queue.unschedulable(pod.uid, now=now, version=self.view.freed_version)
        last = self._last_event.get(pod.uid)
        if last is None or last[0] != why or now - last[1] >= self.settings.event_repeat_s:
            self._last_event[pod.uid] = (why, now)
            self.events.pod_event(pod, reason="FailedScheduling", message=why, type="Warning")
            log.info("%s: %s", pod.key, why)

    def faults(self, now: float) -> FaultCounts:
        """Recent faults from the nodes (annotation, conditions) and the node Events."""
        return count_faults(
            self.view, now=now, window_s=self.settings.fault_window_s, events=self.fault_events
        )

    # -- time -----------------------------------------------------------------------------
    def next_wakeup(self) -> float | None:
        """Seconds until :meth:`schedule` has something to do without new events."""
        now = self.clock()
        due = self.queue.next_due(now)
        if self._fault_expiry is not None:
            until = max(0.0, self._fault_expiry - now)
            due = until if due is None else min(due, until)
        return due

    def _report(self) -> None:
        """Refresh the gauges (at most every ``report_every_s``: they walk every node)."""
        now = self.clock()
        if now - self._reported_at < self.settings.report_every_s:
            return
        self._reported_at = now
        m = self.metrics
        m.pending.set(len(self.queue))
        used, cap = self.view.gpu_milli()
        m.allocation.set(used / cap if cap else 0.0)
        faults = self.faults(now)
        m.gpu_faults.set(sum(faults.per_node.values()))
        frag = getattr(self.placer, "fragmentation", None)
        m.fragmentation.set(frag() if callable(frag) else partial_gpu_share(self.view))

    def gpu_allocation_share(self) -> float:
        used, cap = self.view.gpu_milli()
        return used / cap if cap else 0.0


def partial_gpu_share(view: ClusterView) -> float:
    """Free milli-GPUs on partly used GPUs over the capacity: room no whole-GPU pod can use."""
    cap = sum(1000 * s.info.gpus for s in view.nodes.values())
    frag = sum(f for s in view.nodes.values() for f in s.gpu_free if 0 < f < 1000)
    return frag / cap if cap else 0.0
