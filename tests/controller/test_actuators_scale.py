"""Scale targets: any kind with a scale subresource, found through discovery and resized
through ``/scale`` only — a Deployment, a StatefulSet, custom resources that declare a scale
(a JobSet-style TrainerSet, a PyTorchJob) — then the controller resizing them end to end."""

from __future__ import annotations

import pytest

from autoscaler.actuators.base import Size
from autoscaler.actuators.scale import ScaleActuator
from kube.client import RetryPolicy, connect
from kube.errors import TargetGone, TargetRejected
from kube.scale import ObjectRef, ScaleSubresources
from tests.support.fault_fakes import ClusterRig, FakeKubeApi, Objects

DEPLOY = ObjectRef("apps/v1", "Deployment", "ctr-worker")
PS = ObjectRef("apps/v1", "StatefulSet", "ctr-ps")
TRAINERS = ObjectRef("training.kale.test/v1", "TrainerSet", "ctr-set")


@pytest.fixture()
def api():
    with FakeKubeApi() as fake:
        objs = Objects("ml")
        fake.put(objs.deployment("ctr-worker", 4, gpus=1))
        fake.put(objs.statefulset("ctr-ps", 1))
        fake.put(objs.trainerset("ctr-set", 2))
        fake.put(objs.pytorchjob("ctr-pt", 2))
        yield fake


@pytest.fixture()
def scales(api, tmp_path):
    k = connect(kubeconfig=api.kubeconfig(tmp_path / "kc"), retry=RetryPolicy(sleep=lambda s: None))
    yield ScaleSubresources(k)
    k.close()


def spec_replicas(api, api_version: str, kind: str, name: str) -> int:
    return api.get(api_version, kind, "ml", name)["spec"]["replicas"]


def test_reads_through_discovery_and_the_scale_subresource_only(scales, api):
    target = ScaleActuator(scales, namespace="ml", workers=DEPLOY, ps=PS)
    assert target.current() == Size(4, 1)
    assert target.current() == Size(4, 1)
    assert target.selector == "app=ctr-worker"
    assert [r.path for r in api.calls("GET")] == [
        "/apis/apps/v1",  # once: what discovery found is cached
        "/apis/apps/v1/namespaces/ml/deployments/ctr-worker/scale",
        "/apis/apps/v1/namespaces/ml/statefulsets/ctr-ps/scale",
        "/apis/apps/v1/namespaces/ml/deployments/ctr-worker/scale",
        "/apis/apps/v1/namespaces/ml/statefulsets/ctr-ps/scale",
    ]


def test_growing_writes_the_ps_first_and_shrinking_the_workers_first(scales, api):
    target = ScaleActuator(scales, namespace="ml", workers=DEPLOY, ps=PS)
    assert target.apply(Size(12, 3)) == Size(12, 3)
    assert [r.path.split("/")[-2] for r in api.calls("PUT")] == ["ctr-ps", "ctr-worker"]
    assert spec_replicas(api, "apps/v1", "Deployment", "ctr-worker") == 12
    assert spec_replicas(api, "apps/v1", "StatefulSet", "ctr-ps") == 3
    put = api.calls("PUT")[-1]
    assert put.body["kind"] == "Scale" and put.body["metadata"]["resourceVersion"]
    api.requests.clear()
    target.apply(Size(2, 1))
    assert [r.path.split("/")[-2] for r in api.calls("PUT")] == ["ctr-worker", "ctr-ps"]
    assert {r.method for r in api.requests} <= {"GET", "PUT"}
    assert all(r.path.endswith("/scale") for r in api.calls("PUT"))
    api.requests.clear()
    target.apply(Size(2, 1))
    assert api.calls("PUT") == []  # in place: nothing written


def test_without_a_ps_ref_the_job_has_no_parameter_servers(scales, api):
    target = ScaleActuator(scales, namespace="ml", workers=DEPLOY)
    assert target.current() == Size(4, 0)
    assert target.fit(Size(8, 2)) == Size(8, 0)
    assert target.apply(Size(8, 2)) == Size(8, 0)
    assert len(api.calls("PUT")) == 1


def test_a_custom_resource_is_resized_on_its_crds_replica_path(scales, api):
    target = ScaleActuator(scales, namespace="ml", workers=TRAINERS)
    assert target.current() == Size(2, 0)
    assert target.selector == "trainerset=ctr-set"
    target.apply(Size(5, 0))
    obj = api.get("training.kale.test/v1", "TrainerSet", "ml", "ctr-set")
    assert obj["spec"]["workers"] == {"replicas": 5, "image": "x"}  # that field alone
    assert api.calls("PUT")[0].path == (
        "/apis/training.kale.test/v1/namespaces/ml/trainersets/ctr-set/scale"
    )
    pytorch = ScaleActuator(
        scales, namespace="ml", workers=ObjectRef("kubeflow.org/v1", "PyTorchJob", "ctr-pt")
    )
    pytorch.apply(Size(3, 0))
    obj = api.get("kubeflow.org/v1", "PyTorchJob", "ml", "ctr-pt")
    assert obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3


