"""The Kubernetes view mapped onto ``placement``'s cluster model, and policies by name.

The decision is the simulator's own code: a :class:`PolicyPlacer` keeps a
``placement.cluster.Cluster`` in step with the scheduler's :class:`ClusterView` (one row
per node, in the view's name order; rows rewritten only for nodes that changed) and, per
pod, calls ``placement.placer.choose`` — feasible nodes, the policy's integer scores, ties
to a seeded random node order, the policy's GPU choice — with the mask of the nodes
Kubernetes allows (cordon, readiness, taints, selectors, required node affinity). Same
cluster, same pods in the same order, same seed: the same placements as ``kale place
simulate``.

Names: ``first-fit`` (no placement code at all), every name of
``placement.policies.POLICIES`` (``fault-bestfit`` included), and ``agent:PATH`` — a saved
learned agent. Every policy is built by placement's own registry
(``placement.policies.make_policy``, which hands ``agent:PATH`` to ``placement.agents``), so
the scheduler and the simulators know the same names; while ``placement.agents`` is absent an
agent is refused with that reason.

FGD plans against the workload's typical pods: those of the ``workload`` pod list when one
is configured, else of the pods this scheduler has seen (recounted whenever that number
doubles, so early decisions do not freeze an unrepresentative mix).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from placement.agent_names import AGENT_PREFIX, parse_agent_name
from placement.cluster import Cluster, NodeSpec
from placement.errors import PlacementError
from placement.frag import TypicalPods, cluster_fragmentation, typical_pods
from placement.placer import choose, tie_order
from placement.pod import Pod
from placement.policies import POLICIES, PolicyContext, ScorePolicy, make_policy
from placement.policies.capabilities import FaultAware
from placement.policies.guard import GuardedPolicy
from scheduler.faults import FaultCounts
from scheduler.objects import Demand, NodeInfo, PodInfo
from scheduler.placers import Choice, FirstFit, Placer
from scheduler.view import ClusterView

Factory = Callable[[PolicyContext], ScorePolicy]


def known_policies() -> list[str]:
    return ["first-fit", *POLICIES, f"{AGENT_PREFIX}PATH[,fallback=RULE]"]


def _require_agents() -> None:
    if importlib.util.find_spec("placement.agents") is None:
        raise ValueError(
            "saved agents (agent:PATH) need placement.agents, which this version lacks"
        )


def _factory(name: str) -> Factory:
    """Builds policy ``name`` through placement's registry (agents included)."""

    def build(context: PolicyContext) -> ScorePolicy:
        return make_policy(name, context)

    return build


def check_policy_name(name: str) -> None:
    """Raise ValueError (naming the known policies) when ``name`` is not one."""
    if name.startswith(AGENT_PREFIX):
        if not name.removeprefix(AGENT_PREFIX):
            raise ValueError("agent: needs a path (agent:PATH)")
        try:
            fallback = parse_agent_name(name).fallback
        except PlacementError as exc:
            raise ValueError(str(exc)) from None
        if fallback is not None and fallback not in POLICIES:
            raise ValueError(f"unknown fallback policy {fallback!r}; known: {', '.join(POLICIES)}")
        _require_agents()
        return
    if name != "first-fit" and name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(known_policies())}")


def node_spec(info: NodeInfo) -> NodeSpec:
    """A Kubernetes node as placement's node (capacity only; state is synced per row)."""
    return NodeSpec(
        info.name,
        max(0, info.cpu_milli),
        max(0, info.memory_mib),
        max(0, info.gpus),
        info.model or "",
        pod_limit=max(0, info.max_pods),
    )


def placement_pod(name: str, demand: Demand) -> Pod:
    """A pod's demand as placement's pod."""
    return Pod(
        name,
        demand.cpu_milli,
        demand.memory_mib,
        demand.gpu_count,
        demand.gpu_milli if demand.gpu_count else 0,
        demand.gpu_models or frozenset(),
    )


def _affinity(demand: Demand) -> int:
    if demand.gpu_count == 0:
        return -1
    return 0 if demand.sharing else demand.gpu_count


