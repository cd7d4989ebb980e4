"""Pods, Nodes, ``pods/binding`` and watches for the fake API server (a scheduler's view).

A scheduler lives on list + watch, so this part of the fake serves what client-go's
reflector (and Kale's) relies on, with the real paths and JSON shapes:

* ``core/v1`` pods (namespaced, ``status`` subresource, ``binding`` subresource) and nodes
  (cluster-scoped, ``status`` subresource); lists across namespaces;
* ``?watch=true`` streams newline-delimited ``{"type": ..., "object": ...}`` events over a
  chunked response: from a ``resourceVersion`` (only newer changes), or from the current
  state (synthetic ADDED events first) when none is given; ``BOOKMARK`` events carrying the
  latest resourceVersion when ``allowWatchBookmarks=true``; ``timeoutSeconds`` ends the
  stream; a resourceVersion older than the retained history answers an ``ERROR`` event with
  a 410 ``Expired`` Status (``compact()`` forgets the history to force that);
* ``fieldSelector`` (``=``, ``==``, ``!=`` on ``metadata.name``/``metadata.namespace``,
  ``spec.nodeName``, ``spec.schedulerName``, ``status.phase``) and ``labelSelector``
  (``k=v``, ``k!=v``, ``k``, ``!k``) on lists and watches; an object that stops matching a
  watch's selector is sent as DELETED, one that starts matching as ADDED, like the server;
* ``POST pods/<name>/binding``: sets ``spec.nodeName``, copies the Binding's annotations onto
  the pod (what the real registry does), adds the ``PodScheduled`` condition; an already
  assigned pod answers 409 ``Conflict`` (a pod is bound at most once), as does a UID
  precondition that does not match;
* a stand-in for the StatefulSet controller (off by default): pods ``<sts>-<i>`` created from
  the template and deleted from the top when ``spec.replicas`` changes.

The store shares the main fake's lock and resourceVersion counter, so versions are
ordered across kinds as on a real server.
"""

from __future__ import annotations

import copy
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .kube_api import FakeKubeApi

RESOURCES = {"pods": "Pod", "nodes": "Node"}
FIELDS = {
    "metadata.name": ("metadata", "name"),
    "metadata.namespace": ("metadata", "namespace"),
    "spec.nodeName": ("spec", "nodeName"),
    "spec.schedulerName": ("spec", "schedulerName"),
    "status.phase": ("status", "phase"),
}


def _iso(t: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if t is None else t))


def _error(code: int, reason: str, message: str, details: dict | None = None) -> Exception:
    from .kube_api import ApiError

    return ApiError(code, reason, message, details)


def _parse_selector(text: str, *, fields: bool) -> list[tuple[str, str, str | None]]:
    """``a=b,c!=d,e,!f`` as (key, op, value) triples; op in ``= != exists !exists``."""
    out: list[tuple[str, str, str | None]] = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            out.append((k.strip(), "!=", v.strip()))
        elif "=" in term:
            k, v = term.split("==", 1) if "==" in term else term.split("=", 1)
            out.append((k.strip(), "=", v.strip()))
        elif fields:
            raise _error(400, "BadRequest", f"invalid field selector {term!r}")
        elif term.startswith("!"):
            out.append((term[1:], "!exists", None))
        else:
            out.append((term, "exists", None))
    for k, _, _ in out if fields else ():
        if k not in FIELDS:
            raise _error(400, "BadRequest", f'field label not supported: "{k}"')
    return out


def _field(obj: dict, key: str) -> str:
    section, name = FIELDS[key]
    return str((obj.get(section) or {}).get(name) or "")


