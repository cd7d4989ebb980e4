"""``kubectl scale etj``, the pause and pin annotations, against the fake API server.

The job's ``scale`` subresource is driven through the official client exactly as kubectl
does it (a merge patch on ``.../elastictrainingjobs/NAME/scale``); the controller runs on a
fake clock with synthetic traffic high enough that the planner always wants more workers,
so a job that stays put stays put because it was told to.
"""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from autoscaler.actuators.statefulset import StatefulSetActuator
from autoscaler.controller.cluster_jobs import ClusterJobs
from autoscaler.controller.loop import Controller
from autoscaler.controller.settings import ControllerSettings
from autoscaler.job.loading import parse_job
from autoscaler.job.overrides import PAUSED, PAUSED_REPLICAS
from forecasting.registry import make_forecaster
from kube.client import RetryPolicy, connect
from kube.custom_resources import ElasticTrainingJobs
from tests.support.controller_fakes import (
    SYNC_MODEL,
    FakeClock,
    FakeKubeApi,
    Objects,
    TraceMetrics,
    job_doc,
)

ETJ = ("kale.dev", "v1alpha1", "ml", "elastictrainingjobs", "ctr")


class Rig:
    """One controller, one job on two StatefulSets, traffic that always asks for more."""

    def __init__(self, api: FakeKubeApi, tmp_path) -> None:
        self.api = api
        self.clock = FakeClock()
        self.kube = connect(
            kubeconfig=api.kubeconfig(tmp_path / "kc"),
            retry=RetryPolicy(attempts=2, sleep=lambda s: None),
        )
        self.metrics = TraceMetrics(self.clock, lambda t: 150_000.0)
        crs = ElasticTrainingJobs(self.kube, namespaces=["ml"])

        self.controller = Controller(
            jobs_source=ClusterJobs(crs.list, models_dir=SYNC_MODEL.parent),
            meter_factory=lambda e: self.metrics,
            forecaster_factory=lambda e: make_forecaster("seasonal_naive", period=60),
            actuator_factory=lambda e: StatefulSetActuator(
                self.kube, namespace="ml", workers="ctr-worker", ps="ctr-ps"
            ),
            clock=self.clock,
            status_sink=crs,
            settings=ControllerSettings(identity="kale-0"),
        )

    def ticks(self, n: int) -> None:
        for _ in range(n):
            self.controller.tick()
            self.clock.advance(60)

    def workers(self) -> tuple[int, int]:
        get = self.api.get
        return (
            get("apps/v1", "StatefulSet", "ml", "ctr-worker")["spec"]["replicas"],
            get("apps/v1", "StatefulSet", "ml", "ctr-ps")["spec"]["replicas"],
        )

    def status(self) -> dict:
        return self.api.get("kale.dev/v1alpha1", "ElasticTrainingJob", "ml", "ctr")["status"]

    def condition(self, type_: str) -> dict | None:
        return next((c for c in self.status()["conditions"] if c["type"] == type_), None)

    def annotate(self, **notes: str | None) -> None:
        obj = self.api.get("kale.dev/v1alpha1", "ElasticTrainingJob", "ml", "ctr")
        current = obj["metadata"].setdefault("annotations", {})
        for k, v in notes.items():
            key = {"paused": PAUSED, "pinned": PAUSED_REPLICAS}[k]
            if v is None:
                current.pop(key, None)
            else:
                current[key] = v
        self.api.put(obj)

    def scale_writes(self) -> int:
        return len(
            [r for r in self.api.calls("PUT", "/statefulsets/") if r.path.endswith("/scale")]
        )

    def close(self) -> None:
        self.controller.close()
        self.kube.close()


@pytest.fixture()
def rig(tmp_path):
    with FakeKubeApi() as api:
        objs = Objects("ml")
        api.put(objs.statefulset("ctr-worker", 2, gpus=1))
        api.put(objs.statefulset("ctr-ps", 1))
        api.put(
            job_doc(
                target={"kind": "StatefulSet", "workers": "ctr-worker", "ps": "ctr-ps"},
                model="ctr-sync.json",
                max_workers=32,
            )
        )
        r = Rig(api, tmp_path)
        yield r
        r.close()


