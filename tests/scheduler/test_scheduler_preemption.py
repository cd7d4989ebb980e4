"""Priority preemption against the fake API server: PriorityClasses resolved at admission,
victims evicted through ``pods/eviction`` (PodDisruptionBudgets honoured), the preemptor
nominated, and bound once its victims are gone."""

from __future__ import annotations

import pytest
from scheduler_harness import condition, events, node_of, start_scheduler

from tests.support.kube_api import ApiError
from tests.support.scheduler_fakes import (
    FakeKubeApi,
    node_doc,
    pdb_doc,
    pod_doc,
    priority_class_doc,
    wait_for,
)

CLASSES = {"low": 10, "mid": 50, "high": 1000}


@pytest.fixture()
def api():
    with FakeKubeApi() as fake:
        fake.core.bookmark_interval_s = 0.2
        for name, value in CLASSES.items():
            fake.put(priority_class_doc(name, value))
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


def running_pod(api, name, node, *, gpus=2, priority_class="low", labels=None, **kw):
    """A pod bound and running on ``node`` (placed by someone else)."""
    api.core.put_pod(
        pod_doc(
            name,
            gpus=gpus,
            node=node,
            priority_class=priority_class,
            labels=labels,
            scheduler="default-scheduler",
            **kw,
        )
    )
    api.core.set_phase("ml", name, "Running")


def present(api, name) -> bool:
    return api.core.pod("ml", name) is not None


def test_priority_classes_resolve_to_spec_priority_when_a_pod_is_created(api):
    api.put(priority_class_doc("batch", 5, global_default=True, preemption_policy="Never"))
    code, created, _ = api.handle(
        "POST", "/api/v1/namespaces/ml/pods", pod_doc("p", priority_class="high"), None
    )
    assert code == 201 and created["spec"]["priority"] == 1000
    assert created["spec"]["preemptionPolicy"] == "PreemptLowerPriority"
    _, plain, _ = api.handle("POST", "/api/v1/namespaces/ml/pods", pod_doc("q"), None)
    assert (plain["spec"]["priorityClassName"], plain["spec"]["priority"]) == ("batch", 5)
    assert plain["spec"]["preemptionPolicy"] == "Never"
    with pytest.raises(ApiError, match="no PriorityClass with name nope was found") as missing:
        api.handle("POST", "/api/v1/namespaces/ml/pods", pod_doc("r", priority_class="nope"), None)
    assert missing.value.code == 403
    with pytest.raises(ApiError, match="must not be provided in pod spec"):
        api.handle("POST", "/api/v1/namespaces/ml/pods", pod_doc("s", priority=7), None)


def test_a_high_priority_pod_preempts_the_lowest_priority_pods_and_lands(api, scheduler):
    api.core.put_node(node_doc("n1", gpus=2))
    api.core.put_node(node_doc("n2", gpus=2))
    running_pod(api, "mid-a", "n1", priority_class="mid")
    running_pod(api, "low-a", "n2", gpus=1)
    running_pod(api, "low-b", "n2", gpus=1)
    run = scheduler()
    api.core.put_pod(pod_doc("urgent", gpus=2, priority_class="high"))
    wait_for(lambda: node_of(api, "urgent") == "n2", what="the preemptor bound")
    # two pods of priority 10 go rather than one of 50: the victims' priority comes first
    assert sorted(api.core.evictions) == [("ml", "low-a"), ("ml", "low-b")]
    assert present(api, "mid-a") and not present(api, "low-a") and not present(api, "low-b")
    for victim in ("low-a", "low-b"):
        (event,) = events(api, "Preempted", victim)
        assert event["message"] == (
            "Preempted by ml/urgent (priority 1000) to make room on node n2"
        )
    (preempting,) = events(api, "Preempting", "urgent")
    assert "node n2: ml/low-a, ml/low-b on n2" in preempting["message"]
    nominated = [
        r.body["status"]["nominatedNodeName"] for r in api.calls("PATCH", "/pods/urgent/status")
    ]
    assert nominated[0] == "n2"
    assert run.scheduler.metrics.preemption_victims._value.get() == 2
    assert run.scheduler.metrics.preemptions._value.get() == 1


