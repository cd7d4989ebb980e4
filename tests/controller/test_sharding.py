"""Jobs spread over controller replicas: one Lease per shard, each job planned by one replica.

The Leases live on the fake API server and every replica has its own client and a shared
fake clock, so expiry, takeover and the fence before acting run the real protocol.
"""

from __future__ import annotations

import pytest

from autoscaler.actuators.base import Size
from autoscaler.actuators.dryrun import DryRunActuator
from autoscaler.controller.config import parse_controller_config
from autoscaler.controller.forecast import FitPool
from autoscaler.controller.jobs import DirectoryJobs
from autoscaler.controller.loop import Controller
from autoscaler.controller.settings import ControllerSettings
from autoscaler.controller.sharding import owned_part, shard_of
from autoscaler.controller.sinks import LogEventSink
from autoscaler.policy.quota import ResourceManager
from common.errors import UserError
from forecasting.registry import make_forecaster
from kube.client import RetryPolicy, connect
from kube.leader import ShardElector
from tests.support.controller_fakes import (
    T0,
    FakeClock,
    FakeKubeApi,
    TraceMetrics,
    job_doc,
    write_job,
)

SHARDS = 4


@pytest.fixture()
def api():
    with FakeKubeApi() as fake:
        yield fake


@pytest.fixture()
def clock():
    return FakeClock(T0 + 2 * 86400.0)


@pytest.fixture()
def replica(api, tmp_path, clock):
    kubes = []

    def make(identity: str, *, max_held: int | None = None) -> ShardElector:
        kube = connect(
            kubeconfig=api.kubeconfig(tmp_path / f"kc-{identity}"),
            retry=RetryPolicy(attempts=2, sleep=lambda s: None),
        )
        kubes.append(kube)
        return ShardElector(
            kube,
            namespace="kale-system",
            name="kale-controller",
            shards=SHARDS,
            max_held=max_held,
            identity=identity,
            lease_duration_s=15,
            renew_deadline_s=10,
            retry_period_s=2,
            clock=clock,
        )

    yield make
    for k in kubes:
        k.close()


def rounds(clock, *electors, n: int = 1, step: float = 2.0) -> None:
    for _ in range(n):
        for e in electors:
            e.try_acquire_or_renew()
        clock.advance(step)


# -- which shard ------------------------------------------------------------------------------
def test_a_jobs_shard_is_stable_and_the_jobs_spread_over_every_shard():
    keys = [f"ns{i % 7}/job-{i}" for i in range(400)]
    first = [shard_of(k, SHARDS) for k in keys]
    assert first == [shard_of(k, SHARDS) for k in keys]  # no per-process salt
    counts = [first.count(s) for s in range(SHARDS)]
    assert min(counts) > 400 / SHARDS * 0.7
    assert {shard_of(k, 1) for k in keys} == {0}


def test_a_replica_lists_only_the_jobs_of_the_shards_it_holds(tmp_path):
    d = tmp_path / "jobs"
    names = [f"j{i}" for i in range(12)]
    for n in names:
        write_job(d, job_doc(n))
    listing = DirectoryJobs(d).list()
    mine = frozenset({0, 2})
    part, elsewhere = owned_part(listing, mine, SHARDS)
    assert {e.key for e in part.jobs} == {
        e.key for e in listing.jobs if shard_of(e.key, SHARDS) in mine
    }
    assert {e.key for e in part.jobs} | elsewhere == {e.key for e in listing.jobs}
    assert not {e.key for e in part.jobs} & elsewhere


# -- the leases ------------------------------------------------------------------------------
def test_two_replicas_split_the_shards_up_to_their_limit(replica, clock, api):
    a, b = replica("a", max_held=2), replica("b", max_held=2)
    rounds(clock, a, b, n=3)
    assert len(a.held()) == 2 and len(b.held()) == 2
    assert a.held().isdisjoint(b.held())
    holders = {
        k: api.get("coordination.k8s.io/v1", "Lease", "kale-system", f"kale-controller-{k}")[
            "spec"
        ]["holderIdentity"]
        for k in range(SHARDS)
    }
    assert holders == {k: ("a" if k in a.held() else "b") for k in range(SHARDS)}


