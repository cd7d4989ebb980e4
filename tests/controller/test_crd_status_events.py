"""Job resources: listing, status writes through the subresource, Events on the job."""

from __future__ import annotations

import pytest

from kube.client import RetryPolicy, connect
from kube.custom_resources import ElasticTrainingJobs
from kube.errors import TargetGone, TargetUnavailable
from kube.events import EventRecorder
from tests.support.controller_fakes import FakeKubeApi


def job(name: str, ns: str) -> dict:
    return {
        "apiVersion": "kale.dev/v1alpha1",
        "kind": "ElasticTrainingJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"x": 1},
    }


@pytest.fixture()
def api():
    with FakeKubeApi() as fake:
        fake.put(job("a", "ml"))
        fake.put(job("b", "ads"))
        yield fake


@pytest.fixture()
def kube(api, tmp_path):
    k = connect(
        kubeconfig=api.kubeconfig(tmp_path / "kc"),
        retry=RetryPolicy(attempts=2, sleep=lambda s: None),
    )
    yield k
    k.close()


def test_lists_jobs_in_all_namespaces_or_only_the_given_ones(kube, api):
    assert {o["metadata"]["name"] for o in ElasticTrainingJobs(kube).list()} == {"a", "b"}
    assert [o["metadata"]["name"] for o in ElasticTrainingJobs(kube, namespaces=["ml"]).list()] == [
        "a"
    ]
    assert api.calls("GET")[0].path == "/apis/kale.dev/v1alpha1/elastictrainingjobs"


def test_status_is_replaced_whole_through_the_status_subresource(kube, api):
    crs = ElasticTrainingJobs(kube)
    crs.write_status("ml", "a", {"desiredWorkers": 3, "plannerState": {"hold_until": 9}})
    crs.write_status("ml", "a", {"desiredWorkers": 4, "plannerState": {}})
    obj = api.get("kale.dev/v1alpha1", "ElasticTrainingJob", "ml", "a")
    assert obj["status"] == {"desiredWorkers": 4, "plannerState": {}}  # nothing lingers
    assert obj["metadata"]["generation"] == 1  # status writes never bump the generation
    assert all(r.path.endswith("/a/status") for r in api.calls("PATCH"))
    assert api.calls("PATCH")[0].content_type == "application/json-patch+json"


def test_status_of_a_deleted_job_is_target_gone(kube, api):
    api.delete("kale.dev/v1alpha1", "ElasticTrainingJob", "ml", "a")
    with pytest.raises(TargetGone):
        ElasticTrainingJobs(kube).write_status("ml", "a", {"desiredWorkers": 1})


def test_listing_failure_raises_instead_of_answering_empty(kube, api):
    api.fail(503, times=10)
    with pytest.raises(TargetUnavailable):
        ElasticTrainingJobs(kube).list()


def test_events_point_at_the_job(kube, api):
    rec = EventRecorder(kube, instance="kale-0", clock=lambda: 1_767_225_600.5)
    assert rec.emit(
        namespace="ml",
        name="a",
        uid="u-1",
        reason="ScaledUp",
        message="4 -> 8 workers (2 PS): staying would violate the SLO",
    )
    (ev,) = api.list("v1", "Event", "ml")
    assert ev["involvedObject"] == {
        "apiVersion": "kale.dev/v1alpha1",
        "kind": "ElasticTrainingJob",
        "name": "a",
        "namespace": "ml",
        "uid": "u-1",
    }
    assert ev["reason"] == "ScaledUp" and ev["type"] == "Normal"
    assert ev["source"] == {"component": "kale-controller", "host": "kale-0"}
    assert ev["metadata"]["name"].startswith("a.")
    assert ev["firstTimestamp"].startswith("2026-01-01T00:00:00")


def test_a_failed_event_is_logged_not_raised(kube, api):
    api.fail(500, method="POST", times=10)
    rec = EventRecorder(kube)
    assert rec.emit(namespace="ml", name="a", uid=None, reason="ScaledUp", message="m") is False
