"""Resize a Kubeflow PyTorchJob with elastic torchrun: ``spec.pytorchReplicaSpecs.Worker.replicas``.

Why these rules: an elastic PyTorchJob (``kubeflow.org/v1``, ``spec.elasticPolicy``) runs
``torchrun --nnodes=MIN:MAX``, the training operator rendering ``MIN:MAX`` from
``elasticPolicy.minReplicas``/``maxReplicas``. Workers join and leave by a re-rendezvous
between those bounds, so:

* the worker count written is **clamped** into ``minReplicas..maxReplicas`` (below MIN the
  rendezvous never completes; above MAX the extra pods only wait). :meth:`fit` tells the
  controller so, and the controller never plans a resize the bounds forbid;
* ``maxReplicas`` is **never below the replicas written**: when the policy leaves a bound
  out (the operator would default it to the other bound, or to the first replica count),
  Kale writes the job's own ``minWorkers``/``maxWorkers`` in the same patch, so the rendered
  ``MIN:MAX`` covers every size Kale may choose;
* a PyTorchJob **without** ``elasticPolicy`` has a fixed world size: resizing it would break
  the running job, so it is refused (:class:`TargetRejected`) — it is still read;
* elastic PyTorch training has **no parameter servers**: the size's PS count is always 0
  (what the planner derives from ``workersPerPS`` is not applied) and a ``Master`` replica,
  if any, is left alone.

The write is one JSON merge patch carrying the ``resourceVersion`` just read (a concurrent
writer makes it 409, and :meth:`Kube.update` reads again), touching nothing but the worker
count and the missing bounds. One write is one resize, so the controller's
resize-in-progress marker rolls it forward after a crash exactly as for the other targets.
"""

from __future__ import annotations

import logging
from typing import Any

from autoscaler.actuators.base import Size
from kube.client import Kube
from kube.custom_object import CustomObject
from kube.errors import TargetRejected

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"


def _workers(obj: dict[str, Any]) -> int:
    specs = (obj.get("spec") or {}).get("pytorchReplicaSpecs") or {}
    worker = specs.get("Worker") or {}
    replicas = worker.get("replicas")
    return int(replicas) if replicas is not None else (1 if worker else 0)


def _policy(obj: dict[str, Any]) -> dict[str, Any] | None:
    policy = (obj.get("spec") or {}).get("elasticPolicy")
    return policy if isinstance(policy, dict) else None


def _bound(policy: dict[str, Any], key: str) -> int | None:
    value = policy.get(key)
    return int(value) if value is not None else None


class PyTorchJobActuator:
    """One elastic PyTorchJob's ``Worker`` replicas."""

    kind = "PyTorchJob"

    def __init__(
        self, kube: Kube, *, namespace: str, name: str, min_workers: int, max_workers: int
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.min_workers = min_workers
        """The job's ``spec.training.minWorkers``: written as ``minReplicas`` if it is unset."""
        self.max_workers = max_workers
        """The job's ``spec.training.maxWorkers``: written as ``maxReplicas`` if it is unset."""
        self.what = f"pytorchjob {namespace}/{name}"
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
        self._bounds: tuple[int, int | None] | None = None
        """(minReplicas, maxReplicas) as last read; None: not read yet, or not elastic."""

    def _read(self) -> dict[str, Any]:
        return self.object.read()

    @staticmethod
    def _bounds_of(policy: dict[str, Any]) -> tuple[int, int | None]:
        low, high = _bound(policy, "minReplicas"), _bound(policy, "maxReplicas")
        return max(1, low or 1), high

    def current(self) -> Size:
        obj = self._read()
        policy = _policy(obj)
        self._bounds = self._bounds_of(policy) if policy is not None else None
        return Size(_workers(obj), 0)

    def fit(self, size: Size) -> Size:
        """``size`` within the elastic policy's bounds as last read, with no PS."""
        return Size(self._clamp(size.workers, self._bounds), 0)

    @staticmethod
    def _clamp(workers: int, bounds: tuple[int, int | None] | None) -> int:
        if bounds is None:
            return workers
        low, high = bounds
        workers = max(low, workers)
        return min(high, workers) if high is not None else workers

    def apply(self, size: Size) -> Size:
        def write(obj: dict[str, Any]) -> Size:
            policy = _policy(obj)
            now = Size(_workers(obj), 0)
            if policy is None:
                if now.workers == size.workers:
                    return now
                raise TargetRejected(
                    f"{self.what} has no spec.elasticPolicy: its world size is fixed, so "
                    "Kale does not resize it (add elasticPolicy.minReplicas/maxReplicas and "
                    "run torchrun elastically)"
                )
            bounds = self._bounds_of(policy)
            target = Size(self._clamp(size.workers, bounds), 0)
            fill: dict[str, int] = {}
            if policy.get("minReplicas") is None:
                fill["minReplicas"] = min(self.min_workers, target.workers)
            if policy.get("maxReplicas") is None:
                fill["maxReplicas"] = max(self.max_workers, target.workers)
            if now == target and not fill:
                return now
            spec: dict[str, Any] = {
                "pytorchReplicaSpecs": {"Worker": {"replicas": target.workers}},
            }
            if fill:
                spec["elasticPolicy"] = fill
            self.object.patch_spec(obj, spec)
            log.info("patched %s: %s -> %s", self.what, now, target)
            return target

        return self.kube.update(self.what, self._read, write)

    def close(self) -> None:
        """Nothing to release (the client is shared)."""
