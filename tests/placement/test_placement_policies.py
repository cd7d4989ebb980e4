"""Every score plugin on a hand-computed three-node cluster: exact integer scores, the node
the cycle picks (with the tie-break) and the GPU it takes.

State (free after the setup pods):
  n0  32 cores, 2×T4:  cpu 28000, GPUs [500, 1000]            (one sharing pod)
  n1  64 cores, 4×G2:  cpu 56000, GPUs [1000, 0, 1000, 1000]  (one whole-GPU pod)
  n2  16 cores, 1×T4:  cpu 16000, GPUs [1000]                 (empty)
"""

from __future__ import annotations

import numpy as np
import pytest

from placement.cluster import Cluster, NodeSpec
from placement.errors import PlacementInputError
from placement.frag import PodType, TypicalPods, cluster_fragmentation, typical_pods
from placement.placer import choose, place
from placement.pod import Pod
from placement.policies import POLICIES, PolicyContext, make_policy, parse_policy_names

SHARE = Pod("share", 2000, 1000, 1, 300)
WHOLE = Pod("whole", 8000, 1000, 1, 1000)
CPU = Pod("cpu", 15000, 1000)
ALL = np.array([0, 1, 2])
FORWARD = np.array([0, 1, 2])  # tie-break ranks: n0 first
BACKWARD = np.array([2, 1, 0])  # n2 first
TYPICAL = TypicalPods(
    (PodType(4000, 500, 1), PodType(8000, 1000, 1), PodType(2000, 0, 0)), (0.5, 0.3, 0.2), 1.0
)


@pytest.fixture
def cluster() -> Cluster:
    c = Cluster(
        [
            NodeSpec("n0", 32000, 1 << 20, 2, "T4"),
            NodeSpec("n1", 64000, 1 << 20, 4, "G2"),
            NodeSpec("n2", 16000, 1 << 20, 1, "T4"),
        ]
    )
    c.allocate(Pod("s", 4000, 1, 1, 500), 0, (0,))
    c.allocate(Pod("w", 8000, 1, 1, 1000), 1, (1,))
    return c


def scores(name, pod, cluster, nodes=ALL, **context):
    return make_policy(name, PolicyContext(**context)).score(pod, cluster, nodes).tolist()


def test_bestfit(cluster):
    # n0: 1 - ½·26000/128000 - ½·1200/8000 = 0.8234 ; n1: 0.6203 ; n2: 0.9016
    assert scores("bestfit", SHARE, cluster) == [82, 62, 90]
    decision = choose(SHARE, cluster, make_policy("bestfit"), rank=FORWARD)
    assert (decision.node, decision.gpus, decision.score) == (2, (0,), 90)


def test_dotprod_and_its_tie_break(cluster):
    # 1 - ½[(c/128000)(2000/128000) + (L/8000)(300/8000)]: 0.99478, 0.98955, 0.99668
    assert scores("dotprod", SHARE, cluster) == [99, 98, 99]
    first = choose(SHARE, cluster, make_policy("dotprod"), rank=FORWARD)
    assert (first.node, first.gpus) == (0, (0,))  # the tighter GPU (500 free) of n0
    assert choose(SHARE, cluster, make_policy("dotprod"), rank=BACKWARD).node == 2


def test_gpu_clustering(cluster):
    # base ⌊25(8000-L)/8000⌋ = 20, 15, 21; +75 only-same-kind, +25 empty, +0 other kinds
    assert scores("clustering", SHARE, cluster) == [95, 15, 46]
    assert scores("clustering", WHOLE, cluster) == [20, 90, 46]
    assert scores("clustering", CPU, cluster) == [0, 0, 0]
    both = Pod("w2", 1, 1, 1, 1000)
    cluster.allocate(both, 0, (1,))  # n0 now hosts a sharing and a 1-GPU pod: +50
    assert scores("clustering", SHARE, cluster)[0] == 50 + 25 * 7500 // 8000


def test_gpu_packing(cluster):
    # n0: used GPU with 500 free → 100 - ⌊⌊100·500/1000⌋/10⌋ = 95; n1: only fully free GPUs
    # fit on a used node → 50-1; n2: all 1 GPU free → max(33-1, 1)
    assert scores("packing", SHARE, cluster) == [95, 49, 32]
    assert scores("packing", WHOLE, cluster) == [49, 49, 32]
    two = Pod("two", 1000, 1, 2, 1000)
    assert scores("packing", two, cluster, nodes=np.array([1])) == [48]
    assert scores("packing", CPU, cluster) == [0, 0, 0]
    empty = Cluster([NodeSpec("e", 96000, 1 << 20, 8, "G2")])
    assert scores("packing", WHOLE, empty, nodes=np.array([0])) == [25]  # max(33-8, 8)
    assert choose(CPU, cluster, make_policy("packing"), rank=BACKWARD).node == 2


