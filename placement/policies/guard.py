"""The guard: a learned node agent that hands a decision to a rule when it cannot be trusted.

``agent:PATH,fallback=RULE`` (``placement.agent_names``) builds a :class:`GuardedPolicy`:
the agent decides, except when

* its choice is **infeasible** — scores that are not one integer per candidate node, or
  GPUs that are not ``num_gpu`` distinct GPUs of the node with room for the pod;
* its input is **out of range** — a feature outside what the agent saw in training (the
  ranges its file records; the agent checks them when the guard asks, and raises
  :class:`~placement.fallback.OutsideTrainingRange`);
* it **raises** anything else.

Then the rule decides that pod: its scores pick the node (the placer's tie-break as
usual) and its GPU choice the GPUs. A choice whose node was the agent's but whose GPUs are
infeasible keeps the node (it is feasible: the placer only offers feasible nodes) and takes
the rule's GPUs there. Every decision is counted (:class:`~placement.fallback.FallbackCounts`,
by reason); ``last_reason`` says why the last one fell back, for the scheduler's metric.

Capabilities pass through: the placer's tie order, fault counts, data caches and accesses
reach both policies where they listen (``uses_rank``, ``uses_faults`` if either uses them), so
a guarded agent that never falls back decides exactly as the agent alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from placement.cluster import Cluster
from placement.fallback import FallbackCounts, OutsideTrainingRange
from placement.pod import Pod
from placement.policies.base import ScorePolicy
from placement.policies.capabilities import wants_faults, wants_locality, wants_rank


def gpus_fit(cluster: Cluster, pod: Pod, node: int, gpus: Sequence[int]) -> bool:
    """Whether ``pod`` fits on ``node`` holding exactly ``gpus`` (what ``allocate`` accepts)."""
    if not cluster.fits(pod, node):
        return False
    chosen = [int(g) for g in gpus]
    if len(chosen) != pod.num_gpu or len(set(chosen)) != len(chosen):
        return False
    count = int(cluster.gpu_count[node])
    return all(0 <= g < count and cluster.gpu_free[node, g] >= pod.gpu_milli for g in chosen)


def _valid_scores(scores: Any, count: int) -> bool:
    return (
        isinstance(scores, np.ndarray)
        and scores.shape == (count,)
        and np.issubdtype(scores.dtype, np.integer)
    )


class GuardedPolicy(ScorePolicy):
    """An agent's score plugin with a rule behind it (module docstring)."""

    name = "guarded"

    def __init__(self, agent: ScorePolicy, fallback: ScorePolicy, *, label: str) -> None:
        self.agent, self.fallback, self.label = agent, fallback, label
        self.fallback_counts = FallbackCounts()
        self.last_reason: str | None = None
        self.checks_ranges = bool(getattr(agent, "ranges", None))
        """Whether the agent's file recorded input ranges (else only feasibility and
        errors are checked)."""
        if self.checks_ranges:
            agent.check_ranges = True  # type: ignore[attr-defined]
        self._fell_back: tuple[Pod, str] | None = None

    # -- capabilities, passed through --------------------------------------------------------
    @property
    def uses_rank(self) -> bool:
        return any(getattr(p, "uses_rank", False) for p in (self.agent, self.fallback))

    def observe_rank(self, rank: np.ndarray) -> None:
        for policy in (self.agent, self.fallback):
            if wants_rank(policy):
                policy.observe_rank(rank)

    @property
    def uses_faults(self) -> bool:
        return any(getattr(p, "uses_faults", False) for p in (self.agent, self.fallback))

    def observe_faults(self, node_faults: np.ndarray, gpu_faults: np.ndarray) -> None:
        for policy in (self.agent, self.fallback):
            if wants_faults(policy):
                policy.observe_faults(node_faults, gpu_faults)

    @property
    def uses_locality(self) -> bool:
        return any(getattr(p, "uses_locality", False) for p in (self.agent, self.fallback))

    def observe_locality(self, caches: Any) -> None:
        for policy in (self.agent, self.fallback):
            if wants_locality(policy):
                policy.observe_locality(caches)

    def observe_access(self, pod: Pod, node: int, access: Any) -> None:
        for policy in (self.agent, self.fallback):
            hook = getattr(policy, "observe_access", None)
            if hook is not None:
                hook(pod, node, access)

    # -- the decision ------------------------------------------------------------------------
    def score(self, pod: Pod, cluster: Cluster, nodes: np.ndarray) -> np.ndarray:
        self._fell_back = None
        try:
            scores = self.agent.score(pod, cluster, nodes)
            if _valid_scores(scores, len(nodes)):
                return scores
            reason = "infeasible"
        except OutsideTrainingRange:
            reason = "out_of_range"
        except Exception:  # the guard's purpose: any failure of the agent goes to the rule
            reason = "error"
        self._fell_back = (pod, reason)
        return self.fallback.score(pod, cluster, nodes)

    def choose_gpus(self, pod: Pod, cluster: Cluster, node: int) -> tuple[int, ...]:
        pending, self._fell_back = self._fell_back, None
        reason = pending[1] if pending is not None and pending[0] is pod else None
        if reason is None:
            try:
                gpus = tuple(int(g) for g in self.agent.choose_gpus(pod, cluster, node))
                if gpus_fit(cluster, pod, node, gpus):
                    self._record(None)
                    return gpus
                reason = "infeasible"
            except OutsideTrainingRange:
                reason = "out_of_range"
            except Exception:  # as in score: the rule decides
                reason = "error"
        self._record(reason)
        return self.fallback.choose_gpus(pod, cluster, node)

    def _record(self, reason: str | None) -> None:
        self.last_reason = reason
        self.fallback_counts.record(reason)
