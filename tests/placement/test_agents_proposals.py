"""Agents that contain the rule they must beat: the rules' proposals are exactly the rules'
choices, following a rule's proposal *is* that rule run for run, and a warm start learns it."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from placement.cluster import Cluster
from placement.env.node_env import NodeEnvSettings, NodePlacementEnv, observe_candidates
from placement.env.node_features import Tolerance
from placement.env.proposals import default_proposer
from placement.env.queue_env import QueueEnv, QueueEnvSettings
from placement.env.queue_features import PROPOSALS
from placement.frag import TypicalPods, typical_pods
from placement.inflation import InflationSettings, run_inflation
from placement.placer import choose, place, tie_order
from placement.policies import PolicyContext, make_policy
from placement.queue.priorities import QUEUE_POLICIES
from placement.queue.rlscheduler import simulate
from placement.workloads.generate import WorkloadShape, generate_nodes, generate_pods
from tests.placement.agent_fixtures import tiny_jobs

NODES = generate_nodes(24, seed=11)
PODS = generate_pods(400, seed=12, shape=WorkloadShape(multi_gpu=0.04))
TYPICAL = typical_pods(PODS)


def test_each_rules_first_proposal_is_the_node_that_rule_takes():
    cluster = Cluster(NODES)
    rank = tie_order(len(cluster), np.random.default_rng(3))
    proposer = default_proposer(TYPICAL, top=3)
    rules = {name: make_policy(name, PolicyContext(typical=TYPICAL)) for name in proposer.rules}
    checked = 0
    for pod in PODS[:250]:
        nodes = np.flatnonzero(cluster.feasible(pod))
        if nodes.size > 1:
            proposals = proposer.propose(pod, cluster, nodes, rank)
            assert len(set(proposals.nodes.tolist())) == len(proposals.nodes) <= 9
            assert proposals.features.shape == (len(proposals.nodes), len(proposer.feature_names))
            for name, rule in rules.items():
                expected = choose(pod, cluster, rule, rank=rank)
                assert expected is not None
                assert proposals.nodes[proposals.picks[name]] == expected.node, name
                checked += 1
        place(pod, cluster, rules["bestfit"], rank=rank)
    assert checked > 300


class FollowFGD:
    """balance_dqn's policy with its network replaced by "take FGD's proposal"."""

    def __init__(self, typical: TypicalPods) -> None:
        self.uses_rank = True
        self.proposer = default_proposer(typical, top=4)
        self.tolerance = Tolerance.of(typical)
        self.rank = np.zeros(0, np.int64)

    def observe_rank(self, rank):
        self.rank = rank

    def score(self, pod, cluster, nodes):
        seen = observe_candidates(cluster, pod, nodes, self.tolerance, self.proposer, self.rank)
        return (nodes == seen[0][seen[3]["fgd"]]).astype(np.int64)

    def choose_gpus(self, pod, cluster, node):
        return self.proposer.choose_gpus(pod, cluster, node)


def test_following_fgds_proposals_is_fgd_run_for_run():
    settings = InflationSettings(track_fragmentation=False)
    follow = run_inflation(
        NODES, PODS, "follow", 5, settings, typical=TYPICAL, factory=lambda c: FollowFGD(TYPICAL)
    )
    fgd = run_inflation(NODES, PODS, "fgd", 5, settings, typical=TYPICAL)
    np.testing.assert_array_equal(follow.allocated, fgd.allocated)
    assert follow.failed_pods == fgd.failed_pods


def test_the_env_with_proposals_is_the_inflation_experiment_under_the_rule():
    env = NodePlacementEnv(NODES, PODS, NodeEnvSettings(candidates=4))
    obs, info = env.reset(seed=7)
    while obs is not None:
        assert obs.mask[obs.nodes].all() and obs.mask.sum() == len(obs.nodes) <= 12
        assert obs.rows.shape == (len(obs.nodes), env.spec.row)
        obs, _, _, _, info = env.step(int(obs.nodes[obs.picks["fgd"]]))
    fgd = run_inflation(NODES, PODS, "fgd", 7, InflationSettings(track_fragmentation=False))
    assert info["failed_pods"] == fgd.failed_pods
    assert info["allocated_share"] == pytest.approx(fgd.allocated[-1] / fgd.capacity)


