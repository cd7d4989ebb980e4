"""The ``elastictrainingjobs.kale.dev`` custom resources: list them, write their status.

Why this module exists: in cluster mode the jobs *are* custom resources, and what the
controller decided goes back onto them (``kubectl get etj`` shows desired and current
workers, the last decision and the conditions). Status is written through the ``status``
subresource, so the controller never needs write access to specs, and as one JSON patch
``add /status`` that replaces the whole status: keys the controller dropped (a finished
planner hold, a cleared condition) disappear instead of lingering as a merge patch would
leave them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kube.client import Kube

GROUP, VERSION, PLURAL = "kale.dev", "v1alpha1", "elastictrainingjobs"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"


class ElasticTrainingJobs:
    """Reads the job resources and writes their status."""

    def __init__(self, kube: Kube, *, namespaces: Sequence[str] = ()) -> None:
        self.kube = kube
        self.namespaces = list(namespaces)
        """Namespaces to watch; empty means all namespaces."""

    def list(self) -> list[dict[str, Any]]:
        """Every job resource (raw dicts, with ``metadata`` and ``status`` as served)."""
        if not self.namespaces:
            out = self.kube.call_json(
                "elastictrainingjobs (all namespaces)",
                self.kube.custom.list_cluster_custom_object,
                GROUP,
                VERSION,
                PLURAL,
            )
            return list(out.get("items", []))
        items: list[dict[str, Any]] = []
        for ns in self.namespaces:
            out = self.kube.call_json(
                f"elastictrainingjobs in {ns}",
                self.kube.custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                ns,
                PLURAL,
            )
            items.extend(out.get("items", []))
        return items

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        return self.kube.call_json(
            f"elastictrainingjob {namespace}/{name}",
            self.kube.custom.get_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
        )

    def mark_resize(self, namespace: str, name: str, planner_state: dict[str, Any]) -> None:
        """Merge ``planner_state`` keys (the resize-in-progress marker) into
        ``status.plannerState`` before a resize's first write, so that a controller that dies
        between the PS and the worker write leaves the marker on the job for its successor."""
        self._patch_status(
            namespace, name, {"status": {"plannerState": planner_state}}, MERGE_PATCH
        )

    def write_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Replace the status; raises :class:`TargetGone` when the job was deleted."""
        self._patch_status(
            namespace, name, [{"op": "add", "path": "/status", "value": status}], JSON_PATCH
        )

    def _patch_status(self, namespace: str, name: str, body: Any, content_type: str) -> None:
        self.kube.call(
            f"elastictrainingjob {namespace}/{name} status",
            self.kube.custom.patch_namespaced_custom_object_status,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            body,
            _content_type=content_type,
        )
