"""Leader election on a ``coordination.k8s.io/v1`` Lease, so two replicas never both act.

The controller Deployment runs two replicas for availability; only the holder of the Lease
ticks. The protocol is client-go's (``leaderelection``), with an injected clock:

* **acquire**: no Lease → create it holding it (a 409 means another replica was faster);
  a Lease whose holder is empty, or whose record has not changed for ``lease_duration_s``
  *as observed by this replica* → take it over with a write carrying the resourceVersion
  just read (a 409 means someone else took it first), bumping ``leaseTransitions``.
* **renew**: the holder rewrites ``renewTime`` every ``retry_period_s``. If it cannot renew
  for ``renew_deadline_s`` it stops acting (``is_leader`` turns False) before any other
  replica may take over (``renew_deadline_s < lease_duration_s``).
* **release**: on a clean shutdown the holder empties ``holderIdentity`` so the standby takes
  over at its next try instead of waiting out the lease.

Expiry uses the time this replica *observed* the record change, never the other replica's
timestamps, so clock skew between nodes cannot make two leaders.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

from kubernetes.client import V1Lease, V1LeaseSpec
from pydantic import Field, model_validator

from common.durations import PositiveDuration
from common.settingsfile import SettingsModel
from kube.client import Kube
from kube.errors import ActuatorError, Conflict, TargetGone

log = logging.getLogger(__name__)


def default_identity() -> str:
    """``<hostname>_<random>``: unique per process even when pods share a hostname."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class MicroTime(dt.datetime):
    """A datetime that serialises as a Kubernetes MicroTime: always six fraction digits.

    The client turns datetimes into ``isoformat()``, which drops the fraction when the
    microseconds are 0; the API server parses MicroTime with a fixed ``.000000`` layout and
    would reject that. The client's models keep datetime subclasses as they are.
    """

    def isoformat(self, sep: str = "T", timespec: str = "auto") -> str:
        return self.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def __str__(self) -> str:
        return self.isoformat()


def micro_time(t: float) -> MicroTime:
    """``t`` (seconds since the epoch) as a :class:`MicroTime`."""
    return MicroTime.fromtimestamp(t, dt.UTC)


