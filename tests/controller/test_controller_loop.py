"""The reconcile loop with a fake clock, synthetic traffic and dry-run targets (no I/O)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from autoscaler.actuators.base import Size
from autoscaler.actuators.dryrun import DryRunActuator
from autoscaler.controller.jobs import DirectoryJobs
from autoscaler.controller.loop import Controller
from autoscaler.controller.metering import WarmingUp
from autoscaler.controller.settings import ControllerSettings
from autoscaler.controller.sinks import FileStatusSink, LogEventSink
from autoscaler.controller.state import SqliteStateStore, live_restart_view, restart_view
from autoscaler.job.status import JobStatus
from autoscaler.policy.quota import ResourceManager
from forecasting.registry import make_forecaster
from kube.errors import TargetGone, TargetUnavailable
from tests.support.controller_fakes import (
    SYNC_MODEL,
    T0,
    FakeClock,
    TraceMetrics,
    job_doc,
    write_job,
)
from throughput.model import ThroughputModel

MODEL = ThroughputModel.load(SYNC_MODEL)
PERIOD = 240 * 60.0  # a compressed "day" of four hours keeps the tests short


def capacity(workers: int) -> float:
    return MODEL.throughput(workers, -(-workers // 4), warn=False) if workers else 0.0


def wave(t: float) -> float:
    """Low (20k/s) at the start of each period, high (160k/s) half-way."""
    return 20_000 + 140_000 * (1 - math.cos((t % PERIOD) / PERIOD * 2 * math.pi)) / 2


class Target(DryRunActuator):
    """A dry-run target whose size is the cluster's; failures can be injected."""

    def __init__(self, size: Size) -> None:
        super().__init__(size)
        self.fail_apply: list[Exception] = []
        self.fail_current: list[Exception] = []

    def current(self) -> Size:
        if self.fail_current:
            raise self.fail_current.pop(0)
        return super().current()

    def apply(self, size: Size) -> Size:
        if self.fail_apply:
            raise self.fail_apply.pop(0)
        return super().apply(size)


class Rig:
    """One controller over a directory of jobs, each with a Target and TraceMetrics."""

    def __init__(
        self,
        tmp: Path,
        docs: list[dict],
        *,
        rate=wave,
        quota: int | None = 64,
        start: float = T0 + 2 * PERIOD,
        store: Path | None = None,
        sizes: dict[str, Size] | None = None,
        clock: FakeClock | None = None,
        world: Rig | None = None,
        settings: ControllerSettings | None = None,
    ) -> None:
        self.dir = tmp / "jobs"
        for doc in docs:
            write_job(self.dir, doc)
        self.clock = clock or FakeClock(start)
        self.targets: dict[str, Target] = {}
        self.sources: dict[str, TraceMetrics] = {}
        self.sizes = sizes or {}
        self.events = LogEventSink()
        self.status = FileStatusSink(tmp / "status")
        self.rate = rate
        self.world = world
        """Another rig whose Kafka state (backlog) this one's sources start from."""
        self.controller = Controller(
            jobs_source=DirectoryJobs(self.dir),
            meter_factory=self.meter,
            forecaster_factory=lambda e: make_forecaster("seasonal_naive", period=240),
            actuator_factory=self.actuator,
            resource_manager=ResourceManager(quota) if quota is not None else None,
            clock=self.clock,
            status_sink=self.status,
            event_sink=self.events,
            state_store=SqliteStateStore(store) if store else None,
            settings=settings or ControllerSettings(identity="test"),
        )

    def actuator(self, entry):
        t = self.targets[entry.key] = Target(self.sizes.get(entry.key, Size(2, 1)))
        return t

    def meter(self, entry):
        target_key = entry.key
        src = TraceMetrics(
            self.clock,
            self.rate,
            history_start=T0,
            capacity=lambda: capacity(self.targets[target_key].size.workers),
        )
        if self.world is not None and entry.key in self.world.sources:
            twin = self.world.sources[entry.key]
            src.backlog, src.last = twin.backlog, twin.last
        self.sources[entry.key] = src
        return src

    def tick(self, n: int = 1, step: float = 60.0):
        out = []
        for _ in range(n):
            out.append(self.controller.tick())
            self.clock.advance(step)
        return out

    def status_of(self, key: str) -> dict:
        import json

        ns, name = key.split("/")
        return json.loads(self.status.path(ns, name).read_text())

    def reasons(self) -> list[str]:
        return [e["reason"] for e in self.events.events]


