"""The job's behaviour knobs in the controller, against the fake API server: fallback,
stabilization windows, schedules (the policy layer's wrapper, as in ``kale simulate``).

The controller runs on a fake clock with synthetic traffic; the workers' StatefulSet is
read and written through the official client, so what a test asserts is what the cluster
saw."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from autoscaler.actuators.statefulset import StatefulSetActuator
from autoscaler.controller.cluster_jobs import ClusterJobs
from autoscaler.controller.loop import Controller
from autoscaler.controller.metering import SummedMetricSource
from autoscaler.controller.settings import ControllerSettings
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

HIGH = 150_000.0  # the planner always wants more workers than it has
LOW = 5_000.0  # one or two workers carry it


class Rig:
    def __init__(
        self, api: FakeKubeApi, tmp_path, rate: Callable[[float], float], topics: int = 1
    ) -> None:
        self.api = api
        self.clock = FakeClock()
        self.kube = connect(
            kubeconfig=api.kubeconfig(tmp_path / "kc"),
            retry=RetryPolicy(attempts=2, sleep=lambda s: None),
        )
        self.metrics = TraceMetrics(self.clock, rate)
        # Several topics: each carries an equal share of the traffic (the job's sum is rate).
        self.topics = [TraceMetrics(self.clock, lambda t: rate(t) / topics) for _ in range(topics)]
        meter = (lambda e: self.metrics) if topics == 1 else self._summed
        crs = ElasticTrainingJobs(self.kube, namespaces=["ml"])
        self.controller = Controller(
            jobs_source=ClusterJobs(crs.list, models_dir=SYNC_MODEL.parent),
            meter_factory=meter,
            forecaster_factory=lambda e: make_forecaster("seasonal_naive", period=60),
            actuator_factory=lambda e: StatefulSetActuator(
                self.kube, namespace="ml", workers="ctr-worker", ps="ctr-ps"
            ),
            clock=self.clock,
            status_sink=crs,
            settings=ControllerSettings(identity="kale-0"),
        )

    def _summed(self, entry):
        assert len(entry.job.spec.source.kafka.topic_names) == len(self.topics)
        return SummedMetricSource(list(self.topics))

    def tick(self):
        (rep,) = self.controller.tick()
        self.clock.advance(60)
        return rep

    def workers(self) -> int:
        return self.api.get("apps/v1", "StatefulSet", "ml", "ctr-worker")["spec"]["replicas"]

    def status(self) -> dict:
        return self.api.get("kale.dev/v1alpha1", "ElasticTrainingJob", "ml", "ctr")["status"]

    def close(self) -> None:
        self.controller.close()
        self.kube.close()


def make_rig(
    tmp_path, spec: dict, rate: Callable[[float], float], workers: int = 2, topics: int = 1
):
    tmp_path.mkdir(parents=True, exist_ok=True)
    api = FakeKubeApi().__enter__()
    objs = Objects("ml")
    api.put(objs.statefulset("ctr-worker", workers, gpus=1))
    api.put(objs.statefulset("ctr-ps", -(-workers // 4)))
    doc = job_doc(
        target={"kind": "StatefulSet", "workers": "ctr-worker", "ps": "ctr-ps"},
        model="ctr-sync.json",
        max_workers=32,
    )
    doc["spec"].update(spec)
    if topics > 1:
        kafka = doc["spec"]["source"]["kafka"]
        kafka["topics"] = [f"ctr-{i}" for i in range(topics)]
        del kafka["topic"]
    api.put(doc)
    return api, Rig(api, tmp_path, rate, topics)


@pytest.fixture()
def rigs():
    made = []

    def build(tmp_path, spec, rate, workers=2, topics=1):
        api, rig = make_rig(tmp_path, spec, rate, workers, topics)
        made.append((api, rig))
        return rig

    yield build
    for api, rig in made:
        rig.close()
        api.__exit__(None, None, None)


def test_fallback_sizes_the_job_after_the_threshold_then_planning_resumes(tmp_path, rigs):
    rig = rigs(tmp_path, {"fallback": {"failureThreshold": 3, "workers": 6}}, lambda t: LOW)
    for _ in range(3):
        rig.tick()
    before = rig.workers()
    assert before != 6
    rig.metrics.down = True
    for n in (1, 2):  # below the threshold: held, counted
        rep = rig.tick()
        assert rep.action == "hold_metrics_unavailable", rep.reason
        assert f"({n} of 3 before the fallback)" in rep.reason["why"]
        assert rig.workers() == before
    rep = rig.tick()  # the third tick without metrics: the fallback size
    assert rep.action == "fallback" and rep.resized
    assert rig.workers() == 6
    assert "3 decisions without metrics" in rep.reason["fallback"]
    cond = {c["type"]: c for c in rig.status()["conditions"]}
    assert cond["MetricsAvailable"]["status"] == "False"
    rep = rig.tick()  # still blind: stays at the fallback size, no new write
    assert rep.action == "fallback" and not rep.resized and rig.workers() == 6
    rig.metrics.down = False
    rep = rig.tick()
    assert rep.action != "fallback" and rep.sample is not None


def test_without_a_fallback_missing_metrics_hold_forever(tmp_path, rigs):
    rig = rigs(tmp_path, {}, lambda t: HIGH)
    rig.tick()
    size = rig.workers()
    rig.metrics.down = True
    for _ in range(5):
        rep = rig.tick()
        assert rep.action == "hold_metrics_unavailable"
    assert rig.workers() == size


def test_a_scale_down_window_holds_until_every_recommendation_allows_it(tmp_path, rigs):
    level = [HIGH]  # the whole history follows it: the forecast agrees with the switch

    def rate(t: float) -> float:
        return level[0]

    spec = {"behavior": {"scaleDown": {"stabilizationWindow": "15m"}}}
    plain, held = rigs(tmp_path / "a", {}, rate), rigs(tmp_path / "b", spec, rate)
    for _ in range(8):
        plain.tick(), held.tick()
    assert plain.workers() == held.workers() > 2
    level[0] = LOW
    a, b = plain.tick(), held.tick()
    assert a.action == "scale_down" and a.resized  # without a window: at once
    assert b.action == "hold_stabilizing" and not b.resized
    assert "the 900s window's highest" in b.reason["stabilization"]
    status = held.status()
    assert "stabiliz" in str(status.get("lastDecision", status))
    for _ in range(13):  # 14 minutes: a recommendation of the high size is still in the window
        b = held.tick()
        assert b.action == "hold_stabilizing" and not b.resized
    b = held.tick()  # 15 minutes after the switch only low recommendations are left
    assert b.resized and b.desired.workers < b.current.workers
    assert held.workers() == plain.workers()


def test_a_scale_up_window_waits_for_the_lowest_recommendation_to_rise(tmp_path, rigs):
    level = [LOW]

    def rate(t: float) -> float:
        return level[0]

    rig = rigs(tmp_path, {"behavior": {"scaleUp": {"stabilizationWindow": "10m"}}}, rate)
    for _ in range(5):
        rig.tick()
    before = rig.workers()
    level[0] = HIGH
    reps = [rig.tick() for _ in range(12)]
    ups = [i for i, r in enumerate(reps) if r.resized and r.desired.workers > r.current.workers]
    assert reps[0].action == "hold_stabilizing" and "scale-up" in reps[0].reason["stabilization"]
    assert ups and ups[0] == 9, [r.action for r in reps]  # the low ones have aged out
    assert rig.workers() > before


def test_several_topics_are_sized_for_the_sum_of_their_rates(tmp_path, rigs):
    one = rigs(tmp_path / "one", {}, lambda t: HIGH)
    three = rigs(tmp_path / "three", {}, lambda t: HIGH, topics=3)
    for _ in range(6):
        a, b = one.tick(), three.tick()
        assert b.sample.arrival_rate == pytest.approx(a.sample.arrival_rate)
        assert b.sample.partitions == 3 * a.sample.partitions
    assert three.workers() == one.workers() > 2
    three.topics[1].down = True  # one topic cannot be measured: the job holds, and says why
    rep = three.tick()
    assert rep.action == "hold_metrics_unavailable"
    ready = {c["type"]: c for c in three.status()["conditions"]}["Ready"]
    assert ready["reason"] == "MetricsUnavailable" and "unreachable" in ready["message"]


@pytest.mark.parametrize(
    ("cron", "zone"),
    [("30 0 * * *", "UTC"), ("30 1 * * THU", "Europe/Paris")],  # 00:30 UTC on 2026-01-01
    ids=["utc", "paris"],
)
def test_a_schedule_holds_the_job_within_its_bounds_while_open(tmp_path, rigs, cron, zone):
    spec = {"schedules": [{"cron": cron, "timeZone": zone, "duration": "10m", "minWorkers": 12}]}
    rig = rigs(tmp_path, spec, lambda t: LOW)
    assert rig.clock() % 86400 == 0  # the fake clock starts at midnight UTC
    reps = [rig.tick() for _ in range(30)]  # 00:00 .. 00:29
    assert all(r.action != "schedule" for r in reps)
    assert rig.workers() < 12
    rep = rig.tick()  # 00:30: the window opens
    assert rep.action == "schedule" and rep.resized and rig.workers() == 12
    assert f"by {cron} ({zone})" in rep.reason["schedule"]
    for _ in range(9):  # 00:31 .. 00:39: held at the window's minimum
        rep = rig.tick()
        assert not rep.resized and rig.workers() == 12
    later = [rig.tick() for _ in range(30)]  # closed from 00:40: the planner may shrink it
    assert all("schedule" not in r.reason for r in later)
    assert any(r.resized and r.desired.workers < 12 for r in later)
