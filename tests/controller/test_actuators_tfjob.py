"""TFJob actuator: one merge patch of both replica counts, guarded by resourceVersion."""

from __future__ import annotations

import pytest

from autoscaler.actuators.base import Size
from autoscaler.actuators.tfjob import TFJobActuator
from kube.client import RetryPolicy, connect
from kube.errors import TargetGone
from tests.support.controller_fakes import FakeKubeApi, Objects


@pytest.fixture()
def api():
    with FakeKubeApi() as fake:
        fake.put(Objects("ml").tfjob("ctr-tf", workers=2, ps=1))
        yield fake


@pytest.fixture()
def kube(api, tmp_path):
    k = connect(kubeconfig=api.kubeconfig(tmp_path / "kc"), retry=RetryPolicy(sleep=lambda s: None))
    yield k
    k.close()


def test_reads_worker_and_ps_replicas(kube):
    assert TFJobActuator(kube, namespace="ml", name="ctr-tf").current() == Size(2, 1)


def test_patches_both_counts_in_one_merge_patch(kube, api):
    TFJobActuator(kube, namespace="ml", name="ctr-tf").apply(Size(8, 2))
    patches = api.calls("PATCH")
    assert len(patches) == 1
    assert patches[0].content_type == "application/merge-patch+json"
    assert patches[0].body["spec"] == {
        "tfReplicaSpecs": {"Worker": {"replicas": 8}, "PS": {"replicas": 2}}
    }
    spec = api.get("kubeflow.org/v1", "TFJob", "ml", "ctr-tf")["spec"]["tfReplicaSpecs"]
    assert (spec["Worker"]["replicas"], spec["PS"]["replicas"]) == (8, 2)
    # The rest of the replica specs is untouched by the merge patch.
    assert spec["Worker"]["restartPolicy"] == "OnFailure"


def test_stale_resource_version_conflicts_and_is_retried(kube, api):
    original = api.handle

    def racing(method, path, body, ctype):
        if method == "PATCH" and not api.calls("PATCH"):
            api.touch("kubeflow.org/v1", "TFJob", "ml", "ctr-tf")
        return original(method, path, body, ctype)

    api.handle = racing
    TFJobActuator(kube, namespace="ml", name="ctr-tf").apply(Size(6, 2))
    assert [r.status for r in api.calls("PATCH")] == [409, 200]
    assert TFJobActuator(kube, namespace="ml", name="ctr-tf").current() == Size(6, 2)


def test_same_size_writes_nothing(kube, api):
    TFJobActuator(kube, namespace="ml", name="ctr-tf").apply(Size(2, 1))
    assert api.calls("PATCH") == []


def test_deleted_tfjob_is_target_gone(kube, api):
    api.delete("kubeflow.org/v1", "TFJob", "ml", "ctr-tf")
    with pytest.raises(TargetGone):
        TFJobActuator(kube, namespace="ml", name="ctr-tf").apply(Size(4, 1))
