"""Pods, Nodes, ``pods/binding`` and watches for the fake API server (a scheduler's view).

A scheduler lives on list + watch, so this part of the fake serves what client-go's
reflector (and Kale's) relies on, with the real paths and JSON shapes:

* ``core/v1`` pods (namespaced, ``status`` subresource, ``binding`` subresource), nodes
  (cluster-scoped, ``status`` subresource) and events (namespaced; kept in the main fake's
  objects, so ``FakeKubeApi.list("v1", "Event")`` sees them); lists across namespaces;
* list and watch with field and label selectors, resourceVersions, BOOKMARKs and 410
  ``Expired`` after :meth:`CoreStore.compact` (:mod:`tests.support.kube_watch`);
* ``pods/binding`` and the StatefulSet controller's pods (:mod:`tests.support.kube_registry`);
* ``pods/eviction`` against PodDisruptionBudgets, priority admission from PriorityClasses,
  graceful deletion, and the strategic merge of pod conditions
  (:mod:`tests.support.kube_policy`).

The store shares the main fake's lock and resourceVersion counter, so versions are
ordered across kinds as on a real server. Object builders (``node_doc``, ``pod_doc``) live
in :mod:`tests.support.kube_objects` and are re-exported here.
"""

from __future__ import annotations

import copy
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator, MutableMapping
from typing import TYPE_CHECKING, Any

from .kube_objects import node_doc, node_event_doc, pod_doc
from .kube_policy import admit_priority, evict, strategic_merge
from .kube_registry import bind, statefulset_pods
from .kube_watch import NAMESPACED, RESOURCES, Change, Selector, WatchStream, _error

if TYPE_CHECKING:
    from .kube_api import FakeKubeApi

__all__ = ["CoreStore", "WatchStream", "node_doc", "node_event_doc", "pod_doc"]


class _Events(MutableMapping[tuple[str, str], dict]):
    """The main fake's stored Events, keyed (namespace, name) like pods.

    Events stay where the rest of the fake keeps them (``FakeKubeApi.list("v1", "Event")``
    sees every one); this store serves their list and watch."""

    def __init__(self, api: FakeKubeApi) -> None:
        self.objects = api.objects

    @staticmethod
    def _key(key: tuple[str, str]) -> tuple[str, str, str, str, str]:
        return ("", "v1", "events", key[0], key[1])

    def __getitem__(self, key: tuple[str, str]) -> dict:
        return self.objects[self._key(key)]

    def __setitem__(self, key: tuple[str, str], value: dict) -> None:
        self.objects[self._key(key)] = value

    def __delitem__(self, key: tuple[str, str]) -> None:
        del self.objects[self._key(key)]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter([(k[3], k[4]) for k in self.objects if k[:3] == ("", "v1", "events")])

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _iso(t: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if t is None else t))


