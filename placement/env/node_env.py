"""Node-level environment: place each arriving pod on a node (``balance_dqn``'s problem).

An episode replays one seed of an arrival process on a fresh cluster:

* ``inflation`` — the ATC'23 experiment (``placement.inflation.arrival_list``): the pod
  list shuffled and tuned toward ``tune ×`` the GPU capacity; pods never leave;
* ``timed`` — pods arrive at their creation time and leave at their deletion time.

Optionally only a random share of the nodes is used (``node_share``): smaller clusters make
training episodes cheaper and vary the state, and the encoding does not care about size. Or
each episode draws a workload of a *family* (``family``, ``placement.workloads.families``:
its mix and its cluster) from the source lists, by the episode's seed.

The actions are every feasible node, or (``candidates``: K) only the top K nodes of each
rule — BestFit, FGD, GpuPacking — with the rules' scores, picks and places among the row
features (``placement.env.proposals``); the placer's tie order is drawn per episode as the
inflation experiment draws it, so each rule's first proposal is the node it would take, and
pods take FGD's GPUs on the chosen node: following FGD's picks is FGD, run for run.

A decision is asked only when it matters: a pod that fits nowhere fails (counted, never
retried) and a pod with one feasible node takes it, as in ``placement.placer.choose``. The
action is a node index allowed by ``observation.mask``; the pod takes that node's default
GPUs. The reward is ``balance_dqn``'s weighted sum, written as the change the action makes
(so that per-step rewards telescope to the episode's final state)::

    r = α · NΔφ  −  β · Δstranded / 1000  −  κ · (GPU milli of pods that failed since) / 1000

with φ the cluster's resource uniformity (the mean over nodes of a per-node term, so N·Δφ
is the chosen node's change) and "stranded" the chosen node's GPU milli that no typical pod
can use (``placement.env.node_features``; how the document's formulas, lost from its text,
were rebuilt: docs/decisions/0121-balance-dqn-networks-and-reward.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from placement.cluster import Cluster, NodeSpec, default_gpus
from placement.env.base import Env, FeatureSpec, check_action
from placement.env.node_features import (
    CLUSTER_FEATURES,
    NODE_FEATURES,
    POD_FEATURES,
    Tolerance,
    cluster_features,
    node_features,
    node_uniformity,
    pod_features,
    stranded_milli,
    utilisation,
)
from placement.env.proposals import CANDIDATE_RULE_FEATURES, Proposer, default_proposer
from placement.errors import PlacementInputError
from placement.frag import TypicalPods, typical_pods
from placement.inflation import arrival_list
from placement.placer import tie_order
from placement.pod import MILLI, Pod
from placement.workloads.families import generate_openb

NODE_SPEC = FeatureSpec(row=len(NODE_FEATURES), context=len(POD_FEATURES) + len(CLUSTER_FEATURES))
CANDIDATE_FEATURES = (*NODE_FEATURES, *CANDIDATE_RULE_FEATURES)
"""A candidate's row when the actions are the rules' proposals: the node, then the rules."""
CANDIDATE_SPEC = FeatureSpec(row=len(CANDIDATE_FEATURES), context=NODE_SPEC.context)
CONTEXT_FEATURES = (*POD_FEATURES, *CLUSTER_FEATURES)
ARRIVALS = ("inflation", "timed")


@dataclass(frozen=True)
class NodeEnvSettings:
    """How episodes are drawn and rewarded."""

    arrivals: str = "inflation"
    """``inflation`` (pods never leave) or ``timed`` (creation/deletion times)."""
    tune: float = 1.3
    """Inflation: arrived GPU demand to reach, × the episode cluster's GPU capacity."""
    node_share: float = 1.0
    """Share of the nodes each episode draws (1.0 = the whole cluster)."""
    alpha: float = 0.5
    """Weight α of the uniformity term."""
    beta: float = 1.0
    """Weight β of the saturation (stranded GPU milli) term."""
    failure_penalty: float = 0.0
    """κ: per GPU of pods that failed between this decision and the next."""
    candidates: int = 0
    """Top nodes of each rule the agent chooses among (0: every feasible node)."""
    family: str = ""
    """A workload family drawn per episode from the source lists (empty: the lists)."""

    def __post_init__(self) -> None:
        if self.arrivals not in ARRIVALS:
            raise PlacementInputError(f"arrivals must be one of {ARRIVALS}, not {self.arrivals!r}")
        if not 0 < self.node_share <= 1:
            raise PlacementInputError("node_share must be in (0, 1]")


