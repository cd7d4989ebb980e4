"""The ElasticTrainingJobs of the cluster, kept current by a watch instead of a list per tick.

Why this module exists: listing every job every tick costs the API server a full read of all
jobs (10,000 objects, with their statuses) per interval per replica. client-go's answer is
an *informer*: list once, remember the list's ``resourceVersion``, then watch from it and
apply each ADDED/MODIFIED/DELETED event to a local cache. When the server has compacted the
history the watch asked for, it answers ``410 Gone`` and the informer lists again. The tick
reads the cache — level-triggered as before: it sees every job every tick, only the reading
is cheap.

Failures: the watch runs on its own daemon thread; a broken stream is re-opened from the
last resourceVersion, an error backs off (the :class:`RetryPolicy` pauses) and lists again.
Until the first list succeeds :meth:`JobInformer.list` raises (the tick is skipped, no job
is forgotten); afterwards it serves the last known state, as a list would have during an
outage, and says how old it is.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException

from autoscaler.actuators.crd_status import GROUP, PLURAL, VERSION
from autoscaler.actuators.errors import ActuatorError, TargetUnavailable
from autoscaler.actuators.kube import Kube

log = logging.getLogger(__name__)

#: Seconds a watch request stays open before it is renewed from its resourceVersion.
WATCH_TIMEOUT_S = 300


class _Gone(Exception):
    """The watch's resourceVersion is older than the server's history: list again."""


class JobInformer:
    """A watch-fed cache of the job resources in ``namespaces`` (empty: all namespaces)."""

    def __init__(
        self,
        kube: Kube,
        *,
        namespaces: Sequence[str] = (),
        watch_timeout_s: int = WATCH_TIMEOUT_S,
        sync_timeout_s: float = 30.0,
        sleep: Callable[[float], bool] | None = None,
    ) -> None:
        self.kube = kube
        self.scopes: list[str | None] = list(namespaces) or [None]
        self.watch_timeout_s = watch_timeout_s
        self.sync_timeout_s = sync_timeout_s
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait
        self._lock = threading.Lock()
        self._items: dict[str | None, dict[tuple[str, str], dict[str, Any]]] = {}
        self._synced = {scope: threading.Event() for scope in self.scopes}
        self._threads: list[threading.Thread] = []
        self.lists = 0
        """Full lists made (the first per scope, then one per 410 or error)."""
        self.events = 0
        """Watch events applied."""
        self.last_error: str | None = None

    # -- what the controller calls -------------------------------------------------------
    def start(self) -> JobInformer:
        for scope in self.scopes:
            t = threading.Thread(
                target=self._run, args=(scope,), name=f"kale-watch-{scope or 'all'}", daemon=True
            )
            self._threads.append(t)
            t.start()
        return self

    def list(self) -> list[dict[str, Any]]:
        """Every job as last seen; raises until the first list has succeeded.

        The objects are the cache's own (an event replaces an object, never changes it):
        read them, do not modify them — copying 10,000 jobs every tick is what this avoids.
        """
        deadline = time.monotonic() + self.sync_timeout_s
        for scope in self.scopes:
            if not self._synced[scope].wait(max(0.0, deadline - time.monotonic())):
                raise TargetUnavailable(
                    f"elastictrainingjobs {'in ' + scope if scope else '(all namespaces)'}: "
                    f"not listed yet ({self.last_error or 'waiting for the API server'})"
                )
        with self._lock:
            return [o for scope in self.scopes for o in self._items.get(scope, {}).values()]

    def stop(self) -> None:
        self._stop.set()

    # -- the watch thread ----------------------------------------------------------------
    def _run(self, scope: str | None) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                rv = self._relist(scope)
                failures = 0
                while not self._stop.is_set():
                    rv = self._watch(scope, rv)
            except _Gone:
                log.info("watch of %s expired (410): listing again", scope or "all namespaces")
            except Exception as exc:  # any failure: back off, list again
                failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                pause = self.kube.retry.pause(min(failures, 6))
                log.warning(
                    "watching elastictrainingjobs failed (%s); listing again in %.1fs",
                    self.last_error,
                    pause,
                )
                if self._sleep(pause):
                    return

    def _list_call(self, scope: str | None) -> Callable[..., Any]:
        custom = self.kube.custom
        if scope is None:
            return lambda **kw: custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kw)
        return lambda **kw: custom.list_namespaced_custom_object(
            GROUP, VERSION, scope, PLURAL, **kw
        )

    def _relist(self, scope: str | None) -> str:
        what = f"elastictrainingjobs {'in ' + scope if scope else '(all namespaces)'}"
        out = self.kube.call(what, self._list_call(scope))
        items = {_key(o): o for o in out.get("items", []) if isinstance(o, dict)}
        with self._lock:
            self._items[scope] = items
        self.lists += 1
        self.last_error = None
        self._synced[scope].set()
        return str((out.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, scope: str | None, rv: str) -> str:
        """One watch request from ``rv``; returns the resourceVersion to resume from."""
        w = k8s_watch.Watch()
        list_fn = self._list_call(scope)

        def func(**kw: Any) -> Any:  # Watch.stream needs a function with a docstring type
            return list_fn(**kw)

        func.__doc__ = ":return: object"
        try:
            for event in w.stream(
                func,
                resource_version=rv,
                timeout_seconds=self.watch_timeout_s,
                allow_watch_bookmarks=True,
                deserialize=False,
                _request_timeout=(5.0, self.watch_timeout_s + 10.0),
            ):
                if self._stop.is_set():
                    w.stop()
                    break
                rv = self._apply(scope, event) or rv
        except ApiException as exc:
            if exc.status == 410:
                raise _Gone() from exc
            raise ActuatorError(f"watch: HTTP {exc.status} {exc.reason}") from exc
        return rv

    def _apply(self, scope: str | None, event: dict[str, Any]) -> str | None:
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            return None
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            with self._lock:
                items = self._items.setdefault(scope, {})
                if kind == "DELETED":
                    items.pop(_key(obj), None)
                else:
                    items[_key(obj)] = obj
            self.events += 1
        return str(rv) if rv else None


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    md = obj.get("metadata") or {}
    return str(md.get("namespace", "")), str(md.get("name", ""))
