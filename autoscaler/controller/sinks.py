"""Where the controller reports: job status and events, on the cluster or on disk.

On the cluster the actuators' ``ElasticTrainingJobs.write_status`` and
``EventRecorder.emit`` fit these protocols as they are. In local mode there is no custom
resource: :class:`FileStatusSink` writes each job's status as JSON next to the state (what
``kubectl get etj -o yaml`` would show), and :class:`LogEventSink` logs events as
structured lines.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Protocol

from common.atomic import atomic_write_text

log = logging.getLogger("autoscaler.controller.events")


class StatusSink(Protocol):
    def write_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Replace the job's status; raise ``TargetGone`` if the job no longer exists."""
        ...


class EventSink(Protocol):
    def emit(
        self,
        *,
        namespace: str,
        name: str,
        uid: str | None,
        reason: str,
        message: str,
        type: str = "Normal",
    ) -> bool: ...


class FileStatusSink:
    """``<dir>/<namespace>_<name>.status.json``, replaced atomically."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def path(self, namespace: str, name: str) -> Path:
        return self.directory / f"{namespace}_{name}.status.json"

    def write_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        atomic_write_text(
            self.path(namespace, name), json.dumps(status, indent=2, sort_keys=True), fsync=False
        )


class LogEventSink:
    """Events as log lines (``event="k8s_event"``)."""

    def __init__(self) -> None:
        self.events: list[dict[str, str]] = []

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
        ev = {
            "event": "k8s_event",
            "job": f"{namespace}/{name}",
            "reason": reason,
            "type": type,
            "message": message,
        }
        self.events.append(ev)
        del self.events[:-1000]
        log.info("%s %s: %s", reason, f"{namespace}/{name}", message, extra={"fields": ev})
        return True


class NullSink:
    """Dry runs and ``kale plan``: report nothing anywhere."""

    def write_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        pass

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
        return True
