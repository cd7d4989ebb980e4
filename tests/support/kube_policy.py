"""What the fake API server does for priorities, disruption budgets and pod conditions.

* **Priority admission** (the ``Priority`` admission plugin): a pod created with
  ``spec.priorityClassName`` gets ``spec.priority`` (and ``spec.preemptionPolicy``) from that
  ``scheduling.k8s.io/v1`` PriorityClass — 403 when there is none; without a name, from the
  class marked ``globalDefault`` (else 0). Through the REST API a pod that states a
  ``spec.priority`` other than the computed one is refused, as the plugin does; the tests'
  direct ``put_pod`` keeps a priority it states (an admin writing storage). The built-in
  classes ``system-cluster-critical`` and ``system-node-critical`` always exist.
* **Evictions** (``POST pods/<name>/eviction``, ``policy/v1``): allowed unless a
  ``policy/v1`` PodDisruptionBudget selecting the pod has no disruption left — computed as
  the disruption controller would (healthy pods: ``Running`` and not terminating;
  ``minAvailable`` or ``maxUnavailable``, integers or percentages) — which answers 429
  ``TooManyRequests`` with a ``DisruptionBudget`` cause; more than one budget answers 500, as
  the server does. ``dryRun=All`` checks without evicting. An evicted pod is deleted: at
  once when it is not bound (no kubelet to wait for), else gracefully when the store's
  ``graceful_deletion`` is on (``deletionTimestamp`` set; :meth:`CoreStore.finish_deletion`
  plays the kubelet), else at once.
* **Strategic merge of pod conditions**: a strategic merge patch merges
  ``status.conditions`` by ``type`` (the list's merge key), so patching ``PodScheduled``
  leaves the kubelet's other conditions alone; everything else merges as a JSON merge patch.
"""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING, Any

from .kube_watch import _error

if TYPE_CHECKING:
    from .kube_core import CoreStore

PRIORITY_CLASSES = ("scheduling.k8s.io", "v1", "priorityclasses")
BUDGETS = ("policy", "v1", "poddisruptionbudgets")
BUILTIN_CLASSES = {"system-cluster-critical": 2_000_000_000, "system-node-critical": 2_000_001_000}
MERGE_KEYS = {"conditions": "type"}
"""Lists merged by a key in a strategic merge patch (the pod's and node's conditions)."""


# -- priorities -------------------------------------------------------------------------
def _classes(store: CoreStore) -> dict[str, dict]:
    found = {
        name: {"value": value, "preemptionPolicy": "PreemptLowerPriority"}
        for name, value in BUILTIN_CLASSES.items()
    }
    for key in store.api.indexed[PRIORITY_CLASSES]:
        found[key[4]] = store.api.objects[key]
    return found


def admit_priority(store: CoreStore, pod: dict, *, strict: bool) -> None:
    """Set ``spec.priority`` (and ``preemptionPolicy``) of a pod being created."""
    spec = pod.setdefault("spec", {})
    classes = _classes(store)
    name = spec.get("priorityClassName")
    if name:
        pc = classes.get(name)
        if pc is None:
            raise _error(
                403,
                "Forbidden",
                f'pods "{pod["metadata"].get("name")}" is forbidden: no PriorityClass with '
                f"name {name} was found",
            )
    else:
        defaults = [(n, c) for n, c in classes.items() if c.get("globalDefault")]
        if not defaults:
            if not strict or "priority" not in spec:
                spec.setdefault("priority", 0)
                return
            name, pc = "", {"value": 0}
        else:
            name, pc = min(defaults, key=lambda nc: nc[1].get("value", 0))
            spec["priorityClassName"] = name
    value = int(pc.get("value", 0))
    stated = spec.get("priority")
    if stated is not None and stated != value and (strict or name):
        raise _error(
            403,
            "Forbidden",
            f'pods "{pod["metadata"].get("name")}" is forbidden: the integer value of priority '
            f"({stated}) must not be provided in pod spec; priority admission controller "
            f"computed {value} from the given PriorityClass name",
        )
    spec["priority"] = value
    spec.setdefault("preemptionPolicy", pc.get("preemptionPolicy") or "PreemptLowerPriority")


# -- disruption budgets and evictions -------------------------------------------------------
def _selects(selector: dict, labels: dict) -> bool:
    if not selector:
        return False  # an empty selector in policy/v1 selects nothing here (no pods in tests)
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": labels.get(key) in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def _healthy(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get(
        "deletionTimestamp"
    )


