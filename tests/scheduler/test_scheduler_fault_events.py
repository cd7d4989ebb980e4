"""Xid-style Events on Nodes count as GPU faults: parsed, counted over the window, watched."""

from __future__ import annotations

import datetime as dt

import pytest
from kubernetes.client.exceptions import ApiException
from scheduler_harness import gpus_of, node_of, start_scheduler

from kube.client import RetryPolicy, connect
from kube.informer import Reflector, start
from scheduler.faults import (
    EventFaults,
    FaultSeries,
    count_faults,
    next_expiry,
    parse_fault_event,
)
from scheduler.objects import Conventions, parse_node
from scheduler.view import ClusterView
from tests.support.kube_objects import node_event_doc
from tests.support.scheduler_fakes import FakeKubeApi, node_doc, pod_doc, wait_for

NOW = 1_767_225_600.0
CONV = Conventions()


def event(node: str = "a", **kw) -> dict:
    doc = node_event_doc(node, **kw)
    doc["metadata"]["uid"] = doc["metadata"]["name"]
    return doc


def test_an_xid_event_is_a_fault_of_the_gpu_it_names_or_of_the_node():
    pci_only = parse_fault_event(event(first=NOW - 60), CONV)
    assert pci_only == FaultSeries("a", None, NOW - 60, NOW - 60, 1, "XidError")
    named = event(first=NOW, message="GPU 3: Xid 48 (double-bit ECC error)", reason="GPUXid")
    assert parse_fault_event(named, CONV).gpu == 3
    annotated = event(first=NOW, annotations={"kale.dev/gpu": "5"})
    assert parse_fault_event(annotated, CONV).gpu == 5
    other_reason = event(first=NOW, reason="NodeHasSufficientMemory")
    on_a_pod = dict(event(first=NOW), involvedObject={"kind": "Pod", "name": "p"})
    no_time = dict(event(first=NOW), firstTimestamp=None, lastTimestamp=None)
    assert [parse_fault_event(e, CONV) for e in (other_reason, on_a_pod, no_time)] == [None] * 3
    new_style = dict(event(first=NOW), firstTimestamp=None, lastTimestamp=None, count=None)
    new_style.update(
        eventTime="2026-01-01T00:00:00.250000Z",
        series={"count": 4, "lastObservedTime": "2026-01-01T00:03:00.000000Z"},
    )
    series = parse_fault_event(new_style, CONV)
    assert (series.first, series.last, series.count) == (NOW + 0.25, NOW + 180, 4)


def test_an_aggregated_event_counts_its_occurrences_inside_the_window():
    # seen 5 times, evenly from NOW-400 to NOW: at -400, -300, -200, -100, 0
    series = FaultSeries("a", 1, NOW - 400, NOW, 5, "XidError")
    assert series.between(NOW - 250, NOW) == 3
    assert series.between(NOW - 400, NOW) == 5
    assert series.between(NOW + 1, NOW + 500) == 0
    assert series.next_after(NOW - 250) == NOW - 200
    assert FaultSeries("a", None, NOW, NOW, 1, "x").between(NOW - 1, NOW) == 1
    view = ClusterView()
    view.set_node(parse_node(node_doc("a"), CONV))
    faults = EventFaults()
    faults.apply("SYNC", [event(first=NOW - 400, last=NOW, count=5, message="GPU 1 Xid 79")], CONV)
    counts = count_faults(view, now=NOW, window_s=250, events=faults)
    assert counts.per_node == {"a": 3} and counts.gpu("a", 1) == 3
    # the oldest of the three (at -200) leaves the window 250 s after it happened
    assert next_expiry(view, now=NOW, window_s=250, events=faults) == pytest.approx(NOW + 50)


