"""Nodes, Pods, node Events, PriorityClasses and PodDisruptionBudgets as the kubelet, the GPU
device plugin, a user, a node agent and a cluster admin would write them."""

from __future__ import annotations

import time
from typing import Any


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def node_doc(
    name: str,
    *,
    gpus: int = 8,
    model: str = "V100M32",
    cpu_milli: int = 96_000,
    memory_mib: int = 393_216,
    model_label: str = "nvidia.com/gpu.product",
    unschedulable: bool = False,
    ready: bool = True,
    taints: list[dict] | None = None,
    annotations: dict[str, str] | None = None,
    conditions: list[dict] | None = None,
    max_pods: int = 110,
) -> dict:
    """A Node as the kubelet and the GPU device plugin report it."""
    alloc = {"cpu": f"{cpu_milli}m", "memory": f"{memory_mib}Mi", "pods": str(max_pods)}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    conds = [{"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady"}]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **({model_label: model} if gpus else {})},
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
        "status": {
            "capacity": dict(alloc),
            "allocatable": alloc,
            "conditions": conds + list(conditions or []),
        },
    }


def pod_doc(
    name: str,
    *,
    namespace: str = "ml",
    gpus: int = 0,
    gpu_milli: int | None = None,
    cpu_milli: int = 1000,
    memory_mib: int = 1024,
    scheduler: str = "kale",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    node: str | None = None,
    priority: int | None = None,
    gpu_models: str | None = None,
    priority_class: str | None = None,
) -> dict:
    """A Pod; ``gpu_milli`` < 1000 makes it a GPU-sharing pod (``kale.dev/gpu-milli``);
    ``gpu_models`` ("A|B") restricts the GPU models (``kale.dev/gpu-model``);
    ``priority_class`` names a PriorityClass (the API server sets ``spec.priority``)."""
    requests: dict[str, str] = {"cpu": f"{cpu_milli}m", "memory": f"{memory_mib}Mi"}
    ann = dict(annotations or {})
    if gpu_models:
        ann["kale.dev/gpu-model"] = gpu_models
    if gpu_milli is not None and gpu_milli < 1000:
        ann["kale.dev/gpu-milli"] = str(gpu_milli)
        ann.setdefault("kale.dev/gpu-count", str(max(gpus, 1)))
    elif gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    limits = {k: v for k, v in requests.items() if k == "nvidia.com/gpu"}
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [
            {"name": "main", "image": "x", "resources": {"requests": requests, "limits": limits}}
        ],
    }
    if node:
        spec["nodeName"] = node
    if priority is not None:
        spec["priority"] = priority
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels or {}),
            "annotations": ann,
        },
        "spec": spec,
    }


def node_event_doc(
    node: str,
    *,
    first: float,
    last: float | None = None,
    count: int = 1,
    reason: str = "XidError",
    message: str = "NVRM: Xid (PCI:0000:3b:00): 79, pid=2931, GPU has fallen off the bus.",
    name: str | None = None,
    annotations: dict[str, str] | None = None,
) -> dict:
    """A Warning Event on a Node as node-problem-detector's kernel monitor writes one for a
    kernel log line (``involvedObject`` the node, its UID the node's name, in ``default``);
    ``count`` > 1 is an Event the recorder aggregated (seen ``count`` times, the first at
    ``first`` and the last at ``last``)."""
    last = first if last is None else last
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": name or f"{node}.{int(first * 1e9):x}",
            "namespace": "default",
            "annotations": dict(annotations or {}),
        },
        "involvedObject": {"kind": "Node", "name": node, "uid": node, "apiVersion": "v1"},
        "reason": reason,
        "message": message,
        "type": "Warning",
        "count": count,
        "firstTimestamp": _iso(first),
        "lastTimestamp": _iso(last),
        "source": {"component": "kernel-monitor", "host": node},
    }


def priority_class_doc(
    name: str, value: int, *, global_default: bool = False, preemption_policy: str | None = None
) -> dict:
    """A ``scheduling.k8s.io/v1`` PriorityClass."""
    doc: dict[str, Any] = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": global_default,
        "description": f"priority {value}",
    }
    if preemption_policy is not None:
        doc["preemptionPolicy"] = preemption_policy
    return doc


def pdb_doc(
    name: str,
    labels: dict[str, str],
    *,
    namespace: str = "ml",
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
) -> dict:
    """A ``policy/v1`` PodDisruptionBudget selecting pods with ``labels``."""
    spec: dict[str, Any] = {"selector": {"matchLabels": dict(labels)}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
