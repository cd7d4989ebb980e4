"""GPU shares are never over-committed: the assignment rides on every Binding
(``kale.dev/gpu-assignment``), a restarted scheduler rebuilds each GPU's milli from the
bound pods' annotations (whoever bound them), and every choice is checked before binding."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import pytest
from scheduler_harness import node_of, start_scheduler

from scheduler.faults import FaultCounts
from scheduler.objects import PodInfo
from scheduler.placers import Choice
from scheduler.view import ClusterView
from tests.support.scheduler_fakes import FakeKubeApi, node_doc, pod_doc, wait_for

ASSIGNMENT = "kale.dev/gpu-assignment"


@pytest.fixture()
def api():
    with FakeKubeApi() as fake:
        fake.core.bookmark_interval_s = 0.2
        yield fake


def assignment(api: FakeKubeApi, name: str) -> str | None:
    return (
        (api.core.pod("ml", name) or {}).get("metadata", {}).get("annotations", {}).get(ASSIGNMENT)
    )


def gpu_load(api: FakeKubeApi) -> dict[tuple[str, int], int]:
    """Milli per (node, GPU) summed over the bound pods' assignment annotations."""
    load: dict[tuple[str, int], int] = defaultdict(int)
    for pod in api.core.objects("pods"):
        text = pod["metadata"].get("annotations", {}).get(ASSIGNMENT)
        if pod["spec"].get("nodeName") and text:
            for part in text.split(","):
                g, m = part.split(":")
                load[(pod["spec"]["nodeName"], int(g))] += int(m)
    return load


def test_every_binding_carries_the_gpu_assignment_for_a_device_plugin(api, tmp_path):
    api.core.put_node(node_doc("n1", gpus=4))
    run = start_scheduler(api, tmp_path)
    api.core.put_pod(pod_doc("whole", gpus=2))
    api.core.put_pod(pod_doc("share", gpus=1, gpu_milli=300))
    api.core.put_pod(pod_doc("cpu-only"))
    wait_for(lambda: all(node_of(api, n) for n in ("whole", "share", "cpu-only")))
    run.stop()
    assert assignment(api, "whole") == "0:1000,1:1000"
    assert assignment(api, "share") == "2:300"
    assert assignment(api, "cpu-only") is None  # no GPU, nothing to enforce
    ann = api.core.pod("ml", "whole")["metadata"]["annotations"]
    assert ann["kale.dev/gpus"] == "0,1"  # the indices, as before
    # written by the Binding itself: one write, no PATCH of the pod
    assert not api.calls("PATCH", "/pods/whole") and len(api.calls("POST", "/binding")) == 3


def test_a_restarted_scheduler_rebuilds_every_gpus_shares_from_the_annotations(api, tmp_path):
    api.core.put_node(node_doc("n1", gpus=2))
    first = start_scheduler(api, tmp_path)
    api.core.put_pod(pod_doc("a", gpus=1, gpu_milli=500))
    wait_for(lambda: node_of(api, "a"), what="the first binding")
    first.stop()
    # while it is down another scheduler binds a pod, recording its share the same way: on
    # GPU 1, where a guess from the pod alone (the fullest GPU that fits: 0) would not put it
    other = pod_doc("b", gpus=1, gpu_milli=400, scheduler="other", node="n1")
    other["metadata"]["annotations"][ASSIGNMENT] = "1:400"
    api.core.put_pod(other)
    second = start_scheduler(api, tmp_path)
    for name, milli in (("c", 500), ("d", 600), ("e", 300)):
        api.core.put_pod(pod_doc(name, gpus=1, gpu_milli=milli))
    wait_for(lambda: node_of(api, "c") and node_of(api, "d"), what="c and d bound")
    wait_for(lambda: len(second.scheduler.outcomes) == 3, what="e tried")
    second.stop()
    assert (assignment(api, "c"), assignment(api, "d")) == ("0:500", "1:600")
    assert node_of(api, "e") is None  # 300 fits on no GPU any more
    assert gpu_load(api) == {("n1", 0): 1000, ("n1", 1): 1000}


class Stubborn:
    """A placer that insists on GPU 0 of the first node, whatever holds it (a broken or
    learned policy): the check before binding must catch it."""

    name = "stubborn"

    def __init__(self) -> None:
        self.view = ClusterView()

    def attach(self, view: ClusterView) -> None:
        self.view = view

    def place(self, pod: PodInfo, eligible: Sequence[str], faults: FaultCounts) -> Choice | None:
        return Choice(eligible[0], (0,)) if eligible else None


def test_a_choice_that_would_over_commit_a_gpu_is_never_bound(api, tmp_path):
    api.core.put_node(node_doc("n1", gpus=2))
    held = pod_doc("held", gpus=1, gpu_milli=700, scheduler="other", node="n1")
    held["metadata"]["annotations"][ASSIGNMENT] = "0:700"
    api.core.put_pod(held)
    run = start_scheduler(api, tmp_path, placer=Stubborn())
    api.core.put_pod(pod_doc("new", gpus=1, gpu_milli=500))
    refused = run.scheduler.metrics.bind_failures.labels(reason="overcommit")
    wait_for(lambda: refused._value.get() >= 2, what="the choice refused, and again on retry")
    run.stop()
    assert node_of(api, "new") is None and not api.calls("POST", "/binding")
    outcome = run.scheduler.outcomes[api.core.pod("ml", "new")["metadata"]["uid"]]
    assert outcome.result == "error"
    assert "GPU 0 of node n1 would hold 1200 thousandths" in outcome.detail
