"""Kubernetes Events on the job resource: ``kubectl describe etj`` tells why it was resized.

One ``core/v1`` Event per resize (and per warning such as metrics becoming unavailable),
named and shaped the way client-go's recorder does it (``<job>.<hex nanoseconds>``,
``involvedObject`` pointing at the ElasticTrainingJob, ``source.component``). Events are a
courtesy to operators: a failure to record one is logged and never stops a resize.
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

from kube.client import Kube
from kube.custom_resources import GROUP, VERSION
from kube.errors import ActuatorError

log = logging.getLogger(__name__)

COMPONENT = "kale-controller"


def rfc3339(t: float) -> str:
    """Epoch seconds as the whole-second UTC time an Event's timestamps carry."""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_body(
    involved: dict[str, str],
    *,
    reason: str,
    message: str,
    type: str,
    now: float,
    component: str,
    instance: str,
    seq: int = 0,
) -> dict[str, Any]:
    """A ``core/v1`` Event about ``involved`` (its apiVersion, kind, name, namespace, uid),
    named and shaped as client-go's recorder does it: ``<name>.<hex nanoseconds + seq>``,
    one occurrence, the message cut to 1 KiB. Shared by the job and the pod recorders."""
    stamp = rfc3339(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{involved['name']}.{int(now * 1e9) + seq:x}",
            "namespace": involved["namespace"],
        },
        "involvedObject": involved,
        "reason": reason,
        "message": message[:1024],
        "type": type,
        "count": 1,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "source": {"component": component, "host": instance},
        "reportingComponent": component,
        "reportingInstance": instance,
    }


class EventRecorder:
    """Creates Events whose ``involvedObject`` is an ElasticTrainingJob."""

    def __init__(
        self, kube: Kube, *, instance: str | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self.kube = kube
        self.instance = instance or socket.gethostname()
        self.clock = clock

    def emit(
        self,
        *,
        namespace: str,
        name: str,
        uid: str | None,
        reason: str,
        message: str,
        type: str = "Normal",
    ) -> bool:
        """Record one event; returns whether it was stored."""
        involved = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ElasticTrainingJob",
            "name": name,
            "namespace": namespace,
            "uid": uid or "",
        }
        body = event_body(
            involved,
            reason=reason,
            message=message,
            type=type,
            now=self.clock(),
            component=COMPONENT,
            instance=self.instance,
        )
        try:
            self.kube.call(
                f"event for {namespace}/{name}",
                self.kube.core.create_namespaced_event,
                namespace,
                body,
            )
        except ActuatorError as exc:
            log.warning("could not record event %s on %s/%s: %s", reason, namespace, name, exc)
            return False
        return True