def test_scales_up_through_a_rising_day_and_keeps_the_slo(tmp_path):
    rig = Rig(tmp_path, [job_doc()])
    ups = []
    worst_age = 0.0
    for _ in range(100):  # the rising half of the period
        (rep,) = rig.controller.tick()
        worst_age = max(worst_age, rep.sample.oldest_age_s)
        if rep.resized and rep.desired.workers > rep.current.workers:
            ups.append((rep.sample.arrival_rate, rep.current, rep.desired))
        rig.clock.advance(60)
    assert 1 <= len(ups) <= 4  # the horizon planner climbs in few, larger steps
    # Resizes may come once the load has passed the current capacity: sizing for the SLO's
    # window, the plan spends the SLO's slack where the forecast (here exact, without a band)
    # says the SLO still holds (and the hourly budget of two resizes can make it wait), never
    # more — the worst age below stays well inside the SLO.
    for rate, _, after in ups:
        assert capacity(after.workers) > rate
        assert after.ps == math.ceil(after.workers / 4)  # the ratio is kept
    assert worst_age < 300  # well inside the 10-minute SLO, with room for a resize
    assert rig.reasons().count("ScaledUp") == len(ups)


def test_missing_metrics_hold_the_size_and_never_scale_to_zero(tmp_path):
    rig = Rig(tmp_path, [job_doc()])
    rig.tick(3)
    size = rig.targets["ml/ctr"].size
    rig.sources["ml/ctr"].down = True
    errors_before = rig.controller.metrics.errors.labels(kind="metrics")._value.get()
    for (rep,) in rig.tick(3):
        assert rep.action == "hold_metrics_unavailable"
        assert rep.desired == size and not rep.resized
        assert "metrics unavailable" in rep.reason["why"]
    assert rig.targets["ml/ctr"].size == size and size.workers > 0
    cond = {c["type"]: c for c in rig.status_of("ml/ctr")["conditions"]}
    assert cond["MetricsAvailable"]["status"] == "False"
    assert cond["MetricsAvailable"]["reason"] == "KafkaUnavailable"
    assert cond["Ready"]["status"] == "False"
    assert rig.reasons().count("MetricsUnavailable") == 1  # on the transition only
    assert rig.controller.metrics.errors.labels(kind="metrics")._value.get() == errors_before + 3
    rig.sources["ml/ctr"].down = False
    rig.tick()
    cond = {c["type"]: c for c in rig.status_of("ml/ctr")["conditions"]}
    assert cond["MetricsAvailable"]["status"] == "True"


def test_a_warming_meter_holds_for_a_tick_without_counting_an_error(tmp_path):
    rig = Rig(tmp_path, [job_doc()])
    rig.tick()
    src = rig.sources["ml/ctr"]
    real = src.sample
    calls = iter([WarmingUp("first snapshot")])
    src.sample = lambda: (_ for _ in ()).throw(next(calls)) if src.samples < 2 else real()
    src.samples = 1
    ((rep,),) = rig.tick()
    assert rep.action == "hold_warming_up"
    assert rig.controller.metrics.errors.labels(kind="metrics")._value.get() == 0


def test_a_second_tick_at_the_same_time_changes_nothing(tmp_path):
    rig = Rig(tmp_path, [job_doc()], sizes={"ml/ctr": Size(1, 1)})
    (first,) = rig.controller.tick()
    assert first.resized
    (again,) = rig.controller.tick()  # same clock: a resize is in progress, nothing to do
    assert not again.resized and again.desired == first.desired
    assert rig.targets["ml/ctr"].applied == [first.desired]


