"""A small Kubernetes API server for tests: the real REST paths and JSON shapes, in memory.

No API server can run on the test machines, and mocking the client object would test the
mock. This server speaks HTTP/1.1 JSON on 127.0.0.1 and serves exactly what Kale uses:

* ``apps/v1`` statefulsets and deployments, with the ``scale`` and ``status`` subresources (a
  stand-in for their controllers sets ``status.replicas``/``readyReplicas`` to
  ``spec.replicas``);
* custom resources as the CRDs it holds declare them (:mod:`tests.support.kube_crds`):
  ``kale.dev/v1alpha1`` elastictrainingjobs, ``kubeflow.org/v1`` tfjobs and pytorchjobs, a
  JobSet-style ``training.kale.test/v1`` trainersets — served versions only, ``scale``
  subresources on the CRD's replica paths, ``status`` subresources (writes to the main
  resource leave status alone and vice versa), lists across namespaces;
* what ``kubectl`` needs besides (:mod:`tests.support.kube_discovery`,
  :mod:`tests.support.kube_tables`): discovery (``/api``, ``/apis``, each group version's
  resource list), the Table form of lists and objects (a CRD's printer columns), and a
  deprecated version's ``Warning`` header;
* ``coordination.k8s.io/v1`` leases, ``core/v1`` events, configmaps and secrets;
* ``scheduling.k8s.io/v1`` priorityclasses (cluster-scoped) and ``policy/v1``
  poddisruptionbudgets, which pod creation and ``pods/eviction`` consult
  (:mod:`tests.support.kube_policy`);
* ``core/v1`` pods and nodes with watches and ``pods/binding`` (:mod:`tests.support.kube_core`,
  reached as ``api.core``).

Semantics that matter to a controller are real: ``resourceVersion`` on every object (PUT or
PATCH carrying a stale one answers 409 Conflict), ``generation`` bumped on spec changes only,
AlreadyExists on duplicate create, NotFound as a ``Status`` object, JSON patch, merge patch
and (as a merge patch) strategic merge patch. Failures are injectable per method and path
(any status, with ``Retry-After``), every request is logged, and :meth:`FakeKubeApi.kubeconfig`
writes a kubeconfig the official client loads.

``python -m tests.support.kube_api --kubeconfig PATH`` serves it as a process of its own
until SIGTERM or SIGINT, for programs that talk to an API server only through a kubeconfig
(``benchmarks/scheduler.py``); PATH appears once the server listens.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime as dt
import json
import os
import re
import signal
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from .kube_core import CoreStore, WatchStream
from .kube_crds import CrdRegistry, ScalePaths
from .kube_discovery import discovery
from .kube_tables import table, wants_table

Key = tuple[str, str, str, str, str]  # group, version, resource, namespace, name

KINDS: dict[tuple[str, str, str], tuple[str, bool]] = {
    # (group, version, plural) -> (kind, has a status subresource)
    ("", "v1", "events"): ("Event", False),
    ("", "v1", "configmaps"): ("ConfigMap", False),
    ("", "v1", "secrets"): ("Secret", False),
    ("apps", "v1", "statefulsets"): ("StatefulSet", True),
    ("apps", "v1", "deployments"): ("Deployment", True),
    ("kubeflow.org", "v1", "tfjobs"): ("TFJob", True),
    ("kubeflow.org", "v1", "pytorchjobs"): ("PyTorchJob", True),
    ("training.kale.test", "v1", "trainersets"): ("TrainerSet", True),
    ("kale.dev", "v1alpha1", "elastictrainingjobs"): ("ElasticTrainingJob", True),
    ("coordination.k8s.io", "v1", "leases"): ("Lease", False),
    ("scheduling.k8s.io", "v1", "priorityclasses"): ("PriorityClass", False),
    ("policy", "v1", "poddisruptionbudgets"): ("PodDisruptionBudget", True),
}

CLUSTER_SCOPED = frozenset({("scheduling.k8s.io", "priorityclasses")})
"""Resources without a namespace (stored under the namespace ``""``)."""

INDEXED = (("scheduling.k8s.io", "v1", "priorityclasses"), ("policy", "v1", "poddisruptionbudgets"))
"""Resources whose keys are kept apart: read on every pod create or eviction, they must not
cost a walk over every stored object (Events pile up by the thousand in a benchmark)."""

STORAGE_VERSION: dict[tuple[str, str], str] = {("kale.dev", "v1"): "v1alpha1"}
"""Versions the test helpers (:meth:`FakeKubeApi.put`, ``get``…) accept for objects kept
under another one: the CRD lists ``kale.dev/v1`` unserved, and the API server reads what was
stored as it as ``v1alpha1`` (``conversion: None``). Over HTTP only served versions answer."""

SCALED_BUILTINS = frozenset({"statefulsets", "deployments"})
"""Built-in resources with a ``scale`` subresource; a custom resource has one when its CRD
declares it (:meth:`tests.support.kube_crds.CrdRegistry.scale`)."""

_PATH = re.compile(
    r"^/(?:api/(?P<cv>v1)|apis/(?P<g>[^/]+)/(?P<v>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<res>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$"
)


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Failure:
    """An injected answer: the next ``times`` matching requests get ``status``.

    ``status`` None answers normally, after ``delay_s`` (a slow server); ``lose`` applies
    the request and then drops the connection without answering (the answer was lost on
    the way: the client cannot tell whether its write happened).
    """

    status: int | None
    method: str | None = None
    path: str | None = None
    """Substring the request path must contain (None: any path)."""
    times: int = 1
    retry_after: float | None = None
    hits: int = 0
    delay_s: float = 0.0
    lose: bool = False


class LostAnswer(Exception):
    """Raised by :meth:`FakeKubeApi.handle` after applying a request whose answer is lost."""


@dataclass
class Request:
    method: str
    path: str
    status: int
    body: Any = None
    content_type: str | None = None
    time: float = 0.0
    """Wall time the answer was sent (seconds since the epoch)."""
    started: float = 0.0
    """Wall time the request arrived (requests overlapping in time ran concurrently)."""
    clock: float | None = None
    """The client's own (fake) time, when it sends an ``X-Test-Clock`` header."""
    query: str = ""
    """The query string (``watch=true&resourceVersion=…`` marks a watch)."""


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details = details or {}


