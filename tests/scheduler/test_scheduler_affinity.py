"""Required node affinity in the node mask: nodeSelectorTerms as kube-scheduler reads them."""

from __future__ import annotations

import pytest

from kube.binding import BindOutcome
from scheduler.affinity import allows, parse_node_affinity
from scheduler.core import Scheduler, SchedulerSettings
from scheduler.objects import Conventions, parse_pod
from scheduler.placers import FirstFit
from tests.support.scheduler_fakes import node_doc, pod_doc


def required(*terms: dict) -> dict:
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
            }
        }
    }


def expr(key: str, operator: str, *values: str) -> dict:
    out: dict = {"key": key, "operator": operator}
    if values:
        out["values"] = list(values)
    return out


ZONE_A = {"zone": "a", "gpus-per-node": "8", "pool": "train"}
ZONE_B = {"zone": "b", "gpus-per-node": "4"}


@pytest.mark.parametrize(
    ("requirement", "on_a", "on_b"),
    [
        (expr("zone", "In", "a", "c"), True, False),
        (expr("zone", "NotIn", "a"), False, True),
        (expr("pool", "NotIn", "serve"), True, True),  # absent label: NotIn holds
        (expr("pool", "Exists"), True, False),
        (expr("pool", "DoesNotExist"), False, True),
        (expr("gpus-per-node", "Gt", "4"), True, False),
        (expr("gpus-per-node", "Lt", "8"), False, True),
        (expr("zone", "Gt", "1"), False, False),  # "a" is no integer: never matches
    ],
)
def test_each_operator(requirement: dict, on_a: bool, on_b: bool):
    affinity = parse_node_affinity(required({"matchExpressions": [requirement]}))
    assert (allows(affinity, "n-a", ZONE_A), allows(affinity, "n-b", ZONE_B)) == (on_a, on_b)


def test_terms_are_ored_requirements_anded_and_fields_name_the_node():
    both = required(
        {"matchExpressions": [expr("zone", "In", "a"), expr("pool", "In", "serve")]},
        {"matchFields": [expr("metadata.name", "In", "n-b")]},
    )
    affinity = parse_node_affinity(both)
    assert not allows(affinity, "n-a", ZONE_A)  # zone a but not pool serve
    assert allows(affinity, "n-b", ZONE_B)  # the second term, by name
    assert not allows(parse_node_affinity(required({})), "n-a", ZONE_A)  # an empty term
    assert parse_node_affinity({}) is None and allows(None, "any", {})


@pytest.mark.parametrize(
    ("requirement", "why"),
    [
        (expr("zone", "Near", "a"), "unsupported operator 'Near'"),
        (expr("zone", "In"), "In needs values"),
        (expr("zone", "Exists", "a"), "Exists takes no values"),
        (expr("gpus-per-node", "Gt", "four"), "Gt needs one integer value"),
    ],
)
def test_a_malformed_affinity_is_a_problem_of_the_pod(requirement: dict, why: str):
    doc = pod_doc("p")
    doc["spec"].update(required({"matchExpressions": [requirement]}))
    pod = parse_pod(doc, Conventions())
    assert pod.problem is not None and why in pod.problem


class Binder:
    def __init__(self) -> None:
        self.bound: dict[str, str] = {}

    def bind(self, pod, node, annotations):
        self.bound[pod.name] = node
        return BindOutcome("bound", node)


class Events:
    def __init__(self) -> None:
        self.failed: dict[str, str] = {}

    def pod_event(self, pod, *, reason, message, type):
        if reason == "FailedScheduling":
            self.failed[pod.name] = message


def test_the_scheduler_places_only_on_nodes_the_affinity_allows():
    binder, events = Binder(), Events()
    s = Scheduler(
        placer=FirstFit(),
        binder=binder,
        events=events,
        settings=SchedulerSettings(scheduled_events=False),
        clock=lambda: 1000.0,
    )
    for name, labels in (("n1", ZONE_B), ("n2", ZONE_A), ("n3", ZONE_A)):
        node = node_doc(name, gpus=8)
        node["metadata"]["labels"].update(labels)
        s.on_node("ADDED", node)
    pods = {
        "zone-a": required({"matchExpressions": [expr("zone", "In", "a")]}),
        "not-n2": required(
            {"matchExpressions": [expr("zone", "In", "a")]},
            {"matchFields": [expr("metadata.name", "NotIn", "n2")]},
        ),
        "nowhere": required({"matchExpressions": [expr("zone", "In", "z")]}),
    }
    for i, (name, spec) in enumerate(pods.items()):
        doc = pod_doc(name, gpus=1)
        doc["metadata"]["uid"] = f"uid-{i}"
        doc["spec"].update(spec)
        s.on_pod("ADDED", doc)
    s.schedule()
    # first-fit in name order: n1 (zone b) is skipped; the second term lets "not-n2" use n1
    assert binder.bound == {"zone-a": "n2", "not-n2": "n1"}
    assert events.failed == {
        "nowhere": "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    }
