"""Resize a Kubeflow TFJob by patching ``spec.tfReplicaSpecs.{Worker,PS}.replicas``.

Why a merge patch with ``resourceVersion``: the training operator and people edit TFJobs
too; a JSON merge patch that carries the resourceVersion just read is rejected with 409 if
anyone wrote in between (then :meth:`Kube.update` re-reads), and it touches nothing but the
two replica counts. Both counts change in one write, so the ratio never breaks half-way.
"""

from __future__ import annotations

import logging
from typing import Any

from autoscaler.actuators.base import Size
from kube.client import Kube
from kube.custom_object import CustomObject

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "tfjobs"


def _replicas(obj: dict[str, Any], role: str) -> int:
    specs = obj.get("spec", {}).get("tfReplicaSpecs", {})
    return int((specs.get(role) or {}).get("replicas") or 0)


class TFJobActuator:
    """One TFJob with ``Worker`` and ``PS`` replica specs."""

    kind = "TFJob"

    def __init__(self, kube: Kube, *, namespace: str, name: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.what = f"tfjob {namespace}/{name}"
        self.object = CustomObject(
            kube,
            group=GROUP,
            version=VERSION,
            plural=PLURAL,
            namespace=namespace,
            name=name,
            what=self.what,
        )
        # The training operator's labels on the worker pods (for the job's scale subresource).
        self.selector = (
            f"training.kubeflow.org/job-name={name},training.kubeflow.org/replica-type=worker"
        )

    def _read(self) -> dict[str, Any]:
        return self.object.read()

    def current(self) -> Size:
        obj = self._read()
        return Size(_replicas(obj, "Worker"), _replicas(obj, "PS"))

    def apply(self, size: Size) -> Size:
        def write(obj: dict[str, Any]) -> Size:
            now = Size(_replicas(obj, "Worker"), _replicas(obj, "PS"))
            if now == size:
                return now
            self.object.patch_spec(
                obj,
                {
                    "tfReplicaSpecs": {
                        "Worker": {"replicas": size.workers},
                        "PS": {"replicas": size.ps},
                    }
                },
            )
            log.info("patched %s: %s -> %s", self.what, now, size)
            return size

        return self.kube.update(self.what, self._read, write)

    def close(self) -> None:
        """Nothing to release (the client is shared)."""
