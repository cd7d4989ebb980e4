"""Resize any object with a ``scale`` subresource, named as the HPA names it.

Why: platforms run training workers as Deployments, StatefulSets or their own custom
resources (JobSet-style), and the HPA's contract for all of them is ``/scale``. A ``Scale``
target names the workers' object (``spec.target.scaleTargetRef``) and, when the parameter
servers run apart, theirs (``spec.target.psRef``); both are read and written through
``/scale`` only (:class:`kube.scale.ScaleSubresources`), so the controller needs ``get`` and
``update`` on ``<resource>/scale`` and nothing on the objects themselves.

Order keeps the w/p ratio safe as for StatefulSets (:func:`autoscaler.actuators.base.in_order`);
without a ``psRef`` the job has no PS (the size's PS count is 0). ``apply`` with the size
already set writes nothing.
"""

from __future__ import annotations

import logging

from autoscaler.actuators.base import Size, in_order
from kube.scale import ObjectRef, ScaleSubresources, replicas_of, selector_of

log = logging.getLogger(__name__)


class ScaleActuator:
    """Workers (and optionally PS) as objects with a scale subresource, in one namespace."""

    kind = "Scale"

    def __init__(
        self,
        scales: ScaleSubresources,
        *,
        namespace: str,
        workers: ObjectRef,
        ps: ObjectRef | None = None,
    ) -> None:
        self.scales = scales
        self.namespace = namespace
        self.workers = workers
        self.ps = ps
        self.selector: str | None = None
        """The worker pods' label selector, as the workers' ``/scale`` says (for the job's
        own scale subresource)."""

    def current(self) -> Size:
        scale = self.scales.get(self.workers, self.namespace)
        self.selector = selector_of(scale) or self.selector
        ps = replicas_of(self.scales.get(self.ps, self.namespace)) if self.ps else 0
        return Size(replicas_of(scale), ps)

    def fit(self, size: Size) -> Size:
        """No ``psRef``: no PS, whatever the planner's ratio says."""
        return size if self.ps is not None else Size(size.workers, 0)

    def apply(self, size: Size) -> Size:
        size = self.fit(size)
        now = self.current()
        if now == size:
            return now
        for ref, replicas in in_order(now, size, workers=self.workers, ps=self.ps):
            if ref is not None:
                self.scales.set_replicas(ref, self.namespace, replicas)
        log.info("scaled %s in %s: %s -> %s", self.workers, self.namespace, now, size)
        return size

    def close(self) -> None:
        """Nothing to release: the client and its discovery cache are shared."""
