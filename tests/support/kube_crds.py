"""The CustomResourceDefinitions the fake API server holds, and what it reads from them.

A real API server serves a custom resource as its CRD says: which versions are served (and
which one is stored), the ``status`` and ``scale`` subresources and the scale's replica paths,
the printer columns of ``kubectl get``, a deprecated version's warning, the names discovery
lists. The fake reads the same from the same documents:

* Kale's own CRD is the generated ``manifests/crd/elastictrainingjobs.yaml`` (so a change to
  the generator shows in what ``kubectl`` sees against the fake);
* the Kubeflow training operator's ``tfjobs`` and ``pytorchjobs`` (``kubeflow.org/v1``) with
  its printer columns, and the ``scale`` subresource the operator declares on PyTorchJobs
  (``spec.pytorchReplicaSpecs.Worker.replicas``);
* ``trainersets.training.kale.test``: a JobSet-style workload of a platform's own, whose only
  contract with Kale is a ``scale`` subresource (``spec.workers.replicas``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
KALE_CRD = ROOT / "manifests" / "crd" / "elastictrainingjobs.yaml"

_OPEN = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_STATE_AGE = [
    {"name": "State", "type": "string", "jsonPath": ".status.conditions[-1:].type"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def _crd(
    group: str,
    kind: str,
    plural: str,
    *,
    version: str = "v1",
    columns: list[dict[str, Any]] | None = None,
    scale: dict[str, str] | None = None,
    short_names: list[str] | None = None,
    categories: list[str] | None = None,
) -> dict[str, Any]:
    subresources: dict[str, Any] = {"status": {}}
    if scale is not None:
        subresources["scale"] = scale
    names: dict[str, Any] = {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
    }
    if short_names:
        names["shortNames"] = short_names
    if categories:
        names["categories"] = categories
    entry: dict[str, Any] = {
        "name": version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": copy.deepcopy(_OPEN)},
        "subresources": subresources,
    }
    if columns:
        entry["additionalPrinterColumns"] = copy.deepcopy(columns)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": names,
            "versions": [entry],
        },
    }


def kale_crd() -> dict[str, Any]:
    """The generated ElasticTrainingJob CRD, as ``kubectl apply`` would install it."""
    return yaml.safe_load(KALE_CRD.read_text(encoding="utf-8"))


def tfjob_crd() -> dict[str, Any]:
    return _crd("kubeflow.org", "TFJob", "tfjobs", columns=_STATE_AGE)


def pytorchjob_crd() -> dict[str, Any]:
    return _crd(
        "kubeflow.org",
        "PyTorchJob",
        "pytorchjobs",
        columns=_STATE_AGE,
        scale={
            "specReplicasPath": ".spec.pytorchReplicaSpecs.Worker.replicas",
            "statusReplicasPath": ".status.replicaStatuses.Worker.active",
            "labelSelectorPath": ".status.replicaStatuses.Worker.selector",
        },
    )


def trainerset_crd() -> dict[str, Any]:
    return _crd(
        "training.kale.test",
        "TrainerSet",
        "trainersets",
        columns=[
            {"name": "Workers", "type": "integer", "jsonPath": ".spec.workers.replicas"},
            {"name": "Ready", "type": "integer", "jsonPath": ".status.workers.ready"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
        scale={
            "specReplicasPath": ".spec.workers.replicas",
            "statusReplicasPath": ".status.workers.ready",
            "labelSelectorPath": ".status.workers.selector",
        },
        short_names=["ts"],
    )


@dataclass(frozen=True)
class ScalePaths:
    """A custom resource's ``scale`` subresource, as its CRD declares it."""

    spec: str
    status: str
    selector: str | None
    maximum: int | None
    """The schema's bound on the spec replicas field (None: only non-negative)."""


class CrdRegistry:
    """The CRDs an API server holds, by ``<plural>.<group>``."""

    def __init__(self, crds: list[dict[str, Any]] | None = None) -> None:
        self.crds: dict[str, dict[str, Any]] = {}
        for crd in crds or []:
            self.install(crd)

    @classmethod
    def default(cls) -> CrdRegistry:
        return cls([kale_crd(), tfjob_crd(), pytorchjob_crd(), trainerset_crd()])

    def install(self, crd: dict[str, Any]) -> None:
        """Hold ``crd`` (replacing one of the same name), as ``kubectl apply`` of it would."""
        self.crds[crd["metadata"]["name"]] = copy.deepcopy(crd)

    def find(self, group: str, plural: str) -> dict[str, Any] | None:
        return self.crds.get(f"{plural}.{group}")

    def version(self, group: str, version: str, plural: str) -> dict[str, Any] | None:
        """The CRD's entry for ``version`` when it is served (None: not served or no CRD)."""
        crd = self.find(group, plural)
        for entry in (crd or {}).get("spec", {}).get("versions", []):
            if entry["name"] == version and entry.get("served"):
                return entry
        return None

    def storage(self, group: str, plural: str) -> dict[str, Any] | None:
        crd = self.find(group, plural)
        for entry in (crd or {}).get("spec", {}).get("versions", []):
            if entry.get("storage"):
                return entry
        return None

    def scale(self, group: str, plural: str) -> ScalePaths | None:
        """The scale subresource's paths (None: the CRD declares none)."""
        entry = self.storage(group, plural)
        scale = ((entry or {}).get("subresources") or {}).get("scale")
        if not scale:
            return None
        schema = (entry or {}).get("schema", {}).get("openAPIV3Schema", {})
        return ScalePaths(
            scale["specReplicasPath"],
            scale["statusReplicasPath"],
            scale.get("labelSelectorPath"),
            _maximum(schema, scale["specReplicasPath"]),
        )

    def columns(self, group: str, version: str, plural: str) -> list[dict[str, Any]] | None:
        """``additionalPrinterColumns`` of a served version (None: not a custom resource)."""
        entry = self.version(group, version, plural)
        if entry is None:
            return None
        return list(entry.get("additionalPrinterColumns") or [])

    def warning(self, group: str, version: str, plural: str) -> str | None:
        """The ``Warning`` the API server sends for a deprecated version."""
        entry = self.version(group, version, plural)
        if entry is None or not entry.get("deprecated"):
            return None
        crd = self.find(group, plural) or {}
        kind = crd["spec"]["names"]["kind"]
        return entry.get("deprecationWarning") or f"{group}/{version} {kind} is deprecated"

    def all(self) -> list[dict[str, Any]]:
        return [self.crds[name] for name in sorted(self.crds)]


def _maximum(schema: dict[str, Any], path: str) -> int | None:
    node: dict[str, Any] | None = schema
    for part in path.strip(".").split("."):
        node = (node or {}).get("properties", {}).get(part)
    value = (node or {}).get("maximum")
    return int(value) if value is not None else None