@pytest.mark.parametrize("with_state", [True, False])
def test_a_restarted_controller_makes_the_same_decisions(tmp_path, with_state):
    a = Rig(tmp_path / "a", [job_doc()], store=tmp_path / "a.sqlite")
    for _ in range(150):  # restart right after a scale-up, while its resize is under way
        (rep,) = a.controller.tick()
        a.clock.advance(60)
        if rep.resized and rep.desired.workers > rep.current.workers and _ >= 40:
            break
    # "Restart": a new controller on a copy of the state, the same cluster and Kafka state.
    for suffix in ("", "-wal", "-shm"):  # the database and its write-ahead log
        if (tmp_path / f"a.sqlite{suffix}").exists():
            shutil.copy(tmp_path / f"a.sqlite{suffix}", tmp_path / f"b.sqlite{suffix}")
    b = Rig(
        tmp_path / "b",
        [job_doc()],
        store=tmp_path / "b.sqlite" if with_state else None,
        clock=a.clock,
        sizes={"ml/ctr": a.targets["ml/ctr"].size},
        world=a,
    )
    same = []
    for _ in range(30):
        (ra,) = a.controller.tick()
        (rb,) = b.controller.tick()
        same.append(
            (ra.action, ra.reason.get("why"), ra.desired)
            == (rb.action, rb.reason.get("why"), rb.desired)
        )
        a.clock.advance(60)
    # With its state the new process converges to exactly the old one's decisions; without
    # it (the control case) it would forget the resize under way and the hold it set.
    assert all(same) is with_state


def test_a_state_is_written_when_a_restart_needs_it_and_at_least_every_few_ticks(tmp_path):
    rig = Rig(tmp_path, [job_doc()], store=tmp_path / "s.sqlite")
    store = rig.controller.store
    every = rig.controller.settings.save_every_ticks
    written: list[bool] = []
    real = store.save_many

    def save_many(states):  # type: ignore[no-untyped-def]
        if "ml/ctr" in states:
            written[-1] = True
        return real(states)

    store.save_many = save_many  # type: ignore[method-assign]
    views, since = [], 0
    for _ in range(60):
        written.append(False)
        rig.controller.tick()
        rig.clock.advance(60)
        rt = rig.controller.runtimes["ml/ctr"]
        views.append(restart_view(rt.state.to_dict()))
        assert live_restart_view(rt.state) == views[-1]  # what the loop compares
        since = 0 if written[-1] else since + 1
        assert since < every  # never more than `every` ticks behind
        if len(views) > 1 and views[-1] != views[-2]:
            assert written[-1]  # what a restart needs changed: written at once
    assert 0 < sum(written) < len(written)  # and ticks that changed nothing else skip it
    rig.controller.close()  # closing writes the latest state, whatever its turn
    saved = SqliteStateStore(tmp_path / "s.sqlite")
    assert saved.load("ml/ctr") == json.loads(json.dumps(rt.state.to_dict()))
    saved.close()


def test_a_state_whose_view_cannot_be_compared_is_written_every_tick(tmp_path):
    rig = Rig(tmp_path, [job_doc()], store=tmp_path / "s.sqlite")
    rig.controller.tick()
    rig.clock.advance(60)
    store = rig.controller.store
    writes: list[int] = []
    real = store.save_many

    def save_many(states):  # type: ignore[no-untyped-def]
        writes.append(len(states))
        return real(states)

    store.save_many = save_many  # type: ignore[method-assign]
    rig.controller.runtimes["ml/ctr"].state.policy["odd"] = float("nan")  # NaN != NaN
    for _ in range(5):
        rig.controller.tick()
        rig.clock.advance(60)
    assert len(writes) >= 5  # never skipped as "unchanged"


def test_gpus_are_shared_fairly_between_equal_jobs_when_short(tmp_path):
    docs = [job_doc("a"), job_doc("b")]
    rig = Rig(
        tmp_path,
        docs,
        rate=lambda t: 150_000.0,
        quota=16,
        sizes={"ml/a": Size(1, 1), "ml/b": Size(1, 1)},
    )
    reps = {r.job: r for r in rig.controller.tick()}
    assert reps["ml/a"].planned.workers > 8 and reps["ml/b"].planned.workers > 8
    assert reps["ml/a"].desired.workers == reps["ml/b"].desired.workers == 8
    assert rig.targets["ml/a"].size == Size(8, 2)
    cond = {c["type"]: c for c in rig.status_of("ml/a")["conditions"]}
    assert cond["QuotaLimited"]["status"] == "True"
    assert "QuotaLimited" in rig.reasons()
    assert sum(rig.controller.resources.held.values()) <= 16


