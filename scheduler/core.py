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
from the pods (their ``spec.nodeName`` and GPU assignment annotation) and places only pods
that are still unbound.

Why no GPU is over-committed: before every Binding the per-GPU thousandths on the chosen
node are summed again from the placements (the bound pods' assignment annotations, whoever
bound them, and the bindings in flight) — independently of the running free counts the
policy read — and a choice that would exceed 1000 on a GPU is refused. The assignment rides
on the Binding itself (the API server copies its annotations onto the pod in the same
write as ``spec.nodeName``), so no crash can leave a pod bound without it.

A pod that cannot be placed gets a ``FailedScheduling`` Event and the ``PodScheduled=False``
condition (reason ``Unschedulable``, the same message) on its status — written when the
message changes, never once per retry. If it outranks pods that hold the room it needs, it
*preempts* them (:mod:`scheduler.preemption` chooses them): they are evicted, the pod is
*nominated* to the node (``status.nominatedNodeName``; the room is reserved in the view so
nobody else takes it) and bound on a later pass once they are gone.

``dry_run``: every decision is made and logged, nothing is written (no Binding, status,
eviction or Event); a decided pod is held in the view as if bound, so the next decisions
see the plan so far.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kube.binding import BindOutcome, EvictOutcome
from placement.errors import PlacementError
from placement.frag import TypicalPods, typical_pods
from scheduler.adapter import placement_pod
from scheduler.faults import EventFaults, FaultCounts, count_faults, next_expiry
from scheduler.metrics import SchedulerMetrics
from scheduler.objects import (
    Conventions,
    GpuAssignment,
    PodInfo,
    gpu_assignment,
    ineligible,
    parse_gpu_assignment,
    parse_node,
    parse_pod,
)
from scheduler.placers import Choice, Placer
from scheduler.preemption import Planner, Preemption, VictimUnit
from scheduler.queue import SchedulingQueue
from scheduler.view import ClusterView

log = logging.getLogger(__name__)


class Binder(Protocol):
    def bind(self, pod: PodInfo, node: str, annotations: dict[str, str]) -> BindOutcome: ...


class PodEvents(Protocol):
    def pod_event(self, pod: PodInfo, *, reason: str, message: str, type: str) -> None: ...


class PodStatus(Protocol):
    def unschedulable(
        self, pod: PodInfo, *, message: str, since: float, nominated_node: str | None = None
    ) -> bool: ...


class Evictor(Protocol):
    def evict(self, pod: PodInfo, *, dry_run: bool = False) -> EvictOutcome: ...


@dataclass(frozen=True)
class Outcome:
    """What became of a pod in this process (``kale scheduler --once`` prints them)."""

    pod: str
    result: str
    """``bound``, ``would bind``, ``unschedulable``, ``nominated``, ``would preempt``,
    ``error``."""
    detail: str