def test_fgd_fragmentation_of_the_state(cluster):
    # F = Σ w·frag: n0 0.3·500 + 0.2·1500 = 450; n1 0.2·3000; n2 0.2·1000
    amount, ratio = cluster_fragmentation(cluster, TYPICAL)
    assert amount == pytest.approx(1250) and ratio == pytest.approx(1250 / 5500)


def test_fgd_sharing_pod_tries_every_gpu(cluster):
    # n0/GPU0 (500→200): F' 400, ⌊100σ(0.05)⌋ = 51; n0/GPU1: F' 600 → 46; n1, n2: ΔF -150 → 46
    assert scores("fgd", SHARE, cluster, typical=TYPICAL) == [51, 46, 46]
    fgd = make_policy("fgd", PolicyContext(typical=TYPICAL))
    assert fgd.choose_gpus(SHARE, cluster, 0) == (0,)
    assert fgd.choose_gpus(SHARE, cluster, 1) == (0,)  # equal GPUs: the lowest index
    assert choose(SHARE, cluster, fgd, rank=BACKWARD).node == 0


def test_fgd_whole_and_cpu_pods(cluster):
    # every node's F drops by 200 with one whole GPU taken: ⌊100σ(0.2)⌋ = 54 everywhere
    assert scores("fgd", WHOLE, cluster, typical=TYPICAL) == [54, 54, 54]
    # 15 cores leave n2 1000 milli CPU: every type lacks CPU there, F' = 1000 → ⌊100σ(-0.8)⌋
    assert scores("fgd", CPU, cluster, typical=TYPICAL) == [50, 50, 31]
    fgd = make_policy("fgd", PolicyContext(typical=TYPICAL))
    assert fgd.choose_gpus(WHOLE, cluster, 1) == (0,)


def test_fgd_memo_follows_the_cluster(cluster):
    fgd = make_policy("fgd", PolicyContext(typical=TYPICAL))
    before = fgd.score(SHARE, cluster, ALL).tolist()
    alloc = place(SHARE, cluster, fgd, rank=FORWARD)
    assert (alloc.node, alloc.gpus) == (0, (0,))
    assert fgd.score(SHARE, cluster, ALL).tolist() != before
    cluster.release(alloc)
    assert fgd.score(SHARE, cluster, ALL).tolist() == before


def test_random_draws_a_feasible_node_and_gpu(cluster):
    rng = np.random.default_rng(1)
    policy = make_policy("random", PolicyContext(rng=rng))
    seen_nodes, seen_gpus = set(), set()
    for _ in range(60):
        s = policy.score(SHARE, cluster, ALL)
        assert sorted(s.tolist()) == [0, 0, 100]
        seen_nodes.add(int(np.argmax(s)))
        seen_gpus.add(policy.choose_gpus(SHARE, cluster, 1))
    assert seen_nodes == {0, 1, 2}
    assert seen_gpus == {(0,), (2,), (3,)}  # any GPU with 300 free, never the full one


def test_lone_feasible_node_is_taken_without_scoring(cluster):
    big = Pod("big", 50000, 1, 1, 300)
    decision = choose(big, cluster, make_policy("bestfit"), rank=FORWARD)
    assert (decision.node, decision.score) == (1, None)
    assert choose(Pod("huge", 10**6, 1), cluster, make_policy("bestfit"), rank=FORWARD) is None


def test_typical_pods_cover_95_percent_most_frequent_first():
    pods = (
        [Pod(f"a{i}", 1000, 1, 1, 500) for i in range(60)]
        + [Pod(f"b{i}", 2000, 1) for i in range(30)]
        + [Pod(f"c{i}", 3000, 1, 2, 1000) for i in range(6)]
        + [Pod(f"d{i}", 500, 1, 1, 1000, frozenset({"T4"})) for i in range(4)]
    )
    typical = typical_pods(pods)
    assert typical.types == (
        PodType(1000, 500, 1),
        PodType(2000, 0, 0),
        PodType(3000, 1000, 2),
    )
    assert typical.weights == pytest.approx((60 / 96, 30 / 96, 6 / 96))
    assert typical.coverage == pytest.approx(0.96)
    assert len(typical_pods(pods, include_cpu=False).types) == 3


def test_registry_names_and_unknown_names():
    assert list(POLICIES) == ["random", "dotprod", "clustering", "packing", "bestfit", "fgd"]
    assert parse_policy_names("bestfit, fgd") == ["bestfit", "fgd"]
    with pytest.raises(PlacementInputError, match="unknown policy 'tetris'; known: random"):
        parse_policy_names("bestfit,tetris")
    with pytest.raises(PlacementInputError, match="named twice"):
        parse_policy_names("fgd,fgd")
    with pytest.raises(PlacementInputError, match="known: random, dotprod"):
        make_policy("nope")
    with pytest.raises(ValueError, match="typical pods"):
        make_policy("fgd")
