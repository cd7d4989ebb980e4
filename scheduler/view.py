"""The cluster as the scheduler accounts for it: nodes, and what every bound pod holds.

Built from the Nodes and the bound pods the watches deliver, and from the scheduler's own
decisions the moment it makes them ("assumed" pods, as kube-scheduler calls them, so the
next decision does not reuse GPUs a binding in flight is taking). Per node: free CPU,
memory, pod slots and the free thousandths of each GPU. Which GPUs a pod holds, and how much
of each, comes from the ``kale.dev/gpu-assignment`` annotation (``kale.dev/gpus`` before it)
the scheduler writes through the Binding — so a restarted scheduler, or one beside another
writer of the annotation, accounts every GPU's milli exactly; pods without one (bound by
someone else) hold the GPUs :func:`choose_gpus` would give them, resolved after every pod
whose GPUs are known, so a guess never displaces a known share.

*Reservations* hold room for a pod that preempted others (its nominated node) until they
are gone and it is bound: other pods see the room taken, the accounting of what is bound
(:meth:`ClusterView.gpu_load`) does not.

Nodes are kept in name order: the order is the same after every restart and relist, so a
restarted scheduler makes the same decisions (policies break ties by node position).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler.objects import Demand, NodeInfo, PodInfo, ineligible

log = logging.getLogger(__name__)


@dataclass(slots=True)
class NodeState:
    """A node with what is left on it."""

    info: NodeInfo
    cpu_free: int = 0
    memory_free: int = 0
    gpu_free: list[int] = field(default_factory=list)
    pod_count: int = 0

    @property
    def name(self) -> str:
        return self.info.name

    def reset(self) -> None:
        self.cpu_free, self.memory_free = self.info.cpu_milli, self.info.memory_mib
        self.gpu_free = [1000] * self.info.gpus
        self.pod_count = 0


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a pod is (or is about to be) and what it holds there."""

    node: str
    gpus: tuple[int, ...] | None
    """None until the node is known (for a pod bound by someone else)."""
    demand: Demand
    milli: tuple[int, ...] | None = None
    """Thousandths held of each of ``gpus`` (None: ``demand.gpu_milli`` of each)."""
    guessed: bool = False
    """The GPUs are :func:`choose_gpus`'s guess (nobody recorded them on the pod)."""

    def shares(self) -> list[tuple[int, int]]:
        """(GPU, milli) pairs this placement holds."""
        gpus = self.gpus or ()
        milli = self.milli if self.milli is not None else (self.demand.gpu_milli,) * len(gpus)
        return list(zip(gpus, milli, strict=True))


def choose_gpus(free: list[int], demand: Demand) -> tuple[int, ...] | None:
    """GPUs for ``demand`` on a node with ``free`` milli per GPU (None: they do not fit).

    Whole GPUs: the lowest-numbered free ones. Sharing: the fitting GPU with the least free
    milli (packs fractions together, keeps whole GPUs whole) — the simulator's rule for
    every policy but FGD, which picks its own.
    """
    k, m = demand.gpu_count, demand.gpu_milli
    if k == 0:
        return ()
    fitting = [i for i, f in enumerate(free) if f >= m]
    if len(fitting) < k:
        return None
    if demand.sharing:
        return (min(fitting, key=lambda i: (free[i], i)),)
    return tuple(fitting[:k])


def fits(node: NodeState, demand: Demand) -> tuple[int, ...] | None:
    """GPUs ``demand`` would take on ``node`` if its CPU, memory and a pod slot are free."""
    if (
        node.cpu_free < demand.cpu_milli
        or node.memory_free < demand.memory_mib
        or node.pod_count >= node.info.max_pods
    ):
        return None
    return choose_gpus(node.gpu_free, demand)