def test_a_dead_replicas_shards_are_taken_over_within_the_lease_time(replica, clock):
    a, b = replica("a"), replica("b")
    rounds(clock, a, b, n=2)
    assert a.held() == frozenset(range(SHARDS)) and not b.held()
    # a dies (stops renewing): b takes every shard once a's leases have expired
    waited = 0.0
    while len(b.held()) < SHARDS:
        rounds(clock, b)
        waited += 2.0
        assert waited <= 15 + 2 * 2.0, "takeover slower than the lease duration"
    assert not a.is_leader()  # a's own clock: its renew deadline passed long ago


def test_no_shard_is_held_by_two_replicas_in_any_round(replica, clock):
    a, b, c = replica("a", max_held=2), replica("b", max_held=2), replica("c", max_held=2)
    for step in range(60):
        alive = [a, b, c] if step < 20 or step >= 40 else [b, c]  # a pauses for 40 s
        rounds(clock, *alive)
        held = [r.held() for r in (a, b, c)]
        assert sum(len(h) for h in held) == len(frozenset().union(*held)), held


def test_the_fence_fails_once_the_shard_was_taken_over(replica, clock, api):
    a, b = replica("a"), replica("b")
    rounds(clock, a, b)
    assert a.fence(0) and a.fence(3)
    # Someone rewrote shard 0's Lease behind a's back (a takeover a's clock has not seen).
    lease = api.get("coordination.k8s.io/v1", "Lease", "kale-system", "kale-controller-0")
    lease["spec"]["holderIdentity"] = "b"
    api.put(lease)
    assert a.is_leader()  # by its own clock it still leads...
    assert not a.fence(0)  # ...but the server says otherwise: it must not act
    assert a.fence(3)


def test_a_clean_shutdown_releases_every_shard_at_once(replica, clock):
    a, b = replica("a"), replica("b")
    rounds(clock, a, b)
    assert a.release()
    rounds(clock, b)
    assert b.held() == frozenset(range(SHARDS))


# -- the controller over shards ----------------------------------------------------------------
class Replica:
    """A controller whose jobs are those of the shards its elector holds."""

    def __init__(self, elector, tmp_path, clock, jobs_dir, name, quota=None):
        self.elector = elector
        self.events = LogEventSink()
        self.planned: list[str] = []
        self.controller = Controller(
            jobs_source=DirectoryJobs(jobs_dir),
            meter_factory=lambda e: TraceMetrics(clock, lambda t: 30_000.0, history_start=T0),
            forecaster_factory=lambda e: make_forecaster("seasonal_naive", period=240),
            actuator_factory=lambda e: DryRunActuator(Size(2, 1)),
            resource_manager=ResourceManager(quota) if quota is not None else None,
            clock=clock,
            event_sink=self.events,
            settings=ControllerSettings(identity=name, shards=SHARDS),
            ownership=elector,
        )

    def tick(self) -> set[str]:
        return {rep.job for rep in self.controller.tick()}


def test_each_job_is_planned_by_exactly_one_replica_and_moves_when_its_replica_dies(
    replica, clock, tmp_path
):
    jobs_dir = tmp_path / "jobs"
    keys = {f"ml/j{i}" for i in range(16)}
    for key in keys:
        write_job(jobs_dir, job_doc(key.split("/")[1]))
    ea, eb = replica("a", max_held=2), replica("b", max_held=SHARDS)
    rounds(clock, ea, n=1)
    rounds(clock, eb, n=1)
    a = Replica(ea, tmp_path, clock, jobs_dir, "a")
    b = Replica(eb, tmp_path, clock, jobs_dir, "b")
    for _ in range(3):
        rounds(clock, ea, eb)
        pa, pb = a.tick(), b.tick()
        assert pa.isdisjoint(pb) and pa | pb == keys
        assert all(shard_of(k, SHARDS) in ea.held() for k in pa)
        clock.advance(56)
    status_owner = {rt.key: (rt.shard, "a") for rt in a.controller.runtimes.values()} | {
        rt.key: (rt.shard, "b") for rt in b.controller.runtimes.values()
    }
    assert all(shard == shard_of(k, SHARDS) for k, (shard, _) in status_owner.items())
    owned = [e for e in b.events.events if e["reason"] == "ShardOwned"]
    assert len(owned) == len(b.controller.runtimes)
    assert all("planned by replica b" in e["message"] for e in owned)
    # a dies: within the lease time b plans every job, a's jobs included, once each
    moved = set(a.controller.runtimes)
    for _ in range(10):
        rounds(clock, eb)
        pb = b.tick()
    assert pb == keys
    assert moved <= set(b.controller.runtimes)


