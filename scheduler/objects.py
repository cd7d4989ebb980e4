"""Pods and Nodes as the scheduler sees them: typed views parsed from the API's JSON.

Why a module of its own: every Kubernetes convention the scheduler depends on — which
resource is a GPU, which label names the GPU model, how a GPU-sharing pod says how much of
a GPU it wants, which annotation records the GPUs a pod holds, how a gang is named — is
decided here, once, and configurable (:class:`Conventions`). The rest of the scheduler
works on :class:`PodInfo` and :class:`NodeInfo` and never reads raw JSON.

GPU demand (the FGD simulator's model): a pod asks ``gpu_count`` GPUs with ``gpu_milli``
thousandths of each. Whole GPUs come from the ``nvidia.com/gpu`` request (or limit: for
extended resources a limit implies the request); a GPU-sharing pod cannot ask the device
plugin for part of a GPU, so it says ``kale.dev/gpu-milli`` (1–999) and optionally
``kale.dev/gpu-count`` in annotations. ``kale.dev/gpu-model: "A|B"`` (or a node selector on
the model label) restricts the GPU models.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from kube.quantity import QuantityError, count, cpu_milli, memory_mib
from scheduler.affinity import NodeAffinity, allows, parse_node_affinity

log = logging.getLogger(__name__)

DONE_PHASES = frozenset({"Succeeded", "Failed"})
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True)
class Conventions:
    """Names of the resources, labels and annotations the scheduler reads and writes."""

    scheduler_name: str = "kale"
    """Pods with this ``spec.schedulerName`` are ours."""
    gpu_resource: str = "nvidia.com/gpu"
    gpu_model_label: str = "nvidia.com/gpu.product"
    """Node label naming the GPU model (NVIDIA GPU feature discovery sets this one)."""
    gpu_milli_annotation: str = "kale.dev/gpu-milli"
    gpu_count_annotation: str = "kale.dev/gpu-count"
    gpu_model_annotation: str = "kale.dev/gpu-model"
    assigned_gpus_annotation: str = "kale.dev/gpus"
    """Written by the scheduler through the Binding: the GPU indices the pod holds."""
    gpu_assignment_annotation: str = "kale.dev/gpu-assignment"
    """Written through the Binding beside ``assigned_gpus_annotation``: ``GPU:milli`` pairs
    (``"0:500,1:1000"``), what a device plugin enforces and what a restarted scheduler
    rebuilds its accounting from (see :func:`parse_gpu_assignment`)."""
    gang_label: str = "kale.dev/gang"
    gang_size_annotation: str = "kale.dev/gang-size"
    faults_annotation: str = "kale.dev/gpu-faults"
    fault_conditions: tuple[str, ...] = ("GPUUnhealthy",)
    """Node condition types that count as a GPU fault while ``True``."""
    fault_event_reasons: tuple[str, ...] = ("XidError", "GPUXid")
    """Reasons of Node Events that count as a GPU fault (a node agent's Xid rule)."""
    fault_gpu_annotation: str = "kale.dev/gpu"
    """On a fault Event: the GPU index, when the message does not name it."""


@dataclass(frozen=True, slots=True)
class Demand:
    """What a pod asks for."""

    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_count: int = 0
    gpu_milli: int = 0
    """Per GPU; 1000 for whole GPUs."""
    gpu_models: frozenset[str] | None = None
    """Allowed GPU models (None: any)."""

    @property
    def sharing(self) -> bool:
        """A fraction of one GPU, packed next to other sharing pods."""
        return self.gpu_count == 1 and 0 < self.gpu_milli < 1000

    @property
    def gpu_total_milli(self) -> int:
        return self.gpu_count * self.gpu_milli


@dataclass(slots=True)
class PodInfo:
    """A pod: identity, demand, constraints, and where it runs (if anywhere)."""

    uid: str
    namespace: str
    name: str
    demand: Demand
    scheduler_name: str = "default-scheduler"
    node_name: str | None = None
    phase: str = "Pending"
    priority: int = 0
    deleting: bool = False
    assigned_gpus: tuple[int, ...] | None = None
    gang: str | None = None
    """``namespace/name`` of the pod's gang, if any."""
    gang_size: int = 1
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    node_affinity: NodeAffinity | None = None
    """Required node affinity (``nodeSelectorTerms``); None: any node."""
    problem: str | None = None
    """Why the pod cannot be scheduled whatever the cluster looks like (bad annotation)."""
    gpu_assignment: GpuAssignment | None = None
    """The ``GPU:milli`` shares the pod holds, from its assignment annotation (None: absent)."""
    preemption_policy: str = "PreemptLowerPriority"
    """``spec.preemptionPolicy`` (set from the PriorityClass by the API server); ``Never``:
    the pod waits instead of evicting anyone."""
    nominated_node: str | None = None
    """``status.nominatedNodeName``: where the pod waits for preempted pods to leave."""
    scheduled_condition: PodCondition | None = None
    """The pod's ``PodScheduled`` condition as the API server holds it."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def holds_resources(self) -> bool:
        """Bound and not finished: its requests count against its node."""
        return self.node_name is not None and self.phase not in DONE_PHASES

    def wants_scheduling(self, scheduler_name: str) -> bool:
        return (
            self.scheduler_name == scheduler_name
            and self.node_name is None
            and self.phase == "Pending"
            and not self.deleting
        )


@dataclass(frozen=True, slots=True)
class PodCondition:
    """A pod condition as read (``status``, ``reason``, ``message``, ``lastTransitionTime``)."""

    status: str
    reason: str = ""
    message: str = ""
    last_transition: str = ""


@dataclass(frozen=True, slots=True)
class GpuAssignment:
    """GPUs and the thousandths of each a pod holds: ``kale.dev/gpu-assignment``.

    The text form is ``GPU:milli`` pairs joined by commas, GPUs in increasing order
    (``"0:500"`` half of GPU 0; ``"2:1000,3:1000"`` GPUs 2 and 3 whole): what a device
    plugin or a CUDA_VISIBLE_DEVICES webhook reads, and what a restarted scheduler rebuilds
    its per-GPU accounting from.
    """

    gpus: tuple[int, ...]
    milli: tuple[int, ...]

    def text(self) -> str:
        return ",".join(f"{g}:{m}" for g, m in zip(self.gpus, self.milli, strict=True))


def parse_gpu_assignment(text: str) -> GpuAssignment:
    """``"0:500,1:1000"`` as a :class:`GpuAssignment`; ValueError names what is wrong."""
    gpus: list[int] = []
    milli: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        index, sep, share = part.partition(":")
        if not sep:
            raise ValueError(f"{part!r} is not GPU:milli")
        g, m = int(index), int(share)
        if g < 0 or not 1 <= m <= 1000:
            raise ValueError(f"{part!r}: the GPU must be >= 0 and the milli 1-1000")
        if g in gpus:
            raise ValueError(f"GPU {g} appears twice")
        gpus.append(g)
        milli.append(m)
    return GpuAssignment(tuple(gpus), tuple(milli))


def gpu_assignment(gpus: tuple[int, ...], demand: Demand) -> GpuAssignment:
    """What a pod of ``demand`` placed on ``gpus`` holds (every GPU: ``demand.gpu_milli``)."""
    return GpuAssignment(tuple(gpus), tuple(demand.gpu_milli for _ in gpus))


@dataclass(frozen=True, slots=True)
class Fault:
    """One GPU fault seen on a node (``gpu`` None: the node as a whole)."""

    time: float
    gpu: int | None
    reason: str


@dataclass(slots=True)
class NodeInfo:
    """A node's capacity and whether new pods may go there."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str | None
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, Any]] = field(default_factory=list)
    unschedulable: bool = False
    ready: bool = True
    max_pods: int = 110
    faults: tuple[Fault, ...] = ()

    @property
    def blocked(self) -> str | None:
        """Why no new pod may land here at all (None: it may)."""
        if self.unschedulable:
            return "node(s) were unschedulable"
        if not self.ready:
            return "node(s) had condition NotReady"
        return None


