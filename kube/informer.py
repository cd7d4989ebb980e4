"""List + watch of pods, nodes or events as raw JSON: the scheduler's eyes (client-go's reflector).

Any other collection is followed the same way when the caller passes its ``list_fn`` (the
controller's ElasticTrainingJobs: :mod:`kube.job_watch`).

Why not poll: a scheduler must see a new pod within milliseconds and must not list the
whole cluster every second. The protocol is the API server's own:

1. **list** (one request) → every object and the collection's ``resourceVersion``;
2. **watch** from that version with ``allowWatchBookmarks=true``: ADDED/MODIFIED/DELETED
   events stream in; each moves the resume point to its object's version, and BOOKMARK
   events move it without an object, so a quiet watch can still resume near the head;
3. the watch ends (``timeoutSeconds``, a dropped connection): **re-watch** from the resume
   point, after a backoff if it failed — nothing is missed and nothing re-listed;
4. the resume point is too old (HTTP 410 Gone, or an ``ERROR`` event with code 410: the
   server compacted its history): **re-list** and hand the full state to the sink, which
   replaces its cache (deletions missed meanwhile show up as absent objects).

Objects stay plain dicts (``_preload_content=False``): deserialising every pod into the
client's models costs more than a scheduling decision.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import urllib3
from kubernetes.client.exceptions import ApiException
from tenacity import RetryCallState, Retrying, retry_if_exception_type

from kube.client import Kube, RetryPolicy, status_of
from kube.errors import ActuatorError

log = logging.getLogger(__name__)

Resource = Literal["pods", "nodes", "events"]
Sink = Callable[[str, Any], None]
"""``sink(type, payload)``: ``("SYNC", [objects])`` after each list, else ``(type, object)``."""


class Expired(Exception):
    """The resume point is older than the server's history: re-list (HTTP 410 Gone)."""


class _Stopped(Exception):
    """:meth:`Reflector.stop` was called during a failure or its pause: :meth:`Reflector.run`
    returns."""


_FAILURES = (
    ActuatorError,
    ApiException,
    urllib3.exceptions.HTTPError,
    OSError,
    ValueError,  # a malformed answer (JSON): the thread must not die of it
    KeyError,
)
"""What a pass may fail with and be tried again after a pause."""


@dataclass
class ReflectorStats:
    """What happened, for metrics and tests."""

    lists: int = 0
    watches: int = 0
    events: int = 0
    bookmarks: int = 0
    expired: int = 0
    errors: int = 0
    by_type: dict[str, int] = field(default_factory=dict)