def test_priority_wins_when_gpus_are_short(tmp_path):
    docs = [job_doc("a", priority=10), job_doc("b")]
    rig = Rig(
        tmp_path,
        docs,
        rate=lambda t: 150_000.0,
        quota=24,
        sizes={"ml/a": Size(1, 1), "ml/b": Size(1, 1)},
    )
    reps = {r.job: r for r in rig.controller.tick()}
    assert reps["ml/a"].desired.workers == reps["ml/a"].planned.workers
    assert reps["ml/b"].desired.workers == 24 - reps["ml/a"].desired.workers


def test_a_job_removed_from_the_directory_is_forgotten(tmp_path):
    rig = Rig(tmp_path, [job_doc("a"), job_doc("b")], quota=64)
    rig.tick()
    assert set(rig.controller.runtimes) == {"ml/a", "ml/b"}
    (rig.dir / "b.yaml").unlink()
    rig.tick()
    assert set(rig.controller.runtimes) == {"ml/a"}
    assert rig.sources["ml/b"].closed
    assert "ml/b" not in rig.controller.resources.held
    assert b'etj="b"' not in rig.controller.metrics.render()


def test_an_invalid_job_is_reported_and_the_others_continue(tmp_path):
    bad = job_doc("bad")
    bad["spec"]["training"]["minWorkers"] = 100  # > maxWorkers
    rig = Rig(tmp_path, [job_doc("good"), bad])
    (rep,) = rig.controller.tick()
    assert rep.job == "ml/good"
    assert "minWorkers" in rig.controller.invalid["ml/bad"][0]
    ready = rig.status_of("ml/bad")["conditions"][0]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "InvalidSpec")


def test_a_failed_listing_keeps_every_job_as_it_is(tmp_path):
    rig = Rig(tmp_path, [job_doc()])
    rig.tick()
    shutil.rmtree(rig.dir)
    assert rig.controller.tick() == []
    assert set(rig.controller.runtimes) == {"ml/ctr"}
    assert rig.controller.metrics.errors.labels(kind="list")._value.get() == 1


def test_a_failed_resize_is_reported_and_retried_on_the_next_tick(tmp_path):
    rig = Rig(tmp_path, [job_doc()], sizes={"ml/ctr": Size(1, 1)})
    rig.controller._sync(rig.controller.jobs_source.list(), rig.clock())  # build the job
    target = rig.targets["ml/ctr"]
    target.fail_apply.append(TargetUnavailable("statefulset ml/w scale: HTTP 503 after 5 tries"))
    ((rep,),) = rig.tick(step=0)
    assert rep.action == "resize_failed" and not rep.resized
    assert target.size == Size(1, 1)
    cond = {c["type"]: c for c in rig.status_of("ml/ctr")["conditions"]}
    assert cond["TargetAvailable"]["reason"] == "ResizeFailed"
    assert "ResizeFailed" in rig.reasons()
    ((rep,),) = rig.tick()
    assert rep.resized and target.size == rep.desired


def test_a_missing_target_holds_and_is_reported_once(tmp_path):
    rig = Rig(tmp_path, [job_doc()])
    rig.tick()
    target = rig.targets["ml/ctr"]
    target.fail_current += [TargetGone("statefulset ml/ctr-worker scale: not found")] * 2
    for (rep,) in rig.tick(2):
        assert rep.action == "hold" and rep.desired is None and not rep.resized
    cond = {c["type"]: c for c in rig.status_of("ml/ctr")["conditions"]}
    assert cond["TargetAvailable"]["reason"] == "TargetNotFound"
    assert rig.reasons().count("TargetUnavailable") == 1


def test_a_job_whose_resource_is_gone_is_forgotten(tmp_path):
    rig = Rig(tmp_path, [job_doc()])

    def gone(namespace, name, status):
        raise TargetGone("elastictrainingjob ml/ctr status: not found")

    rig.controller.status_sink.write_status = gone
    rig.tick()
    assert rig.controller.runtimes == {}


