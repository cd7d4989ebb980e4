"""The preemption planner on its own (no API server): which victims, which node."""

from __future__ import annotations

from placement.frag import PodType, TypicalPods
from scheduler.objects import Demand, NodeInfo, PodInfo
from scheduler.preemption import Planner, VictimUnit
from scheduler.view import ClusterView


def node(name: str, gpus: int = 2) -> NodeInfo:
    return NodeInfo(name, cpu_milli=64_000, memory_mib=262_144, gpus=gpus, model="V100M32")


def pod(name: str, priority: int, *, gpus: int = 1, milli: int = 1000) -> PodInfo:
    return PodInfo(
        uid=name,
        namespace="ml",
        name=name,
        demand=Demand(1000, 1024, gpus, milli),
        priority=priority,
    )


class Cluster:
    """A view with pods held on GPUs, and the victim units the scheduler would offer."""

    def __init__(self, *nodes: NodeInfo) -> None:
        self.view = ClusterView()
        self.view.sync_nodes(list(nodes))
        self.pods: dict[str, PodInfo] = {}

    def hold(self, p: PodInfo, on: str, gpus: tuple[int, ...]) -> None:
        self.pods[p.uid] = p
        self.view.hold(p.uid, on, gpus, p.demand)

    def units(self, floor: int) -> list[VictimUnit]:
        return [
            VictimUnit(uid, (p,), (self.view.placements[uid],))
            for uid, p in self.pods.items()
            if p.priority < floor
        ]

    def plan(self, preemptor: PodInfo, typical: TypicalPods | None = None):
        planner = Planner(self.view, typical=lambda: typical)
        return planner.plan([preemptor], lambda _: self.view.order, self.units(preemptor.priority))


def test_the_victims_leaving_the_least_fragmentation_are_preferred():
    c = Cluster(node("n1"), node("n2"))
    c.hold(pod("low-1", 0, milli=600), "n1", (0,))
    c.hold(pod("keep-1", 100, milli=700), "n1", (1,))
    c.hold(pod("low-2", 0, milli=600), "n2", (0,))
    c.hold(pod("keep-2", 100, milli=300), "n2", (1,))
    # typical pods take 600 of a GPU: a GPU with less free is fragmented for them
    typical = TypicalPods((PodType(1000, 600, 1),), (1.0,), 1.0)
    plan = c.plan(pod("urgent", 50, milli=800), typical)
    # either victim lets the pod fit (same priority, one pod each); on n1 it would leave
    # 200 + 300 fragmented milli, on n2 only 200 (GPU 1 keeps 700 free, room for one more)
    assert plan is not None and [v.name for v in plan.victims] == ["low-2"]
    assert [(p.name, n, g) for p, n, g in plan.places] == [("urgent", "n2", (0,))]


def test_without_typical_pods_the_partly_used_gpus_decide():
    c = Cluster(node("n1"), node("n2"))
    c.hold(pod("low-1", 0, milli=600), "n1", (0,))
    c.hold(pod("keep-1", 100, milli=700), "n1", (1,))
    c.hold(pod("low-2", 0, milli=600), "n2", (0,))
    c.hold(pod("keep-2", 100, milli=1000), "n2", (1,))
    plan = c.plan(pod("urgent", 50, milli=800))
    # n1 would keep 200 + 300 free on partly used GPUs, n2 only 200
    assert plan is not None and [v.name for v in plan.victims] == ["low-2"]


def test_lower_victim_priority_beats_fewer_victims():
    c = Cluster(node("n1"), node("n2"))
    c.hold(pod("mid", 40, gpus=2), "n1", (0, 1))
    c.hold(pod("low-a", 1), "n2", (0,))
    c.hold(pod("low-b", 2), "n2", (1,))
    plan = c.plan(pod("urgent", 50, gpus=2))
    assert plan is not None and [v.name for v in plan.victims] == ["low-a", "low-b"]


def test_only_as_many_victims_as_needed_are_taken_from_a_node():
    c = Cluster(node("n1", gpus=4))
    for g in range(4):
        c.hold(pod(f"low-{g}", g), "n1", (g,))
    plan = c.plan(pod("urgent", 50, gpus=2))
    # the two lowest priorities, not all four
    assert plan is not None and [v.name for v in plan.victims] == ["low-0", "low-1"]


def test_nothing_is_planned_when_even_every_lower_pod_gone_is_not_enough():
    c = Cluster(node("n1"))
    c.hold(pod("low", 0), "n1", (0,))
    c.hold(pod("peer", 50), "n1", (1,))
    assert c.plan(pod("urgent", 50, gpus=2)) is None
