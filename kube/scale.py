"""The ``scale`` subresource of any kind, found through API discovery.

Why this module exists: the HPA resizes anything that has a ``/scale`` (Deployments,
StatefulSets, custom resources that declare one), named by ``{apiVersion, kind, name}``, and a
platform expects Kale to do the same. ``/scale`` is the narrowest write there is — an
``autoscaling/v1`` Scale carrying nothing but the replica count — so RBAC can grant
``get``/``update`` on ``<resource>/scale`` without granting edits to the object itself.

A reference names a *kind*; the URL needs its *resource* (the plural). The API server's
discovery document of the group version (``GET /apis/<group>/<version>``, an
``APIResourceList``) maps one to the other and says whether ``<resource>/scale`` exists, so
an unknown kind or one without a scale subresource is a clear error before any write. What
discovery found is cached for the life of the client (each group version's list, and each
kind's resource: a kind's resource name never changes); a kind the cached list does not
have is looked up again, and a failed lookup is not cached (the CRD may be installed later).
Discovery is a non-resource URL every authenticated identity may read (the built-in
``system:discovery`` ClusterRole).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from kube.client import Kube
from kube.errors import TargetGone, TargetRejected


@dataclass(frozen=True)
class ObjectRef:
    """An object in the job's namespace, as the HPA's ``scaleTargetRef`` names it."""

    api_version: str
    """``group/version``, e.g. ``apps/v1``."""
    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}.{self.api_version} {self.name}"


@dataclass(frozen=True)
class ScalableResource:
    """What discovery says about a kind that has a scale subresource."""

    group: str
    version: str
    resource: str
    """The plural in the URL (``deployments``)."""
    kind: str


def split_api_version(api_version: str) -> tuple[str, str]:
    """``apps/v1`` → (``apps``, ``v1``); the core group (``v1``) has an empty group."""
    group, _, version = api_version.rpartition("/")
    return group, version


class ScaleSubresources:
    """Reads and replaces ``/scale`` of any scalable kind; shared by every job's actuator."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._found: dict[tuple[str, str], ScalableResource] = {}
        self._listings: dict[str, Any] = {}
        """Each group version's APIResourceList: one lookup serves every kind in it."""
        self._lock = threading.Lock()

    def resource(self, api_version: str, kind: str) -> ScalableResource:
        """The resource behind ``kind`` in ``api_version``.

        Raises :class:`TargetGone` when the group version is not served (its CRD is not
        installed: the next tick looks again) and :class:`TargetRejected` when the kind is
        not in it, is cluster-scoped, or has no scale subresource.
        """
        with self._lock:
            found = self._found.get((api_version, kind))
            listing = self._listings.get(api_version)
        if found is not None:
            return found
        group, version = split_api_version(api_version)
        if not group:
            raise TargetRejected(
                f"{kind}.{api_version}: the core API group is not supported for Scale targets "
                "(name a group/version such as apps/v1)"
            )
        if listing is not None:
            try:
                found = _scalable(listing, group, version, kind)
            except TargetRejected:
                found = None  # the listing may be older than the kind: ask again
        if found is None:
            listing = self._discover(api_version, kind)
            found = _scalable(listing, group, version, kind)
        with self._lock:
            self._found[(api_version, kind)] = found
            self._listings[api_version] = listing
        return found

    def _discover(self, api_version: str, kind: str) -> Any:
        group, version = split_api_version(api_version)
        try:
            return self.kube.call(
                f"API discovery of {api_version}",
                self.kube.custom.get_api_resources,
                group,
                version,
            )
        except TargetGone:
            raise TargetGone(
                f"{api_version} is not served by the API server (is the CRD of {kind} installed?)"
            ) from None

    def _what(self, ref: ObjectRef, namespace: str) -> str:
        return f"{ref.kind.lower()} {namespace}/{ref.name} scale"

    def get(self, ref: ObjectRef, namespace: str) -> dict[str, Any]:
        """The object's ``autoscaling/v1`` Scale (``spec.replicas``, ``status.selector``)."""
        res = self.resource(ref.api_version, ref.kind)
        return self.kube.call_json(
            self._what(ref, namespace),
            self.kube.custom.get_namespaced_custom_object_scale,
            res.group,
            res.version,
            namespace,
            res.resource,
            ref.name,
        )

    def set_replicas(self, ref: ObjectRef, namespace: str, replicas: int) -> None:
        """Set ``spec.replicas`` through ``/scale``: a read-modify-write whose PUT carries the
        ``resourceVersion`` just read (409 → :meth:`Kube.update` reads again)."""
        res = self.resource(ref.api_version, ref.kind)
        what = self._what(ref, namespace)

        def write(scale: dict[str, Any]) -> Any:
            if replicas_of(scale) == replicas:
                return scale
            body = {
                "apiVersion": "autoscaling/v1",
                "kind": "Scale",
                "metadata": scale.get("metadata") or {},  # name, namespace, resourceVersion
                "spec": {"replicas": replicas},
            }
            return self.kube.call_json(
                what,
                self.kube.custom.replace_namespaced_custom_object_scale,
                res.group,
                res.version,
                namespace,
                res.resource,
                ref.name,
                body,
            )

        self.kube.update(what, lambda: self.get(ref, namespace), write)


def replicas_of(scale: dict[str, Any]) -> int:
    """``spec.replicas`` of a Scale (absent: 0)."""
    return int((scale.get("spec") or {}).get("replicas") or 0)


def selector_of(scale: dict[str, Any]) -> str | None:
    """``status.selector`` of a Scale: the pods' label selector, as a string."""
    value = (scale.get("status") or {}).get("selector")
    return value if isinstance(value, str) and value else None


def _scalable(listing: Any, group: str, version: str, kind: str) -> ScalableResource:
    resources = list(getattr(listing, "resources", None) or [])
    names = {str(r.name) for r in resources}
    main = [r for r in resources if r.kind == kind and "/" not in str(r.name)]
    where = f"{group}/{version}"
    if not main:
        kinds = sorted({str(r.kind) for r in resources if "/" not in str(r.name)})
        raise TargetRejected(
            f"{where} has no kind {kind} (it serves {', '.join(kinds) or 'nothing'})"
        )
    plural = str(main[0].name)
    if not main[0].namespaced:
        raise TargetRejected(f"{kind}.{where} is cluster-scoped: a job's target is namespaced")
    if f"{plural}/scale" not in names:
        raise TargetRejected(
            f"{kind}.{where} ({plural}) has no scale subresource: a Scale target is read and "
            "resized through /scale only"
        )
    return ScalableResource(group, version, plural, kind)
