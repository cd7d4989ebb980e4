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
import threading
import time
import uuid
import zlib
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
        self.resource_version: str | None = None
        """The Lease's resourceVersion after this replica's last write (the fence's token)."""
        self._lock = threading.Lock()

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
            with self._lock:
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
                made = self.kube.call(
                    self.what, self.kube.coordination.create_namespaced_lease, self.namespace, body
                )
            except Conflict:
                return  # another replica created it first
            self.resource_version = _version(made)
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
        (optimistic concurrency: a writer who came first makes this a :class:`Conflict`);
        remembers the resourceVersion the write left."""
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
        written = self.kube.call(
            self.what,
            self.kube.coordination.replace_namespaced_lease,
            self.name,
            self.namespace,
            body,
        )
        self.resource_version = _version(written)

    def fence(self) -> bool:
        """Whether this replica may still act for the Lease: it holds it by its own clock
        (:meth:`is_leader`) *and* the Lease on the server is still the one its last write left
        (same holder, same resourceVersion). A takeover, a deleted or rewritten Lease, or an API
        server that cannot be read all answer False: acting is skipped, never doubled."""
        if not self.is_leader():
            return False
        with self._lock:
            try:
                lease = self.kube.call(
                    self.what,
                    self.kube.coordination.read_namespaced_lease,
                    self.name,
                    self.namespace,
                )
            except ActuatorError as exc:
                log.warning("leader election: cannot check %s before acting: %s", self.what, exc)
                return False
            spec = lease.spec or V1LeaseSpec()
            return (spec.holder_identity or None) == self.identity and (
                _version(lease) == self.resource_version
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
            with self._lock:
                released = self._release()
        except ActuatorError as exc:
            log.warning("leader election: could not release %s: %s", self.what, exc)
            return False
        if released:
            log.info("leader election: %s released %s", self.identity, self.what)
        return released

    def _release(self) -> bool:
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
        return True


class ShardElector:
    """One replica's leases over ``shards`` shards: it holds as many as it can take, at most
    ``max_held``; a shard whose holder stops renewing is taken over once its lease expires.

    Each shard is an independent :class:`LeaderElector` on its own Lease
    (``<name>-<shard>``), so everything that makes one lease safe (observed expiry, optimistic
    concurrency on the resourceVersion, :meth:`LeaderElector.fence`) holds per shard. Replicas
    try free shards starting at a different one each (from their identity), so two replicas
    starting together do not both queue on shard 0.
    """

    def __init__(
        self,
        kube: Kube,
        *,
        namespace: str,
        name: str,
        shards: int,
        max_held: int | None = None,
        identity: str | None = None,
        lease_duration_s: float = 15.0,
        renew_deadline_s: float = 10.0,
        retry_period_s: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if shards < 1:
            raise ValueError("need at least one shard")
        self.identity = identity or default_identity()
        self.shards = shards
        self.max_held = shards if max_held is None else max(1, min(max_held, shards))
        self.retry_period_s = retry_period_s
        self.electors = [
            LeaderElector(
                kube,
                namespace=namespace,
                name=f"{name}-{k}",
                identity=self.identity,
                lease_duration_s=lease_duration_s,
                renew_deadline_s=renew_deadline_s,
                retry_period_s=retry_period_s,
                clock=clock,
            )
            for k in range(shards)
        ]
        start = zlib.crc32(self.identity.encode()) % shards
        self._order = [(start + k) % shards for k in range(shards)]
        self.last_error: str | None = None

    def held(self) -> frozenset[int]:
        """The shards this replica may act for now."""
        return frozenset(k for k, e in enumerate(self.electors) if e.is_leader())

    def is_leader(self) -> bool:
        """Whether it holds any shard (the runner ticks only then)."""
        return any(e.is_leader() for e in self.electors)

    def try_acquire_or_renew(self) -> bool:
        """Renew the shards held, then try free ones up to ``max_held``. Never raises."""
        errors = []
        for k in self._order:
            e = self.electors[k]
            if e.is_leader() or len(self.held()) < self.max_held:
                e.try_acquire_or_renew()
                if e.last_error:
                    errors.append(f"shard {k}: {e.last_error}")
        self.last_error = "; ".join(errors) or None
        return self.is_leader()

    def fence(self, shard: int) -> bool:
        """See :meth:`LeaderElector.fence`, for one shard's Lease."""
        return self.electors[shard].fence()

    def holders(self) -> dict[int, str | None]:
        """Each shard's holder as last seen (this replica's own shards included)."""
        return {
            k: (self.identity if e.is_leader() else e.holder) for k, e in enumerate(self.electors)
        }

    def release(self) -> bool:
        """Give up every shard held (clean shutdown); whether any was released."""
        released = [e.release() for e in self.electors]
        return any(released)


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

    def shard_elector(
        self,
        kube: Any,
        *,
        identity: str,
        clock: Callable[[], float],
        shards: int,
        max_held: int | None = None,
    ) -> ShardElector:
        """One Lease per shard, ``<leaseName>-<shard>`` (see :class:`ShardElector`)."""
        return ShardElector(
            kube,
            namespace=self.namespace or os.environ.get("POD_NAMESPACE") or "kale-system",
            name=self.lease_name,
            shards=shards,
            max_held=max_held,
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