@dataclass
class Nomination:
    """A preemptor waiting on ``node`` for its evicted ``victims`` (uids) to leave."""

    node: str
    gpus: tuple[int, ...]
    victims: frozenset[str]


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
    namespaces: frozenset[str] = frozenset()
    """Place (and preempt) pods of these namespaces only; empty: every namespace. Bound pods
    of every namespace are accounted whatever this says: they hold their nodes' room."""
    preemption: bool = True
    """Evict lower-priority pods for a pod that fits nowhere."""
    dry_run: bool = False
    """Decide and log; write nothing (no Binding, status, eviction or Event)."""


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
        status: PodStatus | None = None,
        evictor: Evictor | None = None,
    ) -> None:
        """``status`` None: no pod conditions written; ``evictor`` None: no preemption."""
        self.settings = s = settings or SchedulerSettings()
        self.conv = s.conventions
        self.placer, self.binder, self.events = placer, binder, events
        self.status, self.evictor = status, evictor
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
        self.nominations: dict[str, Nomination] = {}
        """Preemptors (uid) waiting for their victims, and where."""
        self._condition: dict[str, tuple[str, str | None, float]] = {}
        """uid → (message, nominated node, since) of the PodScheduled=False last written."""
        self._condition_failed: dict[str, float] = {}
        """uid → when writing its condition last failed (tried again after events.repeat)."""
        self._held_priorities: Counter[int] = Counter()
        self._held_priority: dict[str, int] = {}
        """Priorities of the pods holding resources: "is anyone preemptable?" in O(1)."""
        self._singles: dict[str, list[str]] = {}
        self.planner = Planner(self.view, typical=self._typical)
        self.outcomes: dict[str, Outcome] = {}
        """uid → the last outcome of each pod (bounded by the pods present)."""
        self._dry_logged: dict[str, str] = {}
        self._budget_blocked: dict[str, float] = {}
        """Victim units a PodDisruptionBudget protected, until when they are not asked again."""

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
            self._settled(pod.uid)
            self._held(pod.uid, pod.priority)
            held = self.view.placements.get(pod.uid)
            a = pod.gpu_assignment
            if (
                held is None
                or held.node != pod.node_name
                or (pod.assigned_gpus is not None and held.gpus != pod.assigned_gpus)
                or (a is not None and held.shares() != list(zip(a.gpus, a.milli, strict=True)))
            ):
                milli = a.milli if a is not None else None
                self.view.hold(pod.uid, pod.node_name, pod.assigned_gpus, pod.demand, milli)
        elif pod.node_name is not None:  # finished: its resources are free again
            self.view.release(pod.uid)
            self.queue.remove(pod.uid)
            self.assumed.pop(pod.uid, None)
            self._settled(pod.uid)
            self._held(pod.uid, None)
        elif pod.wants_scheduling(self.conv.scheduler_name) and self.in_scope(pod):
            if pod.uid not in self.assumed:
                self.queue.add(pod.uid, priority=pod.priority, now=self.clock())
        else:
            self.queue.remove(pod.uid)

    def in_scope(self, pod: PodInfo) -> bool:
        """Whether ``pod``'s namespace is one this scheduler places (and preempts) in."""
        scope = self.settings.namespaces
        return not scope or pod.namespace in scope

    def _forget(self, uid: str) -> None:
        self.pods.pop(uid, None)
        self.queue.remove(uid)
        self.assumed.pop(uid, None)
        self._last_event.pop(uid, None)
        self._settled(uid)
        self._held(uid, None)
        self.outcomes.pop(uid, None)
        self._dry_logged.pop(uid, None)
        self.view.release(uid)

    def _settled(self, uid: str) -> None:
        """``uid`` is bound or gone: no nomination, no condition of ours to keep in step."""
        self._condition.pop(uid, None)
        self._condition_failed.pop(uid, None)
        if self.nominations.pop(uid, None) is not None:
            self.view.unreserve(uid)

    def _held(self, uid: str, priority: int | None) -> None:
        old = self._held_priority.pop(uid, None)
        if old is not None:
            self._held_priorities[old] -= 1
            if self._held_priorities[old] <= 0:
                del self._held_priorities[old]
        if priority is not None:
            self._held_priority[uid] = priority
            self._held_priorities[priority] += 1

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

    def _only(self, node: str) -> list[str]:
        """``[node]``, the same list each time (placers cache masks by list identity)."""
        if self._eligible_version != self.view.node_version:
            self._eligible, self._eligible_version = {}, self.view.node_version
            self._singles = {}
        return self._singles.setdefault(node, [node])

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
        for pod in members:  # a nominee may use the room held for it
            self.view.unreserve(pod.uid)
        choices: list[tuple[PodInfo, Choice]] = []
        failed: PodInfo | None = None
        for pod in members:  # trial: hold each choice so the next member sees it
            choice = self._place(pod, faults)
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
            self._cannot_place(members, why)
            return 0
        refusal = next(
            (r for _, c in choices if (r := self.view.overcommit(c.node, c.gpus)) is not None),
            None,
        )
        if refusal is not None:  # the policy's choice disagrees with the accounting
            for pod, _ in choices:
                self.view.release(pod.uid, freed=False)
                self.metrics.bind_failures.labels(reason="overcommit").inc()
                self.queue.retry_later(pod.uid, now=self.clock())
                self._outcome(pod, "error", f"not bound: {refusal}")
            log.error("not binding %s: %s", ", ".join(p.key for p, _ in choices), refusal)
            self._restore_reservations(members)
            return 0
        self.metrics.decisions.labels(policy=policy, result="scheduled").inc()
        return sum(self._bind(pod, choice) for pod, choice in choices)

    def _place(self, pod: PodInfo, faults: FaultCounts) -> Choice | None:
        """The placer's choice, on the node ``pod`` is nominated to first (the room its
        preemption made), then anywhere."""
        eligible = self.eligible(pod)
        nomination = self.nominations.get(pod.uid)
        if nomination is not None and nomination.node in eligible:
            choice = self.placer.place(pod, self._only(nomination.node), faults)
            if choice is not None:
                return choice
        return self.placer.place(pod, eligible, faults)

    def _bind(self, pod: PodInfo, choice: Choice) -> int:
        self.assumed[pod.uid] = choice.node
        shares = gpu_assignment(choice.gpus, pod.demand)
        annotations = {
            self.conv.assigned_gpus_annotation: ",".join(str(g) for g in choice.gpus),
            "kale.dev/placement-policy": self.placer.name,
        }
        if choice.gpus:
            annotations[self.conv.gpu_assignment_annotation] = shares.text()
        if self.settings.dry_run:
            self.queue.remove(pod.uid)  # decided: held in the view as if bound
            self._settled(pod.uid)
            detail = f"{choice.node}" + (f" (GPUs {shares.text()})" if choice.gpus else "")
            log.info("dry run: would bind %s to %s", pod.key, detail)
            self._outcome(pod, "would bind", detail)
            return 0
        out = self.binder.bind(pod, choice.node, annotations)
        now = self.clock()
        if out.status == "bound" or (out.status == "elsewhere" and out.node == choice.node):
            entry = self.queue.remove(pod.uid)
            if entry is not None:
                self.metrics.latency.observe(max(0.0, now - entry.first_seen))
            self.metrics.bindings.inc()
            self.bound += 1
            self._last_event.pop(pod.uid, None)
            self._settled(pod.uid)
            self._outcome(
                pod,
                "bound",
                choice.node + (f" (GPUs {shares.text()})" if choice.gpus else ""),
            )
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
            self._settled(pod.uid)
            elsewhere = _assignment(out.annotations.get(self.conv.gpu_assignment_annotation))
            gpus = elsewhere.gpus if elsewhere is not None else out.gpus
            milli = elsewhere.milli if elsewhere is not None else None
            self.view.hold(pod.uid, out.node, gpus, pod.demand, milli)
        elif out.status == "gone":
            self.metrics.bind_failures.labels(reason="gone").inc()
            self._forget(pod.uid)
        else:
            self.metrics.bind_failures.labels(reason="error").inc()
            log.warning("binding %s to %s failed: %s", pod.key, choice.node, out.message)
            self._outcome(pod, "error", f"binding to {choice.node} failed: {out.message}")
            self.queue.retry_later(pod.uid, now=now)
        return 0

    # -- pods that do not fit -------------------------------------------------------------
    def _cannot_place(self, members: list[PodInfo], why: str) -> None:
        """No room for ``members`` (a pod or a gang): wait for preempted pods, preempt, or
        report them unschedulable."""
        waiting = self._waiting_on(members)
        if waiting is not None:
            self._restore_reservations(members)
            for pod in members:
                self._unschedulable(
                    pod,
                    f"{why}; waiting for preempted pods to leave {waiting}",
                    nominated=self._nominated_node(pod),
                )
            return
        self._drop_nominations(members)
        plan = self._plan_preemption(members)
        if plan is not None and self._preempt(members, plan, why):
            return
        for pod in members:
            self._unschedulable(pod, why)

    def _waiting_on(self, members: list[PodInfo]) -> str | None:
        """The node a member still waits on for its victims to leave (None: none)."""
        for pod in members:
            nomination = self.nominations.get(pod.uid)
            if nomination is not None:
                if any(self._still_there(v) for v in nomination.victims):
                    return nomination.node
            elif pod.nominated_node is not None and self._terminating_below(pod):
                return pod.nominated_node  # nominated before a restart: its victims go
        return None

    def _still_there(self, uid: str) -> bool:
        pod = self.pods.get(uid)
        return pod is not None and pod.holds_resources

    def _terminating_below(self, pod: PodInfo) -> bool:
        """Whether lower-priority pods are terminating on ``pod``'s nominated node."""
        for uid in self.view.by_node.get(pod.nominated_node or "", ()):
            other = self.pods.get(uid)
            if other is not None and other.deleting and other.priority < pod.priority:
                return True
        return False

    def _nominated_node(self, pod: PodInfo) -> str | None:
        nomination = self.nominations.get(pod.uid)
        return nomination.node if nomination is not None else pod.nominated_node

    def _restore_reservations(self, members: list[PodInfo]) -> None:
        for pod in members:
            nomination = self.nominations.get(pod.uid)
            if nomination is not None:
                self.view.reserve(pod.uid, nomination.node, nomination.gpus, pod.demand)

    def _drop_nominations(self, members: list[PodInfo]) -> None:
        for pod in members:
            if self.nominations.pop(pod.uid, None) is not None:
                self.view.unreserve(pod.uid)

    def _victim_units(self, exclude: set[str]) -> list[VictimUnit]:
        """Bound pods that may be preempted, grouped into units (a gang is one)."""
        waited_for = {v for n in self.nominations.values() for v in n.victims}
        grouped: dict[str, list[PodInfo]] = {}
        for uid, placement in self.view.placements.items():
            pod = self.pods.get(uid)
            if (
                pod is None
                or uid in self.assumed
                or not pod.holds_resources
                or pod.deleting
                or uid in waited_for
                or not self.in_scope(pod)
                or placement.node not in self.view.nodes
            ):
                continue
            grouped.setdefault(pod.gang or uid, []).append(pod)
        units = []
        for key, pods in grouped.items():
            if key in exclude:
                continue
            pods.sort(key=lambda p: p.key)
            places = tuple(self.view.placements[p.uid] for p in pods)
            units.append(VictimUnit(key, tuple(pods), places))
        return units

    def _plan_preemption(self, members: list[PodInfo]) -> Preemption | None:
        if not self.settings.preemption or (self.evictor is None and not self.settings.dry_run):
            return None
        if any(p.preemption_policy == "Never" for p in members):
            return None
        floor = min(p.priority for p in members)
        if not self._held_priorities or min(self._held_priorities) >= floor:
            return None  # nobody bound has a lower priority: the common case, in O(1)
        now = self.clock()
        for key in [k for k, until in self._budget_blocked.items() if until <= now]:
            del self._budget_blocked[key]
        units = self._victim_units(set(self._budget_blocked))
        return self.planner.plan(members, self.eligible, units)

    def _preempt(self, members: list[PodInfo], plan: Preemption, why: str) -> bool:
        """Evict the plan's victims and nominate the members; False: nothing was evicted.

        A PodDisruptionBudget may forbid a victim's eviction (the API server answers 429):
        that unit is left out and the plan made again (three rounds at most). A plan of
        several pods is first tried as a dry run, so a budget vetoes it before any pod is
        evicted; a budget is remembered for ``backoff.max`` so retries do not ask again."""
        if self.settings.dry_run:
            detail = f"would preempt {plan.describe()}"
            for pod in members:
                self.queue.remove(pod.uid)
                self._outcome(pod, "would preempt", detail)
                self._log_dry(pod, f"{why}; {detail}")
            return True
        assert self.evictor is not None
        for _ in range(3):
            blocked: set[str] = set()
            if len(plan.victims) > 1:
                blocked = {
                    u.key
                    for u in plan.units
                    if any(self.evictor.evict(v, dry_run=True).status == "blocked" for v in u.pods)
                }
            evicted: list[str] = []
            if not blocked:
                evicted, stopped = self._evict(plan, members[0])
                if evicted:
                    self._nominate(members, plan, evicted, why)
                    return True
                if stopped is None:
                    return False  # the API server failed: retried with the pod's backoff
                blocked = {stopped}
            until = self.clock() + self.settings.backoff_max_s
            self._budget_blocked.update(dict.fromkeys(blocked, until))
            self.metrics.eviction_failures.labels(reason="blocked").inc(len(blocked))
            replan = self._plan_preemption(members)
            if replan is None:
                return False
            plan = replan
        return False

    def _evict(self, plan: Preemption, preemptor: PodInfo) -> tuple[list[str], str | None]:
        """Evict the plan's victims in order; (uids evicted or gone, the unit a budget
        protected when one stopped it)."""
        assert self.evictor is not None
        evicted: list[str] = []
        for unit in plan.units:
            for victim in unit.pods:
                out = self.evictor.evict(victim)
                if out.status == "blocked":
                    return evicted, unit.key
                if out.status == "failed":
                    self.metrics.eviction_failures.labels(reason="failed").inc()
                    log.warning("preempting %s for %s: %s", victim.key, preemptor.key, out.message)
                    return evicted, None  # stop the damage: the rest may not be enough
                evicted.append(victim.uid)
                if out.status == "evicted":
                    self.metrics.preemption_victims.inc()
                    node = self.view.placements[victim.uid].node
                    self.events.pod_event(
                        victim,
                        reason="Preempted",
                        message=f"Preempted by {preemptor.key} (priority "
                        f"{preemptor.priority}) to make room on node {node}",
                        type="Normal",
                    )
        return evicted, None

    def _nominate(
        self, members: list[PodInfo], plan: Preemption, evicted: list[str], why: str
    ) -> None:
        """The members wait for the evicted pods on the plan's nodes, the room reserved."""
        self.metrics.preemptions.inc()
        summary = plan.describe()
        log.info("%s: preempting %s", ", ".join(p.key for p in members), summary)
        gone = frozenset(evicted)
        for pod, node, gpus in plan.places:
            self.nominations[pod.uid] = Nomination(node, gpus, gone)
            self.view.reserve(pod.uid, node, gpus, pod.demand)
            self.events.pod_event(
                pod,
                reason="Preempting",
                message=f"Evicting {len(evicted)} lower-priority pod(s) to make room on node "
                f"{node}: {summary}",
                type="Normal",
            )
            self._unschedulable(
                pod, f"{why}; preempting {summary}", nominated=node, result="nominated"
            )

    def _unschedulable(
        self,
        pod: PodInfo,
        why: str,
        *,
        nominated: str | None = None,
        result: str = "unschedulable",
    ) -> None:
        now = self.clock()
        self.queue.unschedulable(pod.uid, now=now, version=self.view.freed_version)
        self._outcome(pod, result, why)
        if self.settings.dry_run:
            self._log_dry(pod, why)
            return
        last = self._last_event.get(pod.uid)
        if last is None or last[0] != why or now - last[1] >= self.settings.event_repeat_s:
            self._last_event[pod.uid] = (why, now)
            self.events.pod_event(pod, reason="FailedScheduling", message=why, type="Warning")
            log.info("%s: %s", pod.key, why)
        self._set_condition(pod, why, nominated, now)

    def _set_condition(self, pod: PodInfo, why: str, nominated: str | None, now: float) -> None:
        """``PodScheduled=False``/``Unschedulable`` with ``why`` on the pod's status, written
        only when the message or the nomination changes (Cluster Autoscaler reads it)."""
        if self.status is None:
            return
        written = self._condition.get(pod.uid)
        if written is not None and written[:2] == (why, nominated):
            return
        cond = pod.scheduled_condition
        if (
            written is None
            and cond is not None
            and (cond.status, cond.reason, cond.message) == ("False", "Unschedulable", why)
            and pod.nominated_node == nominated
        ):  # already there (written before a restart)
            self._condition[pod.uid] = (why, nominated, now)
            return
        if written is not None:
            since = written[2]
        elif cond is not None and cond.status == "False":
            since = _epoch(cond.last_transition, now)
        else:
            since = now
        failed_at = self._condition_failed.get(pod.uid)
        if failed_at is not None and now - failed_at < self.settings.event_repeat_s:
            return  # the API server failed it lately: not again on every retry
        if self.status.unschedulable(pod, message=why, since=since, nominated_node=nominated):
            self._condition[pod.uid] = (why, nominated, since)
            self._condition_failed.pop(pod.uid, None)
            self.metrics.status_updates.inc()
        else:
            self._condition_failed[pod.uid] = now
            self.metrics.errors.labels(kind="status").inc()

    def _outcome(self, pod: PodInfo, result: str, detail: str) -> None:
        self.outcomes[pod.uid] = Outcome(pod.key, result, detail)

    def _log_dry(self, pod: PodInfo, message: str) -> None:
        if self._dry_logged.get(pod.uid) != message:
            self._dry_logged[pod.uid] = message
            log.info("dry run: %s: %s", pod.key, message)

    def _typical(self) -> TypicalPods | None:
        """The typical pods fragmentation is measured against: the policy's, else those of
        the pods held now."""
        typical = getattr(self.placer, "typical", None)
        if isinstance(typical, TypicalPods):
            return typical
        pods = []
        for uid, held in self.view.placements.items():
            try:
                pods.append(placement_pod(uid, held.demand))
            except (ValueError, PlacementError):
                continue
        return typical_pods(pods) if pods else None

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
        entries = self.queue.entries.values()
        m.unschedulable.set(sum(1 for e in entries if e.state == "unschedulable"))
        oldest = min((e.first_seen for e in entries), default=None)
        m.longest_pending.set(0.0 if oldest is None else max(0.0, now - oldest))
        m.nominated.set(len(self.nominations))
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


def _assignment(text: str | None) -> GpuAssignment | None:
    if not text:
        return None
    try:
        return parse_gpu_assignment(text)
    except ValueError:
        return None


def _epoch(stamp: str, default: float) -> float:
    """An RFC 3339 time as epoch seconds (``default`` when unreadable)."""
    try:
        return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return default
