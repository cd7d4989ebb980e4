"""The Kubernetes client, built once, and the one place API errors are sorted.

Why this module exists: every actuator (scale, TFJob, status, events, lease) talks to the
API server the same way and must react to failures the same way. Here the official client
is constructed (from a kubeconfig, or in-cluster from the service account) and every call
goes through :meth:`Kube.call`, which maps HTTP outcomes onto the controller's reactions:

* 429 and 5xx, connection errors and timeouts → exponential backoff with jitter (honouring
  ``Retry-After``), at most ``RetryPolicy.attempts`` tries, then :class:`TargetUnavailable`;
* 409 → :class:`Conflict` at once: only the caller can re-read and re-apply its change, which
  :meth:`Kube.update` does;
* 404 → :class:`TargetGone`; any other 4xx → :class:`TargetRejected` (escalate, no retry).

The loops are tenacity's; the pause is :meth:`RetryPolicy.pause` (the jitter draws from an
injectable random source, and ``Retry-After`` can lengthen a pause, which tenacity's own
waits do not do). The sleep and the random source are injectable, so tests of the error
paths take no time.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
)

from kube.errors import Conflict, TargetGone, TargetRejected, TargetUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
"""HTTP statuses worth another try after a pause (throttled, or the server is unwell)."""


@dataclass
class RetryPolicy:
    """How transient failures are retried."""

    attempts: int = 5
    """Tries in all (the first one included) before giving up."""
    base_s: float = 0.2
    """First pause; each retry doubles it."""
    max_s: float = 10.0
    """Longest pause (also caps ``Retry-After``)."""
    jitter: float = 0.2
    """Each pause is stretched by up to this fraction at random (spreads replicas apart)."""
    conflict_attempts: int = 5
    """Read-modify-write rounds :meth:`Kube.update` tries on 409 before giving up."""
    sleep: Callable[[float], None] = time.sleep
    """Injected in tests."""
    rng: random.Random = field(default_factory=lambda: random.Random(0))

    def pause(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before try ``attempt + 1`` (``attempt`` counts from 1)."""
        backoff = min(self.max_s, self.base_s * 2 ** (attempt - 1))
        backoff *= 1.0 + self.jitter * self.rng.random()
        if retry_after is not None:
            backoff = max(backoff, min(self.max_s, retry_after))
        return backoff


def status_of(exc: BaseException) -> int | None:
    """HTTP status of an API error (None for connection-level failures)."""
    return int(exc.status) if isinstance(exc, ApiException) and exc.status else None


def _transient(exc: BaseException) -> bool:
    """Worth another try: throttled, the server unwell, or the connection failed."""
    if isinstance(exc, ApiException):
        return status_of(exc) in RETRY_STATUSES
    return isinstance(exc, urllib3.exceptions.HTTPError | OSError)


def no_pause(seconds: float) -> None:
    """The sleep of retries that pause for nothing (a re-read is the remedy, not time)."""