def _stamp(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return str(value)


def _version(lease: V1Lease) -> str | None:
    """The resourceVersion a replace must carry (the API server always sets one)."""
    return lease.metadata.resource_version if lease.metadata is not None else None


class LeaderElector:
    """One replica's view of the election; call :meth:`try_acquire_or_renew` periodically."""

    def __init__(
        self,
        kube: Kube,
        *,
        namespace: str,
        name: str = "kale-controller",
        identity: str | None = None,
        lease_duration_s: float = 15.0,
        renew_deadline_s: float = 10.0,
        retry_period_s: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not retry_period_s < renew_deadline_s < lease_duration_s:
            raise ValueError(
                "need retryPeriod < renewDeadline < leaseDuration "
                f"({retry_period_s:g}s, {renew_deadline_s:g}s, "
                f"{lease_duration_s:g}s)"
            )
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self.clock = clock
        self.what = f"lease {namespace}/{name}"
        self._renewed_at: float | None = None
        self._observed: tuple[str | None, str | None] | None = None
        self._observed_at = 0.0
        self.last_error: str | None = None
        self.transitions = 0

    # -- state ---------------------------------------------------------------------------
    def is_leader(self) -> bool:
        """Held and renewed within ``renew_deadline_s`` (stop acting as soon as unsure)."""
        return (
            self._renewed_at is not None and self.clock() - self._renewed_at < self.renew_deadline_s
        )

    @property
    def holder(self) -> str | None:
        """The holder last seen on the Lease (None if it was free or never read)."""
        return self._observed[0] if self._observed else None

    # -- protocol ------------------------------------------------------------------------
    def _spec(self, now: float, acquire: float, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration_s)),
            "acquireTime": micro_time(acquire),
            "renewTime": micro_time(now),
            "leaseTransitions": transitions,
        }

    def try_acquire_or_renew(self) -> bool:
        """One round of the protocol; returns :meth:`is_leader` afterwards. Never raises."""
        held = self._renewed_at is not None
        try:
            self._round()
            self.last_error = None
        except ActuatorError as exc:
            self.last_error = str(exc)
            log.warning("leader election: %s", exc)
        leader = self.is_leader()
        if not leader:
            if held:
                log.warning("leader election: %s lost %s", self.identity, self.what)
            self._renewed_at = None
        return leader

    def _round(self) -> None:
        now = self.clock()
        try:
            lease = self.kube.call(
                self.what, self.kube.coordination.read_namespaced_lease, self.name, self.namespace
            )
        except TargetGone:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(now, now, 0),
            }
            try:
                self.kube.call(
                    self.what, self.kube.coordination.create_namespaced_lease, self.namespace, body
                )
            except Conflict:
                return  # another replica created it first
            self._won(now, 0)
            return
        spec = lease.spec or V1LeaseSpec()  # a Lease may have no spec: nobody holds it
        holder = spec.holder_identity or None
        record = (holder, _stamp(spec.renew_time))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        duration = float(spec.lease_duration_seconds or self.lease_duration_s)
        if holder is not None and holder != self.identity and now < self._observed_at + duration:
            self._renewed_at = None
            return  # held by someone else and not expired
        transitions = int(spec.lease_transitions or 0)
        acquire = now
        if holder == self.identity and spec.acquire_time is not None:
            acquire = spec.acquire_time.timestamp()
        elif holder != self.identity:
            transitions += 1
        try:
            self._replace(lease, self._spec(now, acquire, transitions))
        except Conflict:
            return  # someone else wrote first; their record wins
        if holder != self.identity:
            log.info(
                "leader election: %s acquired %s (previous holder %s)",
                self.identity,
                self.what,
                holder or "none",
            )
        self._won(now, transitions)

    def _replace(self, lease: V1Lease, spec: dict[str, Any]) -> None:
        """Replace the Lease with ``spec``, carrying the resourceVersion read with ``lease``
        (optimistic concurrency: a writer who came first makes this a :class:`Conflict`)."""
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": _version(lease),
            },
            "spec": spec,
        }
        self.kube.call(
            self.what,
            self.kube.coordination.replace_namespaced_lease,
            self.name,
            self.namespace,
            body,
        )

    def _won(self, now: float, transitions: int) -> None:
        self._renewed_at = now
        self._observed = (self.identity, _stamp(micro_time(now)))
        self._observed_at = now
        self.transitions = transitions

    def release(self) -> bool:
        """Give the lease up if held (clean shutdown); returns whether it was released."""
        if self._renewed_at is None:
            return False
        self._renewed_at = None
        try:
            lease = self.kube.call(
                self.what, self.kube.coordination.read_namespaced_lease, self.name, self.namespace
            )
            spec = lease.spec or V1LeaseSpec()
            if (spec.holder_identity or None) != self.identity:
                return False
            now = self.clock()
            self._replace(
                lease,
                {
                    "holderIdentity": None,
                    "leaseDurationSeconds": 1,
                    "acquireTime": micro_time(now),
                    "renewTime": micro_time(now),
                    "leaseTransitions": int(spec.lease_transitions or 0),
                },
            )
        except ActuatorError as exc:
            log.warning("leader election: could not release %s: %s", self.what, exc)
            return False
        log.info("leader election: %s released %s", self.identity, self.what)
        return True


class LeaderElection(SettingsModel):
    """The ``leaderElection`` section of ``controller.yaml`` and ``scheduler.yaml``."""

    enabled: bool = False
    namespace: str | None = Field(
        default=None,
        description="Namespace of the Lease (default: $POD_NAMESPACE, else kale-system).",
    )
    lease_name: str = "kale-controller"
    lease_duration: PositiveDuration = Field(default=15.0, le=3600.0)
    renew_deadline: PositiveDuration = Field(default=10.0, le=3600.0)
    retry_period: PositiveDuration = Field(default=2.0, le=3600.0)
    identity: str | None = Field(
        default=None, description="Defaults to $POD_NAME or hostname plus a random suffix."
    )

    def replica_identity(self) -> str:
        """This replica's name: ``identity``, else $POD_NAME, else hostname plus a suffix."""
        return self.identity or os.environ.get("POD_NAME") or default_identity()

    def elector(self, kube: Any, *, identity: str, clock: Callable[[], float]) -> LeaderElector:
        """The Lease elector these settings describe (the controller's and the scheduler's)."""
        return LeaderElector(
            kube,
            namespace=self.namespace or os.environ.get("POD_NAMESPACE") or "kale-system",
            name=self.lease_name,
            identity=identity,
            lease_duration_s=self.lease_duration,
            renew_deadline_s=self.renew_deadline,
            retry_period_s=self.retry_period,
            clock=clock,
        )

    @model_validator(mode="after")
    def _ordered(self) -> LeaderElection:
        if not self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "need leaderElection.retryPeriod < leaderElection.renewDeadline < "
                f"leaderElection.leaseDuration ({self.retry_period:g}s, "
                f"{self.renew_deadline:g}s, {self.lease_duration:g}s)"
            )
        return self
