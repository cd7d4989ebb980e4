"""Evaluation protocols for queue policies on SWF logs: which jobs, which machine, which rules.

``rlscheduler`` reproduces RLScheduler's published baselines (PLACEMENT.md): the ten
sequences of 1,024 consecutive jobs starting at fixed indices, each on an empty machine
(the log's MaxProcs, else MaxNodes; allocated by whole nodes when it states both), run by
:mod:`placement.queue.rlscheduler`; bounded slowdown averaged over each sequence's jobs,
then over the sequences; RLScheduler's utilisation likewise.

``kale`` keeps the same sequences (so the numbers sit side by side) but runs them with sounder
rules (:mod:`placement.timed` on a processor pool): the head job is chosen afresh at every
event, EASY is the classic form with the reservation recomputed at every event, and every
job runs to completion, so ``util`` is the true utilisation over the makespan.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from placement.errors import PlacementInputError
from placement.queue.base import QueuePolicy
from placement.queue.metrics import summarise
from placement.queue.rlscheduler import ScheduleRun, simulate
from placement.timed import simulate_batch
from placement.workloads.batch import BatchJobs

RLSCHEDULER_STARTS: tuple[int, ...] = (1981, 2756, 4299, 8850, 3316, 2714, 5228, 7762, 4022, 7085)
"""Start indices of RLScheduler's ten test sequences (its seeded draw, written out)."""
SEQUENCE_LENGTH = 1024
"""Jobs per sequence."""
PROTOCOLS = ("rlscheduler", "kale")

Engine = Callable[..., ScheduleRun]


@dataclass(frozen=True)
class ProtocolSettings:
    """Which sequences of a log a protocol evaluates, and under which rules."""

    name: str = "rlscheduler"
    """``rlscheduler`` (the reference rules) or ``kale`` (the sounder ones)."""
    starts: tuple[int, ...] = RLSCHEDULER_STARTS
    """Index of each sequence's first job (in job-number order, after dropping)."""
    length: int = SEQUENCE_LENGTH
    """Jobs per sequence."""


def sequences(jobs: BatchJobs, settings: ProtocolSettings, *, path: str) -> list[BatchJobs]:
    """The protocol's sequences; a log too short for them is a user error (not fewer jobs)."""
    last = max(settings.starts) + settings.length
    if len(jobs) < last:
        raise PlacementInputError(
            f"the {settings.name} protocol needs at least {last} jobs "
            f"(sequences of {settings.length} from index {max(settings.starts)}); "
            f"the log has {len(jobs)} after dropping {jobs.dropped} with run time 0",
            path=path,
        )
    return [jobs.take(slice(s, s + settings.length)) for s in settings.starts]


def _engine(name: str) -> Engine:
    if name == "rlscheduler":
        return simulate
    if name == "kale":
        return simulate_batch
    raise PlacementInputError(f"unknown protocol {name!r} (known: {', '.join(PROTOCOLS)})")


def run_protocol(
    jobs: BatchJobs,
    *,
    processors: int,
    policy: QueuePolicy,
    backfill: bool,
    settings: ProtocolSettings,
    path: str = "<jobs>",
    nodes: int | None = None,
) -> dict[str, object]:
    """Every metric of :func:`summarise`, averaged over the sequences, plus ``per_sequence``."""
    engine = _engine(settings.name)
    per_sequence = []
    for seq in sequences(jobs, settings, path=path):
        run = engine(seq, processors=processors, policy=policy, backfill=backfill, nodes=nodes)
        metrics = summarise(run, processors)
        if settings.name == "kale":
            metrics["util_rlscheduler"] = metrics["util"]
            metrics["util"] = metrics["util_true"]
        per_sequence.append(metrics)
    keys = per_sequence[0].keys()
    mean = {k: float(np.mean([m[k] for m in per_sequence])) for k in keys}
    for count in ("restarts", "failed", "jobs"):
        mean[count] = int(sum(m[count] for m in per_sequence))
    return {**mean, "protocol": settings.name, "backfill": backfill, "per_sequence": per_sequence}
