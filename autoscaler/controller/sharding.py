"""Which jobs this replica plans, when jobs are spread over several controller replicas.

A job belongs to one of ``shards`` shards, by a stable hash of its key (``namespace/name``:
the same shard in every process and after every restart). Each shard has its own Lease
(:class:`kube.leader.ShardElector`); a replica plans the jobs of the shards it holds and no
others, so no job is planned by two replicas at once. Before acting in a tick the replica
checks each shard's Lease on the server (:meth:`Ownership.fence`): a shard lost since the
tick began — its lease taken over, rewritten or unreadable — acts for none of its jobs.
"""

from __future__ import annotations

import zlib
from typing import Protocol

from autoscaler.controller.jobs import Listing


def shard_of(key: str, shards: int) -> int:
    """The shard of a job key (CRC-32: stable across processes, unlike ``hash``)."""
    return zlib.crc32(key.encode()) % shards if shards > 1 else 0


class Ownership(Protocol):
    """The shards this replica may plan (a :class:`kube.leader.ShardElector`)."""

    shards: int
    identity: str

    def held(self) -> frozenset[int]:
        """The shards held now."""
        ...

    def fence(self, shard: int) -> bool:
        """Whether the replica may still act for ``shard`` (checked on the server)."""
        ...


def owned_part(listing: Listing, held: frozenset[int], shards: int) -> tuple[Listing, set[str]]:
    """The jobs (and invalid jobs) of the shards held, and the keys of the others."""
    jobs = [e for e in listing.jobs if shard_of(e.key, shards) in held]
    invalid = [i for i in listing.invalid if shard_of(i.key, shards) in held]
    elsewhere = {e.key for e in listing.jobs if shard_of(e.key, shards) not in held}
    elsewhere |= {i.key for i in listing.invalid if shard_of(i.key, shards) not in held}
    return Listing(jobs=jobs, invalid=invalid), elsewhere