def test_kubectl_scale_round_trips_through_the_scale_subresource(rig):
    custom = rig.kube.custom
    with pytest.raises(ApiException) as missing:  # nothing pinned yet: as the real server
        custom.get_namespaced_custom_object_scale(*ETJ)
    assert missing.value.status == 500 and "spec.replicas" in missing.value.body
    # `kubectl scale etj ctr --replicas=6` is a merge patch on the scale subresource.
    out = custom.patch_namespaced_custom_object_scale(*ETJ, {"spec": {"replicas": 6}})
    assert out["spec"]["replicas"] == 6 and out["kind"] == "Scale"
    rig.ticks(2)
    assert rig.workers() == (6, 2)  # held at 6 workers, PS by workersPerPS = 4
    scale = custom.get_namespaced_custom_object_scale(*ETJ)
    assert scale["spec"]["replicas"] == 6
    assert scale["status"] == {"replicas": 6, "selector": "app=ctr-worker"}
    assert rig.status()["lastDecision"]["action"] == "pinned"
    assert rig.condition("Paused")["reason"] == "PinnedBySpecReplicas"
    # The retired v1 is not served any more: kubectl can only read the job as v1alpha1.
    with pytest.raises(ApiException) as retired:
        custom.get_namespaced_custom_object("kale.dev", "v1", "ml", "elastictrainingjobs", "ctr")
    assert retired.value.status == 404
    with pytest.raises(ApiException) as bad:  # the schema's bound holds on /scale too
        custom.patch_namespaced_custom_object_scale(*ETJ, {"spec": {"replicas": 20_000}})
    assert bad.value.status == 422
    # Unpin (`kubectl patch --type=merge -p '{"spec":{"replicas":null}}'`): the planner is back.
    custom.patch_namespaced_custom_object(*ETJ, {"spec": {"replicas": None}})
    rig.ticks(7)  # the pin's resize holds the planner for its rescale duration (5 min)
    assert rig.workers()[0] > 6
    assert rig.condition("Paused")["status"] == "False"


def test_a_paused_job_is_untouched_across_ticks(rig):
    rig.annotate(paused="true")
    rig.ticks(5)
    assert rig.workers() == (2, 1)
    assert rig.scale_writes() == 0
    paused = rig.condition("Paused")
    assert paused["status"] == "True" and paused["reason"] == "PausedByAnnotation"
    assert rig.status()["lastDecision"]["action"] == "paused"
    # A pin written meanwhile does not move a paused job either (pause is the stronger).
    rig.kube.custom.patch_namespaced_custom_object_scale(*ETJ, {"spec": {"replicas": 9}})
    rig.ticks(2)
    assert rig.workers() == (2, 1) and rig.scale_writes() == 0
    runtime = rig.controller.runtimes["ml/ctr"]
    rig.annotate(paused=None)
    rig.kube.custom.patch_namespaced_custom_object(*ETJ, {"spec": {"replicas": None}})
    rig.ticks(2)
    assert rig.workers()[0] > 2  # unpaused: the planner scales up at once
    # Pausing, pinning and unpausing never rebuilt the job (a rebuild refits its forecaster).
    assert rig.controller.runtimes["ml/ctr"] is runtime


def test_a_pinned_job_is_held_even_while_kafka_is_down(rig):
    rig.annotate(pinned="3")
    rig.ticks(3)
    assert rig.workers() == (3, 1)
    rig.metrics.down = True
    rig.annotate(pinned="5")
    rig.ticks(2)
    assert rig.workers() == (5, 2)  # a pin needs no metrics
    assert rig.condition("MetricsAvailable")["status"] == "False"
    rig.metrics.down = False
    rig.annotate(pinned="500")  # beyond maxWorkers: clamped, and said
    rig.ticks(2)
    assert rig.workers() == (32, 8)
    assert "clamped" in rig.condition("Paused")["message"]
    # every condition carries the generation it was computed for (API conventions)
    generation = rig.api.get("kale.dev/v1alpha1", "ElasticTrainingJob", "ml", "ctr")["metadata"][
        "generation"
    ]
    assert {c["observedGeneration"] for c in rig.status()["conditions"]} == {generation}


@pytest.mark.parametrize(
    ("annotations", "problem"),
    [
        ({PAUSED: "yes"}, f"metadata.annotations.{PAUSED}"),  # only "true"/"false"
        ({PAUSED_REPLICAS: "-1"}, f"metadata.annotations.{PAUSED_REPLICAS}"),  # negative
        ({PAUSED_REPLICAS: "three"}, f"metadata.annotations.{PAUSED_REPLICAS}"),  # not a number
        ({PAUSED_REPLICAS: "1e3"}, f"metadata.annotations.{PAUSED_REPLICAS}"),  # exponent
    ],
)
def test_malformed_pause_annotations_are_refused_by_name(annotations, problem):
    doc = job_doc()
    doc["metadata"]["annotations"] = annotations
    _, problems = parse_job(doc)
    assert [p for p, _ in problems] == [problem]


def test_well_formed_pause_annotations_are_accepted():
    doc = job_doc()
    doc["metadata"]["annotations"] = {PAUSED: "false", PAUSED_REPLICAS: "4"}
    _, problems = parse_job(doc)
    assert problems == []