def test_a_deleted_event_keeps_its_fault_until_it_leaves_the_window():
    faults = EventFaults()
    doc = event(first=NOW - 60)
    assert faults.apply("ADDED", doc, CONV)
    assert not faults.apply("ADDED", doc, CONV)  # nothing new
    faults.apply("DELETED", doc, CONV)  # the API server's event TTL, not a repair
    faults.apply("SYNC", [], CONV)  # a re-list after the TTL: still remembered
    assert len(faults.by_uid) == 1
    faults.prune(before=NOW - 30)
    assert faults.by_uid == {}


def test_the_fake_serves_events_with_field_selectors_and_watches(tmp_path):
    with FakeKubeApi() as api:
        api.core.bookmark_interval_s = 0.1
        kube = connect(kubeconfig=api.kubeconfig(tmp_path / "kc"), retry=RetryPolicy(attempts=1))
        seen: list[tuple[str, object]] = []
        node_events = Reflector(
            kube,
            "events",
            lambda kind, obj: seen.append((kind, obj)),
            field_selector="involvedObject.kind=Node",
            retry=RetryPolicy(base_s=0.05, max_s=0.2, jitter=0),
        )
        api.core.put_event(event("a", first=NOW, name="a.1"))
        pod_event = dict(event("a", first=NOW, name="p.1"))
        pod_event["involvedObject"] = {"kind": "Pod", "name": "p", "namespace": "default"}
        api.core.put_event(pod_event)
        thread = start(node_events)
        try:
            wait_for(node_events.synced.is_set)
            assert [(k, [o["metadata"]["name"] for o in objs]) for k, objs in seen] == [
                ("SYNC", ["a.1"])
            ]
            api.core.put_event(event("a", first=NOW, last=NOW + 60, count=2, name="a.1"))
            api.core.put_event(event("b", first=NOW + 5, name="b.1"))
            wait_for(lambda: len(seen) == 3, what="the two changes")
            assert [(k, o["metadata"]["name"]) for k, o in seen[1:]] == [
                ("MODIFIED", "a.1"),
                ("ADDED", "b.1"),
            ]
            assert seen[1][1]["count"] == 2
            assert {e["metadata"]["name"] for e in api.list("v1", "Event")} == {
                "a.1",
                "p.1",
                "b.1",
            }
            with pytest.raises(ApiException) as bad:  # not a field label of events
                kube.core.list_event_for_all_namespaces(field_selector="spec.nodeName=a")
            assert bad.value.status == 400
        finally:
            node_events.stop()
            thread.join(timeout=10)
            kube.close()


def test_fault_bestfit_avoids_a_node_whose_gpu_had_xid_events(tmp_path):
    now = dt.datetime.now(dt.UTC).timestamp()
    with FakeKubeApi() as api:
        api.core.put_node(node_doc("a", gpus=2))  # BestFit's choice: the fuller node
        api.core.put_node(node_doc("b", gpus=8))
        # GPU 0 of "a": an Xid seen three times in the last minute (one aggregated Event)
        xid = event("a", first=now - 60, last=now - 10, count=3, message="GPU 0: Xid 79")
        api.core.put_event(xid)
        run = start_scheduler(api, tmp_path, policy="fault-bestfit", faults={"window": "1h"})
        wait_for(lambda: run.scheduler.fault_events.by_uid, what="the Xid event")
        api.core.put_pod(pod_doc("p", gpus=1))
        wait_for(lambda: node_of(api, "p"))
        assert node_of(api, "p") == "b"
        api.core.put_node(node_doc("b", gpus=8, unschedulable=True))  # only "a" is left
        wait_for(lambda: run.scheduler.view.nodes["b"].info.unschedulable, what="the cordon")
        api.core.put_pod(pod_doc("q", gpus=1))
        wait_for(lambda: node_of(api, "q"))
        assert (node_of(api, "q"), gpus_of(api, "q")) == ("a", "1")  # its healthy GPU
        api.core.delete_event("default", xid["metadata"]["name"])  # the Event's TTL
        (watch,) = [r for r in run.app.reflectors if r.resource == "events"]
        wait_for(lambda: watch.stats.by_type.get("DELETED"), what="the deletion")
        assert run.scheduler.faults(now).gpu("a", 0) == 3
        run.stop()
