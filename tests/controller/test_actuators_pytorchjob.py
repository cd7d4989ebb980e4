"""PyTorchJob targets: the actuator against the fake API server, then the controller resizing
an elastic PyTorchJob end to end (within its elasticPolicy, rolled forward after a crash)."""

from __future__ import annotations

import pytest

from autoscaler.actuators.base import Size
from autoscaler.actuators.pytorchjob import PyTorchJobActuator
from kube.client import RetryPolicy, connect
from kube.errors import TargetGone, TargetRejected
from tests.support.fault_fakes import ClusterRig, FakeKubeApi, Objects

PT = ("kubeflow.org/v1", "PyTorchJob", "ml")


@pytest.fixture()
def api():
    with FakeKubeApi() as fake:
        fake.put(Objects("ml").pytorchjob("ctr-pt", 2, min_replicas=2, max_replicas=8))
        yield fake


@pytest.fixture()
def kube(api, tmp_path):
    k = connect(kubeconfig=api.kubeconfig(tmp_path / "kc"), retry=RetryPolicy(sleep=lambda s: None))
    yield k
    k.close()


def actuator(kube, name: str = "ctr-pt") -> PyTorchJobActuator:
    return PyTorchJobActuator(kube, namespace="ml", name=name, min_workers=1, max_workers=32)


def spec(api, name: str = "ctr-pt") -> dict:
    return api.get(*PT, name)["spec"]


def test_reads_the_worker_replicas_and_no_parameter_servers(kube, api):
    assert actuator(kube).current() == Size(2, 0)
    assert [r.path for r in api.calls("GET")] == [
        "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/ctr-pt"
    ]


