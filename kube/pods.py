"""Binding pods to nodes, their status, evictions and Events: the scheduler's writes.

* :class:`PodBinder` posts a ``Binding`` to the ``pods/<name>/binding`` subresource, as
  kube-scheduler does. The Binding carries the pod's UID (so a pod deleted and re-created
  under the same name is never bound by an old decision) and annotations — the API server
  copies a Binding's annotations onto the pod, which is how the scheduler records the GPUs
  it gave the pod without needing ``patch`` on pods. A 409 means the pod is already bound
  (by an earlier try whose answer was lost, or by someone else): the binder reads the pod
  and reports where it is, so nobody ever binds twice or accounts a pod twice.
* :class:`PodStatusWriter` patches the ``status`` subresource of a pod that cannot be
  placed: the ``PodScheduled`` condition ``False``/``Unschedulable`` with the reason (what
  Cluster Autoscaler and Karpenter wait for before adding a node) and
  ``status.nominatedNodeName``. A strategic merge patch, as kube-scheduler sends it: the
  conditions list is merged by ``type``, so the kubelet's other conditions stay.
* :class:`PodEvictor` evicts a preemption victim through the Eviction API
  (``POST pods/<name>/eviction``, ``policy/v1``): the API server checks the pod's
  PodDisruptionBudget atomically with the deletion (429 when it forbids it) and the pod
  terminates with its own grace period — no budget read here can race a disruption
  decided elsewhere.
* :class:`PodEventRecorder` writes ``core/v1`` Events on pods (``FailedScheduling``,
  ``Scheduled``, ``Preempted``) from a background thread, like client-go's broadcaster: a
  slow or failing Event write never delays a binding, and a full buffer drops Events (they
  are a courtesy).
"""

from __future__ import annotations

import json
import logging
import queue
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt

from kube.binding import BindOutcome, EvictOutcome
from kube.client import Kube, no_pause, status_of
from kube.errors import (
    ActuatorError,
    Conflict,
    TargetGone,
)
from kube.events import event_body, rfc3339

STRATEGIC_MERGE = "application/strategic-merge-patch+json"

log = logging.getLogger(__name__)


def _finish(resp: Any) -> None:
    """Read the rest of a raw answer, then hand its connection back: a connection returned
    with unread bytes would feed them to the next request as its answer."""
    resp.read()
    resp.release_conn()


def _gpus(pod: dict[str, Any], annotation: str) -> tuple[int, ...] | None:
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(annotation)
    try:
        return tuple(int(g) for g in text.split(",") if g.strip()) if text is not None else None
    except ValueError:
        return None


