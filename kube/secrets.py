"""Read a Secret in a job's namespace: the job's Kafka credentials (SASL) and TLS material.

Why this module exists: ``spec.source.kafka.sasl.secretRef`` and ``.tls.secretRef`` name
Secrets next to the job, so a team owns its credentials; the controller reads exactly the
Secrets a job names, with ``get`` (RBAC grants no list and no watch on Secrets; the
``watch-namespaces`` component limits even that to the watched namespaces). Values are
decoded here and never logged.
"""

from __future__ import annotations

import base64
import binascii

from kube.client import Kube, resource_version


class SecretMissing(ValueError):
    """The Secret does not exist, or its data is malformed: the job's problem."""


class ClusterSecret:
    """One Secret's decoded data."""

    def __init__(self, data: dict[str, bytes], resource_version: str) -> None:
        self._data = data
        self.resource_version = resource_version

    def get(self, key: str) -> bytes | None:
        return self._data.get(key)

    def __repr__(self) -> str:  # never the values
        return f"ClusterSecret(keys={sorted(self._data)}, rv={self.resource_version})"


class Secrets:
    """``get`` of single Secrets through the shared client."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def read(self, namespace: str, name: str) -> ClusterSecret:
        """The Secret's data; :class:`SecretMissing` when it does not exist."""
        secret = self.kube.read_named(
            "Secret", self.kube.core.read_namespaced_secret, namespace, name, missing=SecretMissing
        )
        data: dict[str, bytes] = {}
        for key, value in (secret.data or {}).items():
            try:
                data[key] = base64.b64decode(value or "", validate=True)
            except (binascii.Error, ValueError):
                raise SecretMissing(
                    f"Secret {namespace}/{name}: key {key!r} is not base64"
                ) from None
        for key, value in (getattr(secret, "string_data", None) or {}).items():
            data.setdefault(key, str(value).encode("utf-8"))
        return ClusterSecret(data, resource_version(secret))
