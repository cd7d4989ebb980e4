"""Resize a PS/worker job that runs as two StatefulSets, through their ``/scale`` subresource.

Why ``/scale``: it is the narrowest write that changes a replica count (RBAC can grant it
without granting edits to the pod template), and it is what ``kubectl scale`` and the HPA
use. Each write is a read-modify-write carrying the ``resourceVersion`` just read, so a
concurrent writer makes it fail with 409 and :meth:`Kube.update` re-reads and re-applies.

Order keeps the w/p ratio safe while pods come and go: growing adds PS first (new workers
need their shards), shrinking removes workers first (never more workers per PS than the
ratio). ``apply`` with the size already set writes nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from autoscaler.actuators.base import Size, in_order
from kube.client import Kube

log = logging.getLogger(__name__)


class StatefulSetActuator:
    """Workers and PS as two StatefulSets in one namespace."""

    kind = "StatefulSet"

    def __init__(self, kube: Kube, *, namespace: str, workers: str, ps: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.workers_name = workers
        self.ps_name = ps
        self.selector: str | None = None
        """The worker pods' label selector, as the worker StatefulSet's ``/scale`` says
        (the job's own scale subresource reports it, for HPA and ``kubectl scale``)."""

    def _what(self, name: str) -> str:
        return f"statefulset {self.namespace}/{name} scale"

    def _read(self, name: str) -> Any:
        return self.kube.call(
            self._what(name),
            self.kube.apps.read_namespaced_stateful_set_scale,
            name,
            self.namespace,
        )

    def replicas(self, name: str) -> int:
        scale = self._read(name)
        return int(scale.spec.replicas or 0)

    def current(self) -> Size:
        workers = self._read(self.workers_name)
        self.selector = getattr(workers.status, "selector", None) or self.selector
        return Size(int(workers.spec.replicas or 0), self.replicas(self.ps_name))

    def _set(self, name: str, replicas: int) -> None:
        what = self._what(name)

        def write(scale: Any) -> Any:
            if int(scale.spec.replicas or 0) == replicas:
                return scale
            scale.spec.replicas = replicas  # the body keeps the resourceVersion just read
            return self.kube.call(
                what,
                self.kube.apps.replace_namespaced_stateful_set_scale,
                name,
                self.namespace,
                scale,
            )

        self.kube.update(what, lambda: self._read(name), write)

    def apply(self, size: Size) -> Size:
        now = self.current()
        if now == size:
            return now
        for name, replicas in in_order(now, size, workers=self.workers_name, ps=self.ps_name):
            self._set(name, replicas)
        log.info(
            "scaled statefulsets %s/%s: %s -> %s", self.namespace, self.workers_name, now, size
        )
        return size

    def close(self) -> None:
        """Nothing to release: the :class:`Kube` client is shared and closed by its owner."""