def test_status_matches_the_crd_schema_and_plan_json_has_the_documented_keys(tmp_path):
    rig = Rig(tmp_path, [job_doc()])
    ((rep,),) = rig.tick()
    status = rig.status_of("ml/ctr")
    JobStatus.model_validate(status)  # extra="forbid": every key is in the CRD
    assert status["desiredWorkers"] == rep.desired.workers
    assert status["lastDecision"]["action"] == rep.action
    assert status["controller"] == "test"
    assert set(rep.plan_json()) == {
        "job",
        "time",
        "current_workers",
        "desired_workers",
        "desired_ps",
        "forecast",
        "lead_s",
        "backlog",
        "reason",
    }
    assert rep.plan_json()["forecast"]["model"] == "seasonal_naive"


def test_a_spec_change_rebuilds_the_job_but_keeps_its_target_and_state(tmp_path):
    rig = Rig(tmp_path, [job_doc()])
    rig.tick(3)
    before = rig.controller.runtimes["ml/ctr"]
    doc = job_doc()
    doc["spec"]["slo"]["maxDelay"] = "15m"
    write_job(rig.dir, doc)
    rig.tick()
    after = rig.controller.runtimes["ml/ctr"]
    assert after is not before and after.actuator is before.actuator
    assert after.state is before.state and after.sizing.slo_s == 900


def test_without_a_forecast_the_planner_sizes_for_the_recent_peak(tmp_path):
    rig = Rig(tmp_path, [job_doc()], rate=lambda t: 100_000.0)

    def broken():
        raise RuntimeError("model file corrupt")

    rig.controller.forecaster_factory = lambda e: broken()
    ((rep,),) = rig.tick()
    assert capacity(rep.desired.workers) > 100_000
    cond = {c["type"]: c for c in rig.status_of("ml/ctr")["conditions"]}
    assert cond["ForecastAvailable"]["status"] == "False"
    assert "fit failed" in cond["ForecastAvailable"]["message"]
    assert rig.controller.metrics.errors.labels(kind="forecast")._value.get() == 1


def test_a_slow_fit_runs_in_the_background_and_seasonal_naive_serves_meanwhile(tmp_path):
    import threading

    gate = threading.Event()

    class SlowNaive:
        """Seasonal naive whose fit waits for ``gate`` (a transformer's minute, in a test)."""

        def __init__(self):
            self.inner = make_forecaster("seasonal_naive", period=240)
            self.name = "slow"

        def fit(self, series):
            assert gate.wait(10)
            self.inner.fit(series)
            return self

        def predict(self, horizon, history=None):
            return self.inner.predict(horizon, history=history)

    rig = Rig(tmp_path, [job_doc()], settings=ControllerSettings(identity="test", fit_threads=1))
    rig.controller.forecaster_factory = lambda e: SlowNaive()
    try:
        ((first,),) = rig.tick()  # returns although the fit cannot finish yet
        assert first.reason["forecast"] == "seasonal_naive (interim)"
        cond = {c["type"]: c for c in rig.status_of("ml/ctr")["conditions"]}
        assert cond["ForecastAvailable"]["status"] == "True"
        gate.set()
        rt = rig.controller.runtimes["ml/ctr"]
        rt.forecast._pending.result(timeout=10)
        ((second,),) = rig.tick()
        assert second.reason["forecast"] == "slow"
    finally:
        gate.set()
        rig.controller.close()


@pytest.mark.parametrize("gpus", [0, 2])
def test_gpus_per_worker_count_against_the_quota(tmp_path, gpus):
    rig = Rig(
        tmp_path,
        [job_doc(gpus_per_worker=gpus)],
        rate=lambda t: 150_000.0,
        quota=8,
        sizes={"ml/ctr": Size(1, 1)},
    )
    ((rep,),) = rig.tick()
    if gpus == 0:
        assert rep.desired == rep.planned  # workers without GPUs use no quota
    else:
        assert rep.desired.workers == 4  # 8 GPUs / 2 per worker


