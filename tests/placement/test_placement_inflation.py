"""The inflation experiment's rules: tuning, arrival order, the curve's columns, the run."""

from __future__ import annotations

import numpy as np
import pytest

from placement.cluster import NodeSpec
from placement.errors import PlacementInputError
from placement.inflation import (
    InflationSettings,
    arrival_list,
    curve_columns,
    run_experiment,
    run_inflation,
)
from placement.pod import Pod
from placement.workloads.generate import generate_nodes, generate_pods


def test_tuning_up_appends_clones_until_the_per_gpu_milli_would_pass_the_target():
    pods = [Pod("b", 1, 1, 2, 1000), Pod("a", 1, 1, 1, 500)]
    arrivals = arrival_list(pods, 4000, tune=1.3, rng=np.random.default_rng(0))
    originals, clones = arrivals[:2], arrivals[2:]
    assert sorted(p.name for p in originals) == ["a", "b"]
    assert all("-tuned-" in p.name for p in clones)
    total = sum(p.total_gpu_milli for p in arrivals)
    # the loop stops at the first draw whose *per-GPU* milli passes T = 5200, so a
    # two-GPU clone may overshoot by up to 1000
    assert total <= 5200 + 1000
    assert total + 500 > 5200 or total + 1000 > 5200


def test_tuning_down_removes_arrivals_until_at_or_below_target():
    pods = [Pod(f"p{i}", 1, 1, 1, 1000) for i in range(10)]
    arrivals = arrival_list(pods, 4000, tune=1.3, rng=np.random.default_rng(0))
    assert len(arrivals) == 5 and sum(p.total_gpu_milli for p in arrivals) == 5000


def test_arrival_order_depends_only_on_names_and_seed():
    pods = generate_pods(50, seed=2)
    a = arrival_list(pods, 20000, tune=1.3, rng=np.random.default_rng(7))
    b = arrival_list(list(reversed(pods)), 20000, tune=1.3, rng=np.random.default_rng(7))
    assert [p.name for p in a] == [p.name for p in b]
    c = arrival_list(pods, 20000, tune=1.3, rng=np.random.default_rng(8))
    assert [p.name for p in a] != [p.name for p in c]


def test_curve_columns_average_the_arrivals_rounding_to_each_column():
    arrived = np.array([0.2, 0.6, 1.4, 1.6, 4.0])
    values = np.array([1.0, 2.0, 3.0, 5.0, 9.0])
    out = curve_columns(values, arrived, 5)
    # 0: {0.2}; 1: {0.6, 1.4}; 2: {1.6}; 3: none → neighbours 2..4 = {1.6, 4.0}; 4: {4.0};
    # 5: none → 4..6 = {4.0}
    assert out == {0: 1.0, 1: 2.5, 2: 5.0, 3: 7.0, 4: 9.0, 5: 9.0}
    assert curve_columns(values, arrived, 9).keys() == {0, 1, 2, 3, 4, 5}  # 6..9: no data


def test_a_run_is_deterministic_and_accounts_every_arrival():
    nodes, pods = generate_nodes(30, seed=1), generate_pods(300, seed=1)
    one = run_inflation(nodes, pods, "bestfit", 5)
    again = run_inflation(nodes, pods, "bestfit", 5)
    assert one.curve == again.curve and one.failed_pods == again.failed_pods
    assert np.all(np.diff(one.arrived) >= 0) and np.all(one.allocated <= one.arrived)
    capacity = sum(n.gpus for n in nodes) * 1000
    assert one.arrived[-1] <= 1.3 * capacity + 8000
    assert one.allocated[-1] <= capacity
    # a small cluster jumps several columns with one multi-GPU pod: gaps are allowed
    assert set(one.curve) <= set(range(131)) and len(one.curve) > 100 and 130 in one.curve
    assert 0 < one.final <= 100 and one.failed_pods > 0
    assert 0 <= one.frag_final_ratio <= 1 + 1e-9  # all free milli fragmented, up to rounding


def test_fgd_does_not_lose_to_random_on_a_synthetic_cluster():
    nodes, pods = generate_nodes(40, seed=3), generate_pods(400, seed=3)
    result = run_experiment(nodes, pods, "random,fgd", [1, 2])
    summary = result["policies"]
    assert set(summary) == {"random", "fgd"}
    assert summary["fgd"]["final"] >= summary["random"]["final"]
    assert len(summary["fgd"]["per_seed"]) == 2
    assert set(summary["fgd"]["curve"]) <= {str(c) for c in range(131)}


@pytest.mark.parametrize(
    ("nodes", "pods", "words"),
    [
        ([NodeSpec("cpu", 1000, 1000)], [Pod("p", 1, 1, 1, 100)], "no GPUs"),
        ([NodeSpec("g", 1000, 1000, 1, "T4")], [Pod("p", 1, 1)], "nothing to tune"),
        ([NodeSpec("g", 1000, 1000, 1, "T4")], [], "empty"),
    ],
)
def test_unusable_inputs_are_user_errors(nodes, pods, words):
    with pytest.raises(PlacementInputError, match=words):
        run_inflation(nodes, pods, "bestfit", 1, InflationSettings())