def test_a_family_env_draws_a_new_workload_per_episode():
    settings = NodeEnvSettings(candidates=2, family="train-mix")
    env = NodePlacementEnv(NODES * 4, PODS, settings)
    sizes = set()
    for seed in (1, 2, 3):
        env.reset(seed=seed)
        assert env._episode is not None
        sizes.add(len(env._episode.cluster))
    assert len(sizes) > 1 and max(sizes) <= 0.25 * 96 + 1


@pytest.mark.parametrize("rule", ["sjf", "f1", "fcfs"])
def test_following_a_queue_proposal_with_easys_own_backfill_is_that_rule(rule):
    jobs = tiny_jobs(160, seed=4)
    names = tuple(PROPOSALS)
    env = QueueEnv([jobs], processors=16, settings=QueueEnvSettings(window=8, proposals=names))
    obs, _ = env.reset(seed=0)
    info: dict = {}
    while obs is not None:
        action = names.index(rule) if obs.level == 1 else 0
        obs, _, _, _, info = env.step(action)
    expected = simulate(jobs, processors=16, policy=QUEUE_POLICIES[rule], backfill=True)
    np.testing.assert_array_equal(info["start_s"], expected.start_s)


@pytest.mark.training
def test_the_queue_warm_start_learns_sjf_and_easy():
    from placement.agents.tr_dqn import TRDQN, TRDQNSettings
    from placement.agents.tr_dqn_warm import ImitationSettings

    jobs = tiny_jobs(120, seed=6)
    imitation = ImitationSettings(episodes=2, steps=300, margin=0.05, demo_batch=8)
    settings = TRDQNSettings(seed=2, warmup=32, batch=32, replay=2000, imitation=imitation, lr=3e-3)
    agent = TRDQN(settings)
    env = QueueEnv([jobs], processors=16, settings=settings.env)
    agent.train(env, 1)
    assert agent.warm_start["agreement_after"] > 0.9, agent.warm_start


def _fault_env():
    from placement.env.fault_batch import FaultBatchEnv, FaultBatchSettings
    from placement.fault_patterns import PatternRange

    tiny = FaultBatchSettings(
        nodes=(5, 8),
        jobs_per_gpu=0.6,
        max_run_s=2 * 3600,
        patterns=PatternRange(flaky_share=(0.1, 0.2), flaky_rate=(0.2, 0.5)),
        train_share=1.0,
    )
    return FaultBatchEnv(NODES, PODS, tiny), tiny


def test_fault_awares_teacher_is_fault_bestfit_and_its_rows_carry_the_rules():
    from placement.agents.fault_aware import PROPOSAL_UNIT_FEATURES, FaultAwareAgent
    from placement.agents.fault_aware import FaultAwareSettings as Settings
    from placement.env.fault_batch import run_batch
    from placement.policies.fault_aware import FaultAwareBestFitPolicy

    env, tiny = _fault_env()
    agent = FaultAwareAgent(Settings(seed=1, hidden=16, env=tiny))
    assert agent.width == len(PROPOSAL_UNIT_FEATURES)
    for seed in (3, 4):
        batch = env.draw(seed)
        record: list = []
        taught = run_batch(
            batch,
            functools.partial(agent.policy, record=record, teacher=True),
            settings=tiny,
            typical=TYPICAL,
        )
        rule = run_batch(batch, FaultAwareBestFitPolicy, settings=tiny, typical=TYPICAL)
        assert taught.makespan_s == rule.makespan_s
        assert taught.gpu_hours_lost == pytest.approx(rule.gpu_hours_lost)
        assert record and all(d.rows.shape[1] == agent.width for d in record)


