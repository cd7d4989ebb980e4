"""The ElasticTrainingJobs of the cluster, kept current by a watch instead of a list per tick.

Why this module exists: listing every job every tick costs the API server a full read of all
jobs (10,000 objects, with their statuses) per interval per replica. client-go's answer is
an *informer*: list once, remember the list's ``resourceVersion``, then watch from it and
apply each ADDED/MODIFIED/DELETED event to a local cache. When the server has compacted the
history the watch asked for, it answers ``410 Gone`` and the informer lists again. The tick
reads the cache — level-triggered as before: it sees every job every tick, only the reading
is cheap.

The protocol is the scheduler's :class:`~kube.informer.Reflector` (one per
watched namespace, on its own daemon thread): a watch that ends is re-opened from its last
resourceVersion, a failure backs off (the client's :class:`RetryPolicy` pauses) and watches
again, a 410 lists again. This module is only the cache the reflectors feed. Until the
first list succeeds :meth:`JobInformer.list` raises (the tick is skipped, no job is
forgotten); afterwards it serves the last known state, as a list would have during an
outage.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from kube.client import Kube
from kube.custom_resources import GROUP, PLURAL, VERSION
from kube.errors import TargetUnavailable
from kube.informer import Reflector, start

#: Seconds a watch request stays open before it is renewed from its resourceVersion.
WATCH_TIMEOUT_S = 300

Items = dict[tuple[str, str], dict[str, Any]]
"""(namespace, name) → the job resource as served (raw JSON)."""


class JobInformer:
    """A watch-fed cache of the job resources in ``namespaces`` (empty: all namespaces)."""

    def __init__(
        self,
        kube: Kube,
        *,
        namespaces: Sequence[str] = (),
        watch_timeout_s: int = WATCH_TIMEOUT_S,
        sync_timeout_s: float = 30.0,
    ) -> None:
        self.kube = kube
        self.scopes: list[str | None] = list(namespaces) or [None]
        self.sync_timeout_s = sync_timeout_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._items: dict[str | None, Items] = {}
        self.reflectors = {
            scope: Reflector(
                kube,
                _what(scope),
                partial(self._on_event, scope),
                list_fn=_list_call(kube, scope),
                watch_timeout_s=watch_timeout_s,
                retry=kube.retry,
                stop=self._stop,
            )
            for scope in self.scopes
        }
        self._threads: list[threading.Thread] = []

    @property
    def lists(self) -> int:
        """Full lists made (the first per scope, then one per 410)."""
        return sum(r.stats.lists for r in self.reflectors.values())

    @property
    def events(self) -> int:
        """Watch events applied."""
        return sum(r.stats.events for r in self.reflectors.values())

    @property
    def last_error(self) -> str | None:
        return next((r.last_error for r in self.reflectors.values() if r.last_error), None)

    # -- what the controller calls -------------------------------------------------------
    def start(self) -> JobInformer:
        for scope, reflector in self.reflectors.items():
            self._threads.append(start(reflector, name=f"kale-watch-{scope or 'all'}"))
        return self

    def list(self) -> list[dict[str, Any]]:
        """Every job as last seen; raises until the first list has succeeded.

        The objects are the cache's own (an event replaces an object, never changes it):
        read them, do not modify them — copying 10,000 jobs every tick is what this avoids.
        """
        deadline = time.monotonic() + self.sync_timeout_s
        for scope, reflector in self.reflectors.items():
            if not reflector.synced.wait(max(0.0, deadline - time.monotonic())):
                raise TargetUnavailable(
                    f"{_what(scope)}: not listed yet "
                    f"({reflector.last_error or 'waiting for the API server'})"
                )
        with self._lock:
            return [o for scope in self.scopes for o in self._items.get(scope, {}).values()]

    def stop(self) -> None:
        """End the watches soon (each open stream is closed under its reflector)."""
        for reflector in self.reflectors.values():
            reflector.stop()

    # -- what the reflectors call --------------------------------------------------------
    def _on_event(self, scope: str | None, kind: str, payload: Any) -> None:
        if kind == "SYNC":  # a (re-)list: the whole state, deletions missed meanwhile included
            items = {_key(o): o for o in payload if isinstance(o, dict)}
            with self._lock:
                self._items[scope] = items
            return
        if not isinstance(payload, dict) or kind not in ("ADDED", "MODIFIED", "DELETED"):
            return
        with self._lock:
            items = self._items.setdefault(scope, {})
            if kind == "DELETED":
                items.pop(_key(payload), None)
            else:
                items[_key(payload)] = payload


def _what(scope: str | None) -> str:
    return f"elastictrainingjobs {'in ' + scope if scope else '(all namespaces)'}"


def _list_call(kube: Kube, scope: str | None) -> Callable[..., Any]:
    custom = kube.custom
    if scope is None:
        return lambda **kw: custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kw)
    return lambda **kw: custom.list_namespaced_custom_object(GROUP, VERSION, scope, PLURAL, **kw)


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    md = obj.get("metadata") or {}
    return str(md.get("namespace", "")), str(md.get("name", ""))