def test_the_fewest_pods_are_evicted_among_equal_priorities(api, scheduler):
    api.core.put_node(node_doc("n1", gpus=2))
    api.core.put_node(node_doc("n2", gpus=2))
    running_pod(api, "small-a", "n1", gpus=1)
    running_pod(api, "small-b", "n1", gpus=1)
    running_pod(api, "large", "n2", gpus=2)
    scheduler()
    api.core.put_pod(pod_doc("urgent", gpus=2, priority_class="high"))
    wait_for(lambda: node_of(api, "urgent") == "n2", what="the preemptor bound")
    assert api.core.evictions == [("ml", "large")]


def test_equal_or_higher_priority_pods_are_never_preempted(api, scheduler):
    api.core.put_node(node_doc("n1", gpus=2))
    api.core.put_node(node_doc("n2", gpus=2))
    running_pod(api, "peer", "n1", priority_class="mid")
    running_pod(api, "boss", "n2", priority_class="high")
    run = scheduler()
    api.core.put_pod(pod_doc("waiting", gpus=2, priority_class="mid"))
    wait_for(lambda: condition(api, "waiting"), what="the pod marked unschedulable")
    tries = run.scheduler.metrics.decisions.labels(policy="first-fit", result="unschedulable")
    api.core.put_node(node_doc("n3", gpus=1))  # a change: the pod is tried again
    wait_for(lambda: tries._value.get() >= 2, what="a second try")
    assert api.core.evictions == [] and not api.calls("POST", "/eviction")
    assert present(api, "peer") and present(api, "boss") and node_of(api, "waiting") is None
    assert "preempt" not in condition(api, "waiting")["message"]


def test_a_gang_is_preempted_whole_or_not_at_all(api, scheduler):
    for n in ("n1", "n2", "n3"):
        api.core.put_node(node_doc(n, gpus=2))
    gang = {"labels": {"kale.dev/gang": "g"}, "annotations": {"kale.dev/gang-size": "2"}}
    running_pod(api, "g-0", "n1", **gang)
    running_pod(api, "g-1", "n2", **gang)
    running_pod(api, "single", "n3", priority_class="mid")
    scheduler()
    api.core.put_pod(pod_doc("urgent", gpus=2, priority_class="high"))
    wait_for(lambda: node_of(api, "urgent"), what="the preemptor bound")
    # the gang (priority 10) is cheaper than the single pod (50): evicted whole, both nodes
    assert sorted(api.core.evictions) == [("ml", "g-0"), ("ml", "g-1")]
    assert present(api, "single") and node_of(api, "urgent") in ("n1", "n2")


def test_a_gang_with_one_member_too_important_is_kept_whole(api, scheduler):
    api.core.put_node(node_doc("n1", gpus=2))
    api.core.put_node(node_doc("n2", gpus=2))
    gang = {"labels": {"kale.dev/gang": "g"}, "annotations": {"kale.dev/gang-size": "2"}}
    running_pod(api, "g-0", "n1", **gang)
    running_pod(api, "g-1", "n2", priority_class="high", **gang)
    run = scheduler()
    api.core.put_pod(pod_doc("urgent", gpus=2, priority_class="high"))
    wait_for(lambda: condition(api, "urgent"), what="the pod marked unschedulable")
    tries = run.scheduler.metrics.decisions.labels(policy="first-fit", result="unschedulable")
    api.core.put_node(node_doc("n3", gpus=1))
    wait_for(lambda: tries._value.get() >= 2, what="a second try")
    assert api.core.evictions == [] and present(api, "g-0") and present(api, "g-1")


def test_a_gang_preemptor_evicts_room_for_every_member(api, scheduler):
    api.core.put_node(node_doc("n1", gpus=2))
    api.core.put_node(node_doc("n2", gpus=2))
    running_pod(api, "low-a", "n1")
    running_pod(api, "low-b", "n2")
    scheduler()
    for i in range(2):
        api.core.put_pod(
            pod_doc(
                f"train-{i}",
                gpus=2,
                priority_class="high",
                labels={"kale.dev/gang": "train"},
                annotations={"kale.dev/gang-size": "2"},
            )
        )
    wait_for(lambda: node_of(api, "train-0") and node_of(api, "train-1"), what="the gang bound")
    assert sorted(api.core.evictions) == [("ml", "low-a"), ("ml", "low-b")]
    assert {node_of(api, "train-0"), node_of(api, "train-1")} == {"n1", "n2"}


