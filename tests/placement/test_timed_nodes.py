"""The timed simulator on GPU nodes: gangs all-or-nothing, GPU faults, capacity invariants."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kale.cli.main import main
from placement.cluster import NodeSpec
from placement.faults import FaultModel, FaultSettings
from placement.frag import typical_pods
from placement.node_pool import NodePool, openb_jobs
from placement.placer import tie_order
from placement.pod import Pod
from placement.policies.base import PolicyContext
from placement.policies.registry import make_policy
from placement.queue.priorities import QUEUE_POLICIES
from placement.timed import simulate_timed
from placement.timed_experiment import summarise_timed
from placement.workloads.generate import WorkloadShape, generate_nodes, generate_pods
from placement.workloads.openb import write_nodes, write_pods

TWO_NODES = [NodeSpec("a", 64000, 262144, 8, "V100"), NodeSpec("b", 64000, 262144, 8, "V100")]


def pod(name: str, gpus: int, milli: int = 1000, t: float = 0.0, run: float = 100.0) -> Pod:
    return Pod(name, 4000, 8192, gpus, milli if gpus else 0, frozenset(), t, t + run, t)


def pool_for(nodes, gangs, policy: str = "bestfit", pods=None) -> NodePool:
    typical = typical_pods(pods or [p for g in gangs for p in g])
    rng = np.random.default_rng(0)
    scorer = make_policy(policy, PolicyContext(rng=rng, typical=typical))
    return NodePool(nodes, gangs, scorer, rank=tie_order(len(nodes), rng), typical=typical)


def test_a_gang_starts_all_or_nothing() -> None:
    gangs = [(pod("small", 4),), (pod("g1", 8), pod("g2", 8))]
    pool = pool_for(TWO_NODES, gangs)
    assert pool.try_start(0)  # 4 GPUs on one node: the gang of two full nodes cannot fit
    before = pool.cluster.gpu_free.copy()
    assert not pool.try_start(1)
    np.testing.assert_array_equal(pool.cluster.gpu_free, before)  # nothing half-placed
    assert pool.could_start_after(1, [0]) and pool.ever_fits(1)
    pool.stop(0)
    assert pool.try_start(1) and sorted(a.node for a in pool.held[1]) == [0, 1]
    assert pool.usage()["gpu"] == 1.0


def test_fault_bestfit_in_the_timed_simulator_avoids_gpus_that_failed() -> None:
    gangs = [(pod("first", 1),), (pod("second", 1),)]
    for name, expect in (("bestfit", 0), ("fault-bestfit", 1)):
        pool = pool_for(TWO_NODES, gangs, policy=name)
        pool.set_down(0, True)  # GPU 0 of node "a" fails and is repaired
        pool.set_down(0, False)
        assert pool.unit_failures.tolist()[:2] == [1, 0]
        assert pool.try_start(0)
        (alloc,) = pool.held[0]
        # BestFit's tie order picks "a"; fault-bestfit leaves the node with the failure
        assert alloc.node == expect, name
    pool = pool_for(TWO_NODES[:1], gangs, policy="fault-bestfit")
    pool.set_down(0, True)
    pool.set_down(0, False)
    assert pool.try_start(0) and pool.held[0][0].gpus == (1,)  # a healthy GPU of the node


def test_a_gang_larger_than_the_cluster_fails_without_blocking_the_queue() -> None:
    gangs = [(pod("g1", 8), pod("g2", 8), pod("g3", 8)), (pod("p", 1),)]
    pool = pool_for(TWO_NODES, gangs)
    jobs, _, _ = openb_jobs([gangs[0][0], gangs[1][0]])
    run = simulate_timed(jobs, pool, policy=QUEUE_POLICIES["fcfs"])
    assert run.failed.tolist() == [True, False] and run.end_s[1] == 100


def test_a_gpu_failure_kills_every_pod_sharing_it_and_the_gpu_is_out_until_repaired() -> None:
    # Two sharing pods land on the same GPU (BestFit packs them); a third takes a whole GPU.
    pods = [pod("s1", 1, 500, run=5000), pod("s2", 1, 400, run=5000), pod("w", 1, run=5000)]
    nodes = [NodeSpec("a", 64000, 262144, 2, "V100")]
    pool = pool_for(nodes, [(p,) for p in pods], pods=pods)
    jobs, _, _ = openb_jobs(pods)
    settings = FaultSettings(checkpoint_s=1000, restart_s=100, repair_s=3000)
    assert pool.try_start(0) and pool.try_start(1)
    shared = int(pool.units_of(0)[0])
    assert pool.units_of(1).tolist() == [shared]
    pool.stop(0), pool.stop(1)
    model = FaultModel(np.zeros(2), settings=settings, scripted=((2500.0, shared),))
    run = simulate_timed(jobs, pool, policy=QUEUE_POLICIES["fcfs"], faults=model)
    # s1 and s2 lose 500 s each (checkpoint at 2000); w (on the other GPU) runs through.
    assert run.restarts.tolist() == [1, 1, 0]
    assert run.lost_unit_hours == pytest.approx(500 * (0.5 + 0.4) / 3600)
    # Re-queued at 2600, they find the only healthy GPU held by w until 5000; then they share
    # it (the failed one returns only at 5500) and finish their last 3000 s at 8000.
    assert run.end_s.tolist() == [8000, 8000, 5000]
    assert run.wait_s.tolist() == [2400, 2400, 0]


class CheckedNodePool(NodePool):
    """Checks that no node is ever over-committed after each change."""

    def check(self) -> None:
        c = self.cluster
        assert (c.cpu_free >= 0).all() and (c.mem_free >= 0).all()
        assert (c.gpu_free >= 0).all() and (c.gpu_free <= 1000).all()
        assert (c.cpu_free <= c.cpu_capacity).all() and (c.pod_count <= c.pod_limit).all()

    def try_start(self, job: int) -> bool:
        ok = super().try_start(job)
        self.check()
        return ok

    def stop(self, job: int) -> None:
        super().stop(job)
        self.check()


@pytest.mark.parametrize("policy", ["bestfit", "fgd", "random"])
def test_no_node_is_ever_over_committed_under_pressure_and_faults(policy: str) -> None:
    nodes = generate_nodes(6, seed=3)
    shape = WorkloadShape(mean_interarrival_s=60, mean_duration_s=3600, multi_gpu=0.1)
    pods = generate_pods(80, seed=4, shape=shape)
    jobs, kept, _ = openb_jobs(pods)
    typical = typical_pods(pods)
    rng = np.random.default_rng(1)
    scorer = make_policy(policy, PolicyContext(rng=rng, typical=typical))
    pool = CheckedNodePool(
        nodes, [(p,) for p in kept], scorer, rank=tie_order(6, rng), typical=typical
    )
    model = FaultModel(np.full(len(pool.unit_names), 0.2), settings=FaultSettings(repair_s=600))
    run = simulate_timed(
        jobs, pool, policy=QUEUE_POLICIES["sjf"], backfill=True, faults=model, seed=2
    )
    done = ~run.failed
    assert not np.isnan(run.end_s[done]).any() and run.restarts.sum() > 0
    m = summarise_timed(run)
    assert 0 < m["util_gpu"] <= 1 and 0 <= m["frag_ratio"] <= 1 and m["mean_wait_s"] > 0


def test_the_cli_compares_placements_as_queue_plus_placement(tmp_path: Path, capsys) -> None:
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    write_nodes(nodes, generate_nodes(4, seed=1))
    generated = generate_pods(40, seed=2, shape=WorkloadShape(mean_interarrival_s=30))
    never = Pod("never", 1000, 1024, 1, 1000, frozenset(), 5.0, 50.0, None)  # Pending
    write_pods(pods, [*generated, never])
    args = ["place", "timed", "--nodes", str(nodes), "--pods", str(pods), "--queue", "fcfs,f1"]
    png = tmp_path / "timed.png"
    placements = (
        "bestfit,fgd,fault-bestfit"  # fault-bestfit: placement's registry, as the scheduler's
    )
    extra = ["--placement", placements, "--faults", "default", "--plot", str(png), "--json"]
    code = main([*args, *extra])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and png.read_bytes()[:4] == b"\x89PNG"
    assert list(out["policies"]) == [
        f"{q}+{p}" for q in ("fcfs", "f1") for p in ("bestfit", "fgd", "fault-bestfit")
    ]
    assert out["settings"]["never_scheduled_pods"] == 1
    assert all(m["jobs"] == 40 and "frag_ratio" in m for m in out["policies"].values())


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--placement", "worstfit"], "unknown policy 'worstfit'"),  # not a node policy
        (["--node-share", "0"], "--node-share must be in (0, 1]"),  # no cluster left
        (
            ["--arrival-speedup", "-2"],
            "--arrival-speedup must be a positive number",
        ),  # time reversed
        (["--protocol", "kale"], "--protocol applies to SWF logs"),  # protocols are for SWF
    ],
)
def test_openb_user_mistakes_exit_2(tmp_path: Path, capsys, extra: list[str], message: str) -> None:
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    write_nodes(nodes, generate_nodes(2, seed=1))
    write_pods(pods, generate_pods(5, seed=2))
    code = main(["place", "timed", "--nodes", str(nodes), "--pods", str(pods), *extra])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