class CoreStore:
    """The pods, nodes and events of a :class:`FakeKubeApi`, with their watch history."""

    def __init__(self, api: FakeKubeApi, *, history: int = 100_000) -> None:
        self.api = api
        self.cond = threading.Condition(api.lock)
        self.pods: dict[tuple[str, str], dict] = {}
        self.nodes: dict[str, dict] = {}
        self.events = _Events(api)
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
        self.evictions: list[tuple[str, str]] = []
        """Evictions carried out (not dry runs): (namespace, pod), in order."""
        self.graceful_deletion = False
        """Whether a bound pod being evicted terminates (``deletionTimestamp``) until
        :meth:`finish_deletion` — the kubelet's part — instead of vanishing at once."""

    # -- test helpers ----------------------------------------------------------------------
    def _table(self, resource: str) -> MutableMapping[Any, dict]:
        return {"pods": self.pods, "nodes": self.nodes, "events": self.events}[resource]

    def objects(self, resource: str) -> list[dict]:
        store = self._table(resource)
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
        """Create or replace a pod; a new one goes through priority admission (a priority it
        states is kept, as storage written by an admin would)."""
        with self.cond:
            pod = copy.deepcopy(pod)
            md = pod["metadata"]
            md.setdefault("namespace", "default")
            if (md["namespace"], md["name"]) not in self.pods:
                admit_priority(self, pod, strict=False)
            return self._write("pods", (md["namespace"], md["name"]), pod)

    def delete_gracefully(self, key: tuple[str, str], grace_s: int | None = None) -> None:
        """Delete a pod as the API server does: at once when unbound (or when
        ``graceful_deletion`` is off), else mark it terminating (call with the lock held)."""
        pod = self.pods.get(key)
        if pod is None:
            return
        if not self.graceful_deletion or not pod["spec"].get("nodeName"):
            self._delete("pods", key)
            return
        if pod["metadata"].get("deletionTimestamp"):
            return
        new = copy.deepcopy(pod)
        grace = grace_s if grace_s is not None else pod["spec"].get("terminationGracePeriodSeconds")
        new["metadata"]["deletionTimestamp"] = _iso()
        new["metadata"]["deletionGracePeriodSeconds"] = 30 if grace is None else int(grace)
        self._write("pods", key, new)

    def finish_deletion(self, namespace: str, name: str) -> None:
        """The kubelet's part of a graceful deletion: the terminating pod is gone."""
        with self.cond:
            self._delete("pods", (namespace, name))

    def terminating(self) -> list[tuple[str, str]]:
        """Pods marked for deletion and not gone yet."""
        with self.cond:
            return sorted(k for k, p in self.pods.items() if p["metadata"].get("deletionTimestamp"))

    def delete_pod(self, namespace: str, name: str) -> None:
        with self.cond:
            self._delete("pods", (namespace, name))

    def put_event(self, event: dict) -> dict:
        """Create or replace an Event (as a node agent or a recorder aggregating repeats)."""
        with self.cond:
            md = event["metadata"]
            md.setdefault("namespace", "default")
            return self._write("events", (md["namespace"], md["name"]), copy.deepcopy(event))

    def delete_event(self, namespace: str, name: str) -> None:
        """Remove an Event (the API server's ``--event-ttl`` garbage collection)."""
        with self.cond:
            self._delete("events", (namespace, name))

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
        table = self._table(resource)
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
        table = self._table(resource)
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
            selector = Selector(query, resource)
            selector.namespace = namespace
            if method == "GET" and watching:
                return 200, self._watch(resource, selector, query), {}
            if method == "GET":
                return 200, self._list(resource, selector), {}
            if method == "POST":
                if resource in NAMESPACED and namespace is None:
                    raise _error(405, "MethodNotAllowed", "create needs a namespace")
                return 201, self._create(resource, namespace, body), {}
            raise _error(405, "MethodNotAllowed", f"{method} on a collection")
        if resource in NAMESPACED and namespace is None:
            raise _error(404, "NotFound", f"{resource} are namespaced")
        key: Any = (namespace, name) if resource in NAMESPACED else name
        with self.cond:
            if sub == "binding" and resource == "pods":
                if method != "POST":
                    raise _error(405, "MethodNotAllowed", f"{method} on pods/binding")
                return 201, self._bind(key, body), {}
            if sub == "eviction" and resource == "pods":
                if method != "POST":
                    raise _error(405, "MethodNotAllowed", f"{method} on pods/eviction")
                return 201, evict(self, key, body, query), {}
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
            if resource in NAMESPACED:
                md["namespace"] = namespace
                key: Any = (namespace, md["name"])
            else:
                key = md["name"]
            if resource == "pods" and key not in self.pods:
                admit_priority(self, obj, strict=True)
            if key in self._table(resource):
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
        current = self._table(resource).get(key)
        name = key[1] if resource in NAMESPACED else key
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
        elif method == "PATCH" and (ctype or "").startswith("application/strategic-merge-patch"):
            if not isinstance(body, dict):
                raise _error(400, "BadRequest", "a strategic merge patch must be an object")
            api._check_rv(current, body, ("", "v1", resource, "", name))
            new = strategic_merge(current, body)
        elif method == "PATCH":
            new = api._patched(current, body, ctype, ("", "v1", resource, "", name))
        else:
            raise _error(405, "MethodNotAllowed", method)
        if sub == "status":  # only status changes
            new = dict(copy.deepcopy(current), status=new.get("status", {}))
        elif "status" in current:  # the main resource cannot change status
            new["status"] = copy.deepcopy(current["status"])
        new.setdefault("metadata", {})["name"] = name
        if resource in NAMESPACED:
            new["metadata"]["namespace"] = key[0]
        return 200, self._write(resource, key, new), {}

    def _bind(self, key: tuple[str, str], body: Any) -> dict:
        return bind(self, key, body)

    def on_statefulset(self, sts: dict) -> None:
        """Create/delete ``<name>-<i>`` pods so that they number ``spec.replicas``."""
        statefulset_pods(self, sts)
