"""End to end: the controller resizes a job's StatefulSets, the fake's StatefulSet controller
creates (and deletes) the pods, and ``kale scheduler`` places every new pod with FGD on a
120-node cluster of the openb trace's shape (placement's seeded generator)."""

from __future__ import annotations

from collections import defaultdict

import pytest
from scheduler_harness import events, start_scheduler

from autoscaler.actuators.statefulset import StatefulSetActuator
from autoscaler.controller.loop import Controller
from autoscaler.policy.quota import ResourceManager
from forecasting.registry import make_forecaster
from kube.client import RetryPolicy, connect
from placement.workloads.generate import generate_nodes, generate_pods
from tests.support.controller_fakes import T0, FakeClock, Objects, TraceMetrics, job_doc
from tests.support.scheduler_fakes import FakeKubeApi, node_doc, pod_doc, wait_for

pytestmark = pytest.mark.slow


def rate(t: float) -> float:
    return 30_000.0 if (t - T0) % 3600 < 1800 else 140_000.0  # half an hour low, then high


def statefulset(name: str, replicas: int, *, gpus: int) -> dict:
    sts = Objects("ml").statefulset(name, replicas, gpus=gpus)
    pod_spec = sts["spec"]["template"]["spec"]
    pod_spec["schedulerName"] = "kale"  # what manifests/examples/ do
    resources = pod_spec["containers"][0]["resources"]
    resources["requests"] = {"cpu": "4", "memory": "16Gi", **resources.get("limits", {})}
    return sts


def test_the_controller_resizes_and_kale_scheduler_places_every_new_pod_with_fgd(tmp_path):
    with FakeKubeApi() as api:
        api.core.statefulset_pods = True
        api.core.bookmark_interval_s = 0.5
        nodes = generate_nodes(120, seed=11)
        for n in nodes:
            api.core.put_node(
                node_doc(
                    n.name,
                    gpus=n.gpus,
                    model=n.model,
                    cpu_milli=n.cpu_milli,
                    memory_mib=n.memory_mib,
                )
            )
        run = start_scheduler(api, tmp_path, policy="fgd")
        # the cluster's other work, placed by kale too (and FGD's typical pods)
        background = generate_pods(300, seed=12)
        for p in background:
            api.core.put_pod(
                pod_doc(
                    p.name,
                    namespace="batch",
                    gpus=p.num_gpu,
                    gpu_milli=p.gpu_milli if p.num_gpu else None,
                    cpu_milli=p.cpu_milli,
                    memory_mib=p.memory_mib,
                )
            )
        api.put(statefulset("ctr-worker", 2, gpus=1))
        api.put(statefulset("ctr-ps", 1, gpus=0))
        api.put(
            job_doc(
                target={"kind": "StatefulSet", "workers": "ctr-worker", "ps": "ctr-ps"},
                model="ctr-sync.json",
            )
        )
        kube = connect(
            kubeconfig=api.kubeconfig(tmp_path / "kc-controller"),
            retry=RetryPolicy(attempts=2, sleep=lambda s: None),
        )
        clock = FakeClock(T0 + 86400)
        from autoscaler.controller.cluster_jobs import ClusterJobs
        from kube.custom_resources import ElasticTrainingJobs
        from tests.support.controller_fakes import SYNC_MODEL

        crs = ElasticTrainingJobs(kube, namespaces=["ml"])
        controller = Controller(
            jobs_source=ClusterJobs(crs.list, models_dir=SYNC_MODEL.parent),
            meter_factory=lambda e: TraceMetrics(clock, rate, history_start=T0 - 86400),
            forecaster_factory=lambda e: make_forecaster("seasonal_naive", period=60),
            actuator_factory=lambda e: StatefulSetActuator(
                kube, namespace="ml", workers="ctr-worker", ps="ctr-ps"
            ),
            resource_manager=ResourceManager(64),
            clock=clock,
            status_sink=crs,
        )

        def job_pods() -> list[dict]:
            return [p for p in api.core.objects("pods") if p["metadata"]["namespace"] == "ml"]

        def settled() -> bool:  # every pod placed, or reported as fitting nowhere
            told = {e["involvedObject"]["name"] for e in events(api, "FailedScheduling")}
            pods = api.core.objects("pods")
            return bool(pods) and all(
                p["spec"].get("nodeName") or p["metadata"]["name"] in told for p in pods
            )

        sizes = []
        try:
            wait_for(settled, timeout=60, what="the background pods placed")
            bound_background = len(api.core.bindings)
            for _ in range(70):  # 70 minutes: low, high, low again; between two ticks (a
                controller.tick()  # minute) the scheduler places what the resize created
                sizes.append(
                    api.get("apps/v1", "StatefulSet", "ml", "ctr-worker")["spec"]["replicas"]
                )
                wait_for(
                    lambda: all(p["spec"].get("nodeName") for p in job_pods()),
                    timeout=30,
                    what="every job pod bound",
                )
                clock.advance(60)
        finally:
            controller.close()
            kube.close()
            run.stop()
        created = {n for ns, n, _ in api.core.bindings if ns == "ml"}

    assert len(nodes) >= 100
    assert max(sizes) > 2 and sizes[-1] < max(sizes), " ".join(map(str, sizes))  # up, down
    workers_ever = {f"ctr-worker-{i}" for i in range(max(sizes))}
    assert workers_ever <= created  # every pod the resizes created was placed
    for pod in job_pods():
        ann = pod["metadata"]["annotations"]
        assert ann["kale.dev/placement-policy"] == "fgd"
        if pod["metadata"]["name"].startswith("ctr-worker"):
            assert len(ann["kale.dev/gpus"].split(",")) == 1
    held: dict[tuple[str, int], int] = defaultdict(int)
    for pod in api.core.objects("pods"):
        ann = pod["metadata"]["annotations"]
        if pod["spec"].get("nodeName") and ann.get("kale.dev/gpus"):
            milli = int(ann.get("kale.dev/gpu-milli", 1000))
            for g in ann["kale.dev/gpus"].split(","):
                held[(pod["spec"]["nodeName"], int(g))] += milli
    assert max(held.values()) <= 1000
    assert bound_background > 200
    # the pods removed by the scale-down left the scheduler's books
    live = {p["metadata"]["uid"] for p in api.core.objects("pods")}
    assert set(run.scheduler.view.placements) <= live