def test_a_planner_failure_holds_that_job_only(tmp_path):
    rig = Rig(tmp_path, [job_doc("a"), job_doc("b")])
    rig.tick()
    before = rig.targets["ml/a"].size

    def broken(obs, state):
        raise ZeroDivisionError("bug")

    rig.controller.runtimes["ml/a"].policy.decide = broken
    reps = {r.job: r for r in rig.controller.tick()}
    assert reps["ml/a"].action == "hold" and "planner failed" in reps["ml/a"].reason["why"]
    assert rig.targets["ml/a"].size == before
    assert reps["ml/b"].sample is not None and reps["ml/b"].error is None
    assert rig.controller.metrics.errors.labels(kind="planner")._value.get() == 1


def test_forecasts_are_refitted_early_while_the_history_is_young():
    from autoscaler.controller.forecast import ForecastCache
    from autoscaler.controller.metering import ArrivalHistory

    fits = []

    class Counting:
        def fit(self, series):
            fits.append(len(series))

        def predict(self, horizon, history=None):
            class F:
                mean = p10 = p90 = np.ones(horizon)

                @staticmethod
                def quantile(q):
                    return np.ones(horizon)

            return F()

    cache = ForecastCache(Counting, name="x", interval_s=60.0, horizon_steps=5, refit_s=86400.0)
    for n in range(2, 40):
        hist = ArrivalHistory(T0, 60.0, np.ones(n))
        window = cache.window(T0 + n * 60.0, hist, round(T0 / 60) + n)
        assert window is not None and len(window) == 5
    assert fits == [2, 4, 8, 16, 32]


def test_the_last_complete_observation_survives_a_tick_that_cannot_measure(tmp_path):
    from common.errors import MetricUnavailable

    rig = Rig(tmp_path, [job_doc()])
    rig.tick()
    rt = rig.controller.runtimes["ml/ctr"]
    t, sample, size = rt.last_observed
    assert t == rig.clock() - 60.0 and size == rt.current and sample is rt.sample

    def down():
        raise MetricUnavailable("broker down")

    rig.sources["ml/ctr"].sample = down
    rig.tick()
    assert rt.sample is None and rt.last_observed == (t, sample, size)


def test_a_steady_job_costs_one_plan_search_in_ten_ticks(tmp_path):
    # A search judges thousands of plans (milliseconds); a job whose traffic follows its
    # forecast follows the plan instead, searching again every replan_every_steps (10).
    # This pins that cost, so a default planner that searches every tick cannot land unseen.
    settings = ControllerSettings(identity="test", reforecast_s=3600.0)
    rig = Rig(tmp_path, [job_doc()], rate=lambda t: 50_000.0, settings=settings)
    rig.tick(5)  # the first plan, a resize, and its downtime
    policy = rig.controller.runtimes["ml/ctr"].policy
    before = policy.searches
    reports = rig.tick(30)
    assert policy.searches - before == 3
    assert all(rep.action == "hold" for (rep,) in reports)


def test_the_restart_view_leaves_out_what_the_planner_rewrites_every_tick(tmp_path):
    rig = Rig(tmp_path, [job_doc()], store=tmp_path / "s.sqlite")
    for _ in range(3):
        rig.controller.tick()
        rig.clock.advance(60)
    state = rig.controller.runtimes["ml/ctr"].state.to_dict()
    view = restart_view(state)
    policy = dict(state["policy"])
    # the band predicted for the next steps and the bands kept for the SLO's window move
    # every tick: a state that changed only there need not be written at once
    policy["last_prediction"] = [1, [1.0], [2.0], [1.5]]
    policy["band_seen"] = [[1, 1.0, 1.5, 2.0]]
    assert restart_view({**state, "policy": policy}) == view
    policy["resizes"] = [*policy.get("resizes", []), 10**9]  # the resize budget is not
    assert restart_view({**state, "policy": policy}) != view
    rig.controller.close()


def test_the_planner_charges_the_band_the_job_asks_its_forecaster_for(tmp_path):
    from autoscaler.sim.planners import settings_for

    doc = job_doc()
    doc["spec"].setdefault("forecast", {})["quantile"] = 0.8
    rig = Rig(tmp_path, [doc])
    rig.controller.tick()
    rt = rig.controller.runtimes["ml/ctr"]
    planner = rt.policy.inner
    assert planner.settings.band_quantile == 0.8  # the controller's planner
    assert settings_for(rt.sizing, rt.entry.loaded).band_quantile == 0.8  # the simulator's
    rig.controller.close()