def _count(value: Any, total: int, *, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        share = int(value[:-1]) * total / 100
        return math.ceil(share) if round_up else math.floor(share)
    return int(value)


def budget_verdict(store: CoreStore, pod: dict) -> tuple[int, str] | None:
    """Why ``pod`` may not be evicted now — (500, reason): more than one budget; (429, the
    budget's message): no disruption left — or None: it may."""
    ns = pod["metadata"]["namespace"]
    labels = pod["metadata"].get("labels") or {}
    stored = [store.api.objects[key] for key in store.api.indexed[BUDGETS] if key[3] == ns]
    budgets = [obj for obj in stored if _selects(obj["spec"].get("selector"), labels)]
    if not budgets:
        return None
    if len(budgets) > 1:
        return 500, (
            "This pod has more than one PodDisruptionBudget, which the eviction subresource "
            "does not support."
        )
    (pdb,) = budgets
    spec, name = pdb["spec"], pdb["metadata"]["name"]
    selected = [
        p
        for (pns, _), p in store.pods.items()
        if pns == ns and _selects(spec.get("selector"), p["metadata"].get("labels") or {})
    ]
    healthy = sum(1 for p in selected if _healthy(p))
    if "minAvailable" in spec:
        desired = _count(spec["minAvailable"], len(selected), round_up=True)
    else:
        desired = len(selected) - _count(
            spec.get("maxUnavailable", 0), len(selected), round_up=True
        )
    if not _healthy(pod):  # unhealthyPodEvictionPolicy: IfHealthyBudget
        return None if healthy >= desired else (429, f"The disruption budget {name} is unhealthy")
    if healthy - desired >= 1:
        return None
    return 429, (
        f"The disruption budget {name} needs {desired} healthy pods and has {healthy} currently"
    )


def evict(store: CoreStore, key: tuple[str, str], body: Any, query: dict[str, list[str]]) -> dict:
    """``POST pods/<name>/eviction`` (call with the store's lock held)."""
    pod = store.pods.get(key)
    if pod is None:
        raise _error(
            404, "NotFound", f'pods "{key[1]}" not found', {"name": key[1], "kind": "pods"}
        )
    if not isinstance(body, dict) or body.get("kind") != "Eviction":
        raise _error(400, "BadRequest", "the body must be an Eviction")
    if body.get("apiVersion") not in ("policy/v1", "policy/v1beta1"):
        raise _error(400, "BadRequest", f"unsupported Eviction version {body.get('apiVersion')}")
    if (body.get("metadata") or {}).get("name") not in (None, key[1]):
        raise _error(400, "BadRequest", "name in URL does not match name in Eviction object")
    options = body.get("deleteOptions") or {}
    uid = (options.get("preconditions") or {}).get("uid")
    if uid and uid != pod["metadata"]["uid"]:
        raise _error(
            409,
            "Conflict",
            f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
            f"{pod['metadata']['uid']}",
        )
    dry_run = "All" in (query.get("dryRun") or []) or "All" in (options.get("dryRun") or [])
    verdict = None
    if not pod["metadata"].get("deletionTimestamp"):  # a terminating pod: nothing to check
        verdict = budget_verdict(store, pod)
    if verdict is not None and verdict[0] == 500:
        raise _error(500, "InternalError", verdict[1])
    if verdict is not None:
        raise _error(
            429,
            "TooManyRequests",
            "Cannot evict pod as it would violate the pod's disruption budget.",
            {"causes": [{"reason": "DisruptionBudget", "message": verdict[1]}]},
        )
    if not dry_run:
        store.evictions.append((key[0], key[1]))
        store.delete_gracefully(key, options.get("gracePeriodSeconds"))
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }


# -- strategic merge of conditions ----------------------------------------------------------
def strategic_merge(target: Any, patch: Any) -> Any:
    """A strategic merge patch as the API server applies it to pods and nodes: a JSON merge
    patch, except that ``conditions`` lists merge by ``type`` (``$setElementOrder`` and
    ``$retainKeys`` directives are ignored)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$"):
            continue
        if v is None:
            out.pop(k, None)
        elif k in MERGE_KEYS and isinstance(v, list) and isinstance(out.get(k), list):
            out[k] = _merge_list(out[k], v, MERGE_KEYS[k])
        else:
            out[k] = strategic_merge(out.get(k), v)
    return out


def _merge_list(current: list, patch: list, key: str) -> list:
    merged = [copy.deepcopy(c) for c in current]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            return copy.deepcopy(patch)  # not a keyed list after all: replaced
        at = next((i for i, c in enumerate(merged) if c.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if at is not None:
                del merged[at]
        elif at is None:
            merged.append(strategic_merge({}, item))
        else:
            merged[at] = strategic_merge(merged[at], item)
    return merged
