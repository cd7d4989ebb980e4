"""``train_agent``: build an agent's environment from the data and train it (the CLI's call).

The data decide the environment: a node list and a pod list make node-level episodes (the
inflation experiment on random shares of the cluster, seeds far from the judged ones); an
SWF log makes queue-level episodes on windows of the log that overlap none of the judged
sequences (RLScheduler's ten start indices by default), so an agent trained here can be
judged on those sequences honestly.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from placement.agents import AGENTS, agent_class
from placement.cluster import NodeSpec
from placement.env.node_env import NodePlacementEnv
from placement.env.queue_env import QueueEnv, free_blocks, training_sequences
from placement.errors import PlacementInputError
from placement.pod import Pod
from placement.protocol import RLSCHEDULER_STARTS, SEQUENCE_LENGTH
from placement.workloads.batch import BatchJobs


def parse_assignments(assignments: Sequence[str]) -> dict[str, Any]:
    """``["lr=0.001", "env.nodes=[8, 16]"]`` → overrides (JSON values, else text)."""
    import json

    out: dict[str, Any] = {}
    for item in assignments:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise PlacementInputError(f"--set {item!r}: expected KEY=VALUE")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        out[key.strip()] = tuple(value) if isinstance(value, list) else value
    return out


def _with_overrides(settings: Any, overrides: dict[str, Any]) -> Any:
    """``settings`` with top-level fields, or fields of a nested settings dataclass
    (``env.FIELD``, ``imitation.FIELD``, …), replaced."""
    top = {k: v for k, v in overrides.items() if "." not in k}
    nested: dict[str, dict[str, Any]] = {}
    for key, value in overrides.items():
        if "." in key:
            outer, inner = key.split(".", 1)
            nested.setdefault(outer, {})[inner] = value
    try:
        for outer, fields in nested.items():
            current = getattr(settings, outer, None)
            if not dataclasses.is_dataclass(current) or isinstance(current, type):
                raise PlacementInputError(f"bad agent setting: {outer!r} has no fields")
            top[outer] = _with_overrides(current, fields)
        return dataclasses.replace(settings, **top)
    except TypeError as exc:
        raise PlacementInputError(f"bad agent setting: {exc}") from None


def train_agent(
    name: str,
    *,
    episodes: int,
    seed: int = 0,
    device: str = "cpu",
    nodes: Sequence[NodeSpec] | None = None,
    pods: Sequence[Pod] | None = None,
    jobs: BatchJobs | None = None,
    processors: int | None = None,
    exclude_starts: tuple[int, ...] = RLSCHEDULER_STARTS,
    overrides: dict[str, Any] | None = None,
    on_episode: Callable[[dict[str, float]], None] | None = None,
) -> Any:
    """Train agent ``name`` for ``episodes`` episodes and return it (save it yourself)."""
    if episodes < 1:
        raise PlacementInputError("train for at least one episode")
    cls = agent_class(name)
    extra: dict[str, Any] = {}
    settings = _with_overrides(cls.settings_type(seed=seed), overrides or {})
    builder = getattr(cls, "training_env", None)  # agents whose episodes are not NodeEnv's
    if builder is not None:
        if not nodes or not pods:
            raise PlacementInputError(
                f"{name} trains on a node list and a pod list (--nodes, --pods)"
            )
        env: Any = builder(settings, nodes=list(nodes), pods=list(pods))
    elif AGENTS[name][1] == "node":
        if not nodes or not pods:
            raise PlacementInputError(
                f"{name} trains on a node list and a pod list (--nodes, --pods)"
            )
        env = NodePlacementEnv(list(nodes), list(pods), settings.env)
    else:
        if jobs is None or not processors:
            raise PlacementInputError(f"{name} trains on an SWF log (--swf) with its machine size")
        sequences = training_sequences(
            jobs,
            exclude_starts=exclude_starts,
            exclude_length=SEQUENCE_LENGTH,
            length=settings.sequence_jobs,
            count=settings.sequences,
            seed=seed,
        )
        scale = training_arrival_scale(jobs, processors, exclude_starts)
        machines = [processors] * len(sequences)
        if getattr(settings, "synthetic_family", ""):
            drawn = family_sequences(settings, seed=seed)
            sequences += [jobs for jobs, _ in drawn]
            machines += [size for _, size in drawn]
        else:
            sequences += synthetic_sequences(settings, processors, scale, seed=seed)
            machines = [processors] * len(sequences)
        env = QueueEnv(sequences, processors=machines, settings=settings.env)
        if getattr(settings, "validate_every", 0) > 0:
            held = validation_sequences(settings, processors, scale)
            extra = {"validation": QueueEnv(held, processors=processors, settings=settings.env)}
    agent = cls(settings, device=device)
    agent.train(env, episodes, on_episode=on_episode, **extra)
    return agent


SYNTHETIC_SEED_BASE = 100_000
"""Lublin-model training sequences use generator seeds from here (1000 per agent seed)."""
VALIDATION_SEED_BASE = 50_000
"""Lublin-model validation sequences (held out of training; 1024 jobs each)."""
JUDGE_SEEDS = tuple(range(1, 11))
"""Lublin-model sequences that only judge (benchmarks/placement_agents.py): never trained
or validated on."""


def training_arrival_scale(
    jobs: BatchJobs, processors: int, exclude_starts: tuple[int, ...]
) -> float:
    """The Lublin model's arrival scale matching the mean inter-arrival gap of the log's
    *training* part (the blocks outside the judged sequences), so synthetic sequences carry
    the log's load without looking at the judged jobs."""
    from placement.workloads.lublin import arrival_scale_for

    blocks = free_blocks(len(jobs), exclude_starts=exclude_starts, length=SEQUENCE_LENGTH)
    gaps = np.concatenate([np.diff(jobs.submit_s[b.start : b.stop]) for b in blocks])
    if not len(gaps):
        raise PlacementInputError("no jobs outside the excluded sequences to calibrate on")
    return arrival_scale_for(float(np.mean(gaps)), processors=processors)


