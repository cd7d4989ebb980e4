"""What a job refers to outside its own object: a ConfigMap with its throughput model, and the
Secrets with its Kafka credentials — read in the job's namespace, once per listing.

Why apart from the job sources: both the cluster source (the API server) and the directory
source (environment and files) resolve references the same way, and the rules are the
controller's, not the sources': a missing ConfigMap, Secret or key is the job's problem (an
invalid job, the message naming the field); a failed read (the API server is slow) keeps the
last good value, because a blip must never make the controller forget a job.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autoscaler.kafka.credentials import SecretReader, security_for, uses_secrets

#: A fitted model is ~2 KB; a ConfigMap holds at most 1 MiB.
MAX_MODEL_CHARS = 1 << 20


class ReferenceProblem(Exception):
    """A reference that cannot be resolved: the one-line reason, naming the field."""


@dataclass
class References:
    """Readers for the objects jobs refer to (None: that kind of reference is refused)."""

    config_maps: Callable[[str, str, str], Any] | None = None
    """``(namespace, name, key) -> value`` with ``.text`` and ``.resource_version``; raises
    ``ValueError`` when the map or key is missing."""
    secrets: SecretReader | None = None
    """``(namespace, name) -> SecretData``; raises ``ValueError`` when it is missing."""
    _models: dict[tuple[str, str, str], tuple[str, Any]] = field(default_factory=dict)
    _security: dict[str, Any] = field(default_factory=dict)

    def model(self, key: str, job: Any) -> tuple[str, Any] | None:
        """``(version, model JSON)`` of the job's ConfigMap model, or None (no ConfigMap).
        Raises :class:`ReferenceProblem`."""
        ref = job.spec.throughput.config_map_ref
        if ref is None:
            return None
        ns = job.metadata.namespace
        where = "spec.throughput.configMapRef"
        if self.config_maps is None:
            raise ReferenceProblem(f"{where}: this controller cannot read ConfigMaps")
        ident = (ns, ref.name, ref.key)
        try:
            value = self.config_maps(ns, ref.name, ref.key)
        except ValueError as exc:  # missing: the job's problem
            self._models.pop(ident, None)
            raise ReferenceProblem(f"{where}: {exc}") from None
        except Exception as exc:  # the API server: transient
            if ident in self._models:
                return self._models[ident]
            raise ReferenceProblem(f"{where}: cannot read it yet: {exc}") from None
        hit = self._models.get(ident)
        if hit is not None and hit[0] == value.resource_version:
            return hit
        try:
            if len(value.text) > MAX_MODEL_CHARS:
                raise ValueError(f"{len(value.text)} characters, more than {MAX_MODEL_CHARS}")
            data = json.loads(value.text)
        except (ValueError, RecursionError) as exc:
            raise ReferenceProblem(
                f"{where}: ConfigMap {ns}/{ref.name} key {ref.key} is not a model JSON: {exc}"
            ) from None
        self._models[ident] = (value.resource_version, data)
        return self._models[ident]

    def security(self, key: str, job: Any) -> Any:
        """The job's :class:`~autoscaler.kafka.security.KafkaSecurity` (None: plaintext).
        Raises :class:`ReferenceProblem`."""
        kafka = job.spec.source.kafka
        if not uses_secrets(kafka):
            self._security.pop(key, None)
            return security_for(kafka, job.metadata.namespace, _no_secrets)
        if self.secrets is None:
            raise ReferenceProblem("spec.source.kafka: this controller cannot read Secrets")
        try:
            value = security_for(kafka, job.metadata.namespace, self.secrets)
        except ValueError as exc:  # missing Secret or key: the job's problem
            self._security.pop(key, None)
            raise ReferenceProblem(str(exc)) from None
        except Exception as exc:  # the API server: transient
            if key in self._security:
                return self._security[key]
            raise ReferenceProblem(
                f"spec.source.kafka: cannot read its Secret yet: {exc}"
            ) from None
        self._security[key] = value
        return value


def _no_secrets(namespace: str, name: str) -> Any:
    raise ValueError("no Secret is read for this job")
