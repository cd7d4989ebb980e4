"""``kale scheduler`` against the fake API server: binding, gangs, waiting, node states."""

from __future__ import annotations

import pytest
from scheduler_harness import Recording, events, gpus_of, node_of, start_scheduler

from scheduler.placers import FirstFit
from tests.support.scheduler_fakes import FakeKubeApi, node_doc, pod_doc, wait_for


@pytest.fixture()
def api():
    with FakeKubeApi() as fake:
        fake.core.bookmark_interval_s = 0.2
        yield fake


@pytest.fixture()
def scheduler(api, tmp_path):
    running = []

    def start(**kw):
        r = start_scheduler(api, tmp_path, **kw)
        running.append(r)
        return r

    yield start
    for r in running:
        r.stop()


def test_pods_are_bound_where_the_policy_chose_with_their_gpus(api, scheduler):
    for name, gpus in (("n1", 2), ("n2", 8)):
        api.core.put_node(node_doc(name, gpus=gpus))
    placer = Recording(FirstFit())
    scheduler(placer=placer)
    api.core.put_pod(pod_doc("whole", gpus=2))
    api.core.put_pod(pod_doc("share-a", gpus=1, gpu_milli=300))
    api.core.put_pod(pod_doc("share-b", gpus=1, gpu_milli=500))
    api.core.put_pod(pod_doc("cpu-only"))
    api.core.put_pod(pod_doc("other", scheduler="default-scheduler"))
    names = ("whole", "share-a", "share-b", "cpu-only")
    wait_for(lambda: all(node_of(api, n) for n in names), what="every pod bound")
    for name in names:
        choice = placer.choices[f"ml/{name}"]
        assert node_of(api, name) == choice.node
        assert gpus_of(api, name) == ",".join(map(str, choice.gpus))
    assert node_of(api, "whole") == "n1" and gpus_of(api, "whole") == "0,1"
    # the two sharing pods pack onto one GPU of n2 (n1 is full)
    assert gpus_of(api, "share-a") == gpus_of(api, "share-b") == "0"
    assert node_of(api, "other") is None  # not ours
    assert len(api.core.bindings) == 4
    scheduled = events(api, "Scheduled", "whole")
    assert scheduled and "Successfully assigned ml/whole to n1" in scheduled[0]["message"]
    assert scheduled[0]["involvedObject"]["kind"] == "Pod"
    assert scheduled[0]["source"]["component"] == "kale"


def test_a_pod_that_fits_nowhere_waits_with_an_event_and_binds_when_room_frees(api, scheduler):
    api.core.put_node(node_doc("n1", gpus=4))
    api.core.put_pod(pod_doc("big", gpus=4, node="n1"))  # bound by someone else, holds all
    run = scheduler()
    api.core.put_pod(pod_doc("waiting", gpus=2))
    wait_for(lambda: events(api, "FailedScheduling", "waiting"), what="FailedScheduling")
    (event,) = events(api, "FailedScheduling", "waiting")
    assert event["type"] == "Warning"
    assert event["message"] == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    assert node_of(api, "waiting") is None
    api.core.set_phase("ml", "big", "Succeeded")  # its GPUs are free again
    wait_for(lambda: node_of(api, "waiting") == "n1", what="the binding after the room freed")
    # the latency is observed just after the binding is written: wait for it, not race it
    wait_for(lambda: run.scheduler.metrics.latency._sum.get() > 0, what="the latency observed")


def test_cordoned_not_ready_and_tainted_nodes_never_receive_a_pod(api, scheduler):
    taint = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
    api.core.put_node(node_doc("a-cordoned", unschedulable=True))
    api.core.put_node(node_doc("b-not-ready", ready=False))
    api.core.put_node(node_doc("c-tainted", taints=[taint]))
    api.core.put_node(node_doc("d-small", gpus=1))
    scheduler()
    for i in range(3):
        api.core.put_pod(pod_doc(f"p{i}", gpus=1))
    wait_for(lambda: events(api, "FailedScheduling", "p2") or events(api, "FailedScheduling", "p1"))
    bound = {n: node_of(api, n) for n in ("p0", "p1", "p2")}
    assert [v for v in bound.values() if v] == ["d-small"]
    waiting = next(n for n, v in bound.items() if not v)
    msg = events(api, "FailedScheduling", waiting)[0]["message"]
    assert msg.startswith("0/4 nodes are available: ")
    for part in (
        "1 Insufficient nvidia.com/gpu",
        "1 node(s) had condition NotReady",
        "1 node(s) had untolerated taint(s)",
        "1 node(s) were unschedulable",
    ):
        assert part in msg
    tolerant = pod_doc("tolerant", gpus=1)
    tolerant["spec"]["tolerations"] = [{"key": "maintenance", "operator": "Exists"}]
    api.core.put_pod(tolerant)
    wait_for(lambda: node_of(api, "tolerant") == "c-tainted")
    api.core.put_node(node_doc("a-cordoned"))  # uncordoned: the waiting pods go there
    wait_for(lambda: all(node_of(api, n) for n in ("p0", "p1", "p2")))
    placed = {node_of(api, n) for n in ("p0", "p1", "p2")}
    assert placed == {"d-small", "a-cordoned"} and "b-not-ready" not in placed


def test_a_gang_binds_whole_or_not_at_all(api, scheduler):
    api.core.put_node(node_doc("n1", gpus=4))
    api.core.put_node(node_doc("n2", gpus=4))
    run = scheduler()

    def member(i: int, size: int = 3) -> dict:
        return pod_doc(
            f"g-{i}",
            gpus=4,
            labels={"kale.dev/gang": "train"},
            annotations={"kale.dev/gang-size": str(size)},
        )

    api.core.put_pod(member(0))
    api.core.put_pod(member(1))
    wait_for(lambda: events(api, "FailedScheduling", "g-1"))
    assert (
        "gang ml/train: 2 of 3 pods exist" in events(api, "FailedScheduling", "g-1")[0]["message"]
    )
    api.core.put_pod(member(2))  # all three exist, but only two fit
    wait_for(
        lambda: any(
            "2 of 3 pending pods fit" in e["message"]
            for e in events(api, "FailedScheduling", "g-2")
        )
    )
    assert api.core.bindings == []  # none bound: not two of three
    api.core.put_node(node_doc("n3", gpus=4))
    wait_for(lambda: all(node_of(api, f"g-{i}") for i in range(3)), what="the whole gang")
    assert sorted(node_of(api, f"g-{i}") for i in range(3)) == ["n1", "n2", "n3"]
    assert run.scheduler.view.gpu_milli() == (12_000, 12_000)


def test_a_pod_with_an_unreadable_request_gets_an_event_not_a_crash(api, scheduler):
    api.core.put_node(node_doc("n1"))
    scheduler()
    api.core.put_pod(pod_doc("bad", annotations={"kale.dev/gpu-milli": "lots"}))
    api.core.put_pod(pod_doc("good", gpus=1))
    wait_for(lambda: node_of(api, "good") == "n1")
    wait_for(lambda: events(api, "FailedScheduling", "bad"))
    assert "invalid resources" in events(api, "FailedScheduling", "bad")[0]["message"]