def status_body(code: int, reason: str, message: str, details: dict | None = None) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": reason,
        "details": details or {},
        "code": code,
    }


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def json_patch(doc: Any, ops: list[dict]) -> Any:
    """RFC 6902 JSON patch (add, replace, remove, test)."""
    doc = copy.deepcopy(doc)
    for op in ops:
        parts = _pointer(op["path"])
        parent = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent.setdefault(p, {})
        last = parts[-1]
        kind = op["op"]
        if kind == "test":
            here = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if here != op["value"]:
                raise ApiError(422, "Invalid", f"test failed at {op['path']}")
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                idx = len(parent) if last == "-" else int(last)
                if kind == "add":
                    parent.insert(idx, op["value"])
                else:
                    parent[idx] = op["value"]
            else:
                if kind == "replace" and last not in parent:
                    raise ApiError(422, "Invalid", f"replace: {op['path']} does not exist")
                parent[last] = op["value"]
        elif kind == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            elif last in parent:
                del parent[last]
            else:
                raise ApiError(422, "Invalid", f"remove: {op['path']} does not exist")
        else:
            raise ApiError(422, "Invalid", f"unsupported JSON patch op {kind!r}")
    return doc


class FakeKubeApi:
    """The in-memory API server; use as a context manager or ``start()``/``stop()``."""

    def __init__(self) -> None:
        self.objects: dict[Key, dict] = {}
        self.requests: list[Request] = []
        self.failures: list[Failure] = []
        self.lock = threading.RLock()
        self.auto_ready = True
        """Whether status.replicas follows spec.replicas at once (the StatefulSet controller)."""
        self._rv = 1000
        self.changes = threading.Condition(self.lock)
        """Notified on every change (watches wait on it)."""
        self.log: list[tuple[int, str, Key, dict]] = []
        """(resourceVersion, ADDED/MODIFIED/DELETED, key, object): what watches replay."""
        self.log_limit = 20_000
        self.compacted = 0
        """Watches from a resourceVersion at or below this get 410 Gone (history compacted)."""
        self._stopping = False
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self.core = CoreStore(self)
        self.indexed: dict[tuple[str, str, str], set[Key]] = {r: set() for r in INDEXED}
        """Keys of the resources pod admission reads on every create (see INDEXED)."""
        """Pods, nodes, bindings and watches (a scheduler's part of the API)."""
        self.crds = CrdRegistry.default()
        """The CRDs it holds: what custom resources it serves, and how."""

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> FakeKubeApi:
        self._stopping = False
        handler = type("Handler", (_Handler,), {"api": self})
        self._server = _QuietServer(("127.0.0.1", self.port), handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop answering (clients then see connection errors); ``start()`` resumes."""
        with self.lock:
            self._stopping = True
            self.changes.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
            with self.lock:  # open watches notice and drop their connections
                self.core.cond.notify_all()

    def __enter__(self) -> FakeKubeApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kubeconfig(self, path: str | Path, namespace: str = "default") -> Path:
        """Write a kubeconfig pointing at this server (token auth, plain HTTP)."""
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake-token"}}],
            "contexts": [
                {
                    "name": "fake",
                    "context": {"cluster": "fake", "user": "fake", "namespace": namespace},
                }
            ],
            "current-context": "fake",
        }
        p = Path(path)
        p.write_text(yaml.safe_dump(cfg), encoding="utf-8")
        return p

    # -- test helpers --------------------------------------------------------------------
    def fail(
        self,
        status: int,
        *,
        method: str | None = None,
        path: str | None = None,
        times: int = 1,
        retry_after: float | None = None,
    ) -> Failure:
        """Answer the next ``times`` requests matching method/path with ``status``."""
        f = Failure(status, method.upper() if method else None, path, times, retry_after)
        with self.lock:
            self.failures.append(f)
        return f

    def slow(
        self,
        delay_s: float,
        *,
        method: str | None = None,
        path: str | None = None,
        times: int = 1,
        status: int | None = None,
    ) -> Failure:
        """Answer the next ``times`` matching requests after ``delay_s`` (normally, or with
        ``status``)."""
        f = Failure(status, method.upper() if method else None, path, times, delay_s=delay_s)
        with self.lock:
            self.failures.append(f)
        return f

    def lose(
        self, *, method: str | None = None, path: str | None = None, times: int = 1
    ) -> Failure:
        """Apply the next ``times`` matching requests, then drop their connections unanswered."""
        f = Failure(None, method.upper() if method else None, path, times, lose=True)
        with self.lock:
            self.failures.append(f)
        return f

    def put(self, obj: dict) -> dict:
        """Create or overwrite an object directly (no checks), as an admin would."""
        group, version = _stored(obj["apiVersion"])
        obj["apiVersion"] = f"{group}/{version}" if group else version
        plural = _plural(group, version, obj["kind"])
        md = obj.setdefault("metadata", {})
        md.setdefault("namespace", "" if (group, plural) in CLUSTER_SCOPED else "default")
        with self.lock:
            key = (group, version, plural, md["namespace"], md["name"])
            old = self.objects.get(key)
            self._stamp(obj, old)
            self.objects[key] = copy.deepcopy(obj)
            self._settle(key)
            self._changed(key, "ADDED" if old is None else "MODIFIED")
            return copy.deepcopy(self.objects[key])

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict | None:
        group, version = _stored(api_version)
        key = (group, version, _plural(group, version, kind), namespace, name)
        with self.lock:
            obj = self.objects.get(key)
            return copy.deepcopy(obj) if obj is not None else None

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        group, version = _stored(api_version)
        key = (group, version, _plural(group, version, kind), namespace, name)
        with self.lock:
            old = self.objects.pop(key, None)
            if old is not None:
                self._changed(key, "DELETED", old)

    def list(self, api_version: str, kind: str, namespace: str | None = None) -> list[dict]:
        group, version = _stored(api_version)
        plural = _plural(group, version, kind)
        with self.lock:
            return [
                copy.deepcopy(o)
                for k, o in sorted(self.objects.items())
                if k[:3] == (group, version, plural) and namespace in (None, k[3])
            ]

    def touch(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        """Bump an object's resourceVersion, as another writer would (forces a 409)."""
        group, version = _stored(api_version)
        with self.lock:
            key = (group, version, _plural(group, version, kind), namespace, name)
            obj = self.objects[key]
            obj["metadata"]["resourceVersion"] = self._next_rv()
            self._changed(key, "MODIFIED")

    def compact(self) -> None:
        """Forget the change history, as etcd compaction does: watches resuming from an
        older resourceVersion get 410 Gone and must list again."""
        with self.lock:
            self.compacted = self._rv
            self.log.clear()

    def max_concurrent(self, method: str | None = None, contains: str = "") -> int:
        """Most matching requests that were being served at the same moment."""
        edges = sorted(
            [(r.started, 1) for r in self.calls(method, contains)]
            + [(r.time, -1) for r in self.calls(method, contains)],
            key=lambda e: (e[0], e[1]),
        )
        most = now = 0
        for _, step in edges:
            now += step
            most = max(most, now)
        return most

    def calls(self, method: str | None = None, contains: str = "") -> list[Request]:
        with self.lock:
            return [
                r
                for r in self.requests
                if (method is None or r.method == method) and contains in r.path
            ]

    # -- what kubectl needs besides: discovery, tables, warnings -----------------------------
    def _discovery(self, path: str) -> dict | None:
        """The discovery document at ``path`` (None: not a discovery path)."""
        try:
            return discovery(path, self.crds, f"127.0.0.1:{self.port}")
        except LookupError:
            raise ApiError(
                404, "NotFound", "the server could not find the requested resource"
            ) from None

    def as_table(self, path: str, query: dict[str, list[str]], payload: dict) -> dict:
        """``payload`` (a list or an object answered at ``path``) in the Table form."""
        m = _PATH.match(path)
        if m is None or m["sub"] or payload.get("kind") in ("Status", "Table"):
            return payload
        group, version = m["g"] or "", m["v"] or m["cv"]
        return table(
            payload,
            resource=m["res"],
            printer_columns=self.crds.columns(group, version, m["res"]),
            include=query.get("includeObject", ["Metadata"])[0],
        )

    def warnings(self, path: str) -> dict[str, str]:
        """The ``Warning`` header of an answer at ``path`` (a deprecated version's)."""
        m = _PATH.match(path)
        text = self.crds.warning(m["g"] or "", m["v"] or m["cv"], m["res"]) if m else None
        return {"Warning": f'299 - "{text}"'} if text else {}

    # -- internals -----------------------------------------------------------------------
    def _changed(self, key: Key, kind: str, obj: dict | None = None) -> None:
        """Log a change for watches (call with the lock held)."""
        index = self.indexed.get(key[:3])
        if index is not None:
            (index.discard if kind == "DELETED" else index.add)(key)
        current = obj if obj is not None else self.objects[key]
        rv = int(current["metadata"]["resourceVersion"])
        if kind == "DELETED":
            rv = int(self._next_rv())
            current = copy.deepcopy(current)
            current["metadata"]["resourceVersion"] = str(rv)
        self.log.append((rv, kind, key, copy.deepcopy(current)))
        if len(self.log) > self.log_limit:
            drop = len(self.log) - self.log_limit
            self.compacted = self.log[drop - 1][0]
            del self.log[:drop]
        self.changes.notify_all()

    def watch_events(
        self, group: str, version: str, res: str, ns: str | None, since: int, timeout_s: float
    ) -> Any:
        """Yield watch events after resourceVersion ``since`` until ``timeout_s`` passes or
        the server stops; first an ERROR 410 when ``since`` is older than the history."""
        if since and since <= self.compacted:
            yield {
                "type": "ERROR",
                "object": status_body(410, "Expired", f"too old resource version: {since}"),
            }
            return
        deadline = time.monotonic() + timeout_s
        sent = since
        while True:
            with self.lock:
                batch = [
                    e
                    for e in self.log
                    if e[0] > sent and e[2][:3] == (group, version, res) and ns in (None, e[2][3])
                ]
                if not batch:
                    left = deadline - time.monotonic()
                    if left <= 0 or self._stopping:
                        return
                    self.changes.wait(timeout=min(left, 0.2))
                    continue
            for rv, kind, _, obj in batch:
                sent = max(sent, rv)
                yield {"type": kind, "object": obj}

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _stamp(self, obj: dict, old: dict | None) -> None:
        md = obj["metadata"]
        md["resourceVersion"] = self._next_rv()
        if old is None:
            md.setdefault("uid", str(uuid.uuid4()))
            md.setdefault("creationTimestamp", now_iso())
            if obj.get("kind") != "Event":
                md["generation"] = 1
        else:
            md["uid"] = old["metadata"]["uid"]
            md["creationTimestamp"] = old["metadata"]["creationTimestamp"]
            gen = old["metadata"].get("generation", 1)
            md["generation"] = gen + 1 if obj.get("spec") != old.get("spec") else gen

    def _settle(self, key: Key) -> None:
        obj = self.objects[key]
        if key[2] in SCALED_BUILTINS and self.auto_ready:
            n = obj.get("spec", {}).get("replicas", 1)
            st = obj.setdefault("status", {})
            st.update(
                replicas=n,
                readyReplicas=n,
                updatedReplicas=n,
                availableReplicas=n,
                observedGeneration=obj["metadata"]["generation"],
            )
            if key[2] == "statefulsets":
                st["currentReplicas"] = n
        if key[2] == "statefulsets":
            self.core.on_statefulset(obj)

    def _injected(self, method: str, path: str) -> Failure | None:
        with self.lock:
            for f in self.failures:
                if (
                    f.hits < f.times
                    and f.method in (None, method)
                    and (f.path is None or f.path in path)
                ):
                    f.hits += 1
                    return f
        return None

    def handle(
        self, method: str, raw_path: str, body: Any, content_type: str | None
    ) -> tuple[int, dict, dict[str, str]]:
        parts = urlsplit(raw_path)
        path = parts.path
        injected = self._injected(method, path)
        if injected is not None and injected.delay_s:
            time.sleep(injected.delay_s)
        if injected is not None and injected.lose:
            self._dispatch(method, parts, body, content_type)  # applied; the answer is lost
            raise LostAnswer(f"{method} {path}")
        if injected is not None and injected.status is not None:
            headers = {}
            if injected.retry_after is not None:
                headers["Retry-After"] = f"{injected.retry_after:g}"
            reason = {
                409: "Conflict",
                404: "NotFound",
                429: "TooManyRequests",
                403: "Forbidden",
            }.get(injected.status, "InternalError")
            return (
                injected.status,
                status_body(injected.status, reason, f"injected failure {injected.status}"),
                headers,
            )
        return self._dispatch(method, parts, body, content_type)

    def _dispatch(
        self, method: str, parts: Any, body: Any, content_type: str | None
    ) -> tuple[int, dict, dict[str, str]]:
        path = parts.path
        if method == "GET":
            found = self._discovery(path)
            if found is not None:
                return 200, found, {}
        m = _PATH.match(path)
        if not m:
            raise ApiError(404, "NotFound", f"the server could not find the path {path}")
        group = m["g"] or ""
        version = m["v"] or m["cv"]
        res, ns, name, sub = m["res"], m["ns"], m["name"], m["sub"]
        if self.crds.find(group, res) is not None:
            if not self.crds.version(group, version, res):
                raise ApiError(404, "NotFound", f"the server could not find the resource {res}")
            stored = (self.crds.storage(group, res) or {}).get("name", version)
            if stored != version:  # served as `version`, kept as `stored` (conversion None)
                served, kept = f"{group}/{version}", f"{group}/{stored}"
                if isinstance(body, dict) and body.get("apiVersion") == served:
                    body = {**body, "apiVersion": kept}
                code, payload, headers = self._dispatch_at(
                    method, parts, body, content_type, group, stored, res, ns, name, sub
                )
                return code, _served_as(payload, served, kept), headers
        if CoreStore.serves(group, version, res):
            query = parse_qs(parts.query)
            return self.core.handle(method, res, ns, name, sub, query, body, content_type)
        if (group, version, res) not in KINDS:
            raise ApiError(404, "NotFound", f"the server could not find the resource {res}")
        return self._dispatch_at(
            method, parts, body, content_type, group, version, res, ns, name, sub
        )

    def _dispatch_at(
        self,
        method: str,
        parts: Any,
        body: Any,
        content_type: str | None,
        group: str,
        version: str,
        res: str,
        ns: str | None,
        name: str | None,
        sub: str | None,
    ) -> tuple[int, dict, dict[str, str]]:
        kind, has_status = KINDS[(group, version, res)]
        query = parse_qs(parts.query)
        if (group, res) in CLUSTER_SCOPED:
            if ns is not None:
                raise ApiError(404, "NotFound", f"{res} are not namespaced")
            ns = ""
        with self.lock:
            if name is None:
                if method == "GET":
                    return 200, self._list(group, version, res, kind, ns, query), {}
                if method == "POST":
                    if ns is None:
                        raise ApiError(405, "MethodNotAllowed", "create needs a namespace")
                    return 201, self._create(group, version, res, kind, ns, body), {}
                raise ApiError(405, "MethodNotAllowed", f"{method} on a collection")
            if ns is None:
                raise ApiError(404, "NotFound", "namespaced resource needs a namespace")
            key = (group, version, res, ns, name)
            if sub is None:
                return self._item(key, kind, has_status, method, body, content_type)
            if sub == "status" and has_status:
                return self._status(key, kind, method, body, content_type)
            if sub == "scale" and res in SCALED_BUILTINS:
                return self._scale(key, method, body, content_type)
            paths = self.crds.scale(group, res) if sub == "scale" else None
            if paths is not None:
                return self._crd_scale(key, kind, paths, method, body, content_type)
            raise ApiError(404, "NotFound", f"no subresource {sub} on {res}")

    def _missing(self, key: Key, kind: str) -> ApiError:
        return ApiError(
            404,
            "NotFound",
            f'{key[2]}.{key[0] or "core"} "{key[4]}" not found',
            {"name": key[4], "group": key[0], "kind": key[2]},
        )

    def _list(
        self, group: str, version: str, res: str, kind: str, ns: str | None, query: dict
    ) -> dict:
        items = [
            copy.deepcopy(o)
            for k, o in sorted(self.objects.items())
            if k[:3] == (group, version, res) and (ns is None or k[3] == ns)
        ]
        api_version = f"{group}/{version}" if group else version
        return {
            "kind": f"{kind}List",
            "apiVersion": api_version,
            "metadata": {"resourceVersion": str(self._rv)},
            "items": items,
        }

    def _create(self, group: str, version: str, res: str, kind: str, ns: str, body: dict) -> dict:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "body must be an object")
        obj = copy.deepcopy(body)
        md = obj.setdefault("metadata", {})
        if not md.get("name"):
            if md.get("generateName"):
                md["name"] = md["generateName"] + uuid.uuid4().hex[:5]
            else:
                raise ApiError(422, "Invalid", "metadata.name: Required value")
        md["namespace"] = ns
        obj.setdefault("apiVersion", f"{group}/{version}" if group else version)
        obj.setdefault("kind", kind)
        key = (group, version, res, ns, md["name"])
        if key in self.objects:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{res} "{md["name"]}" already exists',
                {"name": md["name"], "kind": res},
            )
        md.pop("resourceVersion", None)
        self._stamp(obj, None)
        self.objects[key] = obj
        self._settle(key)
        self._changed(key, "ADDED")
        return copy.deepcopy(obj)

    def _check_rv(self, current: dict, given: Any, key: Key) -> None:
        rv = (
            (given or {}).get("metadata", {}).get("resourceVersion")
            if isinstance(given, dict)
            else None
        )
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {key[2]} "{key[4]}": the object '
                "has been modified; please apply your changes to the latest version "
                "and try again",
                {"name": key[4], "kind": key[2]},
            )

    def _patched(self, current: dict, body: Any, content_type: str | None, key: Key) -> dict:
        ctype = (content_type or "").split(";")[0].strip()
        if ctype == "application/json-patch+json":
            if not isinstance(body, list):
                raise ApiError(400, "BadRequest", "a JSON patch must be a list")
            out = json_patch(current, body)
            self._check_rv(current, out, key)
            return out
        if ctype in (
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
            "application/apply-patch+yaml",
        ):
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "a merge patch must be an object")
            self._check_rv(current, body, key)
            return merge_patch(current, body)
        raise ApiError(415, "UnsupportedMediaType", f"unsupported patch type {ctype!r}")

    def _write(self, key: Key, new: dict, old: dict) -> dict:
        new["metadata"]["name"], new["metadata"]["namespace"] = key[4], key[3]
        self._stamp(new, old)
        self.objects[key] = new
        self._settle(key)
        self._changed(key, "MODIFIED")
        return copy.deepcopy(new)

    def _item(
        self,
        key: Key,
        kind: str,
        has_status: bool,
        method: str,
        body: Any,
        content_type: str | None,
    ) -> tuple[int, dict, dict]:
        current = self.objects.get(key)
        if current is None:
            raise self._missing(key, kind)
        if method == "GET":
            return 200, copy.deepcopy(current), {}
        if method == "DELETE":
            del self.objects[key]
            self._changed(key, "DELETED", current)
            return 200, status_body(200, "", "deleted", {"name": key[4]}), {}
        if method == "PUT":
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "body must be an object")
            self._check_rv(current, body, key)
            new = copy.deepcopy(body)
        elif method == "PATCH":
            new = self._patched(current, body, content_type, key)
        else:
            raise ApiError(405, "MethodNotAllowed", method)
        new.setdefault("metadata", {})
        if has_status:  # the main resource cannot change status
            if "status" in current:
                new["status"] = copy.deepcopy(current["status"])
            else:
                new.pop("status", None)
        return 200, self._write(key, new, current), {}

    def _status(
        self, key: Key, kind: str, method: str, body: Any, content_type: str | None
    ) -> tuple[int, dict, dict]:
        current = self.objects.get(key)
        if current is None:
            raise self._missing(key, kind)
        if method == "GET":
            return 200, copy.deepcopy(current), {}
        if method == "PUT":
            self._check_rv(current, body, key)
            new_status = (body or {}).get("status")
        elif method == "PATCH":
            new_status = self._patched(current, body, content_type, key).get("status")
        else:
            raise ApiError(405, "MethodNotAllowed", method)
        new = copy.deepcopy(current)  # only status changes; generation stays
        if new_status is None:
            new.pop("status", None)
        else:
            new["status"] = new_status
        new["metadata"]["resourceVersion"] = self._next_rv()
        self.objects[key] = new
        self._changed(key, "MODIFIED")
        return 200, copy.deepcopy(new), {}

    def _scale_of(self, obj: dict) -> dict:
        md = obj["metadata"]
        labels = obj.get("spec", {}).get("selector", {}).get("matchLabels", {})
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                k: md[k]
                for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            },
            "spec": {"replicas": obj.get("spec", {}).get("replicas", 1)},
            "status": {
                "replicas": obj.get("status", {}).get("replicas", 0),
                "selector": ",".join(f"{k}={v}" for k, v in sorted(labels.items())),
            },
        }

    def _scale(
        self, key: Key, method: str, body: Any, content_type: str | None
    ) -> tuple[int, dict, dict]:
        current = self.objects.get(key)
        if current is None:
            raise self._missing(key, KINDS[key[:3]][0])
        scale = self._scale_of(current)
        if method == "GET":
            return 200, scale, {}
        if method == "PUT":
            self._check_rv(current, body, key)
            new_scale = body
        elif method == "PATCH":
            new_scale = self._patched(scale, body, content_type, key)
        else:
            raise ApiError(405, "MethodNotAllowed", method)
        replicas = (new_scale or {}).get("spec", {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            raise ApiError(422, "Invalid", "spec.replicas: must be a non-negative integer")
        new = copy.deepcopy(current)
        new.setdefault("spec", {})["replicas"] = replicas
        self._write(key, new, current)
        return 200, self._scale_of(self.objects[key]), {}

    def _crd_scale(
        self,
        key: Key,
        kind: str,
        paths: ScalePaths,
        method: str,
        body: Any,
        content_type: str | None,
    ) -> tuple[int, dict, dict]:
        """A custom resource's ``scale`` subresource, as the apiextensions server serves it:
        GET fails while ``specReplicasPath`` holds nothing; PUT/PATCH write that field
        (and only it), bounded by the schema; ``status`` comes from the status paths."""
        spec_path, status_path, selector_path = paths.spec, paths.status, paths.selector
        maximum = paths.maximum
        current = self.objects.get(key)
        if current is None:
            raise self._missing(key, kind)
        found = _at(current, spec_path)
        scale = self._crd_scale_of(current, spec_path, status_path, selector_path)
        if method == "GET":
            if found is None:
                raise ApiError(
                    500, "InternalError", f'the spec replicas field "{spec_path}" does not exist'
                )
            return 200, scale, {}
        if found is None:
            scale["spec"]["replicas"] = -2147483648  # "not set before", as the server does
        if method == "PUT":
            self._check_rv(current, body, key)
            new_scale = body
        elif method == "PATCH":
            new_scale = self._patched(scale, body, content_type, key)
        else:
            raise ApiError(405, "MethodNotAllowed", method)
        replicas = (new_scale or {}).get("spec", {}).get("replicas")
        if replicas == -2147483648 or replicas is None:
            raise ApiError(
                400, "BadRequest", f'the spec replicas field "{spec_path}" cannot be empty'
            )
        if not isinstance(replicas, int) or replicas < 0:
            raise ApiError(
                422,
                "Invalid",
                f'Scale.autoscaling "{key[4]}" is invalid: spec.replicas: Invalid value: '
                f"{replicas}: must be greater than or equal to 0",
            )
        if maximum is not None and replicas > maximum:
            raise ApiError(
                422,
                "Invalid",
                f'{kind}.{key[0]} "{key[4]}" is invalid: {spec_path.strip(".")}: Invalid value: '
                f"{replicas}: {spec_path.strip('.')} in body should be less than or equal to "
                f"{maximum}",
            )
        new = copy.deepcopy(current)
        parent = new
        parts = spec_path.strip(".").split(".")
        for part in parts[:-1]:
            parent = parent.setdefault(part, {})
        parent[parts[-1]] = replicas
        self._write(key, new, current)
        return 200, self._crd_scale_of(self.objects[key], spec_path, status_path, selector_path), {}

    def _crd_scale_of(
        self, obj: dict, spec_path: str, status_path: str, selector_path: str | None
    ) -> dict:
        md = obj["metadata"]
        selector = _at(obj, selector_path) if selector_path else None
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                k: md[k]
                for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            },
            "spec": {"replicas": _at(obj, spec_path) or 0},
            "status": {
                "replicas": _at(obj, status_path) or 0,
                "selector": selector if isinstance(selector, str) else "",
            },
        }


