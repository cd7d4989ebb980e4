"""The cluster model: feasibility, exact GPU binding, release, faults, and the capacity
property (no sequence of allocations and releases ever exceeds a node's capacity)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.cluster import Cluster, NodeSpec, default_gpus, free_gpus, tightest_gpu
from placement.errors import PlacementError
from placement.pod import Pod


def small_cluster() -> Cluster:
    return Cluster(
        [
            NodeSpec("a", 8000, 16384, 2, "T4"),
            NodeSpec("b", 16000, 32768, 4, "V100M16"),
            NodeSpec("c", 4000, 8192, 0, ""),
        ]
    )


def test_fresh_cluster_is_all_free():
    c = small_cluster()
    assert c.gpu_free.tolist() == [[1000, 1000, 0, 0], [1000] * 4, [0] * 4]
    assert c.gpu_free_total.tolist() == [2000, 4000, 0]
    assert c.total_gpu_milli == 6000 and c.allocated_gpu_milli == 0


def test_sharing_pod_needs_one_gpu_with_enough_milli():
    c = small_cluster()
    c.allocate(Pod("x", 1000, 1000, 1, 1000), 0, (0,))
    c.allocate(Pod("y", 1000, 1000, 1, 600), 0, (1,))
    assert c.feasible(Pod("p", 100, 100, 1, 400)).tolist() == [True, True, False]
    assert c.feasible(Pod("p", 100, 100, 1, 500)).tolist() == [False, True, False]


def test_whole_gpu_pod_needs_k_fully_free_gpus():
    c = small_cluster()
    c.allocate(Pod("s", 100, 100, 1, 100), 1, (2,))
    assert c.feasible(Pod("w", 100, 100, 3, 1000)).tolist() == [False, True, False]
    assert c.feasible(Pod("w", 100, 100, 4, 1000)).tolist() == [False, False, False]


def test_cpu_memory_pod_limit_and_model_filter():
    c = small_cluster()
    assert c.feasible(Pod("big", 9000, 100)).tolist() == [False, True, False]
    assert c.feasible(Pod("mem", 100, 20000)).tolist() == [False, True, False]
    # a CPU-only pod ignores models and may use the CPU node
    assert c.feasible(Pod("cpu", 100, 100)).tolist() == [True, True, True]
    t4 = Pod("t4", 100, 100, 1, 500, frozenset({"T4"}))
    assert c.feasible(t4).tolist() == [True, False, False]
    either = Pod("e", 100, 100, 1, 500, frozenset({"T4", "V100M16"}))
    assert c.feasible(either).tolist() == [True, True, False]
    assert not c.feasible(Pod("n", 100, 100, 1, 500, frozenset({"A100"}))).any()
    limited = Cluster([NodeSpec("l", 8000, 8000, 1, "T4", pod_limit=1)])
    limited.allocate(Pod("one", 1, 1), 0)
    assert not limited.feasible(Pod("two", 1, 1)).any()


def test_allocate_binds_exact_gpus_and_release_restores():
    c = small_cluster()
    a = c.allocate(Pod("w", 2000, 4000, 2, 1000), 1, (1, 3))
    assert c.gpu_free[1].tolist() == [1000, 0, 1000, 0]
    assert c.cpu_free[1] == 14000 and c.mem_free[1] == 28768 and c.pod_count[1] == 1
    assert c.affinity_count[1, 2] == 1 and c.allocated_gpu_milli == 2000
    c.release(a)
    assert c.gpu_free[1].tolist() == [1000] * 4
    assert c.affinity_count[1].sum() == 0 and c.pod_count[1] == 0
    with pytest.raises(PlacementError):
        c.release(a)


@pytest.mark.parametrize(
    ("pod", "node", "gpus"),
    [
        (Pod("cpu", 9000, 1), 0, ()),  # too much CPU
        (Pod("g", 1, 1, 1, 500), 0, ()),  # no GPU named
        (Pod("g", 1, 1, 1, 500), 0, (2,)),  # GPU index beyond the node
        (Pod("w", 1, 1, 2, 1000), 1, (0, 0)),  # the same GPU twice
        (Pod("w", 1, 1, 2, 1000), 1, (0,)),  # too few GPUs
        (Pod("g", 1, 1, 1, 500, frozenset({"T4"})), 1, (0,)),  # wrong model
    ],
)
def test_bad_allocations_are_refused_and_change_nothing(pod, node, gpus):
    c = small_cluster()
    before = (c.cpu_free.copy(), c.gpu_free.copy(), c.node_version.copy())
    with pytest.raises(PlacementError):
        c.allocate(pod, node, gpus)
    assert np.array_equal(before[0], c.cpu_free) and np.array_equal(before[1], c.gpu_free)
    assert np.array_equal(before[2], c.node_version)


def test_gpu_fault_takes_a_free_gpu_out_until_repaired():
    c = small_cluster()
    a = c.allocate(Pod("s", 1, 1, 1, 300), 0, (1,))
    assert c.allocations_on_gpu(0, 1) == [a]
    with pytest.raises(PlacementError):
        c.disable_gpu(0, 1)
    c.release(a)
    c.disable_gpu(0, 1)
    assert c.gpu_free[0].tolist()[:2] == [1000, 0] and c.gpu_free_total[0] == 1000
    assert not c.feasible(Pod("w", 1, 1, 2, 1000))[0]
    c.enable_gpu(0, 1)
    assert c.feasible(Pod("w", 1, 1, 2, 1000))[0]


def test_copy_is_independent():
    c = small_cluster()
    d = c.copy()
    d.allocate(Pod("w", 1, 1, 1, 1000), 0, (0,))
    assert c.gpu_free[0, 0] == 1000 and d.gpu_free[0, 0] == 0
    b = d.allocate(Pod("v", 1, 1, 1, 1000), 0, (1,))
    assert b.id == 1


def test_default_gpu_choices():
    free = np.array([1000, 300, 500, 300])
    assert tightest_gpu(free, 300) == 1
    assert tightest_gpu(free, 400) == 2
    assert tightest_gpu(free, 600) == 0
    assert tightest_gpu(free, 1001) == -1
    assert free_gpus(np.array([0, 1000, 200, 1000, 1000]), 2) == (1, 3)
    assert free_gpus(np.array([0, 1000]), 2) == ()
    c = small_cluster()
    assert default_gpus(c, Pod("w", 1, 1, 2, 1000), 1) == (0, 1)
    assert default_gpus(c, Pod("cpu", 1, 1), 1) == ()


pods = st.builds(
    lambda cpu, mem, kind, milli, k: Pod(
        "p",
        cpu,
        mem,
        *((0, 0) if kind == 0 else (1, milli) if kind == 1 else (k, 1000)),
    ),
    st.integers(0, 20000),
    st.integers(0, 40000),
    st.integers(0, 2),
    st.integers(1, 999),
    st.integers(1, 4),
)


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(pods, st.integers(0, 2), st.booleans()), max_size=40))
def test_no_allocation_ever_exceeds_capacity_and_release_restores_it(ops):
    c = small_cluster()
    fresh = c.copy()
    live = []
    for pod, node, release in ops:
        if release and live:
            c.release(live.pop(0))
            continue
        gpus = default_gpus(c, pod, node)
        if c.feasible(pod)[node]:
            live.append(c.allocate(pod, node, gpus))
        else:
            with pytest.raises(PlacementError):
                c.allocate(pod, node, gpus)
        assert (c.cpu_free >= 0).all() and (c.mem_free >= 0).all()
        assert ((c.gpu_free >= 0) & (c.gpu_free <= 1000)).all()
        assert (c.gpu_free_total == c.gpu_free.sum(axis=1)).all()
        used = sum(a.pod.cpu_milli for a in live if a.node == 1)
        assert c.cpu_free[1] == c.cpu_capacity[1] - used
    for a in reversed(live):
        c.release(a)
    for name in ("cpu_free", "mem_free", "pod_count", "gpu_free", "gpu_free_total"):
        assert np.array_equal(getattr(c, name), getattr(fresh, name)), name
    assert c.affinity_count.sum() == 0
