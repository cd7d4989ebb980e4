"""Pods, Nodes, ``pods/binding`` and watches for the fake API server (a scheduler's view).

A scheduler lives on list + watch, so this part of the fake serves what client-go's
reflector (and Kale's) relies on, with the real paths and JSON shapes:

* ``core/v1`` pods (namespaced, ``status`` subresource, ``binding`` subresource) and nodes
  (cluster-scoped, ``status`` subresource); lists across namespaces;
* list and watch with field and label selectors, resourceVersions, BOOKMARKs and 410
  ``Expired`` after :meth:`CoreStore.compact` (:mod:`tests.fakes.kube_watch`);
* ``POST pods/<name>/binding``: sets ``spec.nodeName``, copies the Binding's annotations onto
  the pod (what the real registry does), adds the ``PodScheduled`` condition; an already
  assigned pod answers 409 ``Conflict`` (a pod is bound at most once), as does a UID
  precondition that does not match;
* a stand-in for the StatefulSet controller (off by default): pods ``<sts>-<i>`` created from
  the template and deleted from the top when ``spec.replicas`` changes.

The store shares the main fake's lock and resourceVersion counter, so versions are
ordered across kinds as on a real server. Object builders (``node_doc``, ``pod_doc``) live
in :mod:`tests.fakes.kube_objects` and are re-exported here.
"""

from __future__ import annotations

import copy
import threading
import time
import uuid
from collections import deque
from typing import TYPE_CHECKING, Any

from .kube_objects import node_doc, pod_doc
from .kube_watch import RESOURCES, Change, Selector, WatchStream, _error

if TYPE_CHECKING:
    from .kube_api import FakeKubeApi

__all__ = ["CoreStore", "WatchStream", "node_doc", "pod_doc"]


def _iso(t: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if t is None else t))


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