def _at(obj: dict, path: str) -> Any:
    """The value at a dotted JSON path (``.spec.replicas``), or None."""
    node: Any = obj
    for part in path.strip(".").split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _served_as(payload: Any, served: str, stored: str) -> Any:
    """An answer as the requested version shows it (``apiVersion`` rewritten, as the CRD's
    ``conversion: None`` does)."""
    if not isinstance(payload, dict):
        return payload
    out = dict(payload)
    if out.get("apiVersion") == stored:
        out["apiVersion"] = served
    if isinstance(out.get("items"), list):
        out["items"] = [_served_as(i, served, stored) for i in out["items"]]
    return out


def _split_api_version(api_version: str) -> tuple[str, str]:
    if "/" in api_version:
        g, v = api_version.split("/", 1)
        return g, v
    return "", api_version


def _stored(api_version: str) -> tuple[str, str]:
    group, version = _split_api_version(api_version)
    return group, STORAGE_VERSION.get((group, version), version)


def _plural(group: str, version: str, kind: str) -> str:
    for (g, v, plural), (k, _) in KINDS.items():
        if (g, v, k) == (group, version, kind):
            return plural
    raise KeyError(f"the fake does not serve {group}/{version} {kind}")


class _QuietServer(ThreadingHTTPServer):
    """A client that drops its connection (one killed with SIGKILL) is no server error."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    api: FakeKubeApi
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes: without this, delayed ACKs stall
        # every keep-alive response by ~40 ms.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _watch(self, query: dict) -> bool:
        """Serve a watch (chunked JSON lines) if this GET is one; returns whether it was."""
        if query.get("watch", [""])[0] not in ("true", "1"):
            return False
        api = self.api
        path = urlsplit(self.path).path
        started = time.time()
        m = _PATH.match(path)
        if m is None or CoreStore.serves(m["g"] or "", m["v"] or m["cv"], m["res"]):
            return False  # pods and nodes: the core store serves their watches
        injected = api._injected("GET", path)
        if injected is not None and injected.status is not None:
            return False  # answered as a plain request (an error)
        group, version = m["g"] or "", m["v"] or m["cv"]
        since = int(query.get("resourceVersion", ["0"])[0] or 0)
        timeout_s = float(query.get("timeoutSeconds", ["30"])[0])
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for event in api.watch_events(group, version, m["res"], m["ns"], since, timeout_s):
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the client went away
        with api.lock:
            api.requests.append(
                Request("GET", path, 200, None, None, time.time(), started, None, self._query())
            )
        self.close_connection = True
        return True

    def _query(self) -> str:
        return urlsplit(self.path).query

    def _serve(self, method: str) -> None:
        if method == "GET" and self._watch(parse_qs(urlsplit(self.path).query)):
            return
        started = time.time()
        stamp = self.headers.get("X-Test-Clock")
        clock = float(stamp) if stamp else None
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        content_type = self.headers.get("Content-Type")
        body: Any = None
        try:
            body = json.loads(raw) if raw else None
            code, payload, headers = self.api.handle(method, self.path, body, content_type)
        except LostAnswer:
            with self.api.lock:
                self.api.requests.append(
                    Request(
                        method,
                        urlsplit(self.path).path,
                        0,
                        body,
                        content_type,
                        time.time(),
                        started,
                        clock,
                        self._query(),
                    )
                )
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.request.shutdown(socket.SHUT_RDWR)
            return
        except ApiError as err:
            code, payload, headers = (
                err.code,
                status_body(err.code, err.reason, err.message, err.details),
                {},
            )
        except (ValueError, KeyError, IndexError, TypeError) as err:
            code, payload, headers = 400, status_body(400, "BadRequest", str(err)), {}
        with self.api.lock:
            self.api.requests.append(
                Request(
                    method,
                    urlsplit(self.path).path,
                    code,
                    body,
                    content_type,
                    time.time(),
                    started,
                    clock,
                    self._query(),
                )
            )
        if isinstance(payload, WatchStream):
            self._stream(payload)
            return
        parts = urlsplit(self.path)
        if method == "GET" and code == 200 and wants_table(self.headers.get("Accept")):
            payload = self.api.as_table(parts.path, parse_qs(parts.query), payload)
        headers = {**headers, **self.api.warnings(parts.path)}
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, watch: WatchStream) -> None:
        """A watch: chunked newline-delimited JSON until it ends or the client goes."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for line in watch.lines():
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            if watch.dropped:  # no final chunk: the client sees a broken stream
                self.close_connection = True
                self.request.shutdown(socket.SHUT_RDWR)
                return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:  # the client went first (broken pipe, reset, not connected)
            self.close_connection = True

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")


