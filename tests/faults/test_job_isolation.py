"""One job's exception, whatever its type and wherever in the stack, stays with that job.

Every exception type the stack can raise — the arithmetic ones an infinite SLO or an absurd
horizon produce (``OverflowError``, ``MemoryError``, ``RecursionError``), plain bugs
(``KeyError``, ``TypeError``, …), I/O and library errors — is injected at every point where
the controller calls into a job's pieces. Each time, the other jobs keep being planned and
measured, the tick returns, and the hostile job is marked (condition, Event, metric). Fake
clock, no I/O beyond a temporary directory.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sqlite3
import threading

import pytest

from autoscaler.controller.runner import Runner
from autoscaler.controller.settings import ControllerSettings
from common.errors import KaleError, MetricUnavailable, UserError
from kube.errors import ActuatorError, TargetUnavailable
from tests.support.fault_fakes import HOSTILE, PEACEFUL, HostileRig, job_doc, write_job


class BadStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("hostile __str__")


def every_exception() -> list[Exception]:
    """One instance of each exception type the controller's stack can raise."""
    return [
        OverflowError("(34, 'Numerical result out of range')"),
        MemoryError(),
        RecursionError("maximum recursion depth exceeded"),
        ZeroDivisionError("float division by zero"),
        KeyError("spec"),
        TypeError("unsupported operand type(s)"),
        ValueError("cannot convert float NaN to integer"),
        AttributeError("'NoneType' object has no attribute 'workers'"),
        IndexError("index 0 is out of bounds"),
        RuntimeError("dictionary changed size during iteration"),
        AssertionError(),
        NotImplementedError(),
        FloatingPointError("overflow encountered"),
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
        StopIteration(),
        OSError(28, "No space left on device"),
        TimeoutError("timed out"),
        ConnectionResetError(104, "Connection reset by peer"),
        sqlite3.OperationalError("database is locked"),
        json.JSONDecodeError("Expecting value", "", 0),
        KaleError("kale error"),
        UserError("user error"),
        MetricUnavailable("broker gone"),
        ActuatorError("actuator error"),
        TargetUnavailable("HTTP 503 after 5 tries"),
        BadStr(),
    ]


def assert_peaceful_jobs_served(reports: dict) -> None:
    for key in PEACEFUL:
        rep = reports[key]
        assert rep.error is None and rep.action != "error", (key, rep.action, rep.error)
        assert rep.sample is not None and rep.desired is not None


# Points where a job's pieces are built: a failure there means the job cannot be managed
# (reported like an invalid job), so each exception type gets a fresh controller.
BUILD_POINTS = ("sizing", "meter_factory", "actuator_factory")
RUN_POINTS = ("current", "sample", "arrivals", "decide", "apply", "status", "event")


@pytest.mark.parametrize("point", BUILD_POINTS)
def test_an_exception_while_building_one_job_leaves_the_others_served(tmp_path, point):
    rig = HostileRig(tmp_path)
    for i, exc in enumerate(every_exception()):
        rig.points[point].exc = exc
        write_job(rig.dir, job_doc("a", priority=i))  # a new spec: built again at once
        reports = rig.tick()
        assert HOSTILE not in reports
        assert_peaceful_jobs_served(reports)
        assert HOSTILE in rig.controller.invalid, type(exc).__name__
        problem = rig.controller.invalid[HOSTILE][0]
        assert problem.startswith(f"{HOSTILE}: ") and "\n" not in problem
        ready = rig.ready(HOSTILE)
        assert ready["status"] == "False"
        if not isinstance(exc, KaleError | ValueError | OSError):  # not a spec problem
            assert ready["reason"] == "ControllerError"
            assert type(exc).__name__ in ready["message"]
            assert rig.job_errors() >= 1
            assert "ControllerError" in [e["reason"] for e in rig.events.events]
    rig.points[point].exc = None
    write_job(rig.dir, job_doc("a"))
    assert_peaceful_jobs_served({HOSTILE: rig.tick()[HOSTILE], **rig.tick()})
    rig.controller.close()


@pytest.mark.parametrize("point", RUN_POINTS)
def test_an_exception_while_running_one_job_leaves_the_others_served(tmp_path, point):
    rig = HostileRig(tmp_path)
    rig.tick()  # every job built and measured once
    for exc in every_exception():
        rig.points[point].exc = exc
        calls = rig.points[point].calls
        if point == "apply":  # past the last resize's window, and far from the wish
            rig.clock.advance(600)
            rig.targets[HOSTILE].size = rig.targets[HOSTILE].size.__class__(1, 1)
        reports = rig.tick()
        assert_peaceful_jobs_served(reports)
        hostile = reports[HOSTILE]
        assert not hostile.resized, type(exc).__name__
        if point in ("current", "sample", "arrivals", "decide", "apply"):
            assert rig.points[point].calls > calls, "the injection point was not reached"
            # The job holds and says why: an error report, a hold, or a failed resize.
            assert hostile.action in (
                "error",
                "hold",
                "hold_metrics_unavailable",
                "resize_failed",
            ) or hostile.reason.get("why", "").startswith("planner failed"), hostile.action
        if point in ("current", "sample", "apply") or (
            point == "decide" and hostile.action != "error"
        ):
            assert rig.ready(HOSTILE).get("status") == "False" or point == "decide"
    # The hostile job was counted, and the loop is still whole: with the fault gone it is
    # served again like the others.
    if point not in ("event", "arrivals"):
        assert rig.job_errors() + _errors(rig) >= 1
    rig.points[point].exc = None
    for _ in range(2):
        reports = rig.tick()
    assert reports[HOSTILE].action != "error" and reports[HOSTILE].sample is not None
    rig.controller.close()


