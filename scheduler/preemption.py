"""Priority preemption: which lower-priority pods to evict so that a pod (or a gang) fits.

kube-scheduler's rule, with GPUs in mind. A pod that fits nowhere may evict pods of strictly
lower ``spec.priority`` (never equal, never higher); a gang is a *victim unit*: evicted
whole or not at all, its priority the highest of its members. For each eligible node the
search asks, in order:

1. would the pod fit if every lower-priority unit on the node were gone? (else: not a
   candidate);
2. the lowest priority ``t`` such that removing only units of priority ≤ ``t`` lets it fit
   (the victims' highest priority is as low as it can be);
3. among those units, the fewest pods whose removal lets it fit (sets of 1, 2, … units
   tried in order of priority, up to a budget; past it, kube-scheduler's *reprieve*: start
   from all of them and give back the most important while the pod still fits);
4. across nodes: the lowest highest-priority, then the fewest pods, then the lowest sum of
   priorities, then the least GPU fragmentation the node is left with once the pod is on it
   (``placement.frag``'s measure against the workload's typical pods, FGD's; without
   typical pods the free milli on partly used GPUs), then node order.

A gang preemptor is planned member by member on a simulated cluster: each member first
takes room that is free (or freed by victims already chosen), else the best node as above;
if any member cannot be placed even so, nothing is preempted.

The plan is pure (no API calls): the scheduler evicts, nominates and waits
(:mod:`scheduler.core`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from placement.cluster import Cluster, NodeSpec
from placement.frag import TypicalPods, frag_model
from scheduler.objects import Demand, NodeInfo, PodInfo
from scheduler.view import ClusterView, NodeState, Placement, choose_gpus

SUBSET_BUDGET = 256
"""Victim sets tried per node before the reprieve heuristic decides (step 3)."""


@dataclass(frozen=True)
class VictimUnit:
    """Pods evicted together: one pod, or every bound member of a gang."""

    key: str
    pods: tuple[PodInfo, ...]
    """In ``namespace/name`` order."""
    placements: tuple[Placement, ...]

    @property
    def priority(self) -> int:
        return max(p.priority for p in self.pods)

    @property
    def priority_sum(self) -> int:
        return sum(p.priority for p in self.pods)

    def on_node(self, node: str) -> list[Placement]:
        return [p for p in self.placements if p.node == node]


@dataclass(slots=True)
class SimNode:
    """A node's free resources in a what-if (victims gone, preemptors placed)."""

    info: NodeInfo
    cpu_free: int
    memory_free: int
    pod_count: int
    gpu_free: list[int]

    @classmethod
    def of(cls, state: NodeState) -> SimNode:
        return cls(
            state.info, state.cpu_free, state.memory_free, state.pod_count, list(state.gpu_free)
        )

    def copy(self) -> SimNode:
        return SimNode(
            self.info, self.cpu_free, self.memory_free, self.pod_count, list(self.gpu_free)
        )

    def remove(self, p: Placement) -> None:
        d = p.demand
        self.cpu_free += d.cpu_milli
        self.memory_free += d.memory_mib
        self.pod_count -= 1
        for g, m in p.shares():
            if 0 <= g < len(self.gpu_free):
                self.gpu_free[g] += m

    def add(self, d: Demand, gpus: tuple[int, ...]) -> None:
        self.cpu_free -= d.cpu_milli
        self.memory_free -= d.memory_mib
        self.pod_count += 1
        for g in gpus:
            self.gpu_free[g] -= d.gpu_milli

    def fits(self, d: Demand) -> tuple[int, ...] | None:
        if (
            self.cpu_free < d.cpu_milli
            or self.memory_free < d.memory_mib
            or self.pod_count >= self.info.max_pods
        ):
            return None
        return choose_gpus(self.gpu_free, d)


Rank = tuple[int, int, int]
"""(highest victim priority, victim pods, sum of victim priorities): lower is better."""


