"""The scheduler's core on a fake clock: queue order, retries, assumptions (no API server)."""

from __future__ import annotations

from kube.binding import BindOutcome
from scheduler.core import Scheduler, SchedulerSettings
from scheduler.placers import FirstFit
from tests.support.scheduler_fakes import node_doc, pod_doc


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Binder:
    def __init__(self) -> None:
        self.bound: list[tuple[str, str]] = []
        self.answers: list[BindOutcome] = []

    def bind(self, pod, node, annotations):
        out = self.answers.pop(0) if self.answers else BindOutcome("bound", node)
        if out.status == "bound":
            self.bound.append((pod.name, node))
        return out


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def pod_event(self, pod, *, reason, message, type):
        self.seen.append((pod.name, reason, message))


def make(**settings):
    clock, binder, events = Clock(), Binder(), Events()
    s = Scheduler(
        placer=FirstFit(),
        binder=binder,
        events=events,
        settings=SchedulerSettings(
            backoff_initial_s=1, backoff_max_s=8, flush_s=60, scheduled_events=False, **settings
        ),
        clock=clock,
    )
    return s, clock, binder, events


def uid(pod: dict, name: str) -> dict:
    pod["metadata"]["uid"] = f"uid-{name}"
    return pod


def test_higher_priority_first_then_arrival_order():
    s, _, binder, _ = make()
    s.on_node("SYNC", [node_doc("n1", gpus=2)])
    s.on_pod("ADDED", uid(pod_doc("low", gpus=2), "low"))
    s.on_pod("ADDED", uid(pod_doc("high", gpus=2, priority=100), "high"))
    s.on_pod("ADDED", uid(pod_doc("later", gpus=2, priority=100), "later"))
    assert s.schedule() == 1
    assert binder.bound == [("high", "n1")]


def test_an_unschedulable_pod_waits_for_a_change_and_its_backoff():
    s, clock, binder, events = make()
    s.on_node("SYNC", [node_doc("n1", gpus=1)])
    s.on_pod("ADDED", uid(pod_doc("p", gpus=2), "p"))
    s.schedule()  # t=1000: fails; first backoff 1 s
    assert events.seen[-1][1] == "FailedScheduling" and binder.bound == []
    s.on_pod("ADDED", uid(pod_doc("other", node="n1", scheduler="x"), "other"))
    clock.t += 0.5
    s.schedule()  # a binding elsewhere is no reason to retry
    tries = s.metrics.decisions.labels(policy="first-fit", result="unschedulable")
    assert len(events.seen) == 1 and tries._value.get() == 1
    s.on_node("MODIFIED", node_doc("n1", gpus=2))  # grew: a reason, but the backoff runs
    s.schedule()
    assert binder.bound == [] and s.next_wakeup() == 0.5
    clock.t += 0.5
    s.schedule()
    assert binder.bound == [("p", "n1")]


def test_a_long_parked_pod_is_retried_after_the_flush_interval():
    s, clock, _, _ = make()
    s.on_node("SYNC", [node_doc("n1", gpus=1)])
    s.on_pod("ADDED", uid(pod_doc("p", gpus=2), "p"))
    s.schedule()
    tries = s.metrics.decisions.labels(policy="first-fit", result="unschedulable")
    assert tries._value.get() == 1
    clock.t += 61
    s.schedule()
    assert tries._value.get() == 2
    assert s.next_wakeup() is not None


def test_an_assumed_pod_is_not_placed_again_on_a_stale_event():
    s, _, binder, _ = make()
    s.on_node("SYNC", [node_doc("n1", gpus=2)])
    pod = uid(pod_doc("p", gpus=1), "p")
    s.on_pod("ADDED", pod)
    s.schedule()
    s.on_pod("MODIFIED", pod)  # an older, unbound version arriving after the binding
    s.schedule()
    assert binder.bound == [("p", "n1")] and s.view.gpu_milli() == (1000, 2000)
    bound = uid(pod_doc("p", gpus=1, node="n1", annotations={"kale.dev/gpus": "0"}), "p")
    s.on_pod("MODIFIED", bound)  # the watch confirms
    assert s.assumed == {} and s.view.gpu_milli() == (1000, 2000)
    s.on_pod("DELETED", bound)
    assert s.view.gpu_milli() == (0, 2000)


def test_a_failed_binding_releases_the_hold_and_retries_after_backoff():
    s, clock, binder, _ = make()
    s.on_node("SYNC", [node_doc("n1", gpus=1)])
    s.on_pod("ADDED", uid(pod_doc("p", gpus=1), "p"))
    binder.answers = [BindOutcome("failed", message="HTTP 503 after 5 tries")]
    assert s.schedule() == 0
    assert s.view.gpu_milli() == (0, 1000) and s.assumed == {}
    clock.t += 1.1
    assert s.schedule() == 1 and binder.bound == [("p", "n1")]


def test_a_choice_its_rule_made_is_counted_by_reason():
    from scheduler.placers import Choice

    class RuleMade(FirstFit):
        name = "agent:a.pt,fallback=bestfit"

        def place(self, pod, eligible, faults):
            choice = super().place(pod, eligible, faults)
            return None if choice is None else Choice(choice.node, choice.gpus, "out_of_range")

    s, _, binder, _ = make()
    s.placer = RuleMade()
    s.placer.attach(s.view)
    s.on_node("SYNC", [node_doc("n1", gpus=1)])
    s.on_pod("ADDED", uid(pod_doc("a", gpus=1), "a"))
    assert s.schedule() == 1
    assert binder.bound == [("a", "n1")]
    counted = s.metrics.fallback_decisions.labels(policy=RuleMade.name, reason="out_of_range")
    assert counted._value.get() == 1