def test_the_preemptor_waits_for_its_victims_on_its_nominated_node_then_lands(api, scheduler):
    api.core.graceful_deletion = True  # victims terminate until the kubelet is done
    api.core.put_node(node_doc("n1", gpus=2))
    api.core.put_node(node_doc("n2", gpus=2))
    running_pod(api, "low-a", "n1")
    running_pod(api, "low-b", "n2")
    run = scheduler(backoff={"initial": 0.05, "max": 0.2, "flush": 0.5})  # retried soon
    api.core.put_pod(pod_doc("urgent", gpus=2, priority_class="high"))
    wait_for(
        lambda: api.core.pod("ml", "urgent")["status"].get("nominatedNodeName") == "n1",
        what="the preemptor nominated",
    )
    assert api.core.terminating() == [("ml", "low-a")]  # equal victims: node order
    assert "preempting ml/low-a on n1" in condition(api, "urgent")["message"]
    # while it terminates: later tries wait instead of evicting more, and nobody else
    # takes the room the preemption makes
    api.core.put_pod(pod_doc("filler", gpus=1, priority_class="low"))
    tries = run.scheduler.metrics.decisions.labels(policy="first-fit", result="unschedulable")
    wait_for(lambda: tries._value.get() >= 3, what="tries while the victim terminates")
    wait_for(
        lambda: "waiting for preempted pods to leave n1" in condition(api, "urgent")["message"],
        what="the waiting message",
    )
    assert api.core.evictions == [("ml", "low-a")] and node_of(api, "urgent") is None
    api.core.finish_deletion("ml", "low-a")
    wait_for(lambda: node_of(api, "urgent") == "n1", what="the preemptor on its node")
    assert node_of(api, "filler") is None and present(api, "low-b")


def test_a_disruption_budget_protects_its_pods_from_preemption(api, scheduler):
    api.core.put_node(node_doc("n1", gpus=2))
    api.core.put_node(node_doc("n2", gpus=2))
    api.put(pdb_doc("db", {"app": "db"}, min_available=1))
    running_pod(api, "guarded", "n1", labels={"app": "db"})
    running_pod(api, "other", "n2", priority_class="mid")
    run = scheduler()
    api.core.put_pod(pod_doc("urgent", gpus=2, priority_class="high"))
    wait_for(lambda: node_of(api, "urgent") == "n2", what="the preemptor bound")
    # "guarded" had the lower priority, but its budget forbids evicting it (429)
    assert api.core.evictions == [("ml", "other")] and present(api, "guarded")
    assert run.scheduler.metrics.eviction_failures.labels(reason="blocked")._value.get() == 1


def test_a_pod_whose_class_says_never_waits_instead_of_preempting(api, scheduler):
    api.put(priority_class_doc("polite", 1000, preemption_policy="Never"))
    api.core.put_node(node_doc("n1", gpus=2))
    running_pod(api, "low-a", "n1")
    run = scheduler()
    api.core.put_pod(pod_doc("urgent", gpus=2, priority_class="polite"))
    wait_for(lambda: condition(api, "urgent"), what="the pod marked unschedulable")
    tries = run.scheduler.metrics.decisions.labels(policy="first-fit", result="unschedulable")
    api.core.put_node(node_doc("n2", gpus=1))
    wait_for(lambda: tries._value.get() >= 2, what="a second try")
    assert api.core.evictions == [] and present(api, "low-a")


def test_preemption_can_be_turned_off(api, scheduler):
    api.core.put_node(node_doc("n1", gpus=2))
    running_pod(api, "low-a", "n1")
    scheduler(preemption={"enabled": False})
    api.core.put_pod(pod_doc("urgent", gpus=2, priority_class="high"))
    wait_for(lambda: condition(api, "urgent"), what="the pod marked unschedulable")
    assert api.core.evictions == [] and present(api, "low-a")
