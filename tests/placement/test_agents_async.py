"""async_transformer (seed 003): data locality, the learning step, masks, files, and the two
threads — decisions go on while the trainer trains, and every decision runs on exactly one
published copy of the weights."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from kale.cli import main as cli_main
from placement.agents import load_agent
from placement.agents.async_transformer import AsyncTransformerAgent, AsyncTransformerSettings
from placement.agents.online import SnapshotPublisher, weights_checksum
from placement.cluster import Cluster
from placement.env.locality_env import SequenceSettings, draw_sequence, run_sequence
from placement.env.locality_features import candidate_tokens
from placement.locality import DataCaches, LocalityNodePool, LocalitySettings
from placement.placer import choose, place, tie_order
from placement.pod import Pod
from placement.policies import make_policy
from placement.queue.priorities import queue_policy
from placement.timed import simulate_timed
from placement.workloads.batch import BatchJobs
from placement.workloads.generate import generate_nodes, generate_pods
from placement.workloads.openb import write_nodes, write_pods

NODES, PODS = generate_nodes(12, seed=7), generate_pods(160, seed=8)
ENV = SequenceSettings(window=60, node_share=1.0, arrival_speedup=50.0, train_share=1.0)


def _settings(**kw) -> AsyncTransformerSettings:
    values = dict(
        seed=2, d_model=16, heads=2, ffn=32, slots=8, buffer=128, batch=16,
        batches_per_step=2, warmup=32, train_every=8, copy_every=16, env=ENV,
        proposals=0,
    )  # fmt: skip
    values.update(kw)
    return AsyncTransformerSettings(**values)


def _agent(**kw) -> AsyncTransformerAgent:
    return AsyncTransformerAgent(_settings(**kw))


def test_data_is_read_from_the_nearest_cache_and_evicted_least_recent_first():
    nodes = generate_nodes(4, seed=1)
    cluster = Cluster(nodes)
    settings = LocalitySettings(rack_size=2, cache_share=1.0)
    caches = DataCaches(cluster, settings)
    a = Pod("a", 1000, int(cluster.mem_capacity[0] * 0.6), 1, 1000)
    b = Pod("b", 1000, int(cluster.mem_capacity[0] * 0.6), 1, 500)
    assert list(caches.tiers(a, np.arange(4))) == [2, 2, 2, 2]
    first = caches.access(a, 0)
    assert first.tier == 2 and first.read_s == pytest.approx(a.memory_mib / 500.0)
    assert list(caches.tiers(a, np.arange(4))) == [0, 1, 2, 2]
    assert caches.access(a, 1).tier == 1
    second = caches.access(b, 0)  # does not fit beside a: a is written back
    assert second.evicted_mib == a.memory_mib
    assert second.evict_s == pytest.approx(a.memory_mib / settings.evict_mib_s)
    assert list(caches.tiers(a, np.arange(4))) == [1, 0, 2, 2]


def test_a_job_holds_its_gpus_while_its_data_loads():
    nodes = generate_nodes(2, seed=1)
    pod = Pod("p", 1000, 20_000, 1, 1000)
    jobs = BatchJobs(
        job_id=np.arange(2),
        submit_s=np.array([0.0, 1000.0]),
        run_s=np.array([100.0, 100.0]),
        estimate_s=np.array([100.0, 100.0]),
        size=np.array([1.0, 1.0]),
    )
    pool = LocalityNodePool(
        nodes,
        [(pod,), (pod,)],
        make_policy("bestfit"),
        rank=np.arange(2),
        locality=LocalitySettings(),
    )
    run = simulate_timed(jobs, pool, policy=queue_policy("fcfs"))
    remote = 20_000 / 500.0
    assert run.end_s[0] == pytest.approx(100.0 + remote)  # read from remote storage
    local = 20_000 / 10_000.0
    assert run.end_s[1] == pytest.approx(1000.0 + 100.0 + local)  # now cached on its node
    assert pool.locality_summary()["share_local"] == 0.5


def _experience(agent: AsyncTransformerAgent, episodes: int = 1) -> None:
    sync = _agent(synchronous=True, warmup=10_000)  # fills its buffer, never trains
    sync.net.load_state_dict(agent.net.state_dict())
    sync.train((NODES, PODS), episodes)
    agent.buffer = sync.buffer


@pytest.mark.training
def test_learning_step_lowers_the_td_loss_on_a_fixed_batch():
    agent = _agent(synchronous=True, lr=3e-3, dropout=0.0)
    _experience(agent)
    fixed = agent.buffer.sample(64, np.random.default_rng(0))
    before = float(agent.losses(fixed).detach())
    for _ in range(40):
        loss = agent.losses(fixed)
        agent.optimizer.zero_grad()
        loss.backward()
        agent.optimizer.step()
    assert float(agent.losses(fixed).detach()) < before


def test_decisions_only_pick_feasible_nodes_and_never_an_empty_slot():
    agent = _agent()
    rng = np.random.default_rng(0)
    cluster = Cluster(NODES)
    rank = tie_order(len(cluster), rng)
    caches = DataCaches(cluster, LocalitySettings(rack_size=3))
    policy = agent.policy(explore=True)
    policy.observe_locality(caches)
    for pod in PODS:
        feasible = cluster.feasible(pod)
        nodes = np.flatnonzero(feasible)
        if nodes.size:
            cands = candidate_tokens(pod, cluster, nodes, caches, slots=8)
            q, _ = agent.q_values(cands)
            assert len(q) == int(cands.mask.sum()) <= 8
            assert set(cands.nodes.tolist()) <= set(nodes.tolist())
        decision = choose(pod, cluster, policy, rank=rank)
        assert (decision is None) == (not feasible.any())
        if decision is not None:
            assert feasible[decision.node]
            cluster.allocate(pod, decision.node, decision.gpus)
            caches.access(pod, decision.node)


@pytest.mark.training
def test_save_load_round_trip_gives_identical_decisions(tmp_path):
    agent = _agent(synchronous=True)
    agent.train((NODES, PODS), 1)
    path = tmp_path / "async.pt"
    agent.save(path)
    again = load_agent(path, kind="node")
    assert again.settings == agent.settings
    seq = draw_sequence(NODES, PODS, ENV, seed=5)
    runs = [run_sequence(seq, who.policy, ENV)[0] for who in (agent, again)]
    assert np.array_equal(runs[0].end_s, runs[1].end_s, equal_nan=True)


@pytest.mark.training
def test_synchronous_training_is_deterministic():
    first, second = _agent(synchronous=True), _agent(synchronous=True)
    for agent in (first, second):
        agent.train((NODES, PODS), 2)
    assert first.trainer.steps > 0
    assert weights_checksum(first.net) == weights_checksum(second.net)
    assert [r["return"] for r in first.curve.records] == [r["return"] for r in second.curve.records]


@pytest.mark.training
def test_decisions_go_on_while_the_trainer_is_busy():
    agent = _agent(warmup=16, synchronous=False)
    _experience(agent)
    entered, release = threading.Event(), threading.Event()
    original = agent._step

    def slow_step():
        entered.set()
        assert release.wait(30), "the test never released the trainer"
        return original()

    agent._step = slow_step
    agent.trainer.step = slow_step
    agent.start()
    try:
        agent.trainer.request(steps=1)
        assert entered.wait(30), "the trainer never started its step"
        cluster = Cluster(NODES)
        rank = tie_order(len(cluster), np.random.default_rng(1))
        policy = agent.policy(learn=True)
        made = 0
        for pod in PODS[:40]:  # the trainer is stuck inside its step all along
            decision = choose(pod, cluster, policy, rank=rank)
            if decision is not None:
                cluster.allocate(pod, decision.node, decision.gpus)
                made += 1
        assert made > 20 and not release.is_set()
    finally:
        release.set()
        agent.stop()
    assert agent.trainer.steps >= 1


@pytest.mark.training
def test_every_decision_runs_on_one_whole_published_copy_of_the_weights():
    agent = _agent(warmup=32, train_every=4, copy_every=4, lr=1e-2, synchronous=False)
    agent.publisher = SnapshotPublisher(agent.net, keep_history=True)
    used: list[tuple[str, str]] = []
    current = agent.publisher.current

    def watched():
        snap = current()
        used.append((snap.checksum, weights_checksum(snap.net)))
        return snap

    agent.publisher.current = watched  # type: ignore[method-assign]
    agent.train((NODES, PODS), 3)  # threaded: the trainer publishes while decisions run
    published = set(agent.publisher.history or [])
    assert len(published) > 3, "the trainer published too few copies to test anything"
    assert used and all(stored == actual for stored, actual in used)
    assert {stored for stored, _ in used} <= published
    assert len({stored for stored, _ in used}) > 1  # decisions saw the weights change


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("async")
    nodes, pods = root / "nodes.csv", root / "pods.csv"
    write_nodes(nodes, generate_nodes(10, seed=1))
    write_pods(pods, generate_pods(80, seed=2))
    return root, nodes, pods


@pytest.mark.training
def test_kale_place_train_then_timed_with_locality(files, capsys):
    root, nodes, pods = files
    out = root / "async.pt"
    code = cli_main.main(
        ["place", "train", "--agent", "async_transformer", "--nodes", str(nodes),
         "--pods", str(pods), "--episodes", "1", "-o", str(out), "--json",
         "--set", "env.node_share=1.0", "--set", "env.window=60", "--set", "d_model=16",
         "--set", "imitation_windows=1", "--set", "imitation_steps=5",
         "--set", "validation_windows=1"]
    )  # fmt: skip
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["agent"] == "async_transformer" and out.exists()
    code = cli_main.main(
        ["place", "timed", "--nodes", str(nodes), "--pods", str(pods), "--queue", "fcfs",
         "--placement", f"bestfit,agent:{out}", "--locality", "--arrival-speedup", "50",
         "--json"]
    )  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    for metrics in report["policies"].values():
        assert {"mean_wait_s", "mean_response_s", "util", "mean_access_s"} <= set(metrics)


def test_locality_is_refused_for_swf_logs(tmp_path, capsys):
    swf = tmp_path / "x.swf"
    swf.write_text("; MaxProcs: 4\n1 0 0 10 1 -1 -1 1 10 -1 1 -1 -1 -1 -1 -1 -1 -1\n")
    code = cli_main.main(["place", "timed", "--swf", str(swf), "--locality"])
    assert code == 2 and "--locality" in capsys.readouterr().err


def test_the_agent_places_without_locality_too():
    """In ``kale simulate`` and the Kubernetes scheduler there are no caches: it still decides."""
    agent = _agent()
    cluster = Cluster(NODES)
    rank = tie_order(len(cluster), np.random.default_rng(0))
    policy = agent.policy()
    placed = sum(place(p, cluster, policy, rank=rank) is not None for p in PODS[:50])
    assert placed > 0