class Reflector:
    """Keeps a sink in step with one resource collection, on the calling thread."""

    def __init__(
        self,
        kube: Kube,
        resource: Resource | str,
        sink: Sink,
        *,
        list_fn: Callable[..., Any] | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        watch_timeout_s: int = 300,
        retry: RetryPolicy | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.kube = kube
        self.resource = resource
        """A :data:`Resource`, or with ``list_fn`` any name for messages."""
        self._list_fn = list_fn
        """The client's list call of the collection (None: the core call of ``resource``);
        called with the list and watch parameters as keyword arguments."""
        self.sink = sink
        self.selectors = {
            k: v
            for k, v in (("field_selector", field_selector), ("label_selector", label_selector))
            if v
        }
        self.watch_timeout_s = watch_timeout_s
        self.retry = retry or RetryPolicy(attempts=1_000_000, max_s=5.0)
        self.stop_event = stop or threading.Event()
        self.resource_version: str | None = None
        self.stats = ReflectorStats()
        self.synced = threading.Event()
        """Set once the first list reached the sink."""
        self.last_error: str | None = None
        """The latest failure until a list succeeds again (for a caller's messages)."""
        self.list_timeout_s = 60.0
        """Longest wait for a list's answer (a large cluster's pod list takes a while)."""
        self._response: Any = None
        self._lock = threading.Lock()
        """Orders :meth:`stop` against a watch being opened (no stream escapes the stop)."""

    @property
    def _fn(self) -> Callable[..., Any]:
        if self._list_fn is not None:
            return self._list_fn
        core = self.kube.core
        lists: dict[str, Callable[..., Any]] = {
            "pods": core.list_pod_for_all_namespaces,
            "nodes": core.list_node,
            "events": core.list_event_for_all_namespaces,
        }
        return lists[self.resource]

    # -- the protocol -----------------------------------------------------------------------
    def relist(self) -> None:
        """List everything, hand it to the sink, remember the collection's version."""
        # One try: a failure goes back to :meth:`run`, whose backoff ends at once on stop
        # (``Kube.call``'s own retries would sleep through a stop).
        resp = self._fn(
            _preload_content=False,
            _request_timeout=(5.0, self.list_timeout_s),
            **self.selectors,
        )
        try:
            doc = json.loads(resp.data)
        finally:
            resp.release_conn()
        self.stats.lists += 1
        self.resource_version = str(doc["metadata"]["resourceVersion"])
        self.sink("SYNC", doc.get("items") or [])
        self.last_error = None
        self.synced.set()

    def _lines(self) -> Iterator[bytes]:
        timeout = self.watch_timeout_s
        try:
            resp = self._fn(
                watch=True,
                resource_version=self.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout,
                _preload_content=False,
                _request_timeout=(5.0, timeout + 15.0),
                **self.selectors,
            )
        except ApiException as exc:
            if status_of(exc) == 410:
                raise Expired(str(exc.reason)) from exc
            raise
        with self._lock:
            if self.stop_event.is_set():  # stopped while the request was on its way
                resp.close()
                resp.release_conn()
                return
            self._response = resp
        buffer = b""
        ended = False
        try:
            for chunk in resp.stream(amt=None, decode_content=False):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                yield from (line for line in lines if line.strip())
            ended = True
        finally:
            with self._lock:
                self._response = None
            if not ended:  # left mid-stream: the connection must not be reused
                resp.close()
            resp.release_conn()

    def watch_once(self) -> None:
        """One watch request, until it ends; raises :class:`Expired` when a re-list is due."""
        self.stats.watches += 1
        for line in self._lines():
            event = json.loads(line)
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                code = obj.get("code")
                if code == 410:
                    raise Expired(obj.get("message", "resource version too old"))
                raise ActuatorError(f"watch {self.resource}: {obj.get('message', obj)}")
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv:
                self.resource_version = str(rv)
            if kind == "BOOKMARK":
                self.stats.bookmarks += 1
            else:
                self.stats.events += 1
                self.stats.by_type[kind] = self.stats.by_type.get(kind, 0) + 1
                self.sink(kind, obj)
            if self.stop_event.is_set():
                return

    def run(self) -> None:
        """List, then watch until :meth:`stop`; re-watch on ends, re-list on 410.

        A failure backs off before the next try (tenacity, pausing by
        :meth:`RetryPolicy.pause` of the failures in a row, counted up to ten) however long
        the API server stays away; a stop ends the pause at once.
        """
        retrying = Retrying(
            retry=retry_if_exception_type(_FAILURES),
            wait=lambda state: self.retry.pause(min(state.attempt_number, 10)),
            sleep=self._pause,
            before_sleep=self._failed,
        )
        try:
            while not self.stop_event.is_set():
                retrying(self._follow)  # a pass that ends well starts the count again
        except _Stopped:
            return

    def _follow(self) -> None:
        """(Re-)list when there is no resume point, then watch once; a 410 re-lists at once."""
        while not self.stop_event.is_set():
            try:
                if self.resource_version is None:
                    self.relist()
                self.watch_once()
                return
            except Expired as exc:
                self.stats.expired += 1
                log.info("watch %s: %s; re-listing", self.resource, exc)
                self.resource_version = None
            except _FAILURES:
                if self.stop_event.is_set():
                    raise _Stopped from None
                raise

    def _failed(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        pause = state.next_action.sleep if state.next_action else 0.0
        self.stats.errors += 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        log.warning("watch %s failed (%s); again in %.1fs", self.resource, exc, pause)

    def _pause(self, seconds: float) -> None:
        if self.stop_event.wait(seconds):
            raise _Stopped

    def stop(self) -> None:
        """End :meth:`run` soon: the open watch is closed under it."""
        with self._lock:
            self.stop_event.set()
            resp = self._response
        if resp is not None:
            try:
                resp.shutdown()
            except Exception:  # already closed, or a urllib3 without shutdown()
                log.debug("watch %s: closing the stream failed", self.resource, exc_info=True)


def start(reflector: Reflector, *, name: str | None = None) -> threading.Thread:
    """Run ``reflector`` on a daemon thread."""
    thread = threading.Thread(
        target=reflector.run, name=name or f"kale-watch-{reflector.resource}", daemon=True
    )
    thread.start()
    return thread