@dataclass
class Objects:
    """Builders for the objects tests put into the fake."""

    namespace: str = "ml"

    def statefulset(self, name: str, replicas: int, gpus: int = 0) -> dict:
        resources = {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}
        return {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "replicas": replicas,
                "serviceName": name,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "containers": [{"name": "main", "image": "x", "resources": resources}]
                    },
                },
            },
        }

    def deployment(self, name: str, replicas: int, gpus: int = 0) -> dict:
        sts = self.statefulset(name, replicas, gpus)
        spec = {k: v for k, v in sts["spec"].items() if k != "serviceName"}
        return {**sts, "kind": "Deployment", "spec": spec}

    def pytorchjob(
        self,
        name: str,
        workers: int,
        *,
        min_replicas: int | None = 1,
        max_replicas: int | None = 16,
        elastic: bool = True,
    ) -> dict:
        """An elastic PyTorchJob (``elasticPolicy`` with the bounds given; ``None`` leaves a
        bound out; ``elastic=False`` leaves the policy out)."""
        spec: dict[str, Any] = {
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": workers,
                    "restartPolicy": "OnFailure",
                    "template": {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}},
                }
            }
        }
        if elastic:
            policy: dict[str, Any] = {"rdzvBackend": "c10d"}
            if min_replicas is not None:
                policy["minReplicas"] = min_replicas
            if max_replicas is not None:
                policy["maxReplicas"] = max_replicas
            spec["elasticPolicy"] = policy
        return {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": spec,
        }

    def trainerset(self, name: str, workers: int) -> dict:
        """A JobSet-style custom resource whose workers are sized through its ``/scale``."""
        return {
            "apiVersion": "training.kale.test/v1",
            "kind": "TrainerSet",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"workers": {"replicas": workers, "image": "x"}},
            "status": {"workers": {"ready": workers, "selector": f"trainerset={name}"}},
        }

    def tfjob(self, name: str, workers: int, ps: int) -> dict:
        def spec(n: int) -> dict:
            return {
                "replicas": n,
                "restartPolicy": "OnFailure",
                "template": {"spec": {"containers": [{"name": "tensorflow", "image": "x"}]}},
            }

        return {
            "apiVersion": "kubeflow.org/v1",
            "kind": "TFJob",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"tfReplicaSpecs": {"Worker": spec(workers), "PS": spec(ps)}},
        }


def serve(argv: list[str] | None = None) -> int:
    """Serve an empty fake API server until SIGTERM or SIGINT (the module's entry point)."""
    ap = argparse.ArgumentParser(description="The fake Kubernetes API server, as a process.")
    ap.add_argument(
        "--kubeconfig", type=Path, required=True, help="written once the server listens"
    )
    ap.add_argument(
        "--bookmark-interval",
        type=float,
        default=1.0,
        metavar="S",
        help="idle seconds between BOOKMARK events on a watch",
    )
    args = ap.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with FakeKubeApi() as api:
        api.core.bookmark_interval_s = args.bookmark_interval
        partial = args.kubeconfig.with_name(args.kubeconfig.name + ".part")
        api.kubeconfig(partial)
        os.replace(partial, args.kubeconfig)  # a reader never sees half a file
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(serve())
