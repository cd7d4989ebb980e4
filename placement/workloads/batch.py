"""Rigid batch jobs as arrays: what the queue simulators need from an SWF log.

A rigid job asks for a fixed number of processors for its whole run. The conversion from
SWF follows RLScheduler's loader (PLACEMENT.md's protocol), because that is how the
published Lublin numbers were made and the rules are sensible for any log:

* a job with run time 0 never occupied the machine and is dropped, and so is a job whose
  size the log does not know (allocated and requested processors both −1);
* an unknown run time (−1) becomes 10 s (RLScheduler's choice; Lublin files have none);
* size = max(allocated, requested) processors (logs fill one or the other, or both);
* the estimate a scheduler may see = the requested time, or the true run time when the log
  has no request (−1): model-generated logs such as Lublin's have no requests, so there the
  schedulers see perfect estimates.

Jobs are ordered by job number (stable), as RLScheduler orders them; sequence indices such as
PLACEMENT.md's start indices refer to this order.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from placement.workloads.swf import FIELD_NAMES, UNKNOWN, SwfTrace

UNKNOWN_RUN_S = 10.0
"""Run time given to a job whose log entry says −1 (RLScheduler's loader does the same)."""


@dataclass(frozen=True)
class BatchJobs:
    """Aligned arrays, one entry per job, in job-number order."""

    job_id: np.ndarray
    submit_s: np.ndarray
    run_s: np.ndarray
    estimate_s: np.ndarray
    size: np.ndarray
    dropped: int = 0
    """Jobs of the log left out (run time 0, or no size)."""

    def __len__(self) -> int:
        return len(self.job_id)

    def take(self, index: np.ndarray | slice) -> BatchJobs:
        """The jobs at ``index`` (a slice or positions), keeping their order."""
        return BatchJobs(
            job_id=self.job_id[index],
            submit_s=self.submit_s[index],
            run_s=self.run_s[index],
            estimate_s=self.estimate_s[index],
            size=self.size[index],
        )


def nodes_needed(size: np.ndarray, *, processors: int, nodes: int | None) -> np.ndarray:
    """Whole nodes each job occupies on a machine of ``processors`` in ``nodes`` nodes.

    SWF logs that state both MaxProcs and MaxNodes describe a machine allocated by whole
    nodes (RLScheduler's cluster: ⌈n / (MaxProcs / MaxNodes)⌉ nodes for n processors); with
    one of them only, a node is a processor.
    """
    if nodes is None or nodes == processors:
        return np.asarray(size, dtype=np.int64)
    return np.ceil(np.asarray(size, dtype=np.float64) / (processors / nodes)).astype(np.int64)


def compress_arrivals(jobs: BatchJobs, factor: float) -> BatchJobs:
    """The same jobs arriving ``factor`` times faster (inter-arrival gaps divided by it, run
    times unchanged), so the offered load grows by ``factor``: the usual way to study a log
    under more pressure than it saw (Feitelson's load scaling)."""
    if not (factor > 0 and np.isfinite(factor)):
        raise ValueError(f"the arrival factor must be a positive number, got {factor}")
    if factor == 1 or not len(jobs):
        return jobs
    first = float(np.min(jobs.submit_s))
    return BatchJobs(
        job_id=jobs.job_id,
        submit_s=first + (jobs.submit_s - first) / factor,
        run_s=jobs.run_s,
        estimate_s=jobs.estimate_s,
        size=jobs.size,
        dropped=jobs.dropped,
    )


def batch_jobs_from_swf(trace: SwfTrace) -> BatchJobs:
    """The log's jobs as :class:`BatchJobs`, by the rules in the module docstring."""
    rows = sorted(trace.jobs, key=lambda j: j.job_id)
    kept = [j for j in rows if j.run_s != 0 and max(j.allocated_procs, j.requested_procs) >= 1]
    run = np.array([UNKNOWN_RUN_S if j.run_s == UNKNOWN else j.run_s for j in kept], dtype=float)
    requested = np.array([j.requested_time_s for j in kept], dtype=float)
    return BatchJobs(
        job_id=np.array([j.job_id for j in kept], dtype=np.int64),
        submit_s=np.array([j.submit_s for j in kept], dtype=float),
        run_s=run,
        estimate_s=np.where(requested == UNKNOWN, run, requested),
        size=np.array([max(j.allocated_procs, j.requested_procs) for j in kept], dtype=np.int64),
        dropped=len(rows) - len(kept),
    )


def write_swf(
    path: str | Path, jobs: BatchJobs, *, processors: int, comments: Sequence[str] = ()
) -> None:
    """Save rigid jobs as an SWF log that ``load_swf`` and :func:`batch_jobs_from_swf` read
    back to the same jobs.

    The header states ``MaxProcs`` (``processors``); each row gives the job number, submit
    time, run time and allocated processors; the requested time is the estimate where it
    differs from the run time, else −1 (unknown), as model-generated logs write it.
    Written atomically."""
    lines = [f"; {c}" for c in comments]
    lines += [f"; MaxJobs: {len(jobs.job_id)}", f"; MaxProcs: {processors}"]
    for i in range(len(jobs.job_id)):
        fields: list[object] = [UNKNOWN] * len(FIELD_NAMES)
        run, estimate = float(jobs.run_s[i]), float(jobs.estimate_s[i])
        fields[0], fields[1] = int(jobs.job_id[i]), _number(jobs.submit_s[i])
        fields[3] = _number(run)
        fields[4], fields[10], fields[14] = int(jobs.size[i]), 1, 0
        fields[8] = UNKNOWN if estimate == run else _number(estimate)
        lines.append(" ".join(str(f) for f in fields))
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _number(value: float) -> int | float:
    """Whole numbers without a fraction (SWF's integral fields), others as they are."""
    number = float(value)
    return int(number) if number == int(number) else number
