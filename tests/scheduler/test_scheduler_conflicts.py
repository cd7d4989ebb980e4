"""Bindings under conflict: a 409 is retried or resolved by reading the pod, never a double
bind; two replicas share one lease and only the leader binds."""

from __future__ import annotations

import pytest
from scheduler_harness import events, node_of, start_scheduler

from kube.client import RetryPolicy, connect
from kube.pods import PodBinder
from scheduler.objects import Conventions, parse_pod
from tests.support.scheduler_fakes import FakeKubeApi, node_doc, pod_doc, wait_for


@pytest.fixture()
def api():
    with FakeKubeApi() as fake:
        fake.core.bookmark_interval_s = 0.2
        yield fake


@pytest.fixture()
def binder(api, tmp_path):
    kube = connect(
        kubeconfig=api.kubeconfig(tmp_path / "kc"), retry=RetryPolicy(sleep=lambda s: None)
    )
    yield PodBinder(kube)
    kube.close()


def info(api, name):
    return parse_pod(api.core.pod("ml", name), Conventions())


def test_an_injected_409_on_an_unbound_pod_is_retried_and_binds_once(api, binder):
    api.core.put_pod(pod_doc("p", gpus=1))
    api.fail(409, method="POST", path="/binding", times=2)
    out = binder.bind(info(api, "p"), "n1", {"kale.dev/gpus": "3"})
    assert out.status == "bound"
    assert api.core.bindings == [("ml", "p", "n1")]
    assert api.core.pod("ml", "p")["metadata"]["annotations"]["kale.dev/gpus"] == "3"
    assert len(api.calls("POST", "/binding")) == 3 and len(api.calls("GET", "/pods/p")) == 2


def test_a_409_because_the_pod_is_already_bound_reports_where_without_rebinding(api, binder):
    api.core.put_pod(pod_doc("p", gpus=1))
    stale = info(api, "p")  # the scheduler's view, before someone else binds it
    pod = api.core.pod("ml", "p")
    pod["spec"]["nodeName"] = "n2"
    pod["metadata"]["annotations"]["kale.dev/gpus"] = "5"
    api.core.put_pod(pod)
    out = binder.bind(stale, "n1", {"kale.dev/gpus": "0"})
    assert (out.status, out.node, out.gpus) == ("elsewhere", "n2", (5,))
    assert api.core.bindings == [] and node_of(api, "p") == "n2"


def test_a_deleted_or_replaced_pod_is_gone(api, binder):
    api.core.put_pod(pod_doc("p", gpus=1))
    old = info(api, "p")
    api.core.delete_pod("ml", "p")
    assert binder.bind(old, "n1", {}).status == "gone"
    api.core.put_pod(pod_doc("p", gpus=1))  # same name, new uid: the old decision is void
    assert binder.bind(old, "n1", {}).status == "gone"
    assert api.core.bindings == []


def test_the_scheduler_survives_409s_and_5xx_on_bind_without_double_binding(api, tmp_path):
    api.core.put_node(node_doc("n1", gpus=8))
    run = start_scheduler(api, tmp_path)
    api.fail(409, method="POST", path="/binding", times=3)
    api.fail(503, method="POST", path="/binding", times=1)
    for i in range(4):
        api.core.put_pod(pod_doc(f"p{i}", gpus=1))
    wait_for(lambda: all(node_of(api, f"p{i}") == "n1" for i in range(4)))
    run.stop()
    bound = [name for _, name, _ in api.core.bindings]
    assert sorted(bound) == ["p0", "p1", "p2", "p3"]
    gpus = sorted(
        api.core.pod("ml", f"p{i}")["metadata"]["annotations"]["kale.dev/gpus"] for i in range(4)
    )
    assert gpus == ["0", "1", "2", "3"]  # the view never counted a pod twice
    assert run.scheduler.view.gpu_milli() == (4000, 8000)


def test_only_the_leader_binds_and_the_standby_takes_over(api, tmp_path):
    api.core.put_node(node_doc("n1", gpus=8))
    election = {
        "enabled": True,
        "namespace": "kale-system",
        "leaseDuration": 1.5,
        "renewDeadline": 1.0,
        "retryPeriod": 0.2,
    }
    a = start_scheduler(api, tmp_path / "a", leaderElection={**election, "identity": "a"})
    wait_for(lambda: a.app.is_leader(), what="a leading")
    b = start_scheduler(api, tmp_path / "b", leaderElection={**election, "identity": "b"})
    api.core.put_pod(pod_doc("first", gpus=1))
    # the Scheduled Event is written after the binding is counted (the pod's nodeName is set
    # before the Binding's answer reaches the scheduler): wait for the end, not the middle
    wait_for(lambda: node_of(api, "first") and events(api, "Scheduled", "first"))
    assert a.scheduler.bound == 1 and b.scheduler.bound == 0 and not b.app.is_leader()
    a.app.elector.release = lambda: False  # die holding the lease (no clean hand-over)
    a.stop()
    api.core.put_pod(pod_doc("second", gpus=1))
    wait_for(lambda: node_of(api, "second"), what="the standby binding after taking over")
    b.stop()
    assert b.scheduler.bound == 1
    assert [n for _, n, _ in api.core.bindings] == ["first", "second"]
    # the standby kept its view: it did not give GPU 0 out again
    assert api.core.pod("ml", "second")["metadata"]["annotations"]["kale.dev/gpus"] == "1"


def test_after_410_gone_the_scheduler_relists_and_forgets_pods_deleted_meanwhile(api, tmp_path):
    api.core.put_node(node_doc("n1", gpus=4))
    api.core.put_pod(pod_doc("big", gpus=4, node="n1", scheduler="default-scheduler"))
    run = start_scheduler(api, tmp_path)
    api.stop()  # the watches break while the cluster moves on
    api.core.delete_pod("ml", "big")
    api.core.put_pod(pod_doc("waiting", gpus=2))
    api.core.compact()  # and the API server forgets that history
    api.start()
    wait_for(lambda: node_of(api, "waiting") == "n1", what="the pod placed after the re-list")
    relists = run.scheduler.metrics.relists.labels(resource="pods")._value.get()
    run.stop()
    assert relists == 2 and api.core.expired_watches >= 1
    assert api.core.pod("ml", "waiting")["metadata"]["annotations"]["kale.dev/gpus"] == "0,1"
