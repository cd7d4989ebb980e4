"""A pod ``kale scheduler`` cannot place says so where Cluster Autoscaler looks: its status.

``PodScheduled=False`` with reason ``Unschedulable`` and the default scheduler's message,
written through the ``status`` subresource when the message changes — never once per
retry — beside the ``FailedScheduling`` Event, and replaced by ``True`` on binding.
"""

from __future__ import annotations

import pytest
from scheduler_harness import condition, events, node_of, start_scheduler, status_writes

from kube.binding import BindOutcome
from scheduler.core import Scheduler, SchedulerSettings
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


def test_an_unplaceable_pod_is_marked_unschedulable_with_what_did_not_fit(api, scheduler):
    api.core.put_node(node_doc("n1", gpus=2))
    api.core.put_node(node_doc("n2", gpus=8, model="A100"))
    api.core.put_node(node_doc("n3", gpus=8, unschedulable=True))
    scheduler()
    api.core.put_pod(pod_doc("big", gpus=4, gpu_models="V100M32"))
    wait_for(lambda: condition(api, "big"), what="the PodScheduled condition")
    cond = condition(api, "big")
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert cond["message"] == (
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had no allowed "
        "GPU model, 1 node(s) were unschedulable."
    )
    assert cond["lastTransitionTime"].endswith("Z")
    (event,) = events(api, "FailedScheduling", "big")  # the Event says the same
    assert event["message"] == cond["message"]
    patch = api.calls("PATCH", "/pods/big/status")[0]
    assert patch.content_type.startswith("application/strategic-merge-patch+json")


def test_the_condition_is_updated_when_the_message_changes_and_never_per_retry(api, scheduler):
    api.core.put_node(node_doc("n1", gpus=2))
    api.core.put_pod(pod_doc("holder", gpus=2, node="n1", scheduler="default-scheduler"))
    run = scheduler(backoff={"initial": 0.01, "max": 0.02, "flush": 0.05})
    api.core.put_pod(pod_doc("waiting", gpus=2))
    wait_for(lambda: condition(api, "waiting"), what="the first condition")
    first = condition(api, "waiting")
    # every flush retries the pod: the message stays, so the status is not written again
    tries = run.scheduler.metrics.decisions.labels(policy="first-fit", result="unschedulable")
    wait_for(lambda: tries._value.get() >= 6, what="several retries")
    assert status_writes(api, "waiting") == 1
    api.core.put_node(node_doc("n2", gpus=1))  # a new reason: one more write, same transition
    wait_for(lambda: "2 Insufficient" in condition(api, "waiting")["message"], what="update")
    wait_for(lambda: tries._value.get() >= 12, what="more retries")
    assert status_writes(api, "waiting") == 2
    assert condition(api, "waiting")["lastTransitionTime"] == first["lastTransitionTime"]
    assert run.scheduler.metrics.status_updates._value.get() == 2
    api.core.delete_pod("ml", "holder")
    wait_for(lambda: node_of(api, "waiting") == "n1", what="the binding")
    assert condition(api, "waiting")["status"] == "True"  # the Binding sets it


def test_a_restarted_scheduler_does_not_rewrite_a_condition_already_there(api, scheduler):
    api.core.put_node(node_doc("n1", gpus=1))
    api.core.put_pod(pod_doc("waiting", gpus=2))
    first = scheduler()
    wait_for(lambda: condition(api, "waiting"), what="the condition")
    first.stop()
    second = scheduler()
    tries = second.scheduler.metrics.decisions.labels(policy="first-fit", result="unschedulable")
    wait_for(lambda: tries._value.get() >= 1, what="the second replica's try")
    assert status_writes(api, "waiting") == 1


def test_patching_pod_scheduled_keeps_the_other_conditions(api):
    """The fake merges a strategic merge patch's conditions by type, as the API server."""
    pod = pod_doc("p")
    pod["status"] = {"conditions": [{"type": "Custom", "status": "True"}]}
    api.core.put_pod(pod)
    patch = {"status": {"conditions": [{"type": "PodScheduled", "status": "False"}]}}
    code, _, _ = api.handle(
        "PATCH",
        "/api/v1/namespaces/ml/pods/p/status",
        patch,
        "application/strategic-merge-patch+json",
    )
    assert code == 200
    kinds = [c["type"] for c in api.core.pod("ml", "p")["status"]["conditions"]]
    assert kinds == ["Custom", "PodScheduled"]


class FailingStatus:
    """A status writer whose API server keeps failing."""

    def __init__(self) -> None:
        self.tries = 0

    def unschedulable(self, pod, *, message, since, nominated_node=None):
        self.tries += 1
        return False


def test_a_failing_status_write_is_tried_again_only_after_the_event_interval():
    class Binder:
        def bind(self, pod, node, annotations):
            return BindOutcome("bound", node)

    class Events:
        def pod_event(self, pod, *, reason, message, type):
            pass

    now = [1000.0]
    status = FailingStatus()
    s = Scheduler(
        placer=FirstFit(),
        binder=Binder(),
        events=Events(),
        settings=SchedulerSettings(backoff_initial_s=1, backoff_max_s=1, flush_s=1),
        clock=lambda: now[0],
        status=status,
    )
    s.on_node("SYNC", [node_doc("n1", gpus=1)])
    s.on_pod("SYNC", [pod_doc("big", gpus=2)])
    for _ in range(10):  # ten retries within a minute
        s.schedule()
        now[0] += 5
    assert status.tries == 1 and s.metrics.errors.labels(kind="status")._value.get() == 1
    now[0] += 60
    s.schedule()
    assert status.tries == 2