@pytest.mark.parametrize(
    ("ref", "error", "words"),
    [
        (ObjectRef("apps/v1", "Rollout", "x"), TargetRejected, "apps/v1 has no kind Rollout"),
        (ObjectRef("kubeflow.org/v1", "TFJob", "x"), TargetRejected, "no scale subresource"),
        (ObjectRef("jobset.x-k8s.io/v1alpha2", "JobSet", "x"), TargetGone, "is not served"),
        (ObjectRef("v1", "ReplicationController", "x"), TargetRejected, "core API group"),
    ],
    ids=["unknown-kind", "no-scale", "group-not-served", "core-group"],
)
def test_a_kind_that_cannot_be_scaled_is_a_clear_error(scales, ref, error, words):
    with pytest.raises(error, match=words):
        ScaleActuator(scales, namespace="ml", workers=ref).current()


def test_a_missing_object_is_target_gone(scales):
    with pytest.raises(TargetGone):
        ScaleActuator(
            scales, namespace="ml", workers=ObjectRef("apps/v1", "Deployment", "nope")
        ).current()


def test_a_concurrent_write_conflicts_and_is_retried(scales, api):
    original = api.handle

    def racing(method, path, body, ctype):
        if method == "PUT" and not api.calls("PUT"):
            api.touch("apps/v1", "Deployment", "ml", "ctr-worker")
        return original(method, path, body, ctype)

    api.handle = racing
    ScaleActuator(scales, namespace="ml", workers=DEPLOY).apply(Size(6, 0))
    assert [r.status for r in api.calls("PUT")] == [409, 200]
    assert spec_replicas(api, "apps/v1", "Deployment", "ctr-worker") == 6


# -- the controller, end to end -------------------------------------------------------------
def deployment_with_ps(api: FakeKubeApi, name: str) -> dict:
    objs = Objects("ml")
    api.put(objs.deployment(f"{name}-worker", 1, gpus=1))
    api.put(objs.statefulset(f"{name}-ps", 1))
    return {
        "kind": "Scale",
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": f"{name}-worker"},
        "psRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": f"{name}-ps"},
    }


def trainer_set(api: FakeKubeApi, name: str) -> dict:
    api.put(Objects("ml").trainerset(f"{name}-set", 1))
    ref = {"apiVersion": "training.kale.test/v1", "kind": "TrainerSet", "name": f"{name}-set"}
    return {"kind": "Scale", "scaleTargetRef": ref}


def writes(api, contains: str) -> list[int]:
    return [
        r.body["spec"]["replicas"]
        for r in api.calls("PUT", contains)
        if r.status == 200 and r.path.endswith("/scale")
    ]


def test_the_controller_resizes_a_deployment_and_its_ps_through_scale(tmp_path):
    with FakeKubeApi() as api:
        rig = ClusterRig(api, tmp_path, target=deployment_with_ps)
        (rep,) = rig.tick().values()
        assert rep.resized and rep.desired.workers > 1 and rep.desired.ps > 1
        assert writes(api, "/deployments/job0-worker") == [rep.desired.workers]
        assert writes(api, "/statefulsets/job0-ps") == [rep.desired.ps]
        status = rig.status("job0")
        assert status["desiredWorkers"] == rep.desired.workers
        assert status["labelSelector"] == "app=job0-worker"
        for _ in range(3):
            (rep,) = rig.tick().values()
        assert status["desiredWorkers"] == rig.status("job0")["currentWorkers"]
        assert len(rig.events("ScaledUp")) == 1
        discovered = [r.path for r in api.calls("GET") if r.path == "/apis/apps/v1"]
        assert discovered == ["/apis/apps/v1"]  # one lookup for both kinds, over four ticks
        rig.close()


def test_the_controller_resizes_a_custom_resource_without_ps(tmp_path):
    with FakeKubeApi() as api:
        rig = ClusterRig(api, tmp_path, target=trainer_set)
        (rep,) = rig.tick().values()
        assert rep.resized and rep.desired.workers > 1 and rep.desired.ps == 0
        obj = api.get("training.kale.test/v1", "TrainerSet", "ml", "job0-set")
        assert obj["spec"]["workers"]["replicas"] == rep.desired.workers
        assert rig.status("job0")["currentPS"] == 0
        rig.close()


def test_a_crash_between_the_ps_and_the_worker_write_is_rolled_forward(tmp_path):
    with FakeKubeApi() as api:
        first = ClusterRig(api, tmp_path, target=deployment_with_ps)
        api.fail(503, method="PUT", path="/deployments/job0-worker/scale", times=5)
        (rep,) = first.tick().values()
        assert rep.action == "resize_failed"
        pending = first.status("job0")["plannerState"]["pending"]
        assert writes(api, "/statefulsets/job0-ps") == [pending["to"][1]]  # the PS was written
        assert writes(api, "/deployments/job0-worker") == []
        first.crash()  # kill -9; the new pod has no local state: the marker is on the job
        second = ClusterRig(
            api, tmp_path, clock=first.clock, identity="kale-1", target=deployment_with_ps
        )
        (rep,) = second.tick().values()
        assert rep.action == "resize_completed"
        for _ in range(4):
            second.tick()
        assert writes(api, "/deployments/job0-worker") == [pending["to"][0]]
        assert writes(api, "/statefulsets/job0-ps") == [pending["to"][1]]  # not written twice
        assert len(second.events("ScaledUp")) == 1
        second.close()
