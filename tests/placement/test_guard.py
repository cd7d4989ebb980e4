"""The guard (``agent:PATH,fallback=RULE``): each trigger hands the decision to the rule,
counted by reason; names and options parse as before; the counts reach the JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kale.cli import main as cli_main
from placement.agent_names import AgentName, parse_agent_name, split_policy_list
from placement.cluster import Cluster
from placement.errors import PlacementInputError
from placement.fallback import FeatureRanges, OutsideTrainingRange
from placement.frag import typical_pods
from placement.inflation import InflationSettings, run_inflation
from placement.placer import choose, place, tie_order
from placement.pod import Pod
from placement.policies import PolicyContext, make_policy, parse_policy_names
from placement.policies.base import ScorePolicy
from placement.policies.guard import GuardedPolicy
from placement.policies.simple import BestFitPolicy
from placement.queue.base import QueueView
from placement.queue.guard import GuardedQueuePolicy
from placement.queue.priorities import QUEUE_POLICIES, parse_queue_policies, queue_policy
from placement.queue.rlscheduler import simulate
from placement.workloads.generate import generate_nodes, generate_pods
from placement.workloads.openb import write_nodes, write_pods
from tests.placement.agent_fixtures import tiny_jobs, write_swf

# -- names ------------------------------------------------------------------------------------


def test_an_agents_options_stay_with_it_in_a_policy_list():
    text = "bestfit,agent:a.pt,fallback=fgd,fgd"
    assert split_policy_list(text) == ["bestfit", "agent:a.pt,fallback=fgd", "fgd"]
    assert parse_policy_names(text) == ["bestfit", "agent:a.pt,fallback=fgd", "fgd"]
    assert parse_agent_name("agent:a.pt, fallback=fgd") == AgentName("a.pt", "fgd")
    assert parse_agent_name("agent:a.pt,fallback=fgd").text == "agent:a.pt,fallback=fgd"
    # names without options read exactly as before
    assert parse_policy_names("bestfit,fgd,agent:x.pt") == ["bestfit", "fgd", "agent:x.pt"]
    assert parse_agent_name("agent:x.pt") == AgentName("x.pt", None)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("agent:a.pt,fallback=nope", "unknown fallback policy 'nope'"),
        ("agent:a.pt,rule=fgd", "unknown agent option 'rule=fgd'"),
        ("agent:a.pt,fallback=", "fallback= needs a value"),
        ("agent:a.pt,fallback=fgd,fallback=bestfit", "fallback is given twice"),
        ("agent:a.pt,fallback=agent:b.pt", "the fallback must be a rule"),
        ("bestfit,fallback=fgd", "options follow an agent"),
        ("agent:,fallback=fgd", "give the agent file after 'agent:'"),
    ],
)
def test_bad_agent_options_are_one_line_errors(text, words):
    with pytest.raises(PlacementInputError) as info:
        parse_policy_names(text)
    assert words in str(info.value)


def test_queue_lists_keep_agent_options_too():
    with pytest.raises(PlacementInputError, match="unknown queue policy 'nope'"):
        parse_queue_policies("sjf,agent:q.pt,fallback=nope")
    assert [p.name for p in parse_queue_policies("fcfs,sjf")] == ["fcfs", "sjf"]


# -- the node guard, trigger by trigger -------------------------------------------------------


class Stub(BestFitPolicy):
    """BestFit, with one way to misbehave."""

    name = "stub"

    def __init__(self, how: str = "", context: PolicyContext | None = None) -> None:
        super().__init__(context)
        self.how = how
        self.ranges = FeatureRanges()
        self.check_ranges = False
        if how == "range":
            self.ranges.update("rows", np.zeros((1, 2)))

    def score(self, pod, cluster, nodes):
        if self.how == "raise":
            raise RuntimeError("the agent broke")
        if self.how == "range" and self.check_ranges:
            raise OutsideTrainingRange("rows", ["f0"])
        if self.how == "floats":
            return np.full(len(nodes), 0.5)
        if self.how == "short":
            return super().score(pod, cluster, nodes)[:-1]
        return super().score(pod, cluster, nodes)

    def choose_gpus(self, pod, cluster, node):
        if self.how == "gpus" and pod.num_gpu:
            full = np.flatnonzero(cluster.gpu_free[node] < pod.gpu_milli)
            return (int(full[0]) if full.size else int(cluster.gpu_count[node]),) * pod.num_gpu
        return super().choose_gpus(pod, cluster, node)


class FirstNode(ScorePolicy):
    """A rule that differs from BestFit: the first feasible node, always."""

    name = "first"

    def score(self, pod, cluster, nodes):
        return (nodes == nodes.min()).astype(np.int64)


def _run(policy, seed=1, pods=300):
    nodes, pod_list = generate_nodes(20, seed=seed), generate_pods(pods, seed=seed)
    cluster = Cluster(nodes)
    rank = tie_order(len(cluster), np.random.default_rng(seed))
    placed = []
    for pod in pod_list:
        alloc = place(pod, cluster, policy, rank=rank)
        placed.append(None if alloc is None else (alloc.node, alloc.gpus))
    return placed


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("raise", "error"),
        ("range", "out_of_range"),
        ("floats", "infeasible"),
        ("short", "infeasible"),
    ],
)
def test_a_score_the_guard_cannot_trust_goes_to_the_rule(how, reason):
    guarded = GuardedPolicy(Stub(how), FirstNode(), label=f"agent:{how}")
    placed = _run(guarded)
    counts = guarded.fallback_counts
    assert counts.fallbacks > 0 and counts.by_reason[reason] == counts.fallbacks
    assert counts.decisions == sum(p is not None for p in placed)
    # every scored decision fell back: the run is the rule's, except where one node fitted
    rule = _run(GuardedPolicy(Stub("raise"), FirstNode(), label="all"))
    assert placed == rule


def test_infeasible_gpus_keep_the_agents_node_and_take_the_rules_gpus():
    agent = Stub("gpus")
    guarded = GuardedPolicy(agent, BestFitPolicy(), label="agent:gpus")
    placed = _run(guarded)
    gpu_pods = guarded.fallback_counts.by_reason["infeasible"]
    assert gpu_pods > 0 and guarded.fallback_counts.fallbacks == gpu_pods
    assert placed == _run(BestFitPolicy())  # same nodes (the agent's), the rule's GPUs


def test_a_well_behaved_agent_decides_everything():
    guarded = GuardedPolicy(Stub(), FirstNode(), label="agent:ok")
    assert _run(guarded) == _run(BestFitPolicy())
    assert guarded.fallback_counts.fallbacks == 0 and guarded.fallback_counts.decisions > 0
    assert guarded.last_reason is None


def test_ranges_are_checked_only_when_the_file_recorded_them():
    with_ranges, without = Stub("range"), Stub()
    assert GuardedPolicy(with_ranges, FirstNode(), label="a").checks_ranges
    assert with_ranges.check_ranges
    assert not GuardedPolicy(without, FirstNode(), label="b").checks_ranges
    assert not without.check_ranges


def test_feature_ranges_margin_and_round_trip():
    ranges = FeatureRanges()
    ranges.update("rows", np.array([[0.0, 1.0], [1.0, 1.0]]), ["a", "b"])
    assert ranges.outside("rows", np.array([[1.04, 1.0]])) == []  # within 5 % of the span
    assert ranges.outside("rows", np.array([[1.2, 1.0]])) == ["a"]
    assert ranges.outside("rows", np.array([[0.5, 1.01]])) == ["b"]  # a constant feature
    assert ranges.outside("never-seen", np.ones((1, 3))) == []
    back = FeatureRanges.from_dict(json.loads(json.dumps(ranges.as_dict())))
    assert back.outside("rows", np.array([[1.2, 1.0]])) == ["a"]
    with pytest.raises(OutsideTrainingRange, match="rows outside the training range: a"):
        back.check("rows", np.array([[2.0, 1.0]]))
    assert not FeatureRanges.from_dict(None)


def test_fault_counts_reach_both_and_a_lone_node_goes_to_the_agent():
    from placement.policies.fault_aware import FaultAwareBestFitPolicy

    rule = FaultAwareBestFitPolicy()
    guarded = GuardedPolicy(Stub(), rule, label="agent:x")
    assert guarded.uses_faults
    guarded.observe_faults(np.array([1, 0]), np.zeros((2, 8), np.int64))
    assert rule.node_faults is not None and rule.node_faults.tolist() == [1, 0]
    assert not GuardedPolicy(Stub(), BestFitPolicy(), label="y").uses_faults
    cluster = Cluster(generate_nodes(1, seed=2))
    pod = Pod("p", 1000, 1024)
    decision = choose(pod, cluster, guarded, rank=np.zeros(1, np.int64))
    assert decision is not None and guarded.fallback_counts.decisions == 1
    assert guarded.fallback_counts.fallbacks == 0


# -- the queue guard ----------------------------------------------------------------------------


class QueueStub:
    def __init__(self, how: str) -> None:
        self.name, self.how = f"stub-{how}", how

    def keys(self, view: QueueView):
        if self.how == "raise":
            raise RuntimeError("broken")
        if self.how == "range":
            raise OutsideTrainingRange("head", ["f3"])
        if self.how == "nan":
            return (np.full(len(view), np.nan),)
        return QUEUE_POLICIES["sjf"].keys(view)

    def pick_backfill(self, view, candidates, shadow_s):
        if self.how == "bad-pick":
            return len(candidates)
        return 0


@pytest.mark.parametrize(
    ("how", "reason"),
    [("raise", "error"), ("range", "out_of_range"), ("nan", "infeasible")],
)
def test_a_queue_agent_the_guard_cannot_trust_is_the_rule(how, reason):
    jobs = tiny_jobs(150, seed=2)
    guarded = GuardedQueuePolicy(QueueStub(how), QUEUE_POLICIES["f1"], label="agent:q")
    got = simulate(jobs, processors=16, policy=guarded, backfill=True)
    rule = simulate(jobs, processors=16, policy=QUEUE_POLICIES["f1"], backfill=True)
    assert np.array_equal(got.start_s, rule.start_s)
    counts = guarded.fallback_counts
    assert counts.by_reason[reason] > 0 and counts.fallbacks == counts.by_reason[reason]
    assert counts.decisions > counts.fallbacks  # its backfill picks were its own


def test_a_bad_backfill_pick_is_the_rules_pick():
    jobs = tiny_jobs(150, seed=3)
    guarded = GuardedQueuePolicy(QueueStub("bad-pick"), QUEUE_POLICIES["sjf"], label="agent:q")
    got = simulate(jobs, processors=16, policy=guarded, backfill=True)
    rule = simulate(jobs, processors=16, policy=QUEUE_POLICIES["sjf"], backfill=True)
    assert np.array_equal(got.start_s, rule.start_s)  # the first candidate in submit order
    assert guarded.fallback_counts.by_reason["infeasible"] > 0


# -- real agent files, through the registry and the CLIs ------------------------------------------


def _node_agent(path, *, ranges: bool):
    """An untrained balance_dqn saved with ranges that nothing real lies in (or none)."""
    import torch

    from placement.agents.balance_dqn import BalanceDQN

    agent = BalanceDQN(deterministic=False)
    if ranges:
        agent.ranges.update("rows", np.full((1, agent.width), -5.0))
    agent.save(path)
    if not ranges:  # a file from before ranges were recorded
        payload = torch.load(path, weights_only=True)
        del payload["extra"]["ranges"]
        torch.save(payload, path)
    return path


@pytest.fixture(scope="module")
def openb_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("guard")
    nodes, pods = folder / "nodes.csv", folder / "pods.csv"
    write_nodes(nodes, generate_nodes(30, seed=5))
    write_pods(pods, generate_pods(300, seed=5))
    return str(nodes), str(pods), folder


def test_simulate_reports_fallback_decisions_for_a_guarded_agent(openb_files, capsys):
    nodes, pods, folder = openb_files
    agent = _node_agent(folder / "ranged.pt", ranges=True)
    names = f"fgd,agent:{agent},fallback=fgd"
    args = ["place", "simulate", "--nodes", nodes, "--pods", pods, "--policies", names]
    assert cli_main.main([*args, "--seeds", "1-2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["policies"]
    guarded = result[f"agent:{agent},fallback=fgd"]
    assert "fallback_decisions" not in result["fgd"]
    assert guarded["fallback_decisions"] > 0
    assert guarded["fallback_reasons"]["out_of_range"] == guarded["fallback_decisions"]
    assert [s["fallback_decisions"] for s in guarded["per_seed"]] != [0, 0]
    assert guarded["final"] == result["fgd"]["final"]  # the rule made every choice


def test_an_old_agent_file_is_guarded_for_feasibility_and_errors_only(openb_files):
    nodes, pods, folder = openb_files
    from placement.workloads.openb import load_nodes, load_pods

    agent = _node_agent(folder / "old.pt", ranges=False)
    node_list, pod_list = load_nodes(nodes), load_pods(pods)
    name = f"agent:{agent},fallback=fgd"
    settings = InflationSettings(track_fragmentation=False)
    run = run_inflation(node_list, pod_list, name, 3, settings, typical=typical_pods(pod_list))
    assert run.fallbacks is not None and run.fallbacks.decisions > 0
    assert run.fallbacks.fallbacks == 0
    policy = make_policy(name, PolicyContext(typical=typical_pods(pod_list)))
    assert isinstance(policy, GuardedPolicy) and not policy.checks_ranges


def test_timed_reports_fallback_decisions_for_a_guarded_queue_agent(tmp_path, capsys):
    from placement.agents.tr_dqn import TRDQN
    from placement.env.queue_features import ROW_WIDTH

    agent = TRDQN(deterministic=False)
    agent.ranges.update("head", np.full((1, agent.rows1 * ROW_WIDTH), 99.0))
    agent.save(tmp_path / "q.pt")
    swf = write_swf(tmp_path / "log.swf", tiny_jobs(120, seed=4), 16)
    queues = f"sjf,agent:{tmp_path / 'q.pt'},fallback=sjf"
    args = ["place", "timed", "--swf", str(swf), "--queue", queues, "--backfill", "--json"]
    assert cli_main.main(args) == 0
    result = json.loads(capsys.readouterr().out)["policies"]
    guarded = result[f"agent:{tmp_path / 'q.pt'},fallback=sjf"]
    assert guarded["fallback_decisions"] == guarded["fallback_reasons"]["out_of_range"] > 0
    assert guarded["bsld"] == result["sjf"]["bsld"]
    assert "fallback_decisions" not in result["sjf"]
    policy = queue_policy(f"agent:{tmp_path / 'q.pt'},fallback=sjf")
    assert isinstance(policy, GuardedQueuePolicy) and policy.checks_ranges


def test_a_guarded_node_agent_in_the_timed_simulator(openb_files, capsys):
    nodes, pods, folder = openb_files
    agent = _node_agent(folder / "timed.pt", ranges=True)
    args = ["place", "timed", "--nodes", nodes, "--pods", pods, "--placement"]
    args += [f"fgd,agent:{agent},fallback=fgd", "--node-share", "0.5", "--json"]
    assert cli_main.main([*args, "--arrival-speedup", "50"]) == 0
    result = json.loads(capsys.readouterr().out)["policies"]
    guarded = result[f"fcfs+agent:{agent},fallback=fgd"]
    assert guarded["fallback_decisions"] > 0
    # the rule scored every decision; a lone feasible node took the agent's GPUs — FGD's
    assert guarded["mean_wait_s"] == result["fcfs+fgd"]["mean_wait_s"]


@pytest.mark.training
def test_training_records_every_input_features_range_in_the_file(openb_files, tmp_path, capsys):
    from placement.agents import load_agent
    from placement.env.node_env import CANDIDATE_SPEC
    from placement.env.queue_features import ROW_WIDTH

    nodes, pods, _ = openb_files
    swf = write_swf(tmp_path / "log.swf", tiny_jobs(150, seed=3), 16)
    for agent, data in (
        ("balance_dqn", ["--nodes", nodes, "--pods", pods]),
        ("tr_dqn", ["--swf", str(swf)]),
    ):
        out = tmp_path / f"{agent}.pt"
        args = ["place", "train", "--agent", agent, *data, "--episodes", "1", "-o", str(out)]
        args += ["--set", "imitation.episodes=1", "--set", "imitation.steps=20"]
        args += ["--set", "validate_every=0"]
        if agent == "tr_dqn":
            args += ["--set", "synthetic_sequences=2", "--set", "sequences=8"]
        assert cli_main.main(args) == 0, capsys.readouterr()
        loaded = load_agent(out)
        ranges = loaded.ranges
        assert ranges and all((ranges.low[g] <= ranges.high[g]).all() for g in ranges.low)
        if agent == "balance_dqn":
            assert len(ranges.low["rows"]) == CANDIDATE_SPEC.row  # a node, then the rules
            assert len(ranges.low["context"]) == CANDIDATE_SPEC.context
            assert ranges.names["rows"][0] == "cpu_free"
        else:
            assert len(ranges.low["head"]) == loaded.rows1 * ROW_WIDTH
            assert len(ranges.low["backfill"]) == loaded.rows2 * ROW_WIDTH


class RankAware(BestFitPolicy):
    """A policy that needs the placer's tie order (as the agents choosing among the rules'
    proposals do): without it, it takes the last feasible node."""

    name = "rank-aware"
    uses_rank = True

    def __init__(self) -> None:
        super().__init__()
        self.rank: np.ndarray | None = None

    def observe_rank(self, rank):
        self.rank = rank

    def score(self, pod, cluster, nodes):
        if self.rank is None:
            return (nodes == nodes.max()).astype(np.int64)
        return (nodes == nodes[np.argmin(self.rank[nodes])]).astype(np.int64)


def test_a_guard_that_never_falls_back_decides_as_the_agent_alone():
    guarded = GuardedPolicy(RankAware(), FirstNode(), label="agent:rank")
    assert guarded.uses_rank
    assert _run(guarded) == _run(RankAware())
    assert guarded.fallback_counts.fallbacks == 0


def test_a_capability_is_a_flag_and_its_method():
    from placement.locality import DataCaches, LocalitySettings
    from placement.policies.capabilities import (
        FaultAware,
        wants_faults,
        wants_locality,
        wants_rank,
    )
    from placement.policies.capabilities import (
        RankAware as RankAwareProtocol,
    )
    from placement.policies.fault_aware import FaultAwareBestFitPolicy

    class FlagOnly(BestFitPolicy):
        name = "flag-only"
        uses_rank = True

    class Listener(BestFitPolicy):
        name = "listener"
        uses_locality = True

        def __init__(self) -> None:
            super().__init__()
            self.caches = None

        def observe_locality(self, caches):
            self.caches = caches

    assert wants_rank(RankAware()) and isinstance(RankAware(), RankAwareProtocol)
    assert not wants_rank(BestFitPolicy()) and not wants_rank(FlagOnly())
    assert wants_faults(FaultAwareBestFitPolicy()) and isinstance(
        FaultAwareBestFitPolicy(), FaultAware
    )
    assert not wants_faults(BestFitPolicy())
    listener = Listener()
    guarded = GuardedPolicy(Stub(), listener, label="agent:x")
    assert wants_locality(guarded) and not wants_locality(
        GuardedPolicy(Stub(), BestFitPolicy(), label="y")
    )
    caches = DataCaches(Cluster(generate_nodes(2, seed=2)), LocalitySettings())
    guarded.observe_locality(caches)
    assert listener.caches is caches