def _errors(rig: HostileRig) -> float:
    total = 0.0
    for metric in rig.controller.metrics.errors.collect():
        for s in metric.samples:
            if s.name.endswith("_total"):
                total += s.value
    return total


def test_a_failed_job_is_marked_by_condition_event_and_metric(tmp_path):
    rig = HostileRig(tmp_path)
    rig.tick()
    rig.points["current"].exc = OverflowError("int too large to convert to float")
    # A deeper bug than the actuator's: make the report itself raise for ml/a.
    rt = rig.controller.runtimes[HOSTILE]
    rt.forecast.summary = lambda: {}["boom"]  # type: ignore[method-assign]
    reports = rig.tick()
    rep = reports[HOSTILE]
    assert rep.action == "error" and "KeyError" in (rep.error or "")
    ready = rig.ready(HOSTILE)
    assert (ready["status"], ready["reason"]) == ("False", "ControllerError")
    assert "KeyError" in ready["message"]
    assert [e["reason"] for e in rig.events.events].count("ControllerError") == 1
    text = rig.controller.metrics.render().decode()
    assert 'kale_job_errors_total{error="KeyError",etj="a",namespace="ml",stage="record"}' in text
    assert 'job="' not in text.split("kale_job_errors_total")[1].split("\n")[0]
    rig.tick()  # still failing: no second Event for the same failure
    assert [e["reason"] for e in rig.events.events].count("ControllerError") == 1
    assert_peaceful_jobs_served(rig.tick())


def test_the_state_of_one_job_that_cannot_be_saved_does_not_lose_the_others(tmp_path):
    from autoscaler.controller.state import SqliteStateStore

    store = SqliteStateStore(tmp_path / "state.sqlite")
    rig = HostileRig(tmp_path)
    rig.controller.store = store
    rig.tick()
    rig.controller.runtimes[HOSTILE].state.policy["x"] = object()  # not JSON-able
    assert_peaceful_jobs_served(rig.tick())
    for key in PEACEFUL:
        assert store.load(key)["saved_at"] == rig.clock() - 60
    assert rig.job_errors() >= 1
    rig.controller.close()


def test_the_issues_hostile_specs_get_a_clear_per_job_error(tmp_path):
    """The issue's reproductions: an infinite SLO and a horizon of 10¹¹ weeks. Validation
    refuses them now; the controller would refuse them too (see the next test)."""
    rig = HostileRig(tmp_path)
    inf_slo = job_doc("inf-slo")
    inf_slo["spec"]["slo"]["maxDelay"] = float("inf")
    huge = job_doc("huge-horizon", horizon="99999999999w")
    for doc in (inf_slo, huge):
        write_job(rig.dir, doc)
    reports = rig.tick()
    assert_peaceful_jobs_served(reports)
    for key in ("ml/inf-slo", "ml/huge-horizon"):
        assert key not in reports
        (problem,) = rig.controller.invalid[key]
        assert "\n" not in problem and ("maxDelay" in problem or "horizon" in problem)
        assert rig.ready(key)["status"] == "False"
    rig.controller.close()


def force(model: object, field: str, value: object) -> None:
    object.__setattr__(model, field, value)  # past pydantic's frozen models and validators


@pytest.mark.parametrize(
    "spoil",
    [
        lambda spec: force(spec.slo, "max_delay", float("inf")),
        lambda spec: force(spec.forecast, "horizon", 99999999999 * 7 * 86400.0),
        lambda spec: force(spec.forecast, "interval", 1e-3),
        lambda spec: force(spec.forecast, "horizon", float("nan")),
    ],
)
def test_specs_that_slip_past_validation_are_refused_by_the_controller(tmp_path, spoil):
    """A spec that never went through validation (a bug, an old CRD, a model_construct)
    with absurd durations: the job is refused with one line, before it costs memory."""
    rig = HostileRig(tmp_path)
    real = rig.controller.jobs_source.list

    def spoiled():
        listing = real()
        for i, entry in enumerate(listing.jobs):
            if entry.key == HOSTILE:
                job = entry.loaded.job.model_copy(deep=True)
                spoil(job.spec)
                loaded = type(entry.loaded)(job, entry.loaded.path)
                listing.jobs[i] = dataclasses.replace(entry, loaded=loaded, fingerprint="bad")
        return listing

    rig.controller.jobs_source.list = spoiled  # type: ignore[method-assign]
    for _ in range(2):
        reports = rig.tick()
        assert HOSTILE not in reports
        assert_peaceful_jobs_served(reports)
    (problem,) = rig.controller.invalid[HOSTILE]
    assert problem.startswith(f"{HOSTILE}: ") and "\n" not in problem
    assert rig.ready(HOSTILE)["status"] == "False"
    rig.controller.close()


