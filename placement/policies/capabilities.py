"""What a score plugin may listen to beyond the cluster snapshot, as typed capabilities.

Most policies are a function of (pod, snapshot). A few need more and say so with a flag:
``uses_rank`` (the placer's tie order: an agent choosing among the rules' proposals must
know where each rule's ties go), ``uses_faults`` (recent fault counts) and ``uses_locality``
(the simulator's data caches). Whoever holds that information — the placer, the timed
simulator, the guard passing it through to both its policies, the Kubernetes scheduler —
hands it over before scoring.

The protocols below name each capability for the type checker; the ``wants_*`` guards are
how callers test for one. They read the flag and look the method up, which costs a fraction
of a microsecond (an ``isinstance`` against a runtime-checkable protocol costs tens), so
the placer can ask on every decision. A policy that sets a flag must have the method; one
that has the method but leaves the flag false is not told.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeGuard, runtime_checkable

import numpy as np


@runtime_checkable
class RankAware(Protocol):
    """A policy that wants the placer's tie order before it scores."""

    uses_rank: bool

    def observe_rank(self, rank: np.ndarray) -> None:
        """``rank[node]``: the node's place in the tie-break order (lower wins)."""


@runtime_checkable
class FaultAware(Protocol):
    """A policy that wants the recent fault counts before scoring."""

    uses_faults: bool

    def observe_faults(self, node_faults: np.ndarray, gpu_faults: np.ndarray) -> None:
        """``node_faults[N]`` faults per node, ``gpu_faults[N, G]`` per GPU (node order of
        the cluster about to be scored)."""


@runtime_checkable
class LocalityAware(Protocol):
    """A policy that wants the data caches of a simulator with data locality."""

    uses_locality: bool

    def observe_locality(self, caches: Any) -> None:
        """``caches``: the run's :class:`~placement.locality.DataCaches` (given once)."""


def _wants(policy: object, flag: str, method: str) -> bool:
    return bool(getattr(policy, flag, False)) and callable(getattr(policy, method, None))


def wants_rank(policy: object) -> TypeGuard[RankAware]:
    """Whether ``policy`` asks for the tie order (``uses_rank`` and ``observe_rank``)."""
    return _wants(policy, "uses_rank", "observe_rank")


def wants_faults(policy: object) -> TypeGuard[FaultAware]:
    """Whether ``policy`` asks for fault counts (``uses_faults`` and ``observe_faults``)."""
    return _wants(policy, "uses_faults", "observe_faults")


def wants_locality(policy: object) -> TypeGuard[LocalityAware]:
    """Whether ``policy`` asks for the data caches (``uses_locality`` and
    ``observe_locality``)."""
    return _wants(policy, "uses_locality", "observe_locality")
