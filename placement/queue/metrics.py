"""What a queue run is judged by: slowdown, waits, completion times, utilisation.

Definitions (times in seconds, per job; means over the jobs that ran):

* wait = start − submit (for runs with faults, :mod:`placement.timed` adds the time spent
  queued again after each failure);
* response = first start − submit (equal to wait when nothing fails);
* JCT (job completion time) = end − submit;
* bounded slowdown = max((wait + run) / max(run, τ), 1) with τ = 10 s (Feitelson's bound,
  so that very short jobs do not dominate the mean);
* makespan = last end − first submit;
* utilisation, two ways: RLScheduler's (the sequence's work over the span from the first
  submit to the moment its last job *started*, which ignores the jobs still running then and
  can exceed what the machine really did) and the true one (busy processor-seconds over
  makespan × machine size).
"""

from __future__ import annotations

import numpy as np

from placement.queue.rlscheduler import ScheduleRun

TAU_S = 10.0
"""The bound τ of the bounded slowdown (seconds), the value RLScheduler and most papers use."""


def bounded_slowdown(wait_s: np.ndarray, run_s: np.ndarray, *, tau_s: float = TAU_S) -> np.ndarray:
    """Per-job bounded slowdown max((wait + run) / max(run, τ), 1)."""
    return np.maximum((wait_s + run_s) / np.maximum(run_s, tau_s), 1.0)


def rlscheduler_utilisation(run: ScheduleRun, processors: int) -> float:
    """RLScheduler's utilisation: all the work over (last start − first submit) × processors."""
    ran = ~np.isnan(run.start_s)
    work = float(np.sum(run.jobs.run_s[ran] * run.jobs.size[ran]))
    span = run.last_decision_s - float(np.min(run.jobs.submit_s))
    return work / (span * processors) if span > 0 else float("nan")


def true_utilisation(run: ScheduleRun, processors: int) -> float:
    """Busy processor-seconds over makespan × processors (each job counted while it runs)."""
    ran = ~np.isnan(run.start_s)
    work = float(np.sum(run.jobs.run_s[ran] * run.jobs.size[ran]))
    span = float(np.max(run.end_s[ran])) - float(np.min(run.jobs.submit_s))
    return work / (span * processors) if span > 0 else float("nan")


def summarise(run: ScheduleRun, processors: int) -> dict[str, float]:
    """The per-run metrics of the ``kale place timed`` JSON contract (plus extras)."""
    ran = ~np.isnan(run.start_s)
    jobs = run.jobs
    wait = run.start_s[ran] - jobs.submit_s[ran]
    first_submit = float(np.min(jobs.submit_s))
    return {
        "makespan_s": float(np.max(run.end_s[ran]) - first_submit) if ran.any() else 0.0,
        "mean_jct_s": float(np.mean(run.end_s[ran] - jobs.submit_s[ran])) if ran.any() else 0.0,
        "mean_wait_s": float(np.mean(wait)) if ran.any() else 0.0,
        "mean_response_s": float(np.mean(wait)) if ran.any() else 0.0,
        "bsld": float(np.mean(bounded_slowdown(wait, jobs.run_s[ran]))) if ran.any() else 0.0,
        "util": rlscheduler_utilisation(run, processors),
        "util_true": true_utilisation(run, processors),
        "restarts": run.restarts,
        "gpu_hours_lost": run.gpu_hours_lost,
        "failed": run.failed,
        "jobs": int(ran.sum()),
    }