class ClusterView:
    """Nodes by name and the placements of pods that hold resources."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeState] = {}
        self.order: list[str] = []
        self.placements: dict[str, Placement] = {}
        self.by_node: dict[str, set[str]] = {}
        self.node_version = 0
        """Bumped when the node set, a node's capacity or its eligibility changes."""
        self.freed_version = 0
        """Bumped when resources are freed (a pod left, a node was added or grew)."""
        self.state_version = 0
        """Bumped on every change of what is free (for caches of answers about it)."""
        self.reservations: dict[str, Placement] = {}
        """Room held for preemptors (uid → where) until their victims are gone."""
        self._diagnosis: tuple[int, object, str] | None = None
        self.listeners: list[Callable[[str, str | None], None]] = []
        """``listener(what, node)``: ``("nodes", None)`` or ``("free", name)`` after changes."""

    # -- nodes ----------------------------------------------------------------------------
    def set_node(self, info: NodeInfo) -> None:
        old = self.nodes.get(info.name)
        if old is not None and old.info == info:
            return
        state = NodeState(info)
        self.nodes[info.name] = state
        self._retake(state)
        if old is None:
            self.order = sorted(self.nodes)
        grew = old is None or _roomier(old.info, info)
        self.node_version += 1
        if grew:
            self.freed_version += 1
        self._notify("nodes", None)

    def remove_node(self, name: str) -> None:
        if self.nodes.pop(name, None) is not None:
            self.order = sorted(self.nodes)
            self.node_version += 1
            self._notify("nodes", None)

    def sync_nodes(self, infos: list[NodeInfo]) -> None:
        """Replace the node set (after a list)."""
        names = {i.name for i in infos}
        for name in [n for n in self.nodes if n not in names]:
            self.remove_node(name)
        for info in infos:
            self.set_node(info)

    # -- pods -----------------------------------------------------------------------------
    def hold(
        self,
        uid: str,
        node: str,
        gpus: tuple[int, ...] | None,
        demand: Demand,
        milli: tuple[int, ...] | None = None,
    ) -> Placement:
        """Account ``demand`` on ``node`` for pod ``uid`` (replacing what it held before).

        ``gpus`` None (a pod bound by someone else): the GPUs :func:`choose_gpus` gives it,
        decided when the node is known. ``milli``: the thousandths of each GPU, when the
        pod's assignment says so (else ``demand.gpu_milli`` of each).
        """
        self.release(uid, freed=False)
        if milli is not None and (gpus is None or len(milli) != len(gpus)):
            milli = None
        if gpus is not None and milli is None and len(gpus) != demand.gpu_count:
            gpus = None
        placement = Placement(node, gpus, demand, milli, guessed=gpus is None)
        self.placements[uid] = placement
        self.by_node.setdefault(node, set()).add(uid)
        state = self.nodes.get(node)
        if state is not None:
            if not placement.guessed and any(
                self.placements[u].guessed for u in self.by_node[node] if u != uid
            ):
                self._retake(state)  # the guesses are redone around the known share
            else:
                self._take(state, uid, placement)
            placement = self.placements[uid]
            self._notify("free", node)
        return placement

    def reserve(self, uid: str, node: str, gpus: tuple[int, ...], demand: Demand) -> None:
        """Hold room on ``node`` for a pod waiting there for preempted pods to leave."""
        self.unreserve(uid)
        p = Placement(node, gpus, demand)
        self.reservations[uid] = p
        state = self.nodes.get(node)
        if state is not None:
            self._take(state, uid, p)
            self._notify("free", node)

    def unreserve(self, uid: str) -> Placement | None:
        """Give back a reservation (its pod is bound, gone, or tries elsewhere)."""
        p = self.reservations.pop(uid, None)
        if p is None:
            return None
        state = self.nodes.get(p.node)
        if state is not None:
            self._take(state, uid, p, sign=-1)
            self._notify("free", p.node)
        return p

    def _retake(self, state: NodeState) -> None:
        """Recount a node from scratch: known shares first, then guesses, then reservations."""
        state.reset()
        held = [(u, self.placements[u]) for u in sorted(self.by_node.get(state.name, ()))]
        for uid, p in held:
            if not p.guessed:
                self._take(state, uid, p)
        for uid, p in held:
            if p.guessed:
                self._take(state, uid, Placement(p.node, None, p.demand, guessed=True))
        for uid, r in sorted(self.reservations.items()):
            if r.node == state.name:
                self._take(state, uid, r)

    def release(self, uid: str, *, freed: bool = True) -> Placement | None:
        placement = self.placements.pop(uid, None)
        if placement is None:
            return None
        self.by_node.get(placement.node, set()).discard(uid)
        state = self.nodes.get(placement.node)
        if state is not None:
            self._take(state, uid, placement, sign=-1)
            self._notify("free", placement.node)
        if freed:
            self.freed_version += 1
        return placement

    def _take(self, state: NodeState, uid: str, p: Placement, sign: int = 1) -> Placement:
        d = p.demand
        if sign > 0 and p.gpus is None:  # resolve the GPUs of a pod bound by someone else
            gpus = choose_gpus(state.gpu_free, d)
            if gpus is None:  # overcommitted: the emptiest GPUs
                ranked = sorted(range(len(state.gpu_free)), key=lambda i: -state.gpu_free[i])
                gpus = tuple(sorted(ranked[: d.gpu_count]))
            p = Placement(p.node, gpus, d, guessed=True)
            self.placements[uid] = p
        state.cpu_free -= sign * d.cpu_milli
        state.memory_free -= sign * d.memory_mib
        state.pod_count += sign
        for g, m in p.shares():
            if 0 <= g < len(state.gpu_free):
                state.gpu_free[g] -= sign * m
        return p

    def _notify(self, what: str, node: str | None) -> None:
        self.state_version += 1
        for listener in self.listeners:
            listener(what, node)

    # -- questions ------------------------------------------------------------------------
    def diagnose(self, pod: PodInfo) -> str:
        """Why no node takes ``pod``, in the default scheduler's words.

        The last answer is kept while nothing changed: a full cluster turns away a run of
        pods of the same shape, and each answer walks every node.
        """
        key = (
            pod.demand,
            json.dumps(pod.tolerations, sort_keys=True),
            sorted(pod.node_selector.items()),
            pod.node_affinity,
        )
        cached = self._diagnosis
        if cached is not None and cached[0] == self.state_version and cached[1] == key:
            return cached[2]
        message = self._diagnose(pod)
        self._diagnosis = (self.state_version, key, message)
        return message

    def _diagnose(self, pod: PodInfo) -> str:
        reasons: Counter[str] = Counter()
        d = pod.demand
        for name in self.order:
            state = self.nodes[name]
            why = ineligible(pod, state.info)
            if why is None:
                if state.pod_count >= state.info.max_pods:
                    why = "Too many pods"
                elif state.cpu_free < d.cpu_milli:
                    why = "Insufficient cpu"
                elif state.memory_free < d.memory_mib:
                    why = "Insufficient memory"
                elif choose_gpus(state.gpu_free, d) is None:
                    why = "Insufficient nvidia.com/gpu"
                else:
                    why = "node(s) were passed over by the placement policy"
            reasons[why] += 1
        parts = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda x: x[0]))
        return f"0/{len(self.order)} nodes are available: {parts}." if parts else "no nodes"

    def gpu_load(self, node: str) -> list[int]:
        """Thousandths of each GPU of ``node`` held by the pods placed there (bound, being
        bound, or on trial), summed from their assignments — not from the running free
        counts, and without reservations: the independent check before every binding."""
        state = self.nodes.get(node)
        load = [0] * (state.info.gpus if state is not None else 0)
        for uid in self.by_node.get(node, ()):
            for g, m in self.placements[uid].shares():
                while g >= len(load):  # a share on a GPU the node no longer reports
                    load.append(0)
                load[g] += m
        return load

    def overcommit(self, node: str, gpus: tuple[int, ...]) -> str | None:
        """Why holding ``gpus`` on ``node`` as placed now over-commits a GPU (None: it does
        not): a GPU the node lacks, or more than 1000 thousandths on one."""
        state = self.nodes.get(node)
        if state is None:
            return f"node {node} is gone"
        load = self.gpu_load(node)
        for g in gpus:
            if not 0 <= g < state.info.gpus:
                return f"node {node} has no GPU {g} (it has {state.info.gpus})"
            if load[g] > 1000:
                return f"GPU {g} of node {node} would hold {load[g]} thousandths"
        return None

    def gpu_milli(self) -> tuple[int, int]:
        """(allocated, capacity) GPU milli over the known nodes."""
        cap = sum(1000 * s.info.gpus for s in self.nodes.values())
        free = sum(max(0, f) for s in self.nodes.values() for f in s.gpu_free)
        return cap - free, cap


def _roomier(old: NodeInfo, new: NodeInfo) -> bool:
    """Whether a pod that did not fit on ``old`` might fit on ``new``."""
    return (
        new.cpu_milli > old.cpu_milli
        or new.memory_mib > old.memory_mib
        or new.gpus > old.gpus
        or new.max_pods > old.max_pods
        or (old.blocked is not None and new.blocked is None)
        or len(new.taints) < len(old.taints)
        or new.labels != old.labels
        or len(new.faults) != len(old.faults)
    )
