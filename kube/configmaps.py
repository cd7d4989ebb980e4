"""Read one key of a ConfigMap in a job's namespace (the job's throughput model, or Kafka
client settings).

Why this module exists: an ML engineer keeps the throughput model of their job next to the
job, in their own namespace (``spec.throughput.configMapRef``), instead of asking the platform
team to add it to the controller's ``kale-models`` map. The controller reads exactly the one
ConfigMap a job names, in that job's namespace, with ``get`` (RBAC grants ``get`` on
``configmaps`` and nothing else: no list, no watch). A missing ConfigMap or key is the job's
problem (:class:`ConfigMapMissing`); an API failure is transient (the caller keeps what it
read last).
"""

from __future__ import annotations

from dataclasses import dataclass

from kube.client import Kube, resource_version


class ConfigMapMissing(ValueError):
    """The ConfigMap or the key a job names does not exist."""


@dataclass(frozen=True)
class ConfigMapValue:
    text: str
    resource_version: str


class ConfigMaps:
    """``get`` of single ConfigMaps through the shared client."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def read(self, namespace: str, name: str, key: str) -> ConfigMapValue:
        """The text under ``key``; :class:`ConfigMapMissing` when the map or key is absent,
        the client's :mod:`kube.errors` types on API failures."""
        cm = self.kube.read_named(
            "ConfigMap",
            self.kube.core.read_namespaced_config_map,
            namespace,
            name,
            missing=ConfigMapMissing,
        )
        data = cm.data or {}
        if key not in data:
            have = ", ".join(sorted(data)) or "no keys"
            raise ConfigMapMissing(f"ConfigMap {namespace}/{name} has no key {key!r} ({have})")
        return ConfigMapValue(str(data[key]), resource_version(cm))
