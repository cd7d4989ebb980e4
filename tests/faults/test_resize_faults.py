"""Resizes under API faults: partial writes, restarts between them, 409/429/5xx, slow and
lost answers — through the official client against the fake API server, on a fake clock.

What must hold: a half-done resize is finished (rolled forward) on the next tick, in this
process or the next, and never planned again on top of itself — each StatefulSet changes
once per resize (no double resize); and resizes of different jobs run concurrently, within
the configured bound.
"""

from __future__ import annotations

import pytest

from autoscaler.controller.settings import ControllerSettings
from tests.support.fault_fakes import ClusterRig, FakeKubeApi


@pytest.fixture
def api():
    with FakeKubeApi() as fake:
        yield fake


def test_a_partial_resize_is_rolled_forward_on_the_next_tick(api, tmp_path):
    rig = ClusterRig(api, tmp_path, store=tmp_path / "state.sqlite")
    # The PS write goes through; every try of the worker write fails (5 × 503).
    api.fail(503, method="PUT", path="/statefulsets/job0-worker/scale", times=5)
    (rep,) = rig.tick().values()
    assert rep.action == "resize_failed" and not rep.resized
    pending = rig.status("job0")["plannerState"]["pending"]
    assert pending["from"] == [1, 1] and pending["to"][1] > 1
    assert rig.changes("job0-ps") == [pending["to"][1]] and rig.changes("job0-worker") == []
    conds = {c["type"]: c for c in rig.status("job0")["conditions"]}
    assert conds["Resizing"]["reason"] == "ResizeUnfinished"
    (rep,) = rig.tick().values()
    assert rep.action == "resize_completed" and rep.resized
    assert rig.changes("job0-worker") == [pending["to"][0]]
    assert rig.changes("job0-ps") == [pending["to"][1]]  # not written twice, not rolled back
    assert "pending" not in rig.status("job0")["plannerState"] or not rig.status("job0")[
        "plannerState"
    ].get("pending")
    assert len(rig.events("ScaledUp")) == 1 and len(rig.events("ResizeFailed")) == 1
    for _ in range(3):  # the planner holds while the resize settles: nothing more
        rig.tick()
    assert len(rig.changes("job0-worker")) == 1
    rig.close()


@pytest.mark.parametrize("state_survives", [True, False])
def test_a_restart_after_a_partial_resize_finishes_it_once(api, tmp_path, state_survives):
    """kill -9 between the PS and the worker write; the new process finds the marker in its
    SQLite store, or — with the state directory lost (a new pod) — on the job's status."""
    first = ClusterRig(api, tmp_path, store=tmp_path / "a.sqlite")
    api.fail(500, method="PUT", path="/statefulsets/job0-worker/scale", times=5)
    first.tick()
    first.crash()
    store = tmp_path / ("a.sqlite" if state_survives else "b.sqlite")
    second = ClusterRig(api, tmp_path, store=store, clock=first.clock, identity="kale-1")
    (rep,) = second.tick().values()
    assert rep.action == "resize_completed"
    for _ in range(4):
        second.tick()
    assert len(second.changes("job0-worker")) == 1 and len(second.changes("job0-ps")) == 1
    assert len(second.events("ScaledUp")) == 1
    second.close()


def test_a_lost_answer_to_the_worker_write_is_not_a_second_resize(api, tmp_path):
    rig = ClusterRig(api, tmp_path)
    # The write is applied but its answer never arrives: the client retries with the old
    # resourceVersion (409), re-reads, and finds the size already set.
    api.lose(method="PUT", path="/statefulsets/job0-worker/scale")
    (rep,) = rig.tick().values()
    assert rep.resized and rep.action == "scale_up"
    assert len(rig.changes("job0-worker")) == 1
    assert len(rig.events("ScaledUp")) == 1
    rig.close()


@pytest.mark.parametrize(
    "fault",
    [
        {"status": 409, "times": 2},
        {"status": 429, "times": 3, "retry_after": 2},
        {"status": 500, "times": 2},
        {"status": 503, "times": 4},
    ],
)
def test_transient_api_answers_are_retried_within_the_tick(api, tmp_path, fault):
    rig = ClusterRig(api, tmp_path)
    api.fail(method="PUT", path="/statefulsets/job0-worker/scale", **fault)
    (rep,) = rig.tick().values()
    assert rep.resized and len(rig.changes("job0-worker")) == 1
    if fault["status"] == 429:
        assert 2 in [round(p) for p in rig.pauses]  # Retry-After honoured (fake sleep)
    rig.close()


def test_status_write_faults_leave_the_job_served(api, tmp_path):
    rig = ClusterRig(api, tmp_path)
    api.fail(500, method="PATCH", path="/elastictrainingjobs/job0/status", times=50)
    for _ in range(2):
        (rep,) = rig.tick().values()
        assert rep.error is None or rep.action == "resize_failed"
    assert rig.controller.metrics.errors.labels(kind="status")._value.get() >= 1
    api.failures.clear()
    api.lose(method="PATCH", path="/elastictrainingjobs/job0/status")
    rig.tick()
    assert rig.status("job0")["controller"] == "kale-0"
    rig.close()


def test_resizes_of_different_jobs_run_concurrently_within_the_bound(api, tmp_path):
    settings = ControllerSettings(
        identity="kale-0", act_threads=3, act_deadline_s=60, observe_threads=1
    )
    rig = ClusterRig(api, tmp_path, jobs=5, settings=settings)
    api.slow(0.3, method="PUT", path="/scale", times=100)
    reports = rig.tick()
    assert all(r.resized for r in reports.values())
    overlap = api.max_concurrent("PUT", "/scale")
    assert 2 <= overlap <= 3  # in parallel, never more than act_threads
    for name in rig.names:
        assert len(rig.changes(f"{name}-worker")) == 1
    rig.close()


def test_a_write_slower_than_the_deadline_is_collected_later_never_repeated(api, tmp_path):
    settings = ControllerSettings(identity="kale-0", act_threads=2, act_deadline_s=0.2)
    rig = ClusterRig(api, tmp_path, settings=settings)
    gate = api.slow(2.0, method="PUT", path="/statefulsets/job0-worker/scale")
    (rep,) = rig.tick().values()
    assert rep.action == "resize_in_progress" and not rep.resized
    rt = rig.controller.runtimes["ml/job0"]
    while rt.applying is not None and not rt.applying.done():
        (busy,) = rig.tick(advance=1).values()
        assert busy.action == "resize_in_progress"
        rt.applying.exception(timeout=30) if rt.applying is not None else None
    assert gate.hits == 1
    (rep,) = rig.tick().values()  # collects the finished write: the resize is complete
    for _ in range(3):
        rig.tick()
    assert len(rig.changes("job0-worker")) == 1
    assert len(rig.events("ScaledUp")) == 1
    rig.close()
