"""fault_aware (seed 000): it learns on a fixed tiny problem, never takes an occupied or failed
GPU, survives a save/load round trip decision for decision, sees the simulator's fault
history, and runs wherever a node policy name goes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kale.cli import main as cli_main
from placement.agents import load_agent
from placement.agents.fault_aware import FaultAwareAgent, FaultAwareSettings
from placement.cluster import Cluster
from placement.env.fault_batch import (
    FaultBatchEnv,
    FaultBatchSettings,
    RandomUnitPolicy,
    makespan_reward,
    run_batch,
)
from placement.fault_patterns import FaultPattern, PatternRange, pattern_rates, write_fault_table
from placement.faults import FaultModel, FaultSettings, load_fault_table
from placement.node_pool import NodePool
from placement.placer import choose, place, tie_order
from placement.pod import MILLI, Pod
from placement.policies import PolicyContext, make_policy
from placement.queue.priorities import queue_policy
from placement.timed import simulate_timed
from placement.workloads.batch import BatchJobs
from placement.workloads.generate import generate_nodes, generate_pods
from placement.workloads.openb import write_nodes, write_pods

NODES, PODS = generate_nodes(12, seed=5), generate_pods(200, seed=6)
TINY = FaultBatchSettings(
    nodes=(4, 6),
    jobs_per_gpu=0.6,
    max_run_s=2 * 3600,
    random_placements=2,
    patterns=PatternRange(flaky_share=(0.1, 0.2), flaky_rate=(0.2, 0.5)),
    train_share=1.0,
)


def _agent(**kw) -> FaultAwareAgent:
    values = {"imitation_batches": 1, "imitation_steps": 10, "proposals": 0, **kw}
    values.setdefault("validate_every", 0)
    return FaultAwareAgent(FaultAwareSettings(seed=3, hidden=16, env=TINY, **values))


def _busy_cluster(seed: int) -> tuple[Cluster, np.ndarray]:
    """A cluster half full, with a few GPUs down and a fault history."""
    rng = np.random.default_rng(seed)
    cluster = Cluster(NODES)
    rank = tie_order(len(cluster), rng)
    bestfit = make_policy("bestfit")
    for pod in PODS[:60]:
        place(pod, cluster, bestfit, rank=rank)
    for node in range(len(cluster)):
        for gpu in range(cluster.gpu_count[node]):
            if cluster.gpu_free[node, gpu] == MILLI and rng.random() < 0.15:
                cluster.disable_gpu(node, gpu)
    faults = (rng.random((len(cluster), max(cluster.max_gpus, 1))) < 0.2).astype(np.int64)
    return cluster, faults


@pytest.mark.training
def test_learning_step_lowers_the_loss_on_a_fixed_batch():
    agent = _agent(lr=3e-3)
    env = FaultBatchEnv(NODES, PODS, TINY)
    record: list = []
    batch = env.draw(1)
    run_batch(batch, lambda ctx: agent.policy(ctx, explore=True, record=record), settings=TINY)
    assert record, "the batch made no decision"
    stack = agent._stack()
    rewards = np.linspace(-0.5, 0.5, len(record))
    for decision, reward in zip(record, rewards, strict=True):
        agent.push(stack, [decision], [float(reward)])
    fixed = stack.sample(64, np.random.default_rng(0))
    before = {k: float(v.detach()) for k, v in agent.losses(fixed).items()}
    for _ in range(60):
        agent.learn(fixed)
    after = {k: float(v.detach()) for k, v in agent.losses(fixed).items()}
    assert after["total"] < before["total"]
    assert after["critic"] < before["critic"]


def test_the_reward_compares_the_makespan_with_the_best_random_placement():
    assert makespan_reward(90.0, 100.0) == pytest.approx(0.1)
    assert makespan_reward(120.0, 100.0) == pytest.approx(-0.2)
    assert makespan_reward(50.0, 0.0) == 0.0


@pytest.mark.parametrize("explore", [False, True])
def test_masking_never_takes_an_occupied_failed_or_misfit_gpu(explore):
    agent = _agent()
    for seed in range(4):
        cluster, faults = _busy_cluster(seed)
        policy = agent.policy(explore=explore)
        policy.observe_faults(faults.sum(axis=1), faults)
        rank = tie_order(len(cluster), np.random.default_rng(seed))
        for pod in PODS[60:140]:
            feasible = cluster.feasible(pod)
            decision = choose(pod, cluster, policy, rank=rank)
            if decision is None:
                assert not feasible.any()
                continue
            assert feasible[decision.node]
            assert len(decision.gpus) == pod.num_gpu == len(set(decision.gpus))
            for gpu in decision.gpus:
                assert not cluster.gpu_down[decision.node, gpu]
                need = pod.gpu_milli if pod.is_sharing else MILLI
                assert cluster.gpu_free[decision.node, gpu] >= need
            cluster.allocate(pod, decision.node, decision.gpus)  # raises on a bad pick


@pytest.mark.training
def test_save_load_round_trip_gives_identical_decisions(tmp_path):
    agent = _agent()
    env = FaultBatchEnv(NODES, PODS, TINY)
    agent.train(env, 2)
    path = tmp_path / "fault_aware.pt"
    agent.save(path)
    again = load_agent(path, kind="node")
    assert again.settings == agent.settings
    for seed in range(2):
        picks = []
        for who in (agent, again):
            cluster, faults = _busy_cluster(seed)
            policy = who.policy()
            policy.observe_faults(faults.sum(axis=1), faults)
            rank = tie_order(len(cluster), np.random.default_rng(seed))
            picks.append([choose(p, cluster, policy, rank=rank) for p in PODS[60:120]])
        assert picks[0] == picks[1]


@pytest.mark.training
def test_training_is_deterministic_on_cpu():
    env = FaultBatchEnv(NODES, PODS, TINY)
    first, second = _agent(), _agent()
    first.train(env, 2)
    second.train(env, 2)
    for a, b in zip(first.actor.parameters(), second.actor.parameters(), strict=True):
        assert np.array_equal(a.detach().numpy(), b.detach().numpy())
    assert [r["return"] for r in first.curve.records] == [r["return"] for r in second.curve.records]


def test_every_run_of_a_batch_sees_the_same_failures(monkeypatch):
    """Failure times do not depend on where jobs go: T_rl and T_random compare placements."""
    env = FaultBatchEnv(NODES, PODS, TINY)
    batch = env.draw(4)
    logs: list[list[tuple[float, int]]] = []
    original = NodePool.note_fault

    def logged(self, unit, time_s):
        logs[-1].append((time_s, unit))
        original(self, unit, time_s)

    monkeypatch.setattr(NodePool, "note_fault", logged)
    ends = []
    for factory in (RandomUnitPolicy, lambda ctx: make_policy("bestfit", ctx)):
        logs.append([])
        ends.append(run_batch(batch, factory, settings=TINY).makespan_s)
    horizon = min(ends)
    first, second = ([f for f in log if f[0] <= horizon] for log in logs)
    assert first and first == second
    again = run_batch(batch, RandomUnitPolicy, settings=TINY)
    assert again.makespan_s == ends[0]


def _history_pool(policy, history_unit: int) -> tuple[NodePool, FaultModel, BatchJobs]:
    nodes = generate_nodes(3, seed=2)
    pods = [Pod(f"p{i}", 1000, 1024, 1, MILLI, creation_time=0.0) for i in range(2)]
    jobs = BatchJobs(
        job_id=np.arange(2),
        submit_s=np.array([1000.0, 1000.0]),
        run_s=np.array([100.0, 100.0]),
        estimate_s=np.array([100.0, 100.0]),
        size=np.array([1.0, 1.0]),
    )
    pool = NodePool(nodes, [(p,) for p in pods], policy, rank=np.arange(3), fault_window_s=3600.0)
    settings = FaultSettings(history_s=600.0, window_s=3600.0, repair_s=10.0)
    units = len(pool.unit_names)
    model = FaultModel(np.zeros(units), settings, scripted=((500.0, history_unit),))
    return pool, model, jobs


def test_the_simulator_feeds_the_fault_history_to_fault_aware_policies():
    seen: list[np.ndarray] = []

    class Spy(type(make_policy("fault-bestfit"))):
        def observe_faults(self, node_faults, gpu_faults):
            seen.append(np.asarray(gpu_faults).copy())
            super().observe_faults(node_faults, gpu_faults)

    policy = Spy(PolicyContext())
    pool, model, jobs = _history_pool(policy, history_unit=0)
    simulate_timed(jobs, pool, policy=queue_policy("fcfs"), faults=model, seed=0)
    assert seen and int(seen[-1].sum()) == 1 and seen[-1][0, 0] == 1
    # a failure older than the window is forgotten
    pool.note_time(500.0 + 3600.0 + 1.0)
    assert int(pool.fault_counts()[1].sum()) == 0


@pytest.mark.training
def test_the_agent_prefers_units_without_failures_once_taught():
    """Taught by a reward that punishes GPUs with failures, it stops taking them."""
    agent = _agent(lr=1e-2, entropy=0.0)
    cluster, _ = _busy_cluster(0)
    faults = np.zeros((len(cluster), max(cluster.max_gpus, 1)), np.int64)
    faults[::2, :] = 3  # every other node's GPUs failed recently
    stack = agent._stack()
    pods = [p for p in PODS[60:200] if p.num_gpu == 1]
    for _ in range(3):
        for pod in pods:
            record: list = []
            policy = agent.policy(explore=True, record=record)
            policy.observe_faults(faults.sum(axis=1), faults)
            decision = choose(pod, cluster, policy, rank=np.arange(len(cluster)))
            if decision is None:
                continue
            bad = faults[decision.node, decision.gpus[0]] > 0
            agent.push(stack, record[:1], [-1.0 if bad else 1.0])
        for _ in range(20):
            agent.learn(stack.sample(64, agent.rng))
    policy = agent.policy()
    policy.observe_faults(faults.sum(axis=1), faults)
    picks = [choose(p, cluster, policy, rank=np.arange(len(cluster))) for p in pods]
    chosen = [faults[d.node, d.gpus[0]] > 0 for d in picks if d is not None]
    assert np.mean(chosen) < 0.2


def test_pattern_rates_and_tables_round_trip(tmp_path):
    cluster = Cluster(NODES)
    unit_node = np.repeat(np.arange(len(cluster)), cluster.gpu_count)
    pattern = FaultPattern(flaky_share=0.1, flaky_rate=0.3, flaky_node_share=0.1)
    rates = pattern_rates(pattern, unit_node, seed=1)
    assert np.array_equal(rates, pattern_rates(pattern, unit_node, seed=1))
    assert not np.array_equal(rates, pattern_rates(pattern, unit_node, seed=2))
    assert set(np.unique(rates)) <= {pattern.base_rate, pattern.flaky_rate}
    names = [
        (cluster.names[n], g) for n in range(len(cluster)) for g in range(cluster.gpu_count[n])
    ]
    path = tmp_path / "faults.csv"
    write_fault_table(path, rates, names)
    assert np.allclose(load_fault_table(path, names).rate_per_hour, rates)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("fault_aware")
    nodes, pods = root / "nodes.csv", root / "pods.csv"
    write_nodes(nodes, generate_nodes(10, seed=1))
    write_pods(pods, generate_pods(80, seed=2))
    return root, nodes, pods


@pytest.mark.training
def test_kale_place_train_then_timed_and_simulate_with_the_agent(files, capsys):
    root, nodes, pods = files
    out = root / "fault_aware.pt"
    code = cli_main.main(
        [
            "place",
            "train",
            "--agent",
            "fault_aware",
            "--nodes",
            str(nodes),
            "--pods",
            str(pods),
            "--episodes",
            "1",
            "-o",
            str(out),
            "--json",
            "--set",
            "imitation_batches=1",
            "--set",
            "imitation_steps=5",
            "--set",
            "env.nodes=[4, 8]",
            "--set",
            "validation_batches=1",
        ]
    )
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["agent"] == "fault_aware" and out.exists()
    code = cli_main.main(
        [
            "place",
            "timed",
            "--nodes",
            str(nodes),
            "--pods",
            str(pods),
            "--queue",
            "fcfs",
            "--placement",
            f"bestfit,fault-bestfit,agent:{out}",
            "--faults",
            "default",
            "--fault-history-s",
            "86400",
            "--arrival-speedup",
            "50",
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert set(report["policies"]) == {"fcfs+bestfit", "fcfs+fault-bestfit", f"fcfs+agent:{out}"}
    for metrics in report["policies"].values():
        assert {"makespan_s", "restarts", "gpu_hours_lost"} <= set(metrics)
    code = cli_main.main(
        [
            "place",
            "simulate",
            "--nodes",
            str(nodes),
            "--pods",
            str(pods),
            "--policies",
            f"bestfit,agent:{out}",
            "--seeds",
            "1",
            "--json",
        ]
    )
    assert code == 0 and f"agent:{out}" in json.loads(capsys.readouterr().out)["policies"]


def test_kale_scheduler_places_with_the_saved_agent_where_the_simulator_does(tmp_path):
    from scheduler.adapter import make_placer
    from scheduler.faults import FaultCounts
    from scheduler.objects import Demand, NodeInfo, PodInfo
    from scheduler.view import ClusterView

    path = tmp_path / "fault_aware.pt"
    _agent().save(path)
    specs = generate_nodes(12, seed=3)
    # as Kubernetes shows them: no run time on the pod
    pods = [
        Pod(p.name, p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, p.gpu_models)
        for p in generate_pods(120, seed=4)
    ]
    counts = FaultCounts(3600.0, per_node={specs[0].name: 2, specs[3].name: 1},
                         per_gpu={specs[0].name: {0: 2}, specs[3].name: {1: 1}})  # fmt: skip
    cluster = Cluster(specs)
    gpu_faults = np.zeros((len(cluster), max(cluster.max_gpus, 1)), np.int64)
    gpu_faults[0, 0], gpu_faults[3, 1] = 2, 1
    policy = load_agent(path, kind="node").policy()
    policy.observe_faults(gpu_faults.sum(axis=1), gpu_faults)
    rank = tie_order(len(cluster), np.random.default_rng(7))
    expected = []
    for pod in pods:
        alloc = place(pod, cluster, policy, rank=rank)
        expected.append(None if alloc is None else (cluster.names[alloc.node], alloc.gpus))
    view = ClusterView()
    for s in specs:
        view.set_node(NodeInfo(s.name, s.cpu_milli, s.memory_mib, s.gpus, s.model, max_pods=1001))
    placer = make_placer(f"agent:{path}", seed=7)
    placer.attach(view)
    got = []
    for pod in pods:
        demand = Demand(pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli,
                        pod.gpu_models or None)  # fmt: skip
        info = PodInfo(uid=pod.name, namespace="ml", name=pod.name, demand=demand)
        choice = placer.place(info, view.order, counts)
        got.append(None if choice is None else (choice.node, choice.gpus))
        if choice is not None:
            view.hold(info.uid, choice.node, choice.gpus, info.demand)
    assert got == expected and any(g is not None for g in got)
