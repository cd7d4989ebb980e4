"""Tiny workloads shared by the agent tests (generated, seeded: no data files)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from placement.workloads.batch import BatchJobs


def tiny_jobs(count: int = 120, *, seed: int = 0, processors: int = 16) -> BatchJobs:
    """A bursty rigid-job log small enough to simulate in milliseconds."""
    rng = np.random.default_rng(seed)
    submit = np.cumsum(rng.exponential(30.0, count)).round()
    run = np.maximum(1.0, rng.lognormal(4.0, 1.2, count).round())
    size = rng.choice([1, 2, 4, 8, processors], size=count, p=[0.4, 0.2, 0.2, 0.15, 0.05])
    return BatchJobs(
        job_id=np.arange(1, count + 1),
        submit_s=submit,
        run_s=run,
        estimate_s=run.copy(),
        size=size.astype(np.int64),
    )


def write_swf(path: Path, jobs: BatchJobs, processors: int) -> Path:
    """``jobs`` as an SWF log with a MaxProcs header."""
    lines = [f"; MaxProcs: {processors}"]
    for i in range(len(jobs)):
        fields = [-1] * 18
        fields[0], fields[1], fields[2] = int(jobs.job_id[i]), int(jobs.submit_s[i]), 0
        fields[3], fields[4], fields[7] = int(jobs.run_s[i]), int(jobs.size[i]), int(jobs.size[i])
        fields[8], fields[10] = int(jobs.estimate_s[i]), 1
        lines.append(" ".join(str(f) for f in fields))
    path.write_text("\n".join(lines) + "\n")
    return path