def test_a_replica_that_lost_its_shard_mid_tick_acts_for_none_of_its_jobs(
    replica, clock, tmp_path, api
):
    jobs_dir = tmp_path / "jobs"
    for i in range(8):
        write_job(jobs_dir, job_doc(f"j{i}"))
    ea = replica("a")
    rounds(clock, ea)
    a = Replica(ea, tmp_path, clock, jobs_dir, "a")
    assert len(a.tick()) == 8
    lost = {k for k in a.controller.runtimes if shard_of(k, SHARDS) == 1}
    clock.advance(60)
    rounds(clock, ea, step=0.0)  # a renews every shard at the start of its next tick...
    lease = api.get("coordination.k8s.io/v1", "Lease", "kale-system", "kale-controller-1")
    lease["spec"]["holderIdentity"] = "b"  # ...and loses shard 1 before it acts
    api.put(lease)
    planned = a.tick()
    assert lost and planned.isdisjoint(lost)
    assert not lost & set(a.controller.runtimes)
    assert a.controller.metrics.errors.labels(kind="fence")._value.get() == 1


def test_a_replica_shares_the_gpu_quota_by_the_shards_it_holds(replica, clock, tmp_path):
    jobs_dir = tmp_path / "jobs"
    write_job(jobs_dir, job_doc("j0"))
    ea, eb = replica("a", max_held=1), replica("b", max_held=3)
    rounds(clock, ea, eb)
    a = Replica(ea, tmp_path, clock, jobs_dir, "a", quota=64)
    b = Replica(eb, tmp_path, clock, jobs_dir, "b", quota=64)
    a.tick(), b.tick()
    assert a.controller.resources.quota_gpus == 16
    assert b.controller.resources.quota_gpus == 48


# -- settings -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"shards": 4}, "shards: 4 needs leaderElection.enabled: true"),
        ({"maxShardsPerReplica": 2}, "maxShardsPerReplica needs shards greater than 1"),
        ({"shards": 0, "leaderElection": {"enabled": True}}, "shards"),
        ({"shards": 1000, "leaderElection": {"enabled": True}}, "shards"),
    ],
)
def test_bad_shard_settings_are_one_clear_line(doc, message):
    with pytest.raises(UserError, match=message):
        parse_controller_config({"jobs": {"directory": "jobs"}, **doc})


def test_shard_settings_parse():
    cfg = parse_controller_config(
        {
            "jobs": {"namespaces": []},
            "shards": 8,
            "maxShardsPerReplica": 3,
            "leaderElection": {"enabled": True},
        }
    )
    assert (cfg.shards, cfg.max_shards_per_replica) == (8, 3)


# -- fits, stalest first -------------------------------------------------------------------
def test_fits_run_stalest_first_and_the_backlog_is_counted():
    import threading

    gate = threading.Event()
    order: list[str] = []
    pool = FitPool(1)
    running = threading.Event()

    def block() -> None:  # occupies the only thread until the queue is built
        running.set()
        gate.wait()

    blocker = pool.submit(block)
    assert running.wait(timeout=10)
    fits = {
        name: pool.submit(lambda n=name: order.append(n), fitted_at=at)
        for name, at in [("fresh", 300.0), ("never", None), ("old", 100.0), ("older", 50.0)]
    }
    assert pool.queued() == 4
    gate.set()
    blocker.result(timeout=10)
    for f in fits.values():
        f.result(timeout=10)
    assert order == ["never", "older", "old", "fresh"]
    assert pool.queued() == 0
    pool.close()