class Selector:
    """The list/watch filters of one request."""

    def __init__(self, query: dict[str, list[str]]) -> None:
        self.fields = _parse_selector(query.get("fieldSelector", [""])[0], fields=True)
        self.labels = _parse_selector(query.get("labelSelector", [""])[0], fields=False)
        self.namespace: str | None = None

    def matches(self, obj: dict | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        for key, op, value in self.fields:
            here = _field(obj, key)
            if (op == "=") != (here == value):
                return False
        labels = obj["metadata"].get("labels") or {}
        for key, op, value in self.labels:
            ok = {
                "=": labels.get(key) == value,
                "!=": labels.get(key) != value,
                "exists": key in labels,
                "!exists": key not in labels,
            }[op]
            if not ok:
                return False
        return True


class Change:
    """One entry of the watch history."""

    __slots__ = ("new", "old", "resource", "rv", "type")

    def __init__(self, rv: int, resource: str, type: str, old: dict | None, new: dict) -> None:
        self.rv, self.resource, self.type, self.old, self.new = rv, resource, type, old, new


class WatchStream:
    """A streaming answer: :meth:`lines` yields the newline-delimited JSON events."""

    def __init__(
        self,
        store: CoreStore,
        resource: str,
        selector: Selector,
        *,
        since: int | None,
        bookmarks: bool,
        timeout_s: float,
    ) -> None:
        self.store, self.resource, self.selector = store, resource, selector
        self.since, self.bookmarks, self.timeout_s = since, bookmarks, timeout_s
        self.dropped = False
        """Set when the stream ended because the server stopped (the connection must drop)."""

    def _event(self, type: str, obj: dict) -> bytes:
        return (json.dumps({"type": type, "object": obj}) + "\n").encode()

    def _bookmark(self, rv: int) -> bytes:
        obj = {
            "kind": RESOURCES[self.resource],
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(rv)},
        }
        return self._event("BOOKMARK", obj)

    def _kind(self, change: Change) -> str | None:
        """What this watch sees of a change, given its selector (None: nothing)."""
        was, now = self.selector.matches(change.old), self.selector.matches(change.new)
        if change.type == "DELETED":
            return "DELETED" if was else None
        if was and now:
            return "MODIFIED"
        if now:
            return "ADDED"
        return "DELETED" if was else None

    def lines(self) -> Iterator[bytes]:
        store = self.store
        end = time.monotonic() + self.timeout_s
        with store.cond:
            expired = self.since is not None and self.since < store.compacted_rv
            if self.since is None:  # "most recent": the current state as ADDED events
                last = store.api._rv
                matching = filter(self.selector.matches, store.objects(self.resource))
                initial = [copy.deepcopy(o) for o in matching]
            else:
                last, initial = self.since, []
            compacted = store.compacted_rv
        if expired:
            store.expired_watches += 1
            yield self._event(
                "ERROR",
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": f"too old resource version: {self.since} ({compacted})",
                    "reason": "Expired",
                    "code": 410,
                },
            )
            return
        for obj in initial:
            yield self._event("ADDED", obj)
        next_bookmark = time.monotonic() + store.bookmark_interval_s
        while True:
            out: list[bytes] = []
            with store.cond:
                while True:
                    if store.api._server is None or store.closing:
                        self.dropped = True  # the server stopped: the connection drops
                        return
                    fresh = store.since(last)
                    now = time.monotonic()
                    if fresh or now >= end or (self.bookmarks and now >= next_bookmark):
                        break
                    store.cond.wait(min(end, next_bookmark) - now)
                for change in fresh:
                    last = change.rv
                    if change.resource == self.resource:
                        kind = self._kind(change)
                        if kind is not None:
                            out.append(self._event(kind, change.new))
                latest = store.api._rv
            yield from out
            now = time.monotonic()
            if self.bookmarks and (now >= next_bookmark or now >= end):
                # Nothing of ours changed up to `latest`: a client may resume from there.
                yield self._bookmark(latest if not fresh else last)
                store.bookmarks_sent += 1
                next_bookmark = now + store.bookmark_interval_s
            if now >= end:
                return


