"""Two controller replicas on one (fake) cluster: one acts, one waits, the standby takes over.

Everything runs on a fake clock: each replica's Runner is stepped when its own wait is over,
as two processes would be; Kafka is replaced by synthetic traffic whose backlog depends on
the worker StatefulSet's replicas in the fake API server.
"""

from __future__ import annotations

import pytest

from autoscaler.actuators.statefulset import StatefulSetActuator
from autoscaler.controller.cluster_jobs import ClusterJobs
from autoscaler.controller.loop import Controller
from autoscaler.controller.runner import Runner
from autoscaler.controller.settings import ControllerSettings
from autoscaler.policy.quota import ResourceManager
from forecasting.registry import make_forecaster
from kube.client import RetryPolicy, connect
from kube.custom_resources import ElasticTrainingJobs
from kube.events import EventRecorder
from kube.leader import LeaderElector
from tests.support.controller_fakes import (
    SYNC_MODEL,
    T0,
    FakeClock,
    FakeKubeApi,
    Objects,
    TraceMetrics,
    job_doc,
)
from throughput.model import ThroughputModel

MODEL = ThroughputModel.load(SYNC_MODEL)


def rate(t: float) -> float:
    return 30_000.0 if (t - T0) % 3600 < 1800 else 120_000.0  # half an hour low, then high


@pytest.fixture()
def api():
    with FakeKubeApi() as fake:
        objs = Objects("ml")
        fake.put(objs.statefulset("ctr-worker", 2, gpus=1))
        fake.put(objs.statefulset("ctr-ps", 1))
        # A 1-minute resize and a 3-minute SLO: following the square wave (down for the low
        # half hour, up for the high one) is cheaper than holding one size through it, which
        # a 5-minute resize and a 10-minute SLO would make the cheapest plan.
        doc = job_doc(
            target={"kind": "StatefulSet", "workers": "ctr-worker", "ps": "ctr-ps"},
            model="ctr-sync.json",
            rescale="1m",
            slo="3m",
        )
        doc["spec"]["rescale"]["maxPerHour"] = 6  # the square wave needs more than the default 2
        fake.put(doc)
        yield fake


class Replica:
    def __init__(self, name: str, api: FakeKubeApi, clock: FakeClock, tmp_path) -> None:
        self.kube = connect(
            kubeconfig=api.kubeconfig(tmp_path / f"kc-{name}"),
            retry=RetryPolicy(attempts=2, sleep=lambda s: None),
        )
        self.api = api
        crs = ElasticTrainingJobs(self.kube, namespaces=["ml"])
        self.controller = Controller(
            jobs_source=ClusterJobs(crs.list, models_dir=SYNC_MODEL.parent),
            meter_factory=lambda e: TraceMetrics(
                clock, rate, history_start=T0 - 86400, capacity=self.capacity
            ),
            forecaster_factory=lambda e: make_forecaster("seasonal_naive", period=60),
            actuator_factory=lambda e: StatefulSetActuator(
                self.kube,
                namespace=e.namespace,
                workers=e.job.spec.target.workers,
                ps=e.job.spec.target.ps,
            ),
            resource_manager=ResourceManager(64),
            clock=clock,
            status_sink=crs,
            event_sink=EventRecorder(self.kube, instance=name, clock=clock),
            settings=ControllerSettings(identity=name),
        )
        self.elector = LeaderElector(
            self.kube,
            namespace="kale-system",
            identity=name,
            lease_duration_s=60,
            renew_deadline_s=40,
            retry_period_s=20,
            clock=clock,
        )
        self.runner = Runner(self.controller, interval_s=60, elector=self.elector, clock=clock)
        self.due = clock()
        self.alive = True

    def capacity(self) -> float:
        w = self.api.get("apps/v1", "StatefulSet", "ml", "ctr-worker")["spec"]["replicas"]
        return MODEL.throughput(w, -(-w // 4), warn=False)

    def close(self) -> None:
        self.controller.close()
        self.kube.close()


def run(replicas: list[Replica], clock: FakeClock, seconds: float) -> None:
    end = clock() + seconds
    while clock() < end:
        for r in replicas:
            if r.alive and clock() >= r.due:
                r.due = clock() + r.runner.step()
        clock.advance(1)


def job_status(api):
    return api.get("kale.dev/v1alpha1", "ElasticTrainingJob", "ml", "ctr").get("status", {})


def test_one_replica_acts_the_other_waits_and_takes_over_when_it_dies(api, tmp_path):
    clock = FakeClock(T0 + 86400)
    a, b = Replica("kale-a", api, clock, tmp_path), Replica("kale-b", api, clock, tmp_path)
    try:
        run([a, b], clock, 4500)  # low, high, and half of the next low
        assert a.runner.ticks >= 70 and b.runner.ticks == 0
        lease = api.get("coordination.k8s.io/v1", "Lease", "kale-system", "kale-controller")
        assert lease["spec"]["holderIdentity"] == "kale-a"
        assert job_status(api)["controller"] == "kale-a"
        # The scale followed the plan: up for the high hour, down after it.
        writes = [r.body["spec"]["replicas"] for r in api.calls("PUT", "ctr-worker/scale")]
        assert max(writes) > 2 and writes[-1] < max(writes)
        events = api.list("v1", "Event", "ml")
        assert {"ScaledUp", "ScaledDown"} <= {e["reason"] for e in events}
        assert all(e["source"]["host"] == "kale-a" for e in events)

        # Kill the leader: it stops without releasing the lease.
        a.alive = False
        state_before = dict(job_status(api)["plannerState"])
        writes_before = len(api.calls("PUT", "ctr-worker/scale"))
        run([b], clock, 50)
        assert b.runner.ticks == 0  # the lease has not expired yet as b observed it
        run([b], clock, 40)
        assert b.runner.leader and b.runner.ticks >= 1
        lease = api.get("coordination.k8s.io/v1", "Lease", "kale-system", "kale-controller")
        assert lease["spec"]["holderIdentity"] == "kale-b"
        assert lease["spec"]["leaseTransitions"] == 1
        assert job_status(api)["controller"] == "kale-b"
        # b resumed from the state a left in the status (a quiet time: nothing to resize).
        rt = b.controller.runtimes["ml/ctr"]
        assert state_before["resize_started"] is not None
        assert rt.state.resize_started == state_before["resize_started"]
        assert rt.state.resize_to == state_before["resize_to"]
        run([b], clock, 3600)  # b keeps following the load on its own
        assert len(api.calls("PUT", "ctr-worker/scale")) > writes_before
    finally:
        a.close()
        b.close()


def test_a_clean_shutdown_releases_the_lease_for_an_immediate_handover(api, tmp_path):
    clock = FakeClock(T0 + 86400)
    a, b = Replica("kale-a", api, clock, tmp_path), Replica("kale-b", api, clock, tmp_path)
    try:
        run([a, b], clock, 30)
        a.runner.stop()
        a.runner.run()  # stops at once and releases
        a.alive = False
        run([b], clock, 21)
        assert b.runner.leader and b.runner.ticks == 1
    finally:
        a.close()
        b.close()
