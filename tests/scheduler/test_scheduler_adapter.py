"""The adapter: the scheduler's view decides exactly like placement's simulator."""

from __future__ import annotations

import numpy as np
import pytest

from placement.cluster import Cluster
from placement.errors import PlacementInputError
from placement.frag import typical_pods
from placement.placer import place, tie_order
from placement.policies import POLICIES, PolicyContext, make_policy
from placement.workloads.generate import generate_nodes, generate_pods
from scheduler.adapter import (
    PolicyPlacer,
    check_policy_name,
    make_placer,
    node_spec,
    placement_pod,
)
from scheduler.faults import FaultCounts
from scheduler.objects import Demand, NodeInfo, PodInfo
from scheduler.view import ClusterView

NO_FAULTS = FaultCounts(3600.0)


def view_of(specs) -> ClusterView:
    view = ClusterView()
    for s in specs:
        view.set_node(NodeInfo(s.name, s.cpu_milli, s.memory_mib, s.gpus, s.model, max_pods=1001))
    return view


def pod_info(pod) -> PodInfo:
    demand = Demand(
        pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli, pod.gpu_models or None
    )
    return PodInfo(uid=pod.name, namespace="ml", name=pod.name, demand=demand)


@pytest.mark.parametrize("policy", list(POLICIES))
def test_the_scheduler_places_every_pod_where_the_simulator_does(policy):
    specs = generate_nodes(40, seed=3)
    pods = generate_pods(400, seed=4)
    typical = typical_pods(pods)
    seed = 7
    # the simulator: placement's own cycle on its own cluster
    cluster = Cluster(specs)
    rank = tie_order(len(cluster), np.random.default_rng(seed))
    scorer = make_policy(policy, PolicyContext(rng=np.random.default_rng(seed), typical=typical))
    expected = []
    for pod in pods:
        alloc = place(pod, cluster, scorer, rank=rank)
        expected.append(None if alloc is None else (cluster.names[alloc.node], alloc.gpus))
    # the scheduler: the view, the adapter, holds as the scheduler makes them
    view = view_of(specs)
    placer = PolicyPlacer(policy, POLICIES[policy], seed=seed, typical=typical)
    placer.attach(view)
    got = []
    for pod in pods:
        info = pod_info(pod)
        choice = placer.place(info, view.order, NO_FAULTS)
        got.append(None if choice is None else (choice.node, choice.gpus))
        if choice is not None:
            view.hold(info.uid, choice.node, choice.gpus, info.demand)
    assert got == expected
    assert sum(g is None for g in got) > 0  # the cluster filled up: failures compared too
    assert view.gpu_milli()[0] == cluster.allocated_gpu_milli


def test_only_eligible_nodes_are_chosen():
    specs = generate_nodes(10, seed=1)
    view = view_of(specs)
    placer = make_placer("bestfit")
    placer.attach(view)
    pod = pod_info(generate_pods(1, seed=2)[0])
    allowed = [view.order[-1]]
    assert placer.place(pod, allowed, NO_FAULTS).node == allowed[0]
    assert placer.place(pod, [], NO_FAULTS) is None


def test_fault_bestfit_avoids_nodes_and_gpus_with_recent_faults():
    view = ClusterView()
    for name in ("a", "b"):
        view.set_node(NodeInfo(name, 64000, 262144, 4, "V100"))
    placer = make_placer("fault-bestfit")
    placer.attach(view)
    pod = PodInfo(uid="p", namespace="ml", name="p", demand=Demand(1000, 1024, 1, 1000))
    assert placer.place(pod, view.order, NO_FAULTS).node == "a"  # equal scores: the tie order
    faults = FaultCounts(3600.0, per_node={"a": 2}, per_gpu={"a": {0: 2}})
    assert placer.place(pod, view.order, faults).node == "b"
    # on a node with faulty GPUs, the healthy ones are taken first
    only_a = FaultCounts(3600.0, per_node={"a": 1, "b": 3}, per_gpu={"a": {0: 1}})
    choice = placer.place(pod, view.order, only_a)
    assert choice.node == "a" and choice.gpus == (1,)


def test_unknown_and_agent_policies_are_refused_with_the_reason(tmp_path):
    with pytest.raises(ValueError, match="unknown policy 'fgdx'; known: first-fit, random"):
        check_policy_name("fgdx")
    with pytest.raises(ValueError, match=r"agent: needs a path"):
        check_policy_name("agent:")
    check_policy_name(f"agent:{tmp_path / 'model.pt'}")  # placement.agents is there: valid
    with pytest.raises(PlacementInputError, match="no such agent file"):
        make_policy(f"agent:{tmp_path / 'no-such-model.pt'}", PolicyContext())


def test_mapping_to_the_placement_model():
    spec = node_spec(NodeInfo("n", 8000, 1024, 2, None, max_pods=110))
    assert (spec.model, spec.gpus, spec.pod_limit) == ("", 2, 110)
    pod = placement_pod("p", Demand(500, 64, 1, 250, frozenset({"T4"})))
    assert pod.is_sharing and pod.gpu_models == frozenset({"T4"})


def test_a_guarded_agent_says_when_its_rule_placed_the_pod(tmp_path):
    from placement.agents.balance_dqn import BalanceDQN

    agent = BalanceDQN(deterministic=False)
    agent.ranges.update("rows", np.full((1, agent.width), -5.0))  # nothing real lies here
    agent.save(tmp_path / "a.pt")
    specs = generate_nodes(10, seed=1)
    view = view_of(specs)
    guarded = make_placer(f"agent:{tmp_path / 'a.pt'},fallback=bestfit")
    plain = make_placer("bestfit")
    guarded.attach(view)
    plain.attach(view_of(specs))
    pod = pod_info(generate_pods(1, seed=2)[0])
    choice = guarded.place(pod, view.order, NO_FAULTS)
    assert choice is not None and choice.fallback == "out_of_range"
    expected = plain.place(pod, view.order, NO_FAULTS)
    assert (choice.node, choice.gpus) == (expected.node, expected.gpus)
    assert expected.fallback is None
    with pytest.raises(ValueError, match="unknown fallback policy 'tetris'"):
        check_policy_name(f"agent:{tmp_path / 'a.pt'},fallback=tetris")
