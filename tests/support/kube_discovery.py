"""API discovery for the fake API server: ``/api``, ``/apis``, ``/api/v1``, ``/apis/<g>/<v>``.

``kubectl`` (and any client-go program, and :mod:`kube.scale`) finds a resource through
discovery before it asks for it: the group list, then each group version's
``APIResourceList`` (resource names, kinds, scope, verbs, short names, subresources). The
fake serves the legacy documents only; kubectl asks for the aggregated form first
(``Accept: …as=APIGroupDiscoveryList``) and falls back when the answer is plain JSON, as it
does against an API server older than 1.26.

Built-in resources are listed from :data:`BUILTINS` (what the fake serves); custom resources
from the CRDs it holds (:mod:`tests.support.kube_crds`): their served versions only, ranked
as Kubernetes ranks them (GA › beta › alpha, then by number), so a group's *preferred*
version is the one ``kubectl get`` reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .kube_crds import CrdRegistry

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SUB_VERBS = ["get", "patch", "update"]


@dataclass(frozen=True)
class Builtin:
    """A built-in resource the fake serves, as discovery lists it."""

    group: str
    version: str
    name: str
    kind: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = tuple(ALL_VERBS)


BUILTINS: tuple[Builtin, ...] = (
    Builtin("", "v1", "pods", "Pod", short_names=("po",),
            subresources=("binding", "eviction", "status"), categories=("all",)),
    Builtin("", "v1", "nodes", "Node", namespaced=False, short_names=("no",),
            subresources=("status",)),
    Builtin("", "v1", "events", "Event", short_names=("ev",)),
    Builtin("", "v1", "configmaps", "ConfigMap", short_names=("cm",)),
    Builtin("", "v1", "secrets", "Secret"),
    Builtin("apps", "v1", "statefulsets", "StatefulSet", short_names=("sts",),
            subresources=("scale", "status"), categories=("all",)),
    Builtin("apps", "v1", "deployments", "Deployment", short_names=("deploy",),
            subresources=("scale", "status"), categories=("all",)),
    Builtin("coordination.k8s.io", "v1", "leases", "Lease"),
    Builtin("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False,
            short_names=("pc",)),
    Builtin("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget",
            short_names=("pdb",), subresources=("status",)),
)  # fmt: skip


_KUBE_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_rank(version: str) -> tuple[int, int, int, str]:
    """Sort key of Kubernetes' version priority: GA before beta before alpha, higher numbers
    first; versions that do not look like Kubernetes versions last, by name."""
    m = _KUBE_VERSION.match(version)
    if m is None:
        return (3, 0, 0, version)
    level = {None: 0, "beta": 1, "alpha": 2}[m[2]]
    return (level, -int(m[1]), -int(m[3] or 0), version)


def _group_versions(crds: CrdRegistry) -> dict[str, list[str]]:
    out: dict[str, set[str]] = {}
    for b in BUILTINS:
        if b.group:
            out.setdefault(b.group, set()).add(b.version)
    for crd in crds.all():
        group = crd["spec"]["group"]
        for entry in crd["spec"]["versions"]:
            if entry.get("served"):
                out.setdefault(group, set()).add(entry["name"])
    return {g: sorted(vs, key=version_rank) for g, vs in sorted(out.items())}


def api_versions(address: str) -> dict[str, Any]:
    """``GET /api``: the core group's versions."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    }


def api_group_list(crds: CrdRegistry) -> dict[str, Any]:
    """``GET /apis``: every named group, its served versions and its preferred one."""
    groups = []
    for group, versions in _group_versions(crds).items():
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        groups.append({"name": group, "versions": entries, "preferredVersion": entries[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def _entry(name: str, kind: str, namespaced: bool, verbs: list[str], **extra: Any) -> dict:
    out = {
        "name": name,
        "singularName": extra.pop("singularName", ""),
        "namespaced": namespaced,
        "kind": kind,
        "verbs": verbs,
    }
    out.update({k: v for k, v in extra.items() if v})
    return out


def _subresource(parent: str, sub: str, kind: str, namespaced: bool) -> dict[str, Any]:
    if sub == "scale":
        return _entry(
            f"{parent}/scale", "Scale", namespaced, SUB_VERBS, group="autoscaling", version="v1"
        )
    if sub == "binding":
        return _entry(f"{parent}/binding", "Binding", namespaced, ["create"])
    if sub == "eviction":
        return _entry(
            f"{parent}/eviction", "Eviction", namespaced, ["create"], group="policy", version="v1"
        )
    return _entry(f"{parent}/{sub}", kind, namespaced, SUB_VERBS)


def resource_list(group: str, version: str, crds: CrdRegistry) -> dict[str, Any] | None:
    """``GET /api/v1`` or ``/apis/<group>/<version>`` (None: the group version is not served)."""
    resources: list[dict[str, Any]] = []
    for b in BUILTINS:
        if (b.group, b.version) != (group, version):
            continue
        resources.append(
            _entry(
                b.name,
                b.kind,
                b.namespaced,
                list(b.verbs),
                singularName=b.kind.lower(),
                shortNames=list(b.short_names),
                categories=list(b.categories),
            )
        )
        resources += [_subresource(b.name, s, b.kind, b.namespaced) for s in b.subresources]
    for crd in crds.all():
        spec = crd["spec"]
        entry = crds.version(spec["group"], version, spec["names"]["plural"])
        if spec["group"] != group or entry is None:
            continue
        names, namespaced = spec["names"], spec.get("scope", "Namespaced") == "Namespaced"
        resources.append(
            _entry(
                names["plural"],
                names["kind"],
                namespaced,
                list(ALL_VERBS),
                singularName=names.get("singular", names["kind"].lower()),
                shortNames=list(names.get("shortNames") or []),
                categories=list(names.get("categories") or []),
            )
        )
        subs = entry.get("subresources") or {}
        resources += [
            _subresource(names["plural"], s, names["kind"], namespaced)
            for s in ("scale", "status")
            if s in subs
        ]
    if not resources:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


_DISCOVERY = re.compile(
    r"^/(?:(?P<core>api)(?:/(?P<cv>v1))?|apis(?:/(?P<g>[^/]+)/(?P<v>[^/]+))?)/?$"
)


def discovery(path: str, crds: CrdRegistry, address: str) -> dict[str, Any] | None:
    """The discovery document at ``path`` (None: ``path`` is not a discovery path).

    Raises ``LookupError`` for a discovery path of a group version that is not served."""
    m = _DISCOVERY.match(path)
    if m is None:
        return None
    if m["core"]:
        if m["cv"] is None:
            return api_versions(address)
        found = resource_list("", "v1", crds)
    elif m["g"] is None:
        return api_group_list(crds)
    else:
        found = resource_list(m["g"], m["v"], crds)
    if found is None:
        raise LookupError(path)
    return found
