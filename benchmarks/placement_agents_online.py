"""Benchmark of ``async_transformer`` (the asynchronous transformer scheduler) beside
FCFS + BestFit and the other placements.

Run from the repository root::

    nice .venv/bin/python -m benchmarks.placement_agents_online            # judge the shipped agent
    nice .venv/bin/python -m benchmarks.placement_agents_online --train    # retrain it first
    nice .venv/bin/python -m benchmarks.placement_agents_online --sequences 4 --json-out o.json

``--train`` retrains ``examples/placement/agents/async_transformer.pt`` with :data:`SHIPPED`
on the shared data only: windows of 1,000 pods from the first 70 % of the openb pod
list (by creation time) on random 5 % node shares, arrivals 300× faster, sequence seeds
from 300,000 up, with data locality (``placement.locality``). Judged on windows of the
*last* 30 % (seeds from 910,000 up, their own node shares) — pods it never saw.

Every sequence runs under FCFS (no backfilling) with data locality, for Random, first-fit,
BestFit, FGD, the agent *frozen* (its shipped weights: what ``agent:PATH`` runs, deterministic) and
the agent *online* (the document's mode: it keeps learning from the judged run itself, its
trainer on a second thread; not deterministic). Reported: mean wait, mean JCT (the
document's "response": submit to completion), Kale's mean response (submit to first
start), utilisation (Kale's ``util``: GPU share held, first submit to last end), the GPU
share held and the share doing work (held minus data loading) while jobs arrive, mean
access latency and tier shares; and the decision latency, with and without the trainer
running. Prints tables and writes JSON; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from benchmarks.paths import ROOT, add_data_flag, placement_dir
from placement.agents import load_agent
from placement.agents.training import train_agent
from placement.env.locality_env import (
    SequenceSettings,
    draw_sequence,
    run_sequence,
    split_pods,
    window_utilisation,
)
from placement.frag import typical_pods
from placement.policies import PolicyContext, ScorePolicy, make_policy
from placement.timed_experiment import summarise_timed
from placement.workloads.openb import load_nodes, load_pods

OUT = ROOT / "examples" / "placement" / "agents"
SEQUENCES = SequenceSettings()
"""Windows of 1,000 pods on 5 % of the nodes, arrivals 300× faster (the agent's defaults)."""
SHIPPED = {"episodes": 40, "seed": 0, "overrides": {}}
"""The shipped agent's training: ``kale place train --agent async_transformer --episodes 40``
with the defaults (synchronous: repeatable; chosen on training windows only;
docs/decisions/0158-async-transformer-action-slots-and-training.md)."""
JUDGED_SEED = 910_000
ONLINE = {"warmup": 256, "train_every": 64, "copy_every": 256}
"""The online mode's pace (fixed before judging): the document's 1,024-decision warm-up and
copies would not publish once within a 1,000-pod sequence."""
POLICIES = ("random", "first-fit", "bestfit", "fgd", "agent-frozen", "agent-online")


class FirstFitPolicy(ScorePolicy):
    """The first feasible node in the node list's order."""

    name = "first-fit"

    def __init__(self, context: PolicyContext | None = None) -> None:
        pass

    def score(self, pod, cluster, nodes):  # type: ignore[no-untyped-def]
        return -np.asarray(nodes, np.int64)


def run_policy(name, agent, seq, typical):  # type: ignore[no-untyped-def]
    if name == "agent-frozen":
        factory = agent.policy
    elif name == "agent-online":
        agent.go_online(**ONLINE)
        agent.start()

        def factory(ctx):  # type: ignore[no-untyped-def]
            return agent.policy(ctx, learn=True)
    elif name == "first-fit":
        factory = FirstFitPolicy
    else:

        def factory(ctx):  # type: ignore[no-untyped-def]
            return make_policy(name, ctx)

    started = time.perf_counter()
    try:
        run, pool = run_sequence(seq, factory, SEQUENCES, typical=typical)
    finally:
        if name == "agent-online":
            agent.end_episode()
            agent.stop()
    m = summarise_timed(run)
    held, working = window_utilisation(run, pool)
    return {
        "mean_wait_s": m["mean_wait_s"],
        "mean_jct_s": m["mean_jct_s"],
        "mean_response_s": m["mean_response_s"],
        "util": m["util"],
        "util_window": held,
        "util_window_working": working,
        **pool.locality_summary(),
        "seconds": time.perf_counter() - started,
    }


def judge(path: str, nodes, held, count: int, typical) -> dict:  # type: ignore[no-untyped-def]
    rows: dict[str, list[dict]] = {p: [] for p in POLICIES}
    online_latency: list[float] = []
    online_cpu: list[float] = []
    online_steps = 0
    online_copies = 0
    for k in range(count):
        seq = draw_sequence(nodes, held, SEQUENCES, seed=JUDGED_SEED + k)
        for name in POLICIES:
            agent = load_agent(path, kind="node")  # online runs start from the shipped weights
            rows[name].append(run_policy(name, agent, seq, typical))
            if name == "agent-online":
                online_latency += agent.latency_s
                online_cpu += agent.cpu_s
                online_steps += agent.trainer.steps
                online_copies += agent.publisher.current().version
        print(f"  sequence {k} done", file=sys.stderr, flush=True)
    out = {}
    for name, runs in rows.items():
        out[name] = {key: float(np.mean([r[key] for r in runs])) for key in runs[0]}
        out[name]["per_sequence_wait_s"] = [r["mean_wait_s"] for r in runs]
    lat = np.array(online_latency) * 1000.0
    out["agent-online"]["trainer_steps"] = online_steps
    out["agent-online"]["weight_copies"] = online_copies
    out["agent-online"]["decision_ms"] = _latency(lat)
    out["agent-online"]["decision_cpu_ms"] = _latency(np.array(online_cpu) * 1000.0)
    return out


ONLINE_FAMILIES = (
    "sharing-heavy",
    "sharing-light",
    "multi-gpu-heavy",
    "cpu-heavy",
    "model-constrained",
)
"""Held-out family workloads: the last 30 % of the pod list resampled to each family's mix
(``placement.workloads.families``, generator seed 1); windows of their own seeds."""


def judge_families(path: str, nodes, held, count: int) -> dict:  # type: ignore[no-untyped-def]
    """BestFit, FGD and the frozen agent on ``count`` windows of each held-out family."""
    from placement.workloads.families import generate_openb

    out: dict = {}
    for family in ONLINE_FAMILIES:
        made = generate_openb(family, nodes, held, seed=1)
        pods = sorted(made.pods, key=lambda p: (p.creation_time, p.name))
        typical = typical_pods(pods)
        rows: dict[str, list[dict]] = {}
        for k in range(count):
            seq = draw_sequence(made.nodes, pods, SEQUENCES, seed=JUDGED_SEED + 100 + k)
            for name in ("bestfit", "fgd", "agent-frozen"):
                agent = load_agent(path, kind="node")
                rows.setdefault(name, []).append(run_policy(name, agent, seq, typical))
        out[family] = {
            name: {key: float(np.mean([r[key] for r in runs])) for key in runs[0]}
            | {"per_sequence_wait_s": [r["mean_wait_s"] for r in runs]}
            for name, runs in rows.items()
        }
        print(f"  family {family} done", file=sys.stderr, flush=True)
    return out


def _latency(ms: np.ndarray) -> dict:
    if not len(ms):
        return {}
    return {
        "mean": float(ms.mean()),
        "p50": float(np.percentile(ms, 50)),
        "p95": float(np.percentile(ms, 95)),
        "p99": float(np.percentile(ms, 99)),
        "decisions": len(ms),
    }


def latency_on_full_cluster(path: str, nodes, held) -> dict:  # type: ignore[no-untyped-def]
    """Decision latency on all 1,213 nodes, with the trainer running (threaded) and idle."""
    from dataclasses import replace

    full = replace(SEQUENCES, node_share=1.0, window=1500)
    out = {}
    for mode in ("trainer running", "trainer idle"):
        agent = load_agent(path, kind="node")
        if mode == "trainer running":  # train continuously on the run's own experience
            agent.go_online(train_every=8, warmup=256, copy_every=256)
            agent.start()
        seq = draw_sequence(nodes, held, full, seed=JUDGED_SEED + 999)
        started = time.perf_counter()
        try:
            run_sequence(seq, lambda ctx, a=agent: a.policy(ctx, learn=True), full)
        finally:
            agent.end_episode()
            if mode == "trainer running":
                agent.stop()
        out[mode] = {
            **_latency(np.array(agent.latency_s) * 1000.0),
            "cpu_ms": _latency(np.array(agent.cpu_s) * 1000.0),
            "trainer_steps": agent.trainer.steps,
            "weight_copies": agent.publisher.current().version,
            "seconds": time.perf_counter() - started,
            "load_average": os.getloadavg()[0],
        }
    return out


def train(nodes, pods) -> dict:  # type: ignore[no-untyped-def]
    OUT.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    started, cpu = time.perf_counter(), time.process_time()
    agent = train_agent("async_transformer", nodes=nodes, pods=pods, **SHIPPED)  # type: ignore[arg-type]
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    agent.save(OUT / "async_transformer.pt")
    return {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", action="store_true", help="retrain the shipped agent first")
    parser.add_argument("--agent", default=str(OUT / "async_transformer.pt"))
    parser.add_argument("--sequences", type=int, default=6)
    parser.add_argument("--family-sequences", type=int, default=3, help="windows per family")
    parser.add_argument("--json-out", default=None)
    add_data_flag(parser)
    args = parser.parse_args()

    data = placement_dir(args.data)
    nodes = load_nodes(data / "openb_node_list_gpu_node.csv")
    pods = load_pods(data / "openb_pod_list_default.csv")
    report: dict = {"settings": {"sequences": asdict(SEQUENCES)}}
    if args.train:
        report["training"] = train(nodes, pods)
        t = report["training"]
        print(f"trained in {t['seconds']:.0f} s ({t['cpu_seconds']:.0f} CPU-s)", file=sys.stderr)
    _, held = split_pods(pods, SEQUENCES.train_share)
    typical = typical_pods(held)
    result = judge(args.agent, nodes, held, args.sequences, typical)
    report["sequences"] = result
    print(f"\n## {args.sequences} held-out sequences, FCFS, data locality")
    print(
        "| placement | mean wait s | mean JCT s | mean response s | util | util (arrivals) "
        "| working (arrivals) | access s | local / rack / remote |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, m in result.items():
        print(
            f"| {name} | {m['mean_wait_s']:.0f} | {m['mean_jct_s']:.0f} | "
            f"{m['mean_response_s']:.0f} | {m['util']:.4f} | {m['util_window']:.3f} | "
            f"{m['util_window_working']:.3f} | {m['mean_access_s']:.1f} | "
            f"{m['share_local']:.2f} / {m['share_rack']:.2f} / {m['share_remote']:.2f} |"
        )
    report["families"] = judge_families(args.agent, nodes, held, args.family_sequences)
    print(f"\n## held-out family workloads, {args.family_sequences} windows each")
    print("| family | placement | mean wait s | working (arrivals) | access s | per window wait |")
    print("|---|---|---|---|---|---|")
    for family, rows in report["families"].items():
        for name, m in rows.items():
            waits = " · ".join(f"{w:.0f}" for w in m["per_sequence_wait_s"])
            print(
                f"| {family} | {name} | {m['mean_wait_s']:.0f} | "
                f"{m['util_window_working']:.3f} | {m['mean_access_s']:.1f} | {waits} |"
            )
    report["latency"] = latency_on_full_cluster(args.agent, nodes, held)
    online = result["agent-online"]["decision_ms"]
    print(f"\nonline judged runs: decision ms {online}")
    for mode, lat in report["latency"].items():
        print(f"1,213 nodes, {mode}: {lat}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