def _retry_after(exc: ApiException) -> float | None:
    headers = getattr(exc, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _failure(state: RetryCallState) -> BaseException:
    """The exception the last try ended with (tenacity calls back only after a failure)."""
    assert state.outcome is not None
    exc = state.outcome.exception()
    assert exc is not None
    return exc


def _message(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}".strip()
    return f"{type(exc).__name__}: {exc}"


class Kube:
    """The API groups Kale uses, over one ``ApiClient``, with retries and error mapping."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        retry: RetryPolicy | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        self.api_client = api_client
        self.retry = retry or RetryPolicy()
        self.timeout_s = timeout_s
        self.apps = k8s.AppsV1Api(api_client)
        self.custom = k8s.CustomObjectsApi(api_client)
        self.coordination = k8s.CoordinationV1Api(api_client)
        self.core = k8s.CoreV1Api(api_client)

    @property
    def host(self) -> str:
        return str(self.api_client.configuration.host)

    def call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` with a request timeout, retries and error mapping.

        ``what`` names the object for messages ("statefulset ml/ctr-worker scale").
        """
        kwargs.setdefault("_request_timeout", (min(5.0, self.timeout_s), self.timeout_s))
        policy = self.retry

        def attempt() -> T:
            try:
                return fn(*args, **kwargs)
            except ApiException as exc:
                status = status_of(exc)
                if status in RETRY_STATUSES:
                    raise  # tried again (below)
                if status == 404:
                    raise TargetGone(f"{what}: not found") from exc
                if status == 409:
                    raise Conflict(f"{what}: {_message(exc)}") from exc
                if status is None:  # status 0: TLS or a request the client could not send
                    raise TargetUnavailable(f"{what}: {exc.reason}") from exc
                raise TargetRejected(f"{what}: {_message(exc)}") from exc

        def wait(state: RetryCallState) -> float:
            if state.attempt_number >= policy.attempts:
                return 0.0  # giving up: no pause, and no draw from the jitter's random source
            exc = _failure(state)
            retry_after = _retry_after(exc) if isinstance(exc, ApiException) else None
            return policy.pause(state.attempt_number, retry_after)

        def give_up(state: RetryCallState) -> NoReturn:
            exc, tries = _failure(state), state.attempt_number
            if isinstance(exc, ApiException):
                raise TargetUnavailable(f"{what}: {_message(exc)} after {tries} tries") from exc
            raise TargetUnavailable(
                f"{what}: cannot reach the API server at {self.host} "
                f"({_message(exc)}) after {tries} tries"
            ) from exc

        def note(state: RetryCallState) -> None:
            pause = state.next_action.sleep if state.next_action else 0.0
            log.debug(
                "kubernetes: %s failed (try %d), retrying in %.2fs",
                what,
                state.attempt_number,
                pause,
            )

        retrying = Retrying(
            stop=stop_after_attempt(policy.attempts),
            retry=retry_if_exception(_transient),
            wait=wait,
            sleep=policy.sleep,
            before_sleep=note,
            retry_error_callback=give_up,
        )
        result: T = retrying(attempt)
        return result

    def call_json(
        self, what: str, fn: Callable[..., object], *args: Any, **kwargs: Any
    ) -> dict[str, Any]:
        """:meth:`call` for the client's custom-object methods, whose answer is the decoded
        JSON (typed ``object``): a resource or a list, so it must be a JSON object."""
        out = self.call(what, fn, *args, **kwargs)
        if not isinstance(out, dict):
            raise TargetRejected(f"{what}: the answer is {type(out).__name__}, not an object")
        return out

    def read_named(
        self,
        kind: str,
        read: Callable[[str, str], T],
        namespace: str,
        name: str,
        *,
        missing: Callable[[str], Exception],
    ) -> T:
        """``read(name, namespace)`` of one object a job names (a ConfigMap, a Secret): a 404
        raises ``missing("<kind> <namespace>/<name> does not exist")`` — the job's problem,
        not a failure of the API — and every other failure is :meth:`call`'s."""
        try:
            return self.call(f"{kind.lower()} {namespace}/{name}", read, name, namespace)
        except TargetGone:
            raise missing(f"{kind} {namespace}/{name} does not exist") from None

    def update(self, what: str, read: Callable[[], T], write: Callable[[T], R]) -> R:
        """Read-modify-write with optimistic concurrency: on 409 read again and redo.

        ``write`` receives the freshly read object (carrying its ``resourceVersion``) and
        returns what the write returned; it may be called several times.
        """
        for attempt in Retrying(
            stop=stop_after_attempt(self.retry.conflict_attempts),
            retry=retry_if_exception_type(Conflict),
            sleep=no_pause,
            before_sleep=lambda _: log.info(
                "kubernetes: %s changed under us (409), re-reading", what
            ),
            reraise=True,
        ):
            current = read()  # outside the attempt: a failing read is not a conflict to retry
            with attempt:
                return write(current)
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        self.api_client.close()


def resource_version(obj: Any) -> str:
    """``metadata.resource_version`` of a client object (``""`` when it carries none)."""
    meta = getattr(obj, "metadata", None)
    return str((meta.resource_version if meta is not None else None) or "")


def connect(
    *,
    kubeconfig: str | os.PathLike[str] | None = None,
    context: str | None = None,
    in_cluster: bool | None = None,
    retry: RetryPolicy | None = None,
    timeout_s: float = 10.0,
) -> Kube:
    """A :class:`Kube` from a kubeconfig file, or from the pod's service account.

    ``in_cluster=None`` means: in-cluster when no kubeconfig is given and the pod's
    ``KUBERNETES_SERVICE_HOST`` is set, else the kubeconfig (``$KUBECONFIG`` or
    ``~/.kube/config``).
    """
    cfg = k8s.Configuration()
    if in_cluster is None:
        in_cluster = kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ
    if in_cluster:
        k8s_config.load_incluster_config(client_configuration=cfg)
    else:
        path = os.fspath(kubeconfig) if kubeconfig is not None else None
        k8s_config.load_kube_config(
            config_file=path, context=context, client_configuration=cfg, persist_config=False
        )
    # Retries are ours (above): urllib3 must not retry behind our back.
    cfg.retries = urllib3.Retry(
        total=0, connect=0, read=0, redirect=0, status=0, raise_on_status=False
    )
    return Kube(k8s.ApiClient(configuration=cfg), retry=retry, timeout_s=timeout_s)
