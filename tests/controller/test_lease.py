"""Leader election on a coordination.k8s.io/v1 Lease, with a fake clock."""

from __future__ import annotations

import re

import pytest

from kube.client import RetryPolicy, connect
from kube.leader import LeaderElector
from tests.support.controller_fakes import FakeKubeApi

MICRO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


class Clock:
    def __init__(self) -> None:
        self.t = 1_767_225_600.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture()
def api():
    with FakeKubeApi() as fake:
        yield fake


@pytest.fixture()
def clock():
    return Clock()


@pytest.fixture()
def make(api, tmp_path, clock):
    kubes = []

    def elector(identity: str) -> LeaderElector:
        kube = connect(
            kubeconfig=api.kubeconfig(tmp_path / f"kc-{identity}"),
            retry=RetryPolicy(attempts=2, sleep=lambda s: None),
        )
        kubes.append(kube)
        return LeaderElector(
            kube,
            namespace="kale-system",
            identity=identity,
            lease_duration_s=15,
            renew_deadline_s=10,
            retry_period_s=2,
            clock=clock,
        )

    yield elector
    for k in kubes:
        k.close()


def lease(api):
    return api.get("coordination.k8s.io/v1", "Lease", "kale-system", "kale-controller")


def test_first_replica_creates_and_holds_the_lease(make, api):
    a = make("a")
    assert a.try_acquire_or_renew()
    spec = lease(api)["spec"]
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert MICRO.match(spec["renewTime"]) and MICRO.match(spec["acquireTime"])


def test_second_replica_stays_passive_while_the_leader_renews(make, clock, api):
    a, b = make("a"), make("b")
    assert a.try_acquire_or_renew()
    for _ in range(20):  # 40 s: far beyond the lease duration, but renewed throughout
        clock.t += 2
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    assert lease(api)["spec"]["holderIdentity"] == "a"
    assert b.holder == "a"


def test_standby_takes_over_once_the_leader_stops_renewing(make, clock, api):
    a, b = make("a"), make("b")
    a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b observes a's record now
    clock.t += 14
    assert not b.try_acquire_or_renew()  # not yet expired as b observed it
    clock.t += 2
    assert b.try_acquire_or_renew()
    spec = lease(api)["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    assert not a.is_leader()  # a has not renewed for 16 s > renew deadline


def test_expiry_is_measured_from_when_the_record_was_observed(make, clock, api):
    a, b = make("a"), make("b")
    a.try_acquire_or_renew()
    clock.t += 100  # b starts late: the old renewTime must not make it steal at once
    assert not b.try_acquire_or_renew()
    clock.t += 16
    assert b.try_acquire_or_renew()


def test_release_hands_over_at_the_next_try(make, clock, api):
    a, b = make("a"), make("b")
    a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.release()
    assert lease(api)["spec"].get("holderIdentity") is None
    assert not a.is_leader()
    clock.t += 2
    assert b.try_acquire_or_renew()


def test_a_lease_without_a_spec_is_free_to_take(make, api):
    """``spec`` is optional on a Lease (someone made an empty one): nobody holds it."""
    api.put(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "kale-controller", "namespace": "kale-system"},
        }
    )
    a = make("a")
    assert a.try_acquire_or_renew()
    assert lease(api)["spec"]["holderIdentity"] == "a"
    assert a.release()


def test_losing_the_create_race_means_standby(make, api):
    a = make("a")
    api.fail(409, method="POST", path="/leases")
    assert not a.try_acquire_or_renew()
    assert lease(api) is None


def test_losing_the_takeover_race_means_standby(make, clock, api):
    a, b = make("a"), make("b")
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    clock.t += 16
    api.fail(409, method="PUT", path="/leases/")
    assert not b.try_acquire_or_renew()


def test_leader_stops_acting_when_it_cannot_renew_within_the_deadline(make, clock, api):
    a = make("a")
    assert a.try_acquire_or_renew()
    api.fail(503, times=100)
    clock.t += 2
    assert a.try_acquire_or_renew()  # one failed renewal: still within the deadline
    assert a.last_error is not None
    clock.t += 9
    assert not a.try_acquire_or_renew()  # 11 s since the last renewal > 10 s deadline
    assert not a.is_leader()


def test_settings_must_be_ordered(make, api, tmp_path):
    kube = connect(kubeconfig=api.kubeconfig(tmp_path / "kc"))
    with pytest.raises(ValueError, match="retryPeriod < renewDeadline < leaseDuration"):
        LeaderElector(kube, namespace="x", lease_duration_s=5, renew_deadline_s=10)
    kube.close()