def test_one_merge_patch_of_the_worker_count_carrying_the_resource_version(kube, api):
    rv = api.get(*PT, "ctr-pt")["metadata"]["resourceVersion"]
    assert actuator(kube).apply(Size(6, 2)) == Size(6, 0)  # the PS count is not applied
    (patch,) = api.calls("PATCH")
    assert patch.content_type == "application/merge-patch+json"
    assert patch.body == {
        "metadata": {"resourceVersion": rv},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 6}}},
    }
    worker = spec(api)["pytorchReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 6 and worker["restartPolicy"] == "OnFailure"  # rest untouched
    assert spec(api)["elasticPolicy"] == {"rdzvBackend": "c10d", "minReplicas": 2, "maxReplicas": 8}


def test_the_worker_count_is_clamped_into_the_elastic_policy(kube, api):
    pt = actuator(kube)
    pt.current()
    assert pt.fit(Size(20, 5)) == Size(8, 0) and pt.fit(Size(1, 1)) == Size(2, 0)
    assert pt.apply(Size(20, 5)) == Size(8, 0)
    assert spec(api)["pytorchReplicaSpecs"]["Worker"]["replicas"] == 8
    assert pt.apply(Size(1, 1)) == Size(2, 0)
    assert spec(api)["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    assert pt.apply(Size(1, 0)) == Size(2, 0)  # already at the floor: nothing written
    assert len(api.calls("PATCH")) == 2


def test_missing_bounds_are_written_so_max_replicas_is_never_below_the_replicas(kube, api):
    api.put(Objects("ml").pytorchjob("open", 2, min_replicas=None, max_replicas=None))
    assert actuator(kube, "open").apply(Size(12, 3)) == Size(12, 0)
    policy = spec(api, "open")["elasticPolicy"]
    assert (policy["minReplicas"], policy["maxReplicas"]) == (1, 32)  # the job's own bounds
    assert spec(api, "open")["pytorchReplicaSpecs"]["Worker"]["replicas"] == 12
    api.put(Objects("ml").pytorchjob("low", 2, min_replicas=None, max_replicas=None))
    big = PyTorchJobActuator(kube, namespace="ml", name="low", min_workers=4, max_workers=6)
    assert big.apply(Size(3, 0)) == Size(3, 0)
    policy = spec(api, "low")["elasticPolicy"]
    assert policy["minReplicas"] <= 3 <= policy["maxReplicas"]


def test_a_pytorchjob_without_elastic_policy_is_read_but_never_resized(kube, api):
    api.put(Objects("ml").pytorchjob("fixed", 4, elastic=False))
    pt = actuator(kube, "fixed")
    assert pt.current() == Size(4, 0)
    assert pt.apply(Size(4, 1)) == Size(4, 0)  # nothing to change: no error
    with pytest.raises(TargetRejected, match=r"no spec\.elasticPolicy"):
        pt.apply(Size(8, 0))
    assert api.calls("PATCH") == []


def test_a_concurrent_write_conflicts_and_is_retried(kube, api):
    original = api.handle

    def racing(method, path, body, ctype):
        if method == "PATCH" and not api.calls("PATCH"):
            api.touch(*PT, "ctr-pt")
        return original(method, path, body, ctype)

    api.handle = racing
    actuator(kube).apply(Size(5, 0))
    assert [r.status for r in api.calls("PATCH")] == [409, 200]
    assert actuator(kube).current() == Size(5, 0)


def test_a_deleted_pytorchjob_is_target_gone(kube, api):
    api.delete(*PT, "ctr-pt")
    with pytest.raises(TargetGone):
        actuator(kube).current()


# -- the controller, end to end -------------------------------------------------------------
def pytorchjob_target(max_replicas: int):
    def put(api: FakeKubeApi, name: str) -> dict:
        api.put(Objects("ml").pytorchjob(name, 1, min_replicas=1, max_replicas=max_replicas))
        return {"kind": "PyTorchJob", "name": name}

    return put


def worker_writes(api, name: str = "job0") -> list[int]:
    return [
        r.body["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
        for r in api.calls("PATCH", f"/pytorchjobs/{name}")
        if r.status == 200
    ]


def test_the_controller_resizes_a_pytorchjob_up_to_its_elastic_bound_and_holds_there(tmp_path):
    with FakeKubeApi() as api:
        rig = ClusterRig(api, tmp_path, target=pytorchjob_target(6), max_workers=32)
        (rep,) = rig.tick().values()  # 100k samples/s: the planner wants far more than 6
        assert rep.resized and rep.planned.workers > 6 and rep.desired == Size(6, 0)
        assert worker_writes(api) == [6]
        status = rig.status("job0")
        assert (status["currentWorkers"], status["desiredWorkers"]) == (1, 6)
        why = f"the PyTorchJob takes 6 workers, not {rep.planned.workers}"
        assert status["lastDecision"]["details"]["target"] == why
        assert status["labelSelector"] == (
            "training.kubeflow.org/job-name=job0,training.kubeflow.org/replica-type=worker"
        )
        for _ in range(8):  # past the rescale window: still wants more, the bound holds
            reports = rig.tick()
        (rep,) = reports.values()
        assert rep.action == "hold_target_bounds" and not rep.resized
        assert worker_writes(api) == [6]  # never "resized" again against the bound
        assert len(rig.events("ScaledUp")) == 1
        assert not rig.status("job0")["plannerState"].get("pending")
        assert rig.status("job0")["currentPS"] == 0
        rig.close()


def test_a_crash_mid_resize_is_rolled_forward_once_by_the_next_controller(tmp_path):
    with FakeKubeApi() as api:
        first = ClusterRig(api, tmp_path, target=pytorchjob_target(8), max_workers=32)
        # The marker is written on the job's status, then every try of the patch fails.
        api.fail(503, method="PATCH", path="/pytorchjobs/job0", times=5)
        (rep,) = first.tick().values()
        assert rep.action == "resize_failed"
        pending = first.status("job0")["plannerState"]["pending"]
        assert pending["from"] == [1, 0] and pending["to"] == [8, 0]
        assert worker_writes(api) == []
        first.crash()  # kill -9: a new pod, no local state; the marker is on the job
        second = ClusterRig(api, tmp_path, clock=first.clock, identity="kale-1", max_workers=32,
                            target=pytorchjob_target(8))  # fmt: skip
        (rep,) = second.tick().values()
        assert rep.action == "resize_completed" and rep.resized
        assert worker_writes(api) == [8]
        for _ in range(4):
            second.tick()
        assert worker_writes(api) == [8]  # one resize, written once
        assert len(second.events("ScaledUp")) == 1 and len(second.events("ResizeFailed")) == 1
        assert not second.status("job0")["plannerState"].get("pending")
        second.close()
