"""``kale place timed`` as one library call: load a workload, run every policy, report.

Two kinds of input:

* an SWF log (``swf``): rigid jobs on the log's processors. With ``protocol`` the log is cut
  into RLScheduler's ten test sequences (:mod:`placement.queue.protocol`); without, the whole
  log runs once through the timed simulator.
* an openb trace (``nodes`` + ``pods``): every pod arrives at its creation time, runs for
  deletion − scheduled time, and is placed on GPU nodes by a node policy
  (:mod:`placement.node_pool`).

Each queue policy (× each node policy, for openb) is one entry of the report, named by the
queue policy alone, or ``queue+placement`` when several node policies are compared.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from placement.errors import PlacementInputError
from placement.faults import FaultModel, FaultSettings, default_fault_model, load_fault_table
from placement.pool import ProcessorPool, ResourcePool
from placement.queue.metrics import TAU_S, bounded_slowdown
from placement.queue.priorities import parse_queue_policies
from placement.queue.protocol import PROTOCOLS, ProtocolSettings, run_protocol
from placement.timed import TimedRun, simulate_timed
from placement.workloads.batch import BatchJobs, batch_jobs_from_swf
from placement.workloads.swf import load_swf

Progress = Callable[[str, int], Callable[[int], None]]
"""Given a label and a total, returns the callback that advances a progress bar."""


@dataclass(frozen=True)
class TimedConfig:
    """Everything ``kale place timed`` takes (see the CLI's help for each flag)."""

    swf: str | None = None
    nodes: str | None = None
    pods: str | None = None
    queue: str = "fcfs"
    backfill: bool = False
    placement: str | None = None
    """Node policies for openb runs (default ``bestfit``); not used for SWF logs."""
    faults: str | None = None
    """``default`` (the heterogeneous model), a rate-table CSV, or None (no faults)."""
    seed: int = 0
    protocol: str | None = None
    processors: int | None = None
    """SWF machine size; default: the log's MaxProcs, else MaxNodes."""
    fault_settings: FaultSettings = field(default_factory=FaultSettings)


@dataclass
class TimedReport:
    """Per-entry metrics, per-entry timelines (for plots), and what was run."""

    policies: dict[str, dict[str, Any]]
    timelines: dict[str, dict[str, list[float]]]
    settings: dict[str, Any]


def summarise_timed(run: TimedRun) -> dict[str, Any]:
    """The ``kale place timed`` metrics of one run (the JSON contract's names, plus extras)."""
    jobs = run.jobs
    done = ~np.isnan(run.end_s)
    submit, run_s = jobs.submit_s[done], jobs.run_s[done]
    metrics: dict[str, Any] = {
        "makespan_s": float(np.max(run.end_s[done]) - np.min(jobs.submit_s)) if done.any() else 0.0,
        "mean_jct_s": _mean(run.end_s[done] - submit),
        "mean_wait_s": _mean(run.wait_s[done]),
        "mean_response_s": _mean(run.first_start_s[done] - submit),
        "bsld": _mean(bounded_slowdown(run.end_s[done] - submit - run_s, run_s, tau_s=TAU_S)),
        "util": next(iter(run.usage_mean.values()), math.nan),
        "restarts": int(run.restarts.sum()),
        "gpu_hours_lost": run.lost_unit_hours,
        "failed": int(run.failed.sum()),
        "jobs": int(done.sum()),
        "unit_failures": run.failures,
    }
    for key, value in run.usage_mean.items():
        metrics[f"util_{key}"] = value
    return metrics


def _mean(values: np.ndarray) -> float:
    return float(np.mean(values)) if len(values) else 0.0


def _faults(config: TimedConfig, pool: ResourcePool) -> FaultModel | None:
    if config.faults is None:
        return None
    if config.faults == "default":
        return default_fault_model(
            len(pool.unit_names), seed=config.seed, settings=config.fault_settings
        )
    return load_fault_table(config.faults, pool.unit_names, settings=config.fault_settings)


def _check(config: TimedConfig) -> None:
    openb = config.nodes is not None or config.pods is not None
    if (config.swf is None) == (not openb):
        raise PlacementInputError("give either --swf F.swf or both --nodes and --pods")
    if openb and (config.nodes is None or config.pods is None):
        raise PlacementInputError("an openb run needs both --nodes and --pods")
    if config.protocol is not None:
        if config.swf is None:
            raise PlacementInputError("--protocol applies to SWF logs (--swf) only")
        if config.protocol not in PROTOCOLS:
            known = ", ".join(PROTOCOLS)
            raise PlacementInputError(f"unknown protocol {config.protocol!r} (known: {known})")
        if config.faults is not None:
            raise PlacementInputError("--protocol runs are fault-free; drop --faults")
    if config.swf is not None and config.placement is not None:
        raise PlacementInputError("--placement picks GPU nodes; an SWF log has only processors")
    if config.processors is not None and config.processors < 1:
        raise PlacementInputError(f"--processors must be 1 or more, got {config.processors}")


def run_timed(config: TimedConfig, *, progress: Progress | None = None) -> TimedReport:
    """Run every policy named in ``config`` and report (see the module docstring)."""
    _check(config)
    queues = parse_queue_policies(config.queue)
    if config.swf is not None:
        return _run_swf(config, queues, progress)
    from placement.node_pool import run_openb

    return run_openb(config, queues, progress=progress, summarise=summarise_timed, faults=_faults)


def _run_swf(config: TimedConfig, queues: list, progress: Progress | None) -> TimedReport:
    assert config.swf is not None
    trace = load_swf(config.swf)
    processors = config.processors or trace.processors
    if processors is None:
        raise PlacementInputError(
            "the log states neither MaxProcs nor MaxNodes; give --processors", path=config.swf
        )
    jobs = batch_jobs_from_swf(trace)
    settings: dict[str, Any] = {
        "input": config.swf,
        "processors": processors,
        "backfill": config.backfill,
        "protocol": config.protocol,
        "dropped_jobs": jobs.dropped,
        "seed": config.seed,
    }
    policies: dict[str, dict[str, Any]] = {}
    timelines: dict[str, dict[str, list[float]]] = {}
    for policy in queues:
        if config.protocol is not None:
            policies[policy.name] = run_protocol(
                jobs,
                processors=processors,
                policy=policy,
                backfill=config.backfill,
                settings=ProtocolSettings(name=config.protocol),
                path=config.swf,
            )
            continue
        run = _run_whole_log(jobs, processors, policy, config, settings, progress)
        policies[policy.name] = summarise_timed(run)
        timelines[policy.name] = run.timeline
    return TimedReport(policies=policies, timelines=timelines, settings=settings)


def _run_whole_log(
    jobs: BatchJobs,
    processors: int,
    policy: Any,
    config: TimedConfig,
    settings: dict[str, Any],
    progress: Progress | None,
) -> TimedRun:
    too_big = int(np.count_nonzero(jobs.size > processors))
    settings["larger_than_machine"] = too_big
    pool = ProcessorPool(processors, jobs.size)
    faults = _faults(config, pool)
    if faults is not None:
        settings["faults"] = {"source": faults.source, **asdict(faults.settings)}
    return simulate_timed(
        jobs,
        pool,
        policy=policy,
        backfill=config.backfill,
        faults=faults,
        seed=config.seed,
        progress=progress(policy.name, len(jobs)) if progress else None,
    )