@dataclass
class Candidate:
    """One member on one node, with the units to evict there."""

    node: str
    units: tuple[VictimUnit, ...]
    gpus: tuple[int, ...]
    after: SimNode
    rank: Rank
    order: int
    fragmentation: float = 0.0


@dataclass(frozen=True)
class Preemption:
    """The plan: units to evict, and where each member of the preemptor goes once they left."""

    units: tuple[VictimUnit, ...]
    places: tuple[tuple[PodInfo, str, tuple[int, ...]], ...]

    @property
    def victims(self) -> list[PodInfo]:
        return [p for u in self.units for p in u.pods]

    def describe(self) -> str:
        """``ml/a, ml/b on node-1`` (at most 5 pods named)."""
        names = [p.key for p in self.victims]
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        nodes = sorted({node for _, node, _ in self.places})
        return f"{shown} on {', '.join(nodes)}"


@dataclass
class Planner:
    """Plans preemptions on a :class:`ClusterView` (see the module docstring)."""

    view: ClusterView
    typical: Callable[[], TypicalPods | None] = lambda: None
    budget: int = SUBSET_BUDGET
    _sim: dict[str, SimNode] = field(default_factory=dict)

    def _node(self, name: str) -> SimNode:
        sim = self._sim.get(name)
        if sim is None:
            sim = self._sim[name] = SimNode.of(self.view.nodes[name])
        return sim

    def plan(
        self,
        members: Sequence[PodInfo],
        eligible: Callable[[PodInfo], Sequence[str]],
        units: Iterable[VictimUnit],
    ) -> Preemption | None:
        """Victims and places for ``members`` (a pod or a gang), or None: nothing to do."""
        self._sim = {}
        floor = min(m.priority for m in members)
        by_node: dict[str, list[VictimUnit]] = {}
        for unit in units:
            if unit.priority < floor:
                for node in {p.node for p in unit.placements}:
                    by_node.setdefault(node, []).append(unit)
        if not by_node:
            return None
        chosen: dict[str, VictimUnit] = {}
        places: list[tuple[PodInfo, str, tuple[int, ...]]] = []
        for member in members:
            names = [n for n in eligible(member) if n in self.view.nodes]
            place = self._free_room(member.demand, names)
            if place is None:
                best = self._best(member.demand, names, by_node, chosen)
                if best is None:
                    return None
                for unit in best.units:
                    chosen[unit.key] = unit
                    for p in unit.placements:
                        if p.node in self.view.nodes:
                            self._node(p.node).remove(p)
                place = (best.node, best.gpus)
            node, gpus = place
            self._node(node).add(member.demand, gpus)
            places.append((member, node, gpus))
        if not chosen:
            return None  # it fits without evicting anyone: the policy's turn, not ours
        ordered = sorted(chosen.values(), key=lambda u: (u.priority, u.pods[0].key))
        return Preemption(tuple(ordered), tuple(places))

    def _free_room(self, d: Demand, names: Sequence[str]) -> tuple[str, tuple[int, ...]] | None:
        """The first node where ``d`` fits in the what-if as it stands."""
        for name in names:
            gpus = self._node(name).fits(d)
            if gpus is not None:
                return name, gpus
        return None

    def _best(
        self,
        d: Demand,
        names: Sequence[str],
        by_node: dict[str, list[VictimUnit]],
        chosen: dict[str, VictimUnit],
    ) -> Candidate | None:
        order = {n: i for i, n in enumerate(self.view.order)}
        # steps 1 and 2 on every node: is it a candidate, and how low can the victims be?
        pools: list[tuple[int, str, list[VictimUnit]]] = []
        for name in names:
            here = [u for u in by_node.get(name, ()) if u.key not in chosen]
            info = self.view.nodes[name].info
            if (
                not here
                or info.cpu_milli < d.cpu_milli
                or info.memory_mib < d.memory_mib
                or info.gpus < d.gpu_count
            ):
                continue
            found = self._threshold(name, d, here)
            if found is not None:
                pools.append((found[0], name, found[1]))
        if not pools:
            return None
        lowest = min(t for t, _, _ in pools)
        # step 3 on the nodes where the victims can be that low; step 4 across them
        candidates = [
            c
            for t, name, pool in pools
            if t == lowest
            for c in [self._fewest(name, d, pool, order.get(name, 0))]
            if c is not None
        ]
        if not candidates:
            return None
        top = min(c.rank for c in candidates)
        tied = [c for c in candidates if c.rank == top]
        if len(tied) > 1:
            for c, f in zip(tied, self._fragmentation([c.after for c in tied]), strict=True):
                c.fragmentation = f
        return min(tied, key=lambda c: (c.fragmentation, c.order))

    def _without(self, name: str, units: Iterable[VictimUnit]) -> SimNode:
        sim = self._node(name).copy()
        for unit in units:
            for p in unit.on_node(name):
                sim.remove(p)
        return sim

    def _threshold(
        self, name: str, d: Demand, here: list[VictimUnit]
    ) -> tuple[int, list[VictimUnit]] | None:
        if self._without(name, here).fits(d) is None:
            return None
        for t in sorted({u.priority for u in here}):
            pool = [u for u in here if u.priority <= t]
            if self._without(name, pool).fits(d) is not None:
                return t, pool
        return None  # unreachable: the last threshold is every unit

    def _fewest(self, name: str, d: Demand, pool: list[VictimUnit], order: int) -> Candidate | None:
        pool = sorted(pool, key=lambda u: (u.priority, len(u.pods), u.key))
        best: Candidate | None = None
        tried = 0
        for k in range(1, len(pool) + 1):
            for combo in itertools.combinations(pool, k):
                tried += 1
                if tried > self.budget:
                    break
                best = self._better(best, name, d, combo, order)
            if best is not None or tried > self.budget:
                break
        if best is None:  # kube-scheduler's reprieve: give back the most important first
            keep = list(pool)
            for unit in sorted(pool, key=lambda u: (-u.priority, -len(u.pods), u.key)):
                trial = [u for u in keep if u is not unit]
                if self._without(name, trial).fits(d) is not None:
                    keep = trial
            best = self._better(None, name, d, tuple(keep), order)
        return best

    def _better(
        self,
        best: Candidate | None,
        name: str,
        d: Demand,
        units: tuple[VictimUnit, ...],
        order: int,
    ) -> Candidate | None:
        after = self._without(name, units)
        gpus = after.fits(d)
        if gpus is None:
            return best
        rank = (
            max(u.priority for u in units),
            sum(len(u.pods) for u in units),
            sum(u.priority_sum for u in units),
        )
        if best is not None and best.rank <= rank:
            return best
        after.add(d, gpus)
        return Candidate(name, units, gpus, after, rank, order)

    def _fragmentation(self, states: list[SimNode]) -> list[float]:
        """GPU fragmentation of each what-if node (``placement.frag``; see the docstring)."""
        typical = self.typical()
        if typical is None:
            return [float(sum(f for f in s.gpu_free if 0 < f < 1000)) for s in states]
        specs = [
            NodeSpec(
                f"{s.info.name}#{i}",
                max(0, s.info.cpu_milli),
                max(0, s.info.memory_mib),
                max(0, s.info.gpus),
                s.info.model or "",
                pod_limit=max(0, s.info.max_pods),
            )
            for i, s in enumerate(states)
        ]
        cluster = Cluster(specs)
        for i, s in enumerate(states):
            g = min(len(s.gpu_free), cluster.gpu_free.shape[1])
            cluster.cpu_free[i] = max(0, s.cpu_free)
            cluster.gpu_free[i, :g] = [max(0, f) for f in s.gpu_free[:g]]
            cluster.gpu_free_total[i] = int(cluster.gpu_free[i].sum())
            cluster.node_version[i] += 1
        frag = frag_model(cluster, typical).node_frag()
        return [float(f) for f in frag]
