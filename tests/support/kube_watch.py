"""Selectors and watch streams of the fake API server: what a reflector relies on.

* ``fieldSelector`` (``=``, ``==``, ``!=`` on the field labels the API server supports
  per resource, e.g. ``spec.schedulerName`` for pods or ``involvedObject.kind`` for events;
  any other label answers 400 as the server does) and ``labelSelector`` (``k=v``, ``k!=v``,
  ``k``, ``!k``) on lists and watches;
* ``?watch=true`` streams newline-delimited ``{"type": ..., "object": ...}`` events over a
  chunked response: from a ``resourceVersion`` (only newer changes), or from the current
  state (synthetic ADDED events first) when none is given; ``BOOKMARK`` events carrying the
  latest resourceVersion when ``allowWatchBookmarks=true``; ``timeoutSeconds`` ends the
  stream; a resourceVersion older than the retained history answers an ``ERROR`` event with
  a 410 ``Expired`` Status; an object that stops matching a watch's selector is sent as
  DELETED, one that starts matching as ADDED, like the server.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .kube_core import CoreStore

RESOURCES = {"pods": "Pod", "nodes": "Node", "events": "Event"}
NAMESPACED = frozenset({"pods", "events"})
_META = {
    "metadata.name": ("metadata", "name"),
    "metadata.namespace": ("metadata", "namespace"),
}
FIELDS: dict[str, dict[str, tuple[str, ...]]] = {
    # the field selectors the API server supports per resource (a subset of each)
    "pods": {
        **_META,
        "spec.nodeName": ("spec", "nodeName"),
        "spec.schedulerName": ("spec", "schedulerName"),
        "status.phase": ("status", "phase"),
    },
    "nodes": {**_META, "spec.unschedulable": ("spec", "unschedulable")},
    "events": {
        **_META,
        "involvedObject.kind": ("involvedObject", "kind"),
        "involvedObject.name": ("involvedObject", "name"),
        "involvedObject.namespace": ("involvedObject", "namespace"),
        "involvedObject.uid": ("involvedObject", "uid"),
        "reason": ("reason",),
        "type": ("type",),
        "source": ("source", "component"),
        "reportingComponent": ("reportingComponent",),
    },
}


def _error(code: int, reason: str, message: str, details: dict | None = None) -> Exception:
    from .kube_api import ApiError

    return ApiError(code, reason, message, details)


def _parse_selector(
    text: str, *, fields: dict[str, tuple[str, ...]] | None
) -> list[tuple[str, str, str | None]]:
    """``a=b,c!=d,e,!f`` as (key, op, value) triples; op in ``= != exists !exists``.

    ``fields``: the field labels a field selector may name (None: a label selector)."""
    out: list[tuple[str, str, str | None]] = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            out.append((k.strip(), "!=", v.strip()))
        elif "=" in term:
            k, v = term.split("==", 1) if "==" in term else term.split("=", 1)
            out.append((k.strip(), "=", v.strip()))
        elif fields is not None:
            raise _error(400, "BadRequest", f"invalid field selector {term!r}")
        elif term.startswith("!"):
            out.append((term[1:], "!exists", None))
        else:
            out.append((term, "exists", None))
    for k, _, _ in out if fields is not None else ():
        if k not in fields:
            raise _error(400, "BadRequest", f'field label not supported: "{k}"')
    return out


def _field(obj: dict, path: tuple[str, ...]) -> str:
    value: object = obj
    for part in path:
        value = (value if isinstance(value, dict) else {}).get(part)
    if isinstance(value, bool):
        return str(value).lower()
    return str(value or "")


class Selector:
    """The list/watch filters of one request."""

    def __init__(self, query: dict[str, list[str]], resource: str = "pods") -> None:
        self.known = FIELDS[resource]
        self.fields = _parse_selector(query.get("fieldSelector", [""])[0], fields=self.known)
        self.labels = _parse_selector(query.get("labelSelector", [""])[0], fields=None)
        self.namespace: str | None = None

    def matches(self, obj: dict | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        for key, op, value in self.fields:
            here = _field(obj, self.known[key])
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
            server = store.api._server  # the server this stream belongs to
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
                    if store.api._server is not server or store.closing:
                        # the server stopped (even if a new one started since, as after
                        # ``stop(); start()``): the connection drops
                        self.dropped = True
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