@dataclass(frozen=True)
class NodeObservation:
    """One decision: the pod, its feasible nodes and their feature rows."""

    pod: Pod
    nodes: np.ndarray
    """Indices of the feasible nodes (the rows of ``rows``)."""
    rows: np.ndarray
    """[len(nodes), len(NODE_FEATURES)] float32."""
    context: np.ndarray
    """Pod features then cluster features."""
    mask: np.ndarray
    """The allowed actions over all nodes of the cluster: the feasible nodes, or the
    rules' candidates among them."""
    picks: dict[str, int] = field(default_factory=dict)
    """With candidates: rule name → row of the node that rule would take."""


def observe(
    cluster: Cluster, pod: Pod, nodes: np.ndarray, tolerance: Tolerance
) -> tuple[np.ndarray, np.ndarray]:
    """(rows, context) of ``pod`` over candidate ``nodes``: what the env and the policy
    adapter both feed an agent. The context is the pod's features then the cluster's."""
    util = utilisation(cluster)
    rows = node_features(cluster, pod, nodes, tolerance, util=util)
    return rows, np.concatenate([pod_features(pod), cluster_features(cluster, util=util)])


def observe_candidates(
    cluster: Cluster,
    pod: Pod,
    nodes: np.ndarray,
    tolerance: Tolerance,
    proposer: Proposer,
    rank: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, int]]:
    """(candidate nodes, rows, context, picks) of ``pod`` over the feasible ``nodes`` when
    the actions are the rules' proposals: what the env and the policy both feed an agent."""
    proposals = proposer.propose(pod, cluster, nodes, rank)
    util = utilisation(cluster)
    base = node_features(cluster, pod, proposals.nodes, tolerance, util=util)
    rows = np.concatenate([base, proposals.features], axis=1)
    context = np.concatenate([pod_features(pod), cluster_features(cluster, util=util)])
    return proposals.nodes, rows, context, proposals.picks


@dataclass
class _Episode:
    cluster: Cluster
    arrivals: list[Pod]
    tolerance: Tolerance
    rank: np.ndarray
    proposer: Proposer | None
    position: int = 0
    failed: int = 0
    failed_milli: int = 0
    arrived_milli: int = 0
    departures: list[tuple[float, int]] = field(default_factory=list)
    live: dict[int, Any] = field(default_factory=dict)


