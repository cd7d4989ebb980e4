"""What the API server does beyond storing pods: the Binding subresource and the
StatefulSet controller's pods.

* ``POST pods/<name>/binding``: sets ``spec.nodeName``, copies the Binding's annotations onto
  the pod (what the real registry does), adds the ``PodScheduled`` condition; an already
  assigned pod answers 409 ``Conflict`` (a pod is bound at most once), as does a UID
  precondition that does not match;
* a stand-in for the StatefulSet controller (off by default): pods ``<sts>-<i>`` created from
  the template and deleted from the top when ``spec.replicas`` changes.
"""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING, Any

from .kube_watch import _error

if TYPE_CHECKING:
    from .kube_core import CoreStore


def _iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def bind(store: CoreStore, key: tuple[str, str], body: Any) -> dict:
    """``POST pods/<name>/binding`` (call with the store's lock held)."""
    pod = store.pods.get(key)
    if pod is None:
        raise _error(404, "NotFound", f'pods "{key[1]}" not found', {"name": key[1]})
    if not isinstance(body, dict) or not (body.get("target") or {}).get("name"):
        raise _error(400, "BadRequest", "a Binding needs target.name")
    md = body.get("metadata") or {}
    if md.get("name") not in (None, key[1]):
        raise _error(400, "BadRequest", "the Binding's name must be the pod's")
    conflict = None
    if pod["spec"].get("nodeName"):
        conflict = f"pod {key[1]} is already assigned to node {pod['spec']['nodeName']!r}"
    elif pod["metadata"].get("deletionTimestamp"):
        conflict = f"pod {key[1]} is being deleted, cannot be assigned to a host"
    elif md.get("uid") and md["uid"] != pod["metadata"]["uid"]:
        conflict = f"Precondition failed: UID in precondition: {md['uid']}"
    if conflict:
        raise _error(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on pods/binding "{key[1]}": {conflict}',
            {"name": key[1], "kind": "pods/binding"},
        )
    node = body["target"]["name"]
    new = copy.deepcopy(pod)
    new["spec"]["nodeName"] = node
    if md.get("annotations"):
        new["metadata"].setdefault("annotations", {}).update(md["annotations"])
    conditions = new.setdefault("status", {}).setdefault("conditions", [])
    conditions[:] = [c for c in conditions if c.get("type") != "PodScheduled"]
    conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": _iso()})
    store._write("pods", key, new)
    store.bindings.append((key[0], key[1], node))
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }


def statefulset_pods(store: CoreStore, sts: dict) -> None:
    """Create/delete ``<name>-<i>`` pods so that they number ``spec.replicas``."""
    if not store.statefulset_pods:
        return
    md, spec = sts["metadata"], sts.get("spec", {})
    ns, name = md["namespace"], md["name"]
    want = int(spec.get("replicas", 1))
    template = spec.get("template", {})
    with store.cond:
        ordinals = (k[1].rsplit("-", 1) for k in store.pods if k[0] == ns)
        have = sorted(int(p[1]) for p in ordinals if p[0] == name and p[1].isdigit())
        for i in range(want):
            if i in have:
                continue
            pod = copy.deepcopy(template)
            pmd = pod.setdefault("metadata", {})
            pmd.update(name=f"{name}-{i}", namespace=ns)
            pmd.setdefault("labels", {}).update(
                {
                    "statefulset.kubernetes.io/pod-name": f"{name}-{i}",
                    "apps.kubernetes.io/pod-index": str(i),
                }
            )
            pmd["ownerReferences"] = [
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "name": name,
                    "uid": md.get("uid", ""),
                    "controller": True,
                }
            ]
            store._write("pods", (ns, f"{name}-{i}"), pod)
        for i in reversed(have):
            if i >= want:
                store._delete("pods", (ns, f"{name}-{i}"))