def test_healthy_fgd_teacher_is_fgd_where_nothing_fails():
    """Where no GPU fails, the ``healthy-fgd`` rule is FGD run for run (CPU-only pods too)."""
    from placement.agents.fault_aware import FaultAwareAgent
    from placement.agents.fault_aware import FaultAwareSettings as Settings
    from placement.env.fault_batch import run_batch
    from placement.fault_patterns import FaultPattern
    from placement.policies.fgd import FGDPolicy

    env, tiny = _fault_env()
    agent = FaultAwareAgent(Settings(seed=1, hidden=16, env=tiny, rule="healthy-fgd"))
    calm = FaultPattern(base_rate=0.0, flaky_share=0.0, flaky_rate=0.0, name="calm")

    def recording(factory, out):  # type: ignore[no-untyped-def]
        def make(ctx):  # type: ignore[no-untyped-def]
            policy = factory(ctx)
            inner = policy.choose_gpus

            def choose_gpus(pod, cluster, node):  # type: ignore[no-untyped-def]
                gpus = inner(pod, cluster, node)
                out.append((pod.name, node, gpus))
                return gpus

            policy.choose_gpus = choose_gpus
            return policy

        return make

    for seed in (3, 4):
        batch = env.draw(seed, pattern=calm)
        mine: list = []
        fgd: list = []
        taught = run_batch(
            batch,
            recording(functools.partial(agent.policy, teacher=True), mine),
            settings=tiny,
            typical=TYPICAL,
        )
        rule = run_batch(batch, recording(FGDPolicy, fgd), settings=tiny, typical=TYPICAL)
        assert mine and mine == fgd
        np.testing.assert_array_equal(taught.run.first_start_s, rule.run.first_start_s)


def test_healthy_fgd_teacher_leaves_a_faulty_node_and_gpu_for_healthy_ones():
    from placement.agents.fault_aware import FaultAwareAgent
    from placement.agents.fault_aware import FaultAwareSettings as Settings
    from placement.pod import Pod

    agent = FaultAwareAgent(Settings(seed=1, hidden=16, rule="healthy-fgd"))
    cluster = Cluster(NODES[:6])
    gpu_nodes = np.flatnonzero(cluster.gpu_count >= 2)
    pod = Pod("p", cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=1000)
    policy = agent.policy(PolicyContext(typical=TYPICAL))
    rank = np.arange(len(cluster), dtype=np.int64)
    policy.observe_rank(rank)
    nodes = np.flatnonzero(cluster.feasible(pod))
    fgd = make_policy("fgd", PolicyContext(typical=TYPICAL))
    fgd_node = int(nodes[np.lexsort((rank[nodes], -fgd.score(pod, cluster, nodes)))[0]])
    assert fgd_node in gpu_nodes
    gpu_faults = np.zeros((len(cluster), cluster.max_gpus), np.int64)
    gpu_faults[fgd_node, 0] = 1  # FGD's node: its first GPU (FGD's choice there) failed
    policy.observe_faults(gpu_faults.sum(axis=1), gpu_faults)
    proposals = policy.proposer.propose(pod, cluster, nodes, rank)
    node = policy._taught_node(proposals, rank, cluster)
    assert node != fgd_node
    gpu_faults[:] = 0
    gpu_faults[fgd_node, 0] = 1
    policy.observe_faults(np.zeros(len(cluster), np.int64), gpu_faults)  # node count unknown
    assert policy._taught_node(proposals, rank, cluster) == fgd_node
    assert policy._taught_gpus(pod, cluster, fgd_node) == (1,)


def test_async_transformers_teacher_is_bestfit():
    from placement.agents.async_transformer import AsyncTransformerAgent
    from placement.agents.async_transformer_net import (
        PROPOSAL_TOKEN_FEATURES,
        AsyncTransformerSettings,
    )
    from placement.env.locality_env import SequenceSettings, draw_sequence, run_sequence
    from placement.policies.simple import BestFitPolicy

    env = SequenceSettings(window=80, node_share=1.0, arrival_speedup=50.0, train_share=1.0)
    settings = AsyncTransformerSettings(seed=1, d_model=16, heads=2, ffn=32, env=env)
    agent = AsyncTransformerAgent(settings)
    seq = draw_sequence(NODES, [p for p in PODS if p.deletion_time], env, seed=3)
    taught, _ = run_sequence(
        seq, lambda c: agent.policy(c, teacher=True, learn=True), env, typical=TYPICAL
    )
    rule, _ = run_sequence(seq, BestFitPolicy, env, typical=TYPICAL)
    np.testing.assert_array_equal(taught.first_start_s, rule.first_start_s)
    assert agent.ranges.names["tokens"] == PROPOSAL_TOKEN_FEATURES


def test_fault_aware_names_its_rule_or_says_which_it_knows():
    from placement.agents.fault_aware import FaultAwareSettings as Settings
    from placement.errors import PlacementInputError

    with pytest.raises(PlacementInputError, match="healthy-fgd"):
        Settings(rule="fgd")