class PolicyPlacer:
    """A ``placement`` score policy deciding for the scheduler (see the module docstring)."""

    def __init__(
        self,
        name: str,
        factory: Factory,
        *,
        seed: int = 0,
        typical: TypicalPods | None = None,
        needs_typical: bool = False,
    ) -> None:
        self.name = name
        self.factory = factory
        self.seed = seed
        self.typical = typical
        self.fixed_typical = typical is not None
        self.needs_typical = needs_typical
        self.view = ClusterView()
        self.cluster: Cluster | None = None
        self.policy: ScorePolicy | None = None
        self.rank = np.zeros(0, np.int64)
        self.index: dict[str, int] = {}
        self._rebuild = True
        self._dirty: set[str] = set()
        self._masks: dict[int, tuple[Sequence[str], np.ndarray]] = {}
        self._typical_at = 0
        self._rng = np.random.default_rng(seed)

    # -- keeping the cluster in step ------------------------------------------------------
    def attach(self, view: ClusterView) -> None:
        self.view = view
        view.listeners.append(self._changed)
        self._rebuild = True

    def _changed(self, what: str, node: str | None) -> None:
        if what == "nodes":
            self._rebuild = True
        elif node is not None:
            self._dirty.add(node)

    def _sync(self) -> Cluster | None:
        view = self.view
        if self._rebuild:
            self._rebuild, self._masks = False, {}
            if not view.order:
                self.cluster = None
                return None
            self.cluster = Cluster([node_spec(view.nodes[n].info) for n in view.order])
            self.index = {n: i for i, n in enumerate(view.order)}
            # the simulator's tie order for this node set: a permutation from the seed
            self.rank = tie_order(len(self.cluster), np.random.default_rng(self.seed))
            self._dirty = set(view.order)
        cluster = self.cluster
        if cluster is not None:
            for name in self._dirty:
                if name in self.index:
                    self._write_row(cluster, self.index[name], name)
        self._dirty = set()
        return cluster

    def _write_row(self, c: Cluster, i: int, name: str) -> None:
        state = self.view.nodes[name]
        c.cpu_free[i], c.mem_free[i] = state.cpu_free, state.memory_free
        c.pod_count[i] = state.pod_count
        g = min(len(state.gpu_free), c.gpu_free.shape[1])
        c.gpu_free[i, :g] = np.maximum(np.asarray(state.gpu_free[:g], np.int64), 0)
        c.gpu_free[i, g:] = 0
        c.gpu_free_total[i] = int(c.gpu_free[i].sum())
        affinity = np.zeros(c.affinity_count.shape[1], np.int64)
        for uid in self.view.by_node.get(name, ()):
            a = _affinity(self.view.placements[uid].demand)
            if 0 <= a < affinity.shape[0]:
                affinity[a] += 1
        c.affinity_count[i] = affinity
        c.node_version[i] += 1

    def _policy(self, request: Pod) -> ScorePolicy:
        if self.needs_typical and not self.fixed_typical:
            seen = len(self.view.placements) + 1
            if self.typical is None or seen >= 2 * self._typical_at:
                pods = [request]
                for uid, held in self.view.placements.items():
                    try:
                        pods.append(placement_pod(uid, held.demand))
                    except ValueError:
                        continue
                self.typical, self._typical_at, self.policy = typical_pods(pods), seen, None
        if self.policy is None:
            self.policy = self.factory(PolicyContext(rng=self._rng, typical=self.typical))
        return self.policy

    def _mask(self, eligible: Sequence[str], n: int) -> np.ndarray | None:
        if len(eligible) == n:
            return None  # every node is allowed
        cached = self._masks.get(id(eligible))
        if cached is not None and cached[0] is eligible:
            return cached[1]
        mask = np.zeros(n, bool)
        mask[[self.index[e] for e in eligible if e in self.index]] = True
        self._masks[id(eligible)] = (eligible, mask)
        return mask

    # -- the decision ---------------------------------------------------------------------
    def place(self, pod: PodInfo, eligible: Sequence[str], faults: FaultCounts) -> Choice | None:
        cluster = self._sync()
        if cluster is None or not eligible:
            return None
        try:
            request = placement_pod(pod.key, pod.demand)
        except ValueError:
            return None
        policy = self._policy(request)
        if isinstance(policy, FaultAware) and getattr(policy, "uses_faults", False):
            policy.observe_faults(*self.fault_arrays(cluster, faults))
        allowed = self._mask(eligible, len(cluster))
        decision = choose(request, cluster, policy, rank=self.rank, allowed=allowed)
        if decision is None or len(decision.gpus) != request.num_gpu:
            return None
        fallback = policy.last_reason if isinstance(policy, GuardedPolicy) else None
        gpus = tuple(int(g) for g in decision.gpus)
        return Choice(cluster.names[decision.node], gpus, fallback)

    def fault_arrays(self, cluster: Cluster, faults: FaultCounts) -> tuple[np.ndarray, np.ndarray]:
        """The counts as ``node_faults[N]`` and ``gpu_faults[N, G]`` in the cluster's order."""
        node_faults = np.zeros(len(cluster), np.int64)
        gpu_faults = np.zeros((len(cluster), max(cluster.max_gpus, 1)), np.int64)
        for name, count in faults.per_node.items():
            i = self.index.get(name)
            if i is not None:
                node_faults[i] = count
                for g, n in faults.per_gpu.get(name, {}).items():
                    if 0 <= g < gpu_faults.shape[1]:
                        gpu_faults[i, g] = n
        return node_faults, gpu_faults

    def fragmentation(self) -> float:
        """Fragmented GPU milli (FGD's measure) over the cluster's GPU capacity."""
        cluster = self._sync()
        if cluster is None or self.typical is None or cluster.total_gpu_milli == 0:
            return 0.0
        milli, _ = cluster_fragmentation(cluster, self.typical)
        return milli / cluster.total_gpu_milli


def load_typical(path: str | None) -> TypicalPods | None:
    """Typical pods of a pod list CSV (openb format), or None."""
    if path is None:
        return None
    from placement.workloads.openb import load_pods

    return typical_pods(load_pods(path))


def make_placer(name: str, *, seed: int = 0, workload: str | None = None) -> Placer:
    """The placer called ``name`` (raises ValueError or PlacementError with the reason)."""
    check_policy_name(name)
    if name == "first-fit":
        return FirstFit()
    typical = load_typical(workload)
    agent = name.startswith(AGENT_PREFIX)
    if agent and not Path(parse_agent_name(name).path).exists():
        raise PlacementError(f"{parse_agent_name(name).path}: no saved agent there")
    return PolicyPlacer(
        name, _factory(name), seed=seed, typical=typical, needs_typical=agent or name == "fgd"
    )