class PodBinder:
    """Binds pods through ``pods/binding``; never raises for API failures."""

    def __init__(
        self, kube: Kube, *, gpus_annotation: str = "kale.dev/gpus", attempts: int = 5
    ) -> None:
        self.kube = kube
        self.gpus_annotation = gpus_annotation
        self.attempts = attempts

    def _read(self, namespace: str, name: str) -> dict[str, Any]:
        # the raw answer (``_preload_content=False``: no model objects), not a V1Pod
        resp: Any = self.kube.call(
            f"pod {namespace}/{name}",
            self.kube.core.read_namespaced_pod,
            name,
            namespace,
            _preload_content=False,
        )
        try:
            pod: dict[str, Any] = json.loads(resp.data)
            return pod
        finally:
            resp.release_conn()

    def bind(self, pod: Any, node: str, annotations: dict[str, str]) -> BindOutcome:
        """Bind ``pod`` (anything with ``namespace``, ``name``, ``uid``) to ``node``."""
        ns, name, uid = pod.namespace, pod.name, pod.uid
        metadata: dict[str, Any] = {"name": name, "namespace": ns, "annotations": annotations}
        if uid and "/" not in uid:
            metadata["uid"] = uid
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        what = f"binding {ns}/{name} to {node}"
        for attempt in Retrying(
            stop=stop_after_attempt(self.attempts),
            retry=retry_if_exception_type(_StillUnbound),
            sleep=no_pause,
            before_sleep=lambda state: log.info(
                "%s: conflict on an unbound pod (try %d), retrying", what, state.attempt_number
            ),
            retry_error_callback=lambda _: None,  # gave up: the outcome below
        ):
            with attempt:
                return self._bind_once(what, node, metadata, body)
        return BindOutcome("failed", message=f"{what}: still conflicting after {self.attempts}")

    def _bind_once(
        self, what: str, node: str, metadata: dict[str, Any], body: dict[str, Any]
    ) -> BindOutcome:
        """One try; :class:`_StillUnbound` when it conflicted with a pod still unbound."""
        ns, name = metadata["namespace"], metadata["name"]
        try:
            resp = self.kube.call(
                what,
                self.kube.core.create_namespaced_pod_binding,
                name,
                ns,
                body,
                _preload_content=False,
            )
            _finish(resp)
            return BindOutcome("bound", node, None)
        except TargetGone:
            return BindOutcome("gone", message=f"{ns}/{name} no longer exists")
        except Conflict as exc:
            try:
                current = self._read(ns, name)
            except TargetGone:
                return BindOutcome("gone", message=f"{ns}/{name} no longer exists")
            except ActuatorError as read_exc:
                return BindOutcome("failed", message=f"{exc}; then {read_exc}")
            md = current.get("metadata") or {}
            if "uid" in metadata and md.get("uid") != metadata["uid"]:
                return BindOutcome("gone", message=f"{ns}/{name} was replaced")
            bound_to = (current.get("spec") or {}).get("nodeName")
            if bound_to:
                return BindOutcome(
                    "elsewhere",
                    bound_to,
                    _gpus(current, self.gpus_annotation),
                    str(exc),
                    dict(md.get("annotations") or {}),
                )
            if md.get("deletionTimestamp"):
                return BindOutcome("gone", message=f"{ns}/{name} is being deleted")
            raise _StillUnbound(what) from exc
        except ActuatorError as exc:
            return BindOutcome("failed", message=str(exc))


class _StillUnbound(Exception):
    """A Binding conflicted, yet the pod is not bound: a race worth another try."""


class PodStatusWriter:
    """Writes ``PodScheduled=False``/``Unschedulable`` and ``nominatedNodeName`` on pods."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def unschedulable(
        self, pod: Any, *, message: str, since: float, nominated_node: str | None = None
    ) -> bool:
        """Patch ``pod``'s status (anything with ``namespace``, ``name``); True when written
        (or the pod is gone: nothing left to tell). ``since`` is the condition's
        ``lastTransitionTime``: the caller keeps it while the condition stays ``False``.
        ``nominated_node`` None removes a nomination (a null deletes the field)."""
        body = {
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": message[:32_768],
                        "lastProbeTime": None,
                        "lastTransitionTime": rfc3339(since),
                    }
                ],
                "nominatedNodeName": nominated_node,
            }
        }
        what = f"status of pod {pod.namespace}/{pod.name}"
        try:
            resp = self.kube.call(
                what,
                self.kube.core.patch_namespaced_pod_status,
                pod.name,
                pod.namespace,
                body,
                _content_type=STRATEGIC_MERGE,
                _preload_content=False,
            )
            _finish(resp)
        except TargetGone:
            return True
        except ActuatorError as exc:
            log.warning("could not write the %s: %s", what, exc)
            return False
        return True


def _disruption_budget(exc: ApiException) -> str | None:
    """The PodDisruptionBudget message of a 429 that is one (None: throttling, retry it)."""
    if status_of(exc) != 429:
        return None
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        return None
    causes = (body.get("details") or {}).get("causes") or []
    if any(c.get("reason") == "DisruptionBudget" for c in causes if isinstance(c, dict)):
        reasons = [str(c.get("message") or "") for c in causes if isinstance(c, dict)]
        return "; ".join(r for r in reasons if r) or str(body.get("message") or "")
    return None


class PodEvictor:
    """Evicts pods through the Eviction API; never raises for API failures."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def evict(self, pod: Any, *, dry_run: bool = False) -> EvictOutcome:
        """Evict ``pod`` (``namespace``, ``name``, ``uid``); ``dry_run`` asks the API server
        whether it would (budgets included) without evicting."""
        ns, name, uid = pod.namespace, pod.name, pod.uid
        options: dict[str, Any] = {}
        if uid and "/" not in uid:
            options["preconditions"] = {"uid": uid}  # never a pod re-created under the name
        if dry_run:
            options["dryRun"] = ["All"]
        body: Any = {  # the client takes the JSON for its V1Eviction
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": ns},
            "deleteOptions": options,
        }
        blocked: list[str] = []

        def post(**request: Any) -> Any:  # Kube.call passes the request timeout
            try:
                return self.kube.core.create_namespaced_pod_eviction(
                    name,
                    ns,
                    body,
                    dry_run="All" if dry_run else None,
                    _preload_content=False,
                    **request,
                )
            except ApiException as exc:
                budget = _disruption_budget(exc)
                if budget is None:
                    raise  # throttling or a server error: Kube.call retries it
                blocked.append(budget)
                return None

        what = f"eviction of pod {ns}/{name}"
        try:
            resp = self.kube.call(what, post)
        except TargetGone:
            return EvictOutcome("gone", f"{ns}/{name} no longer exists")
        except Conflict as exc:  # the UID precondition: the pod was replaced
            return EvictOutcome("gone", str(exc))
        except ActuatorError as exc:
            return EvictOutcome("failed", str(exc))
        if blocked:
            return EvictOutcome("blocked", blocked[0] or "a PodDisruptionBudget forbids it")
        _finish(resp)
        return EvictOutcome("evicted")