def test_the_runner_outlives_a_tick_that_raises(tmp_path):
    rig = HostileRig(tmp_path)
    runner = Runner(rig.controller, interval_s=60, clock=rig.clock, wait=lambda s: False)
    real = rig.controller.jobs_source.list
    failures = iter([RecursionError("deep"), MemoryError(), KeyError("x")])

    def flaky():
        exc = next(failures, None)
        if exc is not None:
            raise exc
        return real()

    rig.controller.jobs_source.list = flaky  # type: ignore[method-assign]
    # A bug between jobs (outside any job's guard) must not leave the loop either.
    boom = iter([ZeroDivisionError("between jobs")])
    real_save = rig.controller._save

    def save(runtimes):  # type: ignore[no-untyped-def]
        exc = next(boom, None)
        if exc is not None:
            raise exc
        return real_save(runtimes)

    rig.controller._save = save  # type: ignore[method-assign]
    ticks = 0
    while ticks < 6:
        runner.next_tick = rig.clock()
        runner.step()
        ticks += 1
        rig.clock.advance(60)
    assert runner.ticks == 6
    assert rig.controller.metrics.errors.labels(kind="list")._value.get() == 3
    assert rig.controller.metrics.errors.labels(kind="tick")._value.get() == 1
    assert set(rig.controller.runtimes) == {HOSTILE, *PEACEFUL}
    rig.controller.close()


def test_keyboard_interrupt_still_stops_the_process(tmp_path):
    rig = HostileRig(tmp_path)
    rig.tick()
    rig.points["sample"].exc = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        rig.tick()
    rig.controller.close()


def test_isolation_holds_with_thread_pools_too(tmp_path):
    settings = ControllerSettings(
        identity="test",
        observe_threads=3,
        act_threads=3,
        observe_deadline_s=30,
        act_deadline_s=30,
    )
    rig = HostileRig(tmp_path, settings=settings)
    rig.tick()
    for point in ("current", "sample", "apply", "status"):
        for exc in (OverflowError("x"), MemoryError(), RecursionError("r"), KeyError("k")):
            rig.points[point].exc = exc
            assert_peaceful_jobs_served(rig.tick())
        rig.points[point].exc = None
    assert threading.active_count() < 40
    rig.controller.close()


def test_a_job_that_never_answers_costs_the_tick_its_deadline_and_health_stays_up(tmp_path):
    from common.metrics_server import Health

    gate = threading.Event()
    settings = ControllerSettings(identity="test", observe_threads=3, observe_deadline_s=0.5)
    rig = HostileRig(tmp_path, settings=settings)
    rig.tick()
    rig.controller.runtimes[HOSTILE].meter.sample = lambda: gate.wait(60)  # never answers
    health = Health(stale_after_s=180, clock=rig.clock)
    runner = Runner(
        rig.controller, interval_s=60, clock=rig.clock, wait=lambda s: False, health=health
    )
    try:
        for _ in range(3):
            runner.next_tick = rig.clock()
            runner.step()
            rig.clock.advance(60)
            assert health.alive()
        assert runner.ticks == 3
        rt = rig.controller.runtimes[HOSTILE]
        assert "deadline" in str(rt.metric_error)
        assert rt.state.last_decision["action"] == "hold_metrics_unavailable"
    finally:
        gate.set()
        rig.controller.close()


def test_kale_controller_once_exits_0_with_hostile_job_files(tmp_path, capsys):
    import shlex

    import yaml

    from kale.cli.main import main

    jobs = tmp_path / "jobs"
    write_job(jobs, job_doc("good", target={"kind": "DryRun"}))
    deep = "a: " + "[" * 600 + "]" * 600 + "\n"
    (jobs / "deep.yaml").write_text("kind: ElasticTrainingJob\n" + deep)
    bad = job_doc("inf")
    bad["spec"]["slo"]["maxDelay"] = float("inf")
    write_job(jobs, bad)
    for name in ("good", "inf"):  # a broker nobody listens on: refused at once
        path = jobs / f"{name}.yaml"
        path.write_text(path.read_text().replace("kafka.kafka.svc:9092", "127.0.0.1:9"))
    cfg = tmp_path / "controller.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "jobs": {"directory": str(jobs)},
                "metrics": {"port": 0},
                "forecasting": {"model": "seasonal_naive"},
                "stateDir": str(tmp_path / "state"),
            }
        )
    )
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        code = main(shlex.split(f"controller --config {cfg} --once"))
    finally:  # the CLI set up logging for a process; give the test session its own back
        root.handlers[:], _ = handlers, root.setLevel(level)
    capsys.readouterr()
    assert code == 0
    status = json.loads((tmp_path / "state" / "status" / "ml_good.status.json").read_text())
    assert status["lastDecision"]["action"] == "hold_metrics_unavailable"
