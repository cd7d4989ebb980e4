"""StatefulSet actuator against the fake API server, through the official client."""

from __future__ import annotations

import pytest

from autoscaler.actuators.base import Size
from autoscaler.actuators.statefulset import StatefulSetActuator
from kube.client import Kube, RetryPolicy, connect
from kube.errors import Conflict, TargetGone, TargetRejected, TargetUnavailable
from tests.support.controller_fakes import FakeKubeApi, Objects


@pytest.fixture()
def api():
    with FakeKubeApi() as fake:
        objs = Objects("ml")
        fake.put(objs.statefulset("ctr-worker", 4, gpus=1))
        fake.put(objs.statefulset("ctr-ps", 1))
        yield fake


@pytest.fixture()
def pauses():
    return []


@pytest.fixture()
def kube(api, tmp_path, pauses) -> Kube:
    k = connect(
        kubeconfig=api.kubeconfig(tmp_path / "kubeconfig"),
        retry=RetryPolicy(attempts=4, sleep=pauses.append, jitter=0.0),
    )
    yield k
    k.close()


@pytest.fixture()
def sts(kube) -> StatefulSetActuator:
    return StatefulSetActuator(kube, namespace="ml", workers="ctr-worker", ps="ctr-ps")


def replicas(api, name):
    return api.get("apps/v1", "StatefulSet", "ml", name)["spec"]["replicas"]


def writes(api):
    return [r.path.split("/")[-2] for r in api.calls("PUT", "/scale")]


def test_reads_the_size_from_the_scale_subresource(sts, api):
    assert sts.current() == Size(4, 1)
    assert {r.path for r in api.calls("GET")} == {
        "/apis/apps/v1/namespaces/ml/statefulsets/ctr-worker/scale",
        "/apis/apps/v1/namespaces/ml/statefulsets/ctr-ps/scale",
    }


def test_growing_adds_parameter_servers_before_workers(sts, api):
    assert sts.apply(Size(12, 3)) == Size(12, 3)
    assert (replicas(api, "ctr-worker"), replicas(api, "ctr-ps")) == (12, 3)
    assert writes(api) == ["ctr-ps", "ctr-worker"]


def test_shrinking_removes_workers_before_parameter_servers(sts, api):
    sts.apply(Size(12, 3))
    api.requests.clear()
    sts.apply(Size(2, 1))
    assert writes(api) == ["ctr-worker", "ctr-ps"]
    assert api.get("apps/v1", "StatefulSet", "ml", "ctr-worker")["status"]["readyReplicas"] == 2


def test_applying_the_current_size_writes_nothing(sts, api):
    sts.apply(Size(4, 1))
    assert api.calls("PUT") == []


def test_a_scale_write_carries_the_resource_version_it_read(sts, api):
    sts.apply(Size(8, 2))
    body = api.calls("PUT", "ctr-worker/scale")[0].body
    assert body["metadata"]["resourceVersion"]
    assert body["spec"]["replicas"] == 8


def test_conflict_rereads_and_retries_the_write(sts, api):
    # Another writer bumps the object between our read and our write: the first PUT is 409.
    original = api.handle

    def racing(method, path, body, ctype):
        if (
            method == "PUT"
            and path.endswith("ctr-worker/scale")
            and not api.calls("PUT", "ctr-worker")
        ):
            api.touch("apps/v1", "StatefulSet", "ml", "ctr-worker")
        return original(method, path, body, ctype)

    api.handle = racing
    sts.apply(Size(8, 2))
    assert replicas(api, "ctr-worker") == 8
    assert [r.status for r in api.calls("PUT", "ctr-worker/scale")] == [409, 200]
    assert len(api.calls("GET", "ctr-worker/scale")) >= 3  # current() + two read-modify-writes


def test_conflict_that_never_clears_is_raised(sts, api):
    api.fail(409, method="PUT", path="ctr-worker/scale", times=100)
    with pytest.raises(Conflict):
        sts.apply(Size(8, 2))
    assert len(api.calls("PUT", "ctr-worker/scale")) == 5  # RetryPolicy.conflict_attempts


def test_throttling_backs_off_and_honours_retry_after(sts, api, pauses):
    api.fail(429, method="PUT", path="ctr-ps/scale", times=2, retry_after=3)
    sts.apply(Size(8, 2))
    assert replicas(api, "ctr-ps") == 2
    assert pauses == [3.0, 3.0]


def test_server_errors_back_off_exponentially_then_give_up(sts, api, pauses):
    api.fail(503, method="GET", path="ctr-worker/scale", times=10)
    with pytest.raises(TargetUnavailable, match="after 4 tries"):
        sts.current()
    assert pauses == [0.2, 0.4, 0.8]


def test_a_500_then_success_is_invisible_to_the_caller(sts, api, pauses):
    api.fail(500, method="GET", times=1)
    assert sts.current() == Size(4, 1)
    assert len(pauses) == 1


def test_missing_statefulset_is_target_gone(kube, api):
    gone = StatefulSetActuator(kube, namespace="ml", workers="nope", ps="ctr-ps")
    with pytest.raises(TargetGone, match="nope"):
        gone.current()


def test_forbidden_is_not_retried(sts, api, pauses):
    api.fail(403, method="GET", times=1)
    with pytest.raises(TargetRejected, match="403"):
        sts.current()
    assert pauses == []


def test_unreachable_api_server_is_unavailable_after_retries(sts, api, pauses):
    api.stop()
    with pytest.raises(TargetUnavailable, match="cannot reach the API server"):
        sts.current()
    assert len(pauses) == 3