class PodEventRecorder:
    """``core/v1`` Events on pods, written from a background thread (``sync``: inline)."""

    def __init__(
        self,
        kube: Kube,
        *,
        component: str = "kale",
        instance: str | None = None,
        clock: Callable[[], float] = time.time,
        sync: bool = False,
        buffer: int = 10_000,
    ) -> None:
        self.kube = kube
        self.component = component
        self.instance = instance or socket.gethostname()
        self.clock = clock
        self.sync = sync
        self.failures = 0
        self.dropped = 0
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(maxsize=buffer)
        self._thread: threading.Thread | None = None
        self._abandon = threading.Event()
        self._seq = 0

    def pod_event(self, pod: Any, *, reason: str, message: str, type: str = "Normal") -> None:
        self._seq += 1
        involved = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod.name,
            "namespace": pod.namespace,
            "uid": pod.uid if "/" not in pod.uid else "",
        }
        body = event_body(
            involved,
            reason=reason,
            message=message,
            type=type,
            now=self.clock(),
            component=self.component,
            instance=self.instance,
            seq=self._seq,
        )
        if self.sync:
            self._post(body)
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kale-events", daemon=True)
            self._thread.start()
        try:
            self._queue.put_nowait(body)
        except queue.Full:
            self.dropped += 1

    def _post(self, body: dict[str, Any]) -> None:
        ns = body["metadata"]["namespace"]
        try:
            resp = self.kube.call(
                f"event {body['reason']} on {ns}/{body['involvedObject']['name']}",
                self.kube.core.create_namespaced_event,
                ns,
                body,
                _preload_content=False,
            )
            _finish(resp)
        except ActuatorError as exc:
            self.failures += 1
            log.warning("could not record an event: %s", exc)

    def _run(self) -> None:
        while True:
            body = self._queue.get()
            if body is None:
                return
            if self._abandon.is_set():  # closing took too long: drop the rest
                self.dropped += 1
                continue
            self._post(body)

    def close(self, timeout_s: float = 5.0) -> None:
        """Write what is buffered (up to ``timeout_s``; what is left then is dropped), stop."""
        thread = self._thread
        if thread is None:
            return
        self._queue.put(None)
        thread.join(timeout=timeout_s)
        if thread.is_alive():
            self._abandon.set()
            thread.join(timeout=timeout_s)
        if thread.is_alive():
            log.warning("the event writer did not stop; %d events dropped", self.dropped)
        self._thread = None
