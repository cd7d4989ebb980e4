"""One namespaced custom object, read whole and merge-patched at the version it was read at.

Why this module exists: the training operators' jobs (TFJob, PyTorchJob) are resized by
editing their spec, and a resize must not overwrite an edit made since the read. Sending
the read ``resourceVersion`` in the merge patch makes the API server refuse a stale write
(409), which :meth:`kube.client.Kube.update` answers by reading again.
"""

from __future__ import annotations

from typing import Any

from kube.client import Kube

MERGE_PATCH = "application/merge-patch+json"


class CustomObject:
    """``group/version`` ``plural`` ``namespace/name``, as the actuators of one kind see it."""

    def __init__(
        self,
        kube: Kube,
        *,
        group: str,
        version: str,
        plural: str,
        namespace: str,
        name: str,
        what: str,
    ) -> None:
        self.kube = kube
        self.where = (group, version, namespace, plural, name)
        self.what = what
        """How errors and logs name it (``tfjob ml/ctr``)."""

    def read(self) -> dict[str, Any]:
        """The object as the API server holds it now."""
        return self.kube.call_json(
            self.what, self.kube.custom.get_namespaced_custom_object, *self.where
        )

    def patch_spec(self, read: dict[str, Any], spec: dict[str, Any]) -> None:
        """Merge ``spec`` into the object, refused if it changed since ``read`` was read."""
        patch = {"metadata": {"resourceVersion": read["metadata"]["resourceVersion"]}, "spec": spec}
        self.kube.call(
            self.what,
            self.kube.custom.patch_namespaced_custom_object,
            *self.where,
            patch,
            _content_type=MERGE_PATCH,
        )