class CoreStore:
    """The pods and nodes of a :class:`FakeKubeApi`, with their watch history."""

    def __init__(self, api: FakeKubeApi, *, history: int = 100_000) -> None:
        self.api = api
        self.cond = threading.Condition(api.lock)
        self.pods: dict[tuple[str, str], dict] = {}
        self.nodes: dict[str, dict] = {}
        self.history: deque[Change] = deque(maxlen=history)
        self.compacted_rv = 0
        self.bookmark_interval_s = 1.0
        """Idle time between BOOKMARK events (a real server: about a minute)."""
        self.max_watch_s = 60.0
        self.bindings: list[tuple[str, str, str]] = []
        """Successful bindings: (namespace, pod, node), in order."""
        self.statefulset_pods = False
        """Whether StatefulSet replica changes create and delete pods (the sts controller)."""
        self.verbs: list[tuple[str, str, str | None, str | None]] = []
        """Every request as RBAC sees it: (verb, resource[/sub], namespace, name)."""
        self.expired_watches = 0
        self.bookmarks_sent = 0
        self.closing = False

    # -- test helpers ----------------------------------------------------------------------
    def objects(self, resource: str) -> list[dict]:
        store = self.pods if resource == "pods" else self.nodes
        return [store[k] for k in sorted(store)]

    def put_node(self, node: dict) -> dict:
        """Create or replace a node (as its kubelet or an admin would)."""
        with self.cond:
            name = node["metadata"]["name"]
            return self._write("nodes", name, copy.deepcopy(node))

    def delete_node(self, name: str) -> None:
        with self.cond:
            self._delete("nodes", name)

    def put_pod(self, pod: dict) -> dict:
        with self.cond:
            md = pod["metadata"]
            md.setdefault("namespace", "default")
            return self._write("pods", (md["namespace"], md["name"]), copy.deepcopy(pod))

    def delete_pod(self, namespace: str, name: str) -> None:
        with self.cond:
            self._delete("pods", (namespace, name))

    def pod(self, namespace: str, name: str) -> dict | None:
        with self.cond:
            obj = self.pods.get((namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def node(self, name: str) -> dict | None:
        with self.cond:
            obj = self.nodes.get(name)
            return copy.deepcopy(obj) if obj is not None else None

    def set_phase(self, namespace: str, name: str, phase: str) -> dict:
        """Move a pod to ``phase`` (what the kubelet reports), e.g. Succeeded."""
        with self.cond:
            pod = copy.deepcopy(self.pods[(namespace, name)])
            pod.setdefault("status", {})["phase"] = phase
            return self._write("pods", (namespace, name), pod)

    def compact(self) -> None:
        """Forget the watch history (etcd compaction): older resourceVersions get 410."""
        with self.cond:
            self.history.clear()
            self.compacted_rv = self.api._rv

    def close_watches(self) -> None:
        """End every open watch (the API server dropping its streams)."""
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        time.sleep(0.05)
        with self.cond:
            self.closing = False

    # -- storage -----------------------------------------------------------------------------
    def _record(self, change: Change) -> None:
        if len(self.history) == self.history.maxlen:  # the oldest entry falls off
            self.compacted_rv = self.history[0].rv
        self.history.append(change)

    def since(self, rv: int) -> list[Change]:
        """Changes newer than ``rv``, oldest first (walks back from the newest)."""
        out = []
        for change in reversed(self.history):
            if change.rv <= rv:
                break
            out.append(change)
        out.reverse()
        return out

    def _write(self, resource: str, key: Any, obj: dict) -> dict:
        table: dict = self.pods if resource == "pods" else self.nodes
        old = table.get(key)
        md = obj.setdefault("metadata", {})
        obj["apiVersion"], obj["kind"] = "v1", RESOURCES[resource]
        if old is None:
            md.setdefault("uid", str(uuid.uuid4()))
            md.setdefault("creationTimestamp", _iso())
            if resource == "pods":
                obj.setdefault("spec", {}).setdefault("schedulerName", "default-scheduler")
                obj.setdefault("status", {}).setdefault("phase", "Pending")
        else:
            md["uid"] = old["metadata"]["uid"]
            md["creationTimestamp"] = old["metadata"]["creationTimestamp"]
        md["resourceVersion"] = self.api._next_rv()
        table[key] = obj
        self._record(
            Change(int(md["resourceVersion"]), resource, "MODIFIED" if old else "ADDED", old, obj)
        )
        self.cond.notify_all()
        return copy.deepcopy(obj)

    def _delete(self, resource: str, key: Any) -> dict | None:
        table: dict = self.pods if resource == "pods" else self.nodes
        old = table.pop(key, None)
        if old is None:
            return None
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = self.api._next_rv()
        self._record(
            Change(int(gone["metadata"]["resourceVersion"]), resource, "DELETED", old, gone)
        )
        self.cond.notify_all()
        return gone

    # -- HTTP ------------------------------------------------------------------------------
    @staticmethod
    def serves(group: str, version: str, resource: str) -> bool:
        return group == "" and version == "v1" and resource in RESOURCES

    def handle(
        self,
        method: str,
        resource: str,
        namespace: str | None,
        name: str | None,
        sub: str | None,
        query: dict[str, list[str]],
        body: Any,
        content_type: str | None,
    ) -> tuple[int, Any, dict[str, str]]:
        """Answer one request; a watch answers a :class:`WatchStream` to be streamed."""
        watching = query.get("watch", ["false"])[0] in ("true", "1")
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
            method, "get" if name else ("watch" if watching else "list")
        )
        with self.cond:
            self.verbs.append((verb, resource + (f"/{sub}" if sub else ""), namespace, name))
        if resource == "nodes" and namespace is not None:
            raise _error(404, "NotFound", "nodes are not namespaced")
        if name is None:
            selector = Selector(query)
            selector.namespace = namespace
            if method == "GET" and watching:
                return 200, self._watch(resource, selector, query), {}
            if method == "GET":
                return 200, self._list(resource, selector), {}
            if method == "POST":
                if resource == "pods" and namespace is None:
                    raise _error(405, "MethodNotAllowed", "create needs a namespace")
                return 201, self._create(resource, namespace, body), {}
            raise _error(405, "MethodNotAllowed", f"{method} on a collection")
        if resource == "pods" and namespace is None:
            raise _error(404, "NotFound", "pods are namespaced")
        key: Any = (namespace, name) if resource == "pods" else name
        with self.cond:
            if sub == "binding" and resource == "pods":
                if method != "POST":
                    raise _error(405, "MethodNotAllowed", f"{method} on pods/binding")
                return 201, self._bind(key, body), {}
            if sub not in (None, "status"):
                raise _error(404, "NotFound", f"no subresource {sub} on {resource}")
            return self._item(resource, key, method, sub, body, content_type)

    def _list(self, resource: str, selector: Selector) -> dict:
        with self.cond:
            items = [copy.deepcopy(o) for o in self.objects(resource) if selector.matches(o)]
            rv = str(self.api._rv)
        return {
            "kind": f"{RESOURCES[resource]}List",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": rv},
            "items": items,
        }

    def _watch(self, resource: str, selector: Selector, query: dict) -> WatchStream:
        rv = query.get("resourceVersion", [""])[0]
        since = int(rv) if rv not in ("", "0") else None
        timeout = float(query.get("timeoutSeconds", [str(self.max_watch_s)])[0])
        bookmarks = query.get("allowWatchBookmarks", ["false"])[0] in ("true", "1")
        return WatchStream(
            self,
            resource,
            selector,
            since=since,
            bookmarks=bookmarks,
            timeout_s=min(timeout, self.max_watch_s),
        )

    def _create(self, resource: str, namespace: str | None, body: Any) -> dict:
        if not isinstance(body, dict):
            raise _error(400, "BadRequest", "body must be an object")
        obj = copy.deepcopy(body)
        md = obj.setdefault("metadata", {})
        if not md.get("name"):
            if not md.get("generateName"):
                raise _error(422, "Invalid", "metadata.name: Required value")
            md["name"] = md["generateName"] + uuid.uuid4().hex[:5]
        md.pop("resourceVersion", None)
        with self.cond:
            if resource == "pods":
                md["namespace"] = namespace
                key: Any = (namespace, md["name"])
            else:
                key = md["name"]
            if key in (self.pods if resource == "pods" else self.nodes):
                raise _error(
                    409,
                    "AlreadyExists",
                    f'{resource} "{md["name"]}" already exists',
                    {"name": md["name"], "kind": resource},
                )
            return self._write(resource, key, obj)

    def _item(
        self, resource: str, key: Any, method: str, sub: str | None, body: Any, ctype: str | None
    ) -> tuple[int, Any, dict[str, str]]:
        table: dict = self.pods if resource == "pods" else self.nodes
        current = table.get(key)
        name = key[1] if resource == "pods" else key
        if current is None:
            raise _error(
                404,
                "NotFound",
                f'{resource} "{name}" not found',
                {"name": name, "kind": resource},
            )
        if method == "GET":
            return 200, copy.deepcopy(current), {}
        if method == "DELETE":
            return 200, self._delete(resource, key), {}
        api = self.api
        if method == "PUT":
            api._check_rv(current, body, ("", "v1", resource, "", name))
            new = copy.deepcopy(body)
        elif method == "PATCH":
            new = api._patched(current, body, ctype, ("", "v1", resource, "", name))
        else:
            raise _error(405, "MethodNotAllowed", method)
        if sub == "status":  # only status changes
            new = dict(copy.deepcopy(current), status=new.get("status", {}))
        elif "status" in current:  # the main resource cannot change status
            new["status"] = copy.deepcopy(current["status"])
        new.setdefault("metadata", {})["name"] = name
        if resource == "pods":
            new["metadata"]["namespace"] = key[0]
        return 200, self._write(resource, key, new), {}

    def _bind(self, key: tuple[str, str], body: Any) -> dict:
        pod = self.pods.get(key)
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
        self._write("pods", key, new)
        self.bindings.append((key[0], key[1], node))
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    # -- the StatefulSet controller ----------------------------------------------------------
    def on_statefulset(self, sts: dict) -> None:
        """Create/delete ``<name>-<i>`` pods so that they number ``spec.replicas``."""
        if not self.statefulset_pods:
            return
        md, spec = sts["metadata"], sts.get("spec", {})
        ns, name = md["namespace"], md["name"]
        want = int(spec.get("replicas", 1))
        template = spec.get("template", {})
        with self.cond:
            ordinals = (k[1].rsplit("-", 1) for k in self.pods if k[0] == ns)
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
                self._write("pods", (ns, f"{name}-{i}"), pod)
            for i in reversed(have):
                if i >= want:
                    self._delete("pods", (ns, f"{name}-{i}"))


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
) -> dict:
    """A Pod; ``gpu_milli`` < 1000 makes it a GPU-sharing pod (``kale.dev/gpu-milli``);
    ``gpu_models`` ("A|B") restricts the GPU models (``kale.dev/gpu-model``)."""
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