class NodePlacementEnv(Env[NodeObservation | None]):
    """Gymnasium-style node placement over ``nodes`` and a pod list (module docstring)."""

    spec = NODE_SPEC

    def __init__(
        self,
        nodes: list[NodeSpec],
        pods: list[Pod],
        settings: NodeEnvSettings | None = None,
    ) -> None:
        if not nodes or not pods:
            raise PlacementInputError("the environment needs nodes and pods")
        self.settings = settings or NodeEnvSettings()
        if self.settings.arrivals == "timed" and any(p.creation_time is None for p in pods):
            raise PlacementInputError("timed arrivals need every pod's creation time")
        self.nodes, self.pods = list(nodes), list(pods)
        self.typical: TypicalPods = typical_pods(pods)
        self.tolerance = Tolerance.of(self.typical)
        self.spec = CANDIDATE_SPEC if self.settings.candidates else NODE_SPEC
        self._episode: _Episode | None = None
        self._obs: NodeObservation | None = None

    # -- gymnasium contract -------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[NodeObservation | None, dict[str, Any]]:
        rng = np.random.default_rng(seed)
        nodes, pods, typical = self.nodes, self.pods, self.typical
        if self.settings.family:
            made = generate_openb(self.settings.family, nodes, pods, seed=seed or 0)
            nodes, pods = made.nodes, made.pods
            typical = typical_pods(pods)
        elif self.settings.node_share < 1:
            count = max(2, round(self.settings.node_share * len(nodes)))
            nodes = [nodes[i] for i in np.sort(rng.choice(len(nodes), count, replace=False))]
        cluster = Cluster(nodes)
        if self.settings.arrivals == "inflation":
            if cluster.total_gpu_milli == 0:
                raise PlacementInputError("the cluster has no GPUs")
            arrivals = arrival_list(pods, cluster.total_gpu_milli, tune=self.settings.tune, rng=rng)
        else:
            arrivals = sorted(pods, key=lambda p: (p.creation_time, p.name))
        rank = tie_order(len(cluster), rng)
        k = self.settings.candidates
        proposer = default_proposer(typical, top=k) if k else None
        tolerance = self.tolerance if pods is self.pods else Tolerance.of(typical)
        self._episode = _Episode(cluster, arrivals, tolerance, rank, proposer)
        self._obs = self._advance()
        return self._obs, self._info()

    def step(self, action: int) -> tuple[NodeObservation | None, float, bool, bool, dict[str, Any]]:
        episode, obs = self._episode, self._obs
        if episode is None or obs is None:
            raise RuntimeError("step() after the episode ended; call reset()")
        node = check_action(obs.mask, action)
        cluster, s = episode.cluster, self.settings
        one = np.array([node])
        even_before = float(node_uniformity(utilisation(cluster, one))[0])
        stranded_before = self._stranded(cluster, node)
        self._place(obs.pod, node)
        reward = s.alpha * (float(node_uniformity(utilisation(cluster, one))[0]) - even_before)
        reward -= s.beta * (self._stranded(cluster, node) - stranded_before) / MILLI
        failed_before = episode.failed_milli
        self._obs = self._advance()
        reward -= s.failure_penalty * (episode.failed_milli - failed_before) / MILLI
        return self._obs, float(reward), self._obs is None, False, self._info()

    # -- internals ------------------------------------------------------------------------
    def _stranded(self, cluster: Cluster, node: int) -> float:
        one = np.array([node])
        assert self._episode is not None
        tolerance = self._episode.tolerance
        return float(stranded_milli(cluster.gpu_free[one], cluster.cpu_free[one], tolerance)[0])

    def _place(self, pod: Pod, node: int) -> None:
        episode = self._episode
        assert episode is not None
        cluster, proposer = episode.cluster, episode.proposer
        if proposer is not None:
            gpus = proposer.choose_gpus(pod, cluster, node)
        else:
            gpus = default_gpus(cluster, pod, node)
        alloc = cluster.allocate(pod, node, gpus)
        if self.settings.arrivals == "timed" and pod.deletion_time is not None:
            episode.live[alloc.id] = alloc
            episode.departures.append((pod.deletion_time, alloc.id))

    def _release_until(self, now: float) -> None:
        episode = self._episode
        assert episode is not None
        keep = []
        for when, alloc_id in episode.departures:
            if when <= now:
                episode.cluster.release(episode.live.pop(alloc_id))
            else:
                keep.append((when, alloc_id))
        episode.departures = keep

    def _advance(self) -> NodeObservation | None:
        """Move to the next pod that needs a decision (failing or auto-placing the rest)."""
        episode = self._episode
        assert episode is not None
        cluster = episode.cluster
        while episode.position < len(episode.arrivals):
            pod = episode.arrivals[episode.position]
            episode.position += 1
            episode.arrived_milli += pod.total_gpu_milli
            if self.settings.arrivals == "timed":
                self._release_until(float(pod.creation_time or 0.0))
            mask = cluster.feasible(pod)
            nodes = np.flatnonzero(mask)
            if nodes.size == 0:
                episode.failed += 1
                episode.failed_milli += pod.total_gpu_milli
            elif nodes.size == 1:
                self._place(pod, int(nodes[0]))
            elif episode.proposer is not None:
                seen = observe_candidates(
                    cluster, pod, nodes, episode.tolerance, episode.proposer, episode.rank
                )
                allowed = np.zeros_like(mask)
                allowed[seen[0]] = True
                return NodeObservation(pod, seen[0], seen[1], seen[2], allowed, seen[3])
            else:
                rows, context = observe(cluster, pod, nodes, episode.tolerance)
                return NodeObservation(pod, nodes, rows, context, mask)
        return None

    def _info(self) -> dict[str, Any]:
        episode = self._episode
        assert episode is not None
        cluster = episode.cluster
        return {
            "arrived": episode.position,
            "arrivals": len(episode.arrivals),
            "failed_pods": episode.failed,
            "allocated_share": cluster.allocated_gpu_milli / max(cluster.total_gpu_milli, 1),
            "arrived_share": episode.arrived_milli / max(cluster.total_gpu_milli, 1),
        }
