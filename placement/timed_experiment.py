"""``kale place timed`` as one library call: load a workload, run every policy, report.

Two kinds of input:

* an SWF log (``swf``): rigid jobs on the log's processors. With ``protocol`` the log is cut
  into RLScheduler's ten test sequences (:mod:`placement.protocol`); without, the whole
  log runs once through the timed simulator.
* an openb trace (``nodes`` + ``pods``): every pod arrives at its creation time, runs for
  deletion − scheduled time, and is placed on GPU nodes by a node policy
  (:mod:`placement.node_pool`).

Each queue policy (× each node policy, for openb) is one entry of the report, named by the
queue policy alone, or ``queue+placement`` when several node policies are compared. An entry
run by a guarded agent (``agent:PATH,fallback=RULE``, as queue or node policy) also reports
``fallback_decisions`` — the decisions its rule made — with ``fallback_reasons`` and
``guarded_decisions``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from placement.errors import PlacementInputError
from placement.fallback import FallbackCounts, counts_of
from placement.faults import FaultModel, FaultSettings, default_fault_model, load_fault_table
from placement.locality import LocalityNodePool, LocalitySettings
from placement.pool import ProcessorPool, ResourcePool
from placement.protocol import PROTOCOLS, ProtocolSettings, run_protocol
from placement.queue.base import QueuePolicy
from placement.queue.metrics import TAU_S, bounded_slowdown
from placement.queue.priorities import parse_queue_policies
from placement.timed import TimedRun, simulate_timed
from placement.workloads.batch import (
    BatchJobs,
    batch_jobs_from_swf,
    compress_arrivals,
    nodes_needed,
)
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
    arrival_speedup: float = 1.0
    """Divide the gaps between arrivals by this (run times unchanged): ×k the offered load.
    The openb trace's real arrivals load its cluster well under 1 %, so nothing ever waits;
    a speed-up shows how the policies behave under pressure."""
    node_share: float = 1.0
    """openb: keep this share of the nodes (a seeded random subset), a smaller cluster for
    the same pods — the other way to put the trace under pressure."""
    locality: bool = False
    """openb: jobs read their data through node caches (``placement.locality``), so where
    a job lands changes how long it takes to start; reports the access latency too."""


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
        metrics["frag_ratio" if key == "frag" else f"util_{key}"] = value
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
    if not (config.arrival_speedup > 0 and math.isfinite(config.arrival_speedup)):
        raise PlacementInputError(
            f"--arrival-speedup must be a positive number, got {config.arrival_speedup}"
        )
    if not 0 < config.node_share <= 1:
        raise PlacementInputError(f"--node-share must be in (0, 1], got {config.node_share}")
    if config.swf is not None and config.locality:
        raise PlacementInputError("--locality models data caches on GPU nodes; not for SWF")
    if config.swf is not None and config.node_share != 1:
        raise PlacementInputError("--node-share picks GPU nodes; use --processors for SWF")
    if config.protocol is not None and config.arrival_speedup != 1:
        raise PlacementInputError("--protocol fixes the sequences; drop --arrival-speedup")
    if config.processors is not None and config.processors < 1:
        raise PlacementInputError(f"--processors must be 1 or more, got {config.processors}")


def run_timed(config: TimedConfig, *, progress: Progress | None = None) -> TimedReport:
    """Run every policy named in ``config`` and report (see the module docstring)."""
    _check(config)
    queues = parse_queue_policies(config.queue)
    if config.swf is not None:
        return _run_swf(config, queues, progress)
    return _run_openb(config, queues, progress)


def _run_swf(
    config: TimedConfig, queues: list[QueuePolicy], progress: Progress | None
) -> TimedReport:
    assert config.swf is not None
    trace = load_swf(config.swf)
    processors = config.processors or trace.processors
    if processors is None:
        raise PlacementInputError(
            "the log states neither MaxProcs nor MaxNodes; give --processors", path=config.swf
        )
    # Whole-node allocation only when the log states both sizes (and no override is given).
    nodes = trace.max_nodes if config.processors is None and trace.max_procs else None
    jobs = compress_arrivals(batch_jobs_from_swf(trace), config.arrival_speedup)
    settings: dict[str, Any] = {
        "input": config.swf,
        "processors": processors,
        "nodes": nodes or processors,
        "backfill": config.backfill,
        "protocol": config.protocol,
        "dropped_jobs": jobs.dropped,
        "seed": config.seed,
        "arrival_speedup": config.arrival_speedup,
    }
    policies: dict[str, dict[str, Any]] = {}
    timelines: dict[str, dict[str, list[float]]] = {}
    for policy in queues:
        before = _counts(policy)
        if config.protocol is not None:
            policies[policy.name] = run_protocol(
                jobs,
                processors=processors,
                policy=policy,
                backfill=config.backfill,
                settings=ProtocolSettings(name=config.protocol),
                path=config.swf,
                nodes=nodes,
            )
            _add_fallbacks(policies[policy.name], before, policy)
            continue
        run = _run_whole_log(jobs, (processors, nodes), policy, config, settings, progress)
        policies[policy.name] = summarise_timed(run)
        _add_fallbacks(policies[policy.name], before, policy)
        timelines[policy.name] = run.timeline
    return TimedReport(policies=policies, timelines=timelines, settings=settings)


def _run_whole_log(
    jobs: BatchJobs,
    machine: tuple[int, int | None],
    policy: Any,
    config: TimedConfig,
    settings: dict[str, Any],
    progress: Progress | None,
) -> TimedRun:
    processors, nodes = machine
    need = nodes_needed(jobs.size, processors=processors, nodes=nodes)
    capacity = nodes if nodes is not None else processors
    settings["larger_than_machine"] = int(np.count_nonzero(need > capacity))
    pool = ProcessorPool(capacity, need)
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


def _node_pool(
    config: TimedConfig,
    nodes: list[Any],
    pods: list[Any],
    scorer: Any,
    rank: np.ndarray,
    typical: Any,
) -> Any:
    """The GPU pool of an openb run (with data locality when asked)."""
    from placement.node_pool import NodePool

    gangs = [(p,) for p in pods]
    window = config.fault_settings.window_s
    if config.locality:
        return LocalityNodePool(
            nodes,
            gangs,
            scorer,
            rank=rank,
            locality=LocalitySettings(),
            typical=typical,
            fault_window_s=window,
        )
    return NodePool(nodes, gangs, scorer, rank=rank, typical=typical, fault_window_s=window)


def _run_openb(
    config: TimedConfig, queues: list[QueuePolicy], progress: Progress | None
) -> TimedReport:
    from placement.frag import typical_pods
    from placement.node_pool import openb_jobs
    from placement.placer import tie_order
    from placement.policies.base import PolicyContext
    from placement.policies.registry import make_policy, parse_policy_names
    from placement.workloads.openb import load_nodes, load_pods

    assert config.nodes is not None and config.pods is not None
    names = parse_policy_names(config.placement or "bestfit")
    nodes, pods = load_nodes(config.nodes), load_pods(config.pods)
    if config.node_share < 1:
        keep = round(config.node_share * len(nodes))
        picked = np.random.default_rng([config.seed, 0x5A1E]).choice(
            len(nodes), keep, replace=False
        )
        nodes = [nodes[i] for i in sorted(picked.tolist())]
        if not nodes:
            raise PlacementInputError(f"--node-share {config.node_share} keeps no node")
    jobs, kept, dropped = openb_jobs(pods)
    jobs = compress_arrivals(jobs, config.arrival_speedup)
    if not len(jobs):
        raise PlacementInputError(
            "no pod has creation, scheduled and deletion times", path=config.pods
        )
    typical = typical_pods(pods)
    settings: dict[str, Any] = {
        "input": {"nodes": config.nodes, "pods": config.pods},
        "backfill": config.backfill,
        "never_scheduled_pods": dropped,
        "nodes": len(nodes),
        "gpus": sum(n.gpus for n in nodes),
        "seed": config.seed,
        "arrival_speedup": config.arrival_speedup,
        "locality": asdict(LocalitySettings()) if config.locality else None,
    }
    policies: dict[str, dict[str, Any]] = {}
    timelines: dict[str, dict[str, list[float]]] = {}
    for queue in queues:
        for name in names:
            rng = np.random.default_rng(config.seed)
            rank = tie_order(len(nodes), rng)
            scorer = make_policy(name, PolicyContext(rng=rng, typical=typical))
            pool = _node_pool(config, nodes, kept, scorer, rank, typical)
            faults = _faults(config, pool)
            if faults is not None:
                settings["faults"] = {"source": faults.source, **asdict(faults.settings)}
            entry = f"{queue.name}+{name}" if len(names) > 1 else queue.name
            before = _counts(queue)
            run = simulate_timed(
                jobs,
                pool,
                policy=queue,
                backfill=config.backfill,
                faults=faults,
                seed=config.seed,
                progress=progress(entry, len(jobs)) if progress else None,
            )
            policies[entry] = {**summarise_timed(run), "placement": name}
            _add_fallbacks(policies[entry], before, queue, scorer)
            if isinstance(pool, LocalityNodePool):
                policies[entry].update(pool.locality_summary())
            timelines[entry] = run.timeline
    return TimedReport(policies=policies, timelines=timelines, settings=settings)


def _counts(policy: object) -> FallbackCounts | None:
    """A snapshot of a guarded policy's counts (None: not guarded)."""
    counts = counts_of(policy)
    return counts.snapshot() if counts is not None else None


def _add_fallbacks(
    entry: dict[str, Any], queue_before: FallbackCounts | None, queue: object, node: object = None
) -> None:
    """Add the run's fallback counts to ``entry`` when a guarded policy took part: the
    queue policy's since ``queue_before`` (it serves several entries) and the node
    policy's (made for this entry)."""
    parts = []
    queue_counts = counts_of(queue)
    if queue_counts is not None and queue_before is not None:
        parts.append(queue_counts.since(queue_before))
    node_counts = counts_of(node)
    if node_counts is not None:
        parts.append(node_counts)
    if not parts:
        return
    total = FallbackCounts()
    for part in parts:
        total.add(part)
    entry.update(total.report())
