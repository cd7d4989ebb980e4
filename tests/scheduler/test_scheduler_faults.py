"""GPU fault history: counted per node and GPU over a window, read by a fault-aware policy."""

from __future__ import annotations

import datetime as dt
import json
import urllib.request

import pytest
from scheduler_harness import gpus_of, node_of, start_scheduler

from scheduler.faults import count_faults
from scheduler.objects import Conventions, parse_node
from scheduler.view import ClusterView
from tests.support.scheduler_fakes import FakeKubeApi, node_doc, pod_doc, wait_for

NOW = 1_767_225_600.0


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def faulty_node(name: str, records: list[tuple[int | None, float]], **kw) -> dict:
    ann = {
        "kale.dev/gpu-faults": json.dumps(
            [{"gpu": g, "time": iso(t), "reason": "Xid 79"} for g, t in records]
        )
    }
    return node_doc(name, annotations=ann, **kw)


def test_faults_are_counted_per_node_and_gpu_within_the_window():
    view = ClusterView()
    conv = Conventions()
    cond = {
        "type": "GPUUnhealthy",
        "status": "True",
        "reason": "XidStorm",
        "lastTransitionTime": iso(NOW - 60),
    }
    view.set_node(
        parse_node(faulty_node("a", [(3, NOW - 100), (3, NOW - 50), (1, NOW - 7200)]), conv)
    )
    view.set_node(parse_node(node_doc("b", conditions=[cond]), conv))
    view.set_node(parse_node(node_doc("c", annotations={"kale.dev/gpu-faults": "not json"}), conv))
    counts = count_faults(view, now=NOW, window_s=3600)
    assert counts.per_node == {"a": 2, "b": 1}
    assert counts.gpu("a", 3) == 2 and counts.gpu("a", 1) == 0 and counts.node("c") == 0
    assert count_faults(view, now=NOW, window_s=86400).gpu("a", 1) == 1


def test_fault_bestfit_on_the_cluster_avoids_a_node_with_recent_faults(tmp_path):
    with FakeKubeApi() as api:
        now = dt.datetime.now(dt.UTC).timestamp()
        # "a" would win BestFit (fuller), but GPU 0 failed twice a minute ago
        api.core.put_node(faulty_node("a", [(0, now - 60), (0, now - 30)], gpus=2))
        api.core.put_node(node_doc("b", gpus=8))
        run = start_scheduler(api, tmp_path, policy="fault-bestfit", faults={"window": "1h"})
        api.core.put_pod(pod_doc("p", gpus=1))
        wait_for(lambda: node_of(api, "p"))
        assert node_of(api, "p") == "b"
        api.core.put_node(node_doc("b", gpus=8, unschedulable=True))  # only "a" is left
        # the node watch is asynchronous: let the scheduler see the cordon before the pod
        wait_for(lambda: run.scheduler.view.nodes["b"].info.unschedulable, what="b cordoned")
        api.core.put_pod(pod_doc("q", gpus=1))
        wait_for(lambda: node_of(api, "q"))
        assert (node_of(api, "q"), gpus_of(api, "q")) == ("a", "1")  # its healthy GPU
        assert run.scheduler.metrics.gpu_faults._value.get() == 2
        run.stop()


@pytest.mark.parametrize("policy", ["fgd", "first-fit"])
def test_metrics_are_exported_with_prometheus_names(tmp_path, policy):
    with FakeKubeApi() as api:
        api.core.put_node(node_doc("n1", gpus=2))
        run = start_scheduler(api, tmp_path, policy=policy, metrics={"port": 0})
        api.core.put_pod(pod_doc("a", gpus=1, gpu_milli=500))
        api.core.put_pod(pod_doc("b", gpus=2))
        wait_for(lambda: node_of(api, "a"))
        wait_for(lambda: run.scheduler.metrics.pending._value.get() == 1)
        text = run.scheduler.metrics.render().decode()
        run.stop()
    for name in (
        "kale_scheduler_pending_pods 1.0",
        "kale_scheduler_scheduling_duration_seconds_count 1.0",
        f'kale_scheduler_decisions_total{{policy="{policy}",result="scheduled"}} 1.0',
        f'kale_scheduler_decisions_total{{policy="{policy}",result="unschedulable"}}',
        'kale_scheduler_bind_failures_total{reason="conflict"} 0.0',
        "kale_scheduler_gpu_allocation_ratio 0.25",
        "kale_scheduler_gpu_fragmentation_ratio",
        'kale_scheduler_watch_relists_total{resource="pods"} 1.0',
    ):
        assert name in text, name
    assert 'job="' not in text


def test_the_metrics_server_answers_probes(tmp_path):
    with FakeKubeApi() as api:
        api.core.put_node(node_doc("n1"))
        run = start_scheduler(api, tmp_path, metrics={"port": 0, "address": "127.0.0.1"})
        assert run.app.server is None  # port 0 disables it
        run.stop()
    from common.metrics_server import Health, MetricsServer

    server = MetricsServer(
        run.scheduler.metrics, Health(stale_after_s=60), address="127.0.0.1", port=0
    )
    server.start()
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics").read().decode()
        assert "kale_scheduler_bindings_total" in body
    finally:
        server.stop()