def synthetic_sequences(
    settings: Any, processors: int, scale: float, *, seed: int
) -> list[BatchJobs]:
    """``settings.synthetic_sequences`` Lublin-model sequences of ``sequence_jobs`` jobs,
    each with an arrival scale drawn from ``synthetic_load`` × ``scale``."""
    from placement.workloads.lublin import LublinModel, generate_lublin

    count = getattr(settings, "synthetic_sequences", 0)
    low, high = getattr(settings, "synthetic_load", (1.0, 1.0))
    rng = np.random.default_rng(SYNTHETIC_SEED_BASE + seed)
    out = []
    for i in range(count):
        model = LublinModel(arrival_scale=scale * float(rng.uniform(low, high)))
        gen_seed = SYNTHETIC_SEED_BASE + 1000 * seed + i
        out.append(
            generate_lublin(
                settings.sequence_jobs, processors=processors, seed=gen_seed, model=model
            )
        )
    return out


def family_sequences(settings: Any, *, seed: int) -> list[tuple[BatchJobs, int]]:
    """``settings.synthetic_sequences`` sequences of ``settings.synthetic_family`` (each with
    its machine size), generator seeds from :data:`SYNTHETIC_SEED_BASE` (1000 per agent
    seed): loads and machines as the family draws them."""
    from placement.workloads.families import generate_lublin_family

    out = []
    for i in range(getattr(settings, "synthetic_sequences", 0)):
        made = generate_lublin_family(
            settings.synthetic_family,
            seed=SYNTHETIC_SEED_BASE + 1000 * seed + i,
            jobs=settings.sequence_jobs,
        )
        out.append((made.jobs, made.processors))
    return out


def lublin_sequences(
    seeds: Sequence[int], processors: int, scale: float, *, length: int = SEQUENCE_LENGTH
) -> list[BatchJobs]:
    """Lublin-model sequences at the calibrated load, one per generator seed."""
    from placement.workloads.lublin import LublinModel, generate_lublin

    model = LublinModel(arrival_scale=scale)
    return [generate_lublin(length, processors=processors, seed=s, model=model) for s in seeds]


def validation_sequences(settings: Any, processors: int, scale: float) -> list[BatchJobs]:
    """The held-out Lublin-model sequences that pick the kept weights."""
    count = getattr(settings, "validation_sequences", 0)
    return lublin_sequences(
        range(VALIDATION_SEED_BASE, VALIDATION_SEED_BASE + count), processors, scale
    )


def load_training_data(
    nodes_path: str | None, pods_path: str | None, swf_path: str | None, processors: int | None
) -> dict[str, Any]:
    """``train_agent``'s data keywords from the CLI's files (only those given are read)."""
    data: dict[str, Any] = {}
    if nodes_path or pods_path:
        from placement.workloads.openb import load_nodes, load_pods

        if not (nodes_path and pods_path):
            raise PlacementInputError("give both --nodes and --pods")
        data["nodes"], data["pods"] = load_nodes(nodes_path), load_pods(pods_path)
    if swf_path:
        from placement.workloads.batch import batch_jobs_from_swf
        from placement.workloads.swf import load_swf

        trace = load_swf(swf_path)
        data["jobs"] = batch_jobs_from_swf(trace)
        data["processors"] = processors or trace.processors
        if not data["processors"]:
            raise PlacementInputError(
                "the log states no MaxProcs/MaxNodes: pass --processors", path=swf_path
            )
    if not data:
        raise PlacementInputError("no training data: give --nodes and --pods, or --swf")
    return data


def validation_curve(agent: Any) -> tuple[str, list[tuple[float, float]], int | None] | None:
    """What chose the agent's kept weights: (label, [(episode, score)], kept episode), from
    its validation log (with the warm start's score as episode −1) or its curve's
    ``validation_*`` column; None when it was not validated."""
    kept = getattr(agent, "kept_episode", None)
    log = getattr(agent, "validation_log", None) or []
    if log and all("episode" in e and "allocated" in e for e in log):
        return "validation: % GPUs allocated", [(e["episode"], e["allocated"]) for e in log], kept
    for key, label in (
        ("validation_bsld", "validation: bounded slowdown"),
        ("validation_score", "validation score (lower is better)"),
        ("validation_allocated", "validation: % GPUs allocated"),
    ):
        points = [
            (r["episode"], r[key])
            for r in agent.curve.records
            if key in r and math.isfinite(r[key])
        ]
        if points:
            return label, points, kept
    return None


def training_summary(agent: Any, out_path: str, plot_path: str | None) -> dict[str, Any]:
    """The ``--json`` document (and the ``--plot`` image, when asked)."""
    records = agent.curve.records
    if plot_path:
        from placement.plots import plot_training

        metric = {
            "balance_dqn": "allocated_share",
            "fault_aware": "gpu_hours_lost",
            "async_transformer": "mean_access_s",
        }.get(agent.name)
        plot_training(
            records,
            plot_path,
            title=f"{agent.name} training",
            metric=metric,
            validation=validation_curve(agent),
        )
    return {
        "agent": agent.name,
        "output": out_path,
        "episodes": len(records),
        "seconds": round(agent.curve.seconds, 3),
        "final": records[-1] if records else {},
        "curve": records,
        "settings": dataclasses.asdict(agent.settings),
    }