def event_time(value: Any) -> float | None:
    """An RFC 3339 time (``…Z``, fractions allowed) as seconds since the epoch, or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _resources(container: dict[str, Any], key: str) -> dict[str, Any]:
    return (container.get("resources") or {}).get(key) or {}


def _requests(spec: dict[str, Any], conv: Conventions) -> tuple[int, int, int]:
    """Effective cpu milli, memory MiB and whole GPUs: sum of containers vs. the largest init
    container, plus the pod overhead (the scheduler framework's rule)."""

    def one(c: dict[str, Any]) -> tuple[int, int, int]:
        req, lim = _resources(c, "requests"), _resources(c, "limits")
        gpu = req.get(conv.gpu_resource, lim.get(conv.gpu_resource, 0))
        return (
            cpu_milli(req.get("cpu", 0)),
            memory_mib(req.get("memory", 0)),
            count(gpu),
        )

    main = [one(c) for c in spec.get("containers") or []]
    init = [one(c) for c in spec.get("initContainers") or []]
    total = [sum(v) for v in zip(*main, strict=True)] if main else [0, 0, 0]
    for i in range(3):
        total[i] = max([total[i], *(c[i] for c in init)])
    overhead = spec.get("overhead") or {}
    total[0] += cpu_milli(overhead.get("cpu", 0))
    total[1] += memory_mib(overhead.get("memory", 0))
    return total[0], total[1], total[2]


def parse_pod(obj: dict[str, Any], conv: Conventions) -> PodInfo:
    """A :class:`PodInfo`; a pod whose resources cannot be read gets ``problem`` set."""
    md, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    ann, labels = md.get("annotations") or {}, md.get("labels") or {}
    ns = md.get("namespace", "default")
    problem = None
    demand = Demand()
    try:
        cpu, mem, whole = _requests(spec, conv)
        milli_text = ann.get(conv.gpu_milli_annotation)
        if milli_text is not None:
            milli = int(milli_text)
            k = int(ann.get(conv.gpu_count_annotation, 1))
            if not 1 <= milli <= 1000 or k < 1:
                raise ValueError(f"{conv.gpu_milli_annotation} must be 1-1000 and count >= 1")
            if k > 1 and milli < 1000:
                raise ValueError("a pod asking for several GPUs must take them whole")
        else:
            milli, k = (1000, whole) if whole else (0, 0)
        models = ann.get(conv.gpu_model_annotation) or (spec.get("nodeSelector") or {}).get(
            conv.gpu_model_label
        )
        allowed = frozenset(m.strip() for m in models.split("|") if m.strip()) if models else None
        demand = Demand(cpu, mem, k, milli, allowed)
    except (QuantityError, ValueError, TypeError) as exc:
        problem = f"invalid resources: {exc}"
    gpus = None
    if conv.assigned_gpus_annotation in ann:
        try:
            text = str(ann[conv.assigned_gpus_annotation])
            gpus = tuple(int(g) for g in text.split(",") if g.strip())
        except ValueError:
            log.warning("%s/%s: unreadable %s", ns, md.get("name"), conv.assigned_gpus_annotation)
    affinity = None
    try:
        affinity = parse_node_affinity(spec)
    except ValueError as exc:
        problem = f"invalid node affinity: {exc}"
    assignment = None
    if ann.get(conv.gpu_assignment_annotation):
        try:
            assignment = parse_gpu_assignment(str(ann[conv.gpu_assignment_annotation]))
        except ValueError as exc:
            log.warning(
                "%s/%s: unreadable %s: %s", ns, md.get("name"), conv.gpu_assignment_annotation, exc
            )
    if assignment is not None:  # what a device plugin enforces wins over the bare indices
        gpus = assignment.gpus
    gang, gang_size = None, 1
    if labels.get(conv.gang_label):
        gang = f"{ns}/{labels[conv.gang_label]}"
        try:
            gang_size = int(ann.get(conv.gang_size_annotation, labels.get("kale.dev/gang-size", 1)))
            if gang_size < 1:
                raise ValueError
        except ValueError:
            problem = f"{conv.gang_size_annotation} must be a positive integer"
    return PodInfo(
        uid=md.get("uid") or f"{ns}/{md.get('name')}",
        namespace=ns,
        name=md.get("name", ""),
        demand=demand,
        scheduler_name=spec.get("schedulerName") or "default-scheduler",
        node_name=spec.get("nodeName") or None,
        phase=status.get("phase") or "Pending",
        priority=int(spec.get("priority") or 0),
        deleting=bool(md.get("deletionTimestamp")),
        assigned_gpus=gpus,
        gang=gang,
        gang_size=gang_size,
        node_selector={
            k: v for k, v in (spec.get("nodeSelector") or {}).items() if k != conv.gpu_model_label
        },
        tolerations=list(spec.get("tolerations") or []),
        node_affinity=affinity,
        problem=problem,
        gpu_assignment=assignment,
        preemption_policy=spec.get("preemptionPolicy") or "PreemptLowerPriority",
        nominated_node=status.get("nominatedNodeName") or None,
        scheduled_condition=_condition(status, "PodScheduled"),
    )


def _condition(status: dict[str, Any], kind: str) -> PodCondition | None:
    for cond in status.get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == kind:
            return PodCondition(
                str(cond.get("status") or ""),
                str(cond.get("reason") or ""),
                str(cond.get("message") or ""),
                str(cond.get("lastTransitionTime") or ""),
            )
    return None


def _faults(md: dict[str, Any], status: dict[str, Any], conv: Conventions) -> tuple[Fault, ...]:
    out: list[Fault] = []
    raw = (md.get("annotations") or {}).get(conv.faults_annotation)
    if raw:
        try:
            for rec in json.loads(raw):
                t = event_time(rec.get("time"))
                if t is not None:
                    gpu = None if rec.get("gpu") is None else int(rec["gpu"])
                    out.append(Fault(t, gpu, rec.get("reason", "")))
        except (ValueError, TypeError, AttributeError):
            log.warning("node %s: unreadable %s annotation", md.get("name"), conv.faults_annotation)
    for cond in status.get("conditions") or []:
        if cond.get("type") in conv.fault_conditions and cond.get("status") == "True":
            t = event_time(cond.get("lastTransitionTime")) or event_time(
                cond.get("lastHeartbeatTime")
            )
            if t is not None:
                out.append(Fault(t, None, f"{cond['type']}: {cond.get('reason', '')}"))
    return tuple(sorted(out, key=lambda f: f.time))


def parse_node(obj: dict[str, Any], conv: Conventions) -> NodeInfo:
    """A :class:`NodeInfo`; unreadable quantities count as zero capacity (logged)."""
    md, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    labels = md.get("labels") or {}
    try:
        cpu, mem = cpu_milli(alloc.get("cpu", 0)), memory_mib(alloc.get("memory", 0))
        gpus, max_pods = count(alloc.get(conv.gpu_resource, 0)), count(alloc.get("pods", 110))
    except QuantityError as exc:
        log.warning("node %s: %s; treating it as full", md.get("name"), exc)
        cpu = mem = gpus = max_pods = 0
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return NodeInfo(
        name=md.get("name", ""),
        cpu_milli=cpu,
        memory_mib=mem,
        gpus=gpus,
        model=labels.get(conv.gpu_model_label),
        labels=dict(labels),
        taints=[t for t in spec.get("taints") or [] if t.get("effect") in BLOCKING_EFFECTS],
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
        max_pods=max_pods,
        faults=_faults(md, status, conv),
    )


def tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    """Whether one of ``tolerations`` tolerates ``taint`` (the API's matching rules)."""
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        op = tol.get("operator") or "Equal"
        key = tol.get("key")
        if not key:
            if op == "Exists":
                return True
            continue
        if key != taint.get("key"):
            continue
        if op == "Exists" or (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def ineligible(pod: PodInfo, node: NodeInfo) -> str | None:
    """Why ``pod`` may not go to ``node`` regardless of free resources (None: it may)."""
    blocked = node.blocked
    if blocked is not None:
        return blocked
    for taint in node.taints:
        if not tolerates(pod.tolerations, taint):
            return "node(s) had untolerated taint(s)"
    for k, v in pod.node_selector.items():
        if node.labels.get(k) != v:
            return "node(s) didn't match Pod's node affinity/selector"
    if not allows(pod.node_affinity, node.name, node.labels):
        return "node(s) didn't match Pod's node affinity/selector"
    models = pod.demand.gpu_models
    if pod.demand.gpu_count and models is not None and node.model not in models:
        return "node(s) had no allowed GPU model"
    return None
