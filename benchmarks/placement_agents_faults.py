"""Benchmark of ``fault_aware`` (fault-aware DRL placement) beside the placements a user
would pick instead.

Run from the repository root::

    nice .venv/bin/python -m benchmarks.placement_agents_faults            # judge the shipped agent
    nice .venv/bin/python -m benchmarks.placement_agents_faults --train    # retrain it first
    nice .venv/bin/python -m benchmarks.placement_agents_faults --batches 4 --json-out f.json

``--train`` retrains ``examples/placement/agents/fault_aware.pt`` with :data:`SHIPPED` on
the shared data only: batches drawn from the first 70 % of the openb pod list (by creation
time), on random 8–16-node shares of the node list, under fault patterns drawn from a range,
with batch seeds from 200,000 up. Nothing judged is trained on:

* **batches** come from the last 30 % of the pod list, with seeds from 900,000 up, on
  clusters of the training size and on 64–128-node clusters the agent never saw;
* **fault patterns** are named ones (:data:`JUDGED_PATTERNS`) on seeds of their own: which
  GPUs and nodes are flaky is new in every batch, and ``default`` is the ``--faults
  default`` model, far milder than any training pattern.

Judged (the source document's experiment): each batch's makespan, restarts and GPU-hours lost to
failures, mean JCT, for random units (the document's reference), first-fit, BestFit, FGD,
fault-bestfit, the agent, the agent blind to faults (its fault inputs zeroed: the same
network, fault-oblivious), and an *oracle* (fault-bestfit told the truly flaky GPUs: a bound
on what fault history can buy). Also the decision latency on the whole 1,213-node cluster.

The **families judge** (``--families-only`` runs it alone) is the Placement V target's: the
held-out pods resampled to the default mix and every named openb family
(:data:`FAULT_FAMILIES`), each in the timed simulator under ``--faults default`` and the
``flaky-gpus`` pattern, fault seeds ``1..--fault-seeds``; BestFit, FGD, fault-bestfit, the
agent and the agent behind its guard (``fallback=fault-bestfit``, :data:`GUARD_RULE`), and
per workload the agent's GPU-hours lost against the better of BestFit and FGD with the
paired per-seed difference and its standard error. Prints tables and writes JSON; asserts
nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from benchmarks.paths import ROOT, add_data_flag, placement_dir
from placement.agents import load_agent
from placement.agents.training import train_agent
from placement.cluster import Cluster
from placement.env.fault_batch import (
    FaultBatchEnv,
    FaultBatchSettings,
    RandomUnitPolicy,
    run_batch,
)
from placement.env.locality_env import split_pods
from placement.fault_patterns import FaultPattern
from placement.frag import typical_pods
from placement.placer import choose, place, tie_order
from placement.policies import PolicyContext, ScorePolicy, make_policy
from placement.policies.fault_aware import FaultAwareBestFitPolicy
from placement.policies.guard import GuardedPolicy
from placement.workloads.openb import load_nodes, load_pods

OUT = ROOT / "examples" / "placement" / "agents"
BATCH = FaultBatchSettings()
"""The training batches (the agent's defaults): 32–64 nodes, one GPU job per GPU arriving over
a period at a load of 0.5–1, 10 % multi-GPU, runs clipped to 24 h, patterns of 5–20 % flaky
GPUs at 0.05–0.5 failures per hour (docs/decisions/0153-judging-fault-aware-placement.md)."""
SHIPPED = {"episodes": 300, "seed": 0, "overrides": {}}
"""The shipped agent's training: ``kale place train --agent fault_aware --episodes 300`` with
the defaults (chosen on training batches only;
docs/decisions/0152-fault-aware-reward-and-two-attempts.md)."""
ALL_AT_ONCE = replace(
    BATCH,
    nodes=(8, 16),
    jobs_per_gpu=2.0,
    offered_load=None,
    multi_gpu_share=0.3,
    max_run_s=4 * 3600,
)
"""The document's batch: every job submitted at once, the cluster oversubscribed."""
JUDGED_PATTERNS = {
    "flaky-gpus": FaultPattern(flaky_share=0.08, flaky_rate=0.1, name="flaky-gpus"),
    "flaky-nodes": FaultPattern(
        flaky_share=0.02, flaky_rate=0.1, flaky_node_share=0.05, name="flaky-nodes"
    ),
    "heavy": FaultPattern(flaky_share=0.15, flaky_rate=0.3, flaky_node_share=0.02, name="heavy"),
    "default": FaultPattern(flaky_share=0.05, flaky_rate=1e-3, name="default"),
}
JUDGED_SEED = 900_000
POLICIES = (
    "random-units",
    "first-fit",
    "bestfit",
    "fgd",
    "fault-bestfit",
    "fault_aware",
    "fault_aware-blind",
    "oracle",
)


class FirstFitPolicy(ScorePolicy):
    """The first feasible node in the node list's order (the default scheduler's fallback)."""

    name = "first-fit"

    def __init__(self, context: PolicyContext | None = None) -> None:
        pass

    def score(self, pod, cluster, nodes):  # type: ignore[no-untyped-def]
        return -np.asarray(nodes, np.int64)


class OraclePolicy(FaultAwareBestFitPolicy):
    """fault-bestfit told which GPUs are truly flaky (one "fault" each), not their history."""

    name = "oracle"

    def __init__(self, context: PolicyContext, flaky: np.ndarray) -> None:
        super().__init__(context)
        self.flaky = flaky

    def observe_faults(self, node_faults: np.ndarray, gpu_faults: np.ndarray) -> None:
        super().observe_faults(self.flaky.sum(axis=1), self.flaky)


def _flaky_matrix(batch) -> np.ndarray:  # type: ignore[no-untyped-def]
    c = Cluster(batch.nodes)
    unit_node = np.repeat(np.arange(len(c)), c.gpu_count)
    offset = np.concatenate([[0], np.cumsum(c.gpu_count)])
    flaky = np.zeros((len(c), max(c.max_gpus, 1)), np.int64)
    base = float(np.min(batch.faults.rate_per_hour))
    flaky[unit_node, np.arange(len(unit_node)) - offset[unit_node]] = (
        batch.faults.rate_per_hour > base
    )
    return flaky


def _factory(name: str, agent, batch) -> Callable[[PolicyContext], ScorePolicy]:  # type: ignore[no-untyped-def]
    if name == "random-units":
        return RandomUnitPolicy
    if name == "first-fit":
        return FirstFitPolicy
    if name == "fault_aware":
        return agent.policy
    if name == "fault_aware-blind":

        def blind(ctx: PolicyContext) -> ScorePolicy:
            policy = agent.policy(ctx)
            policy.uses_faults = False  # never fed: sees no failure at all
            return policy

        return blind
    if name == "oracle":
        flaky = _flaky_matrix(batch)
        return lambda ctx: OraclePolicy(ctx, flaky)
    return lambda ctx: make_policy(name, ctx)


def judge_batches(agent, nodes, held, *, label, settings, count, typical) -> dict:  # type: ignore[no-untyped-def]
    """Every policy on ``count`` batches per judged pattern; per-policy means and the
    per-batch paired differences against BestFit."""
    env = FaultBatchEnv(nodes, held, settings)
    rows: dict[str, list[tuple[float, float, float, float]]] = {p: [] for p in POLICIES}
    seconds: dict[str, float] = dict.fromkeys(POLICIES, 0.0)
    for p_index, (pname, pattern) in enumerate(JUDGED_PATTERNS.items()):
        for k in range(count):
            batch = env.draw(JUDGED_SEED + 1000 * p_index + k, pattern=pattern)
            for name in POLICIES:
                started = time.perf_counter()
                factory = _factory(name, agent, batch)
                r = run_batch(batch, factory, settings=settings, typical=typical)
                seconds[name] += time.perf_counter() - started
                rows[name].append(
                    (r.makespan_s / 3600, r.restarts, r.gpu_hours_lost, r.mean_jct_s / 3600)
                )
        print(f"  {label}: pattern {pname} done", file=sys.stderr, flush=True)
    base = np.array(rows["bestfit"])
    out = {}
    for name in POLICIES:
        a = np.array(rows[name])
        diff = a - base
        n = len(a)
        out[name] = {
            "makespan_h": float(a[:, 0].mean()),
            "restarts": float(a[:, 1].mean()),
            "gpu_hours_lost": float(a[:, 2].mean()),
            "mean_jct_h": float(a[:, 3].mean()),
            "makespan_vs_bestfit_pct": float(100 * np.mean(diff[:, 0] / base[:, 0])),
            "makespan_vs_bestfit_se_pct": float(100 * np.std(diff[:, 0] / base[:, 0]) / np.sqrt(n)),
            "lost_vs_bestfit": float(diff[:, 2].mean()),
            "lost_vs_bestfit_se": float(diff[:, 2].std() / np.sqrt(n)),
            "batches": n,
            "seconds_per_batch": seconds[name] / n,
            "per_pattern": {
                pname: {
                    "makespan_h": float(a[i * count : (i + 1) * count, 0].mean()),
                    "restarts": float(a[i * count : (i + 1) * count, 1].mean()),
                    "gpu_hours_lost": float(a[i * count : (i + 1) * count, 2].mean()),
                }
                for i, pname in enumerate(JUDGED_PATTERNS)
            },
        }
    return out


def judge_timed(agent, nodes, held, typical) -> dict:  # type: ignore[no-untyped-def]
    """The held-out trace through the timed simulator (FCFS + EASY, a tenth of the nodes,
    arrivals 100× faster), one judged pattern with 3 days of history: ``kale place timed``'s
    numbers."""
    from placement.fault_patterns import pattern_model
    from placement.faults import FaultSettings
    from placement.node_pool import NodePool, openb_jobs
    from placement.queue.priorities import queue_policy
    from placement.timed import simulate_timed
    from placement.timed_experiment import summarise_timed
    from placement.workloads.batch import compress_arrivals

    jobs, kept, _ = openb_jobs(held)
    jobs = compress_arrivals(jobs, 100.0)
    out: dict = {}
    for seed in (0, 1):
        rng = np.random.default_rng([JUDGED_SEED + seed, 0x5A1E])
        subset = [nodes[i] for i in np.sort(rng.choice(len(nodes), len(nodes) // 10, False))]
        cluster = Cluster(subset)
        unit_node = np.repeat(np.arange(len(cluster)), cluster.gpu_count)
        settings = FaultSettings(history_s=3 * 86400.0, window_s=3 * 86400.0)
        for pname in ("flaky-gpus", "flaky-nodes"):
            faults = pattern_model(
                JUDGED_PATTERNS[pname], unit_node, seed=JUDGED_SEED + seed, settings=settings
            )
            for name in ("bestfit", "fgd", "fault-bestfit", "fault_aware"):
                ctx = PolicyContext(rng=np.random.default_rng(seed), typical=typical)
                policy = agent.policy(ctx) if name == "fault_aware" else make_policy(name, ctx)
                pool = NodePool(
                    subset,
                    [(p,) for p in kept],
                    policy,
                    rank=tie_order(len(subset), np.random.default_rng(seed)),
                    typical=typical,
                    fault_window_s=settings.window_s,
                )
                run = simulate_timed(
                    jobs,
                    pool,
                    policy=queue_policy("fcfs"),
                    backfill=True,
                    faults=faults,
                    seed=seed,
                    record_timeline=False,
                )
                m = summarise_timed(run)
                out.setdefault(name, []).append(
                    {
                        k: m[k]
                        for k in (
                            "makespan_s",
                            "mean_wait_s",
                            "mean_jct_s",
                            "restarts",
                            "gpu_hours_lost",
                            "unit_failures",
                        )
                    }
                )
        print(f"  timed: seed {seed} done", file=sys.stderr, flush=True)
    return {
        name: {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
        | {"per_run_lost": [r["gpu_hours_lost"] for r in runs]}
        for name, runs in out.items()
    }


FAULT_FAMILIES = (
    "default",
    "sharing-heavy",
    "sharing-light",
    "multi-gpu-heavy",
    "cpu-heavy",
    "model-constrained",
    "small-cluster",
)
"""Held-out workloads of the families judge: the last 30 % of the pod list resampled to
each family's mix (``placement.workloads.families``; generator seed 1) — the default
workload and every named openb family but ``half-cluster`` (``small-cluster`` already
varies the size)."""
FAULT_SEEDS = (1, 2, 3, 4, 5)
"""Fault seeds of the families judge (which GPUs are flaky, when each fails)."""
FAMILY_RULES = ("bestfit", "fgd", "fault-bestfit")
"""The rules the families judge runs beside the agent."""
GUARD_RULE = "fault-bestfit"
"""The guarded agent's rule in the families judge: the fault-aware rule the agent starts
from. A fault-blind rule (FGD) deciding the agent's out-of-range inputs would place those
jobs on GPUs the agent knows to fail."""
FAULT_MODELS = ("default", "flaky-gpus")
"""The families judge's fault models: ``--faults default`` (5 % of GPUs fail once per ~6
weeks: few failures, the model users run) and the judged ``flaky-gpus`` pattern (8 % at
0.1 per hour: placement decides much)."""


def judge_families(agent, nodes, held, seeds=FAULT_SEEDS) -> dict:  # type: ignore[no-untyped-def]
    """``kale place timed`` on held-out family workloads: FCFS + EASY, a tenth of the nodes,
    arrivals 100× faster, each fault model of :data:`FAULT_MODELS` with 3 days of history
    known, fault ``seeds``; per family, model and placement, the means over seeds and each
    seed's numbers (makespan too, for the paired comparison)."""
    from placement.node_pool import openb_jobs
    from placement.workloads.batch import compress_arrivals
    from placement.workloads.families import generate_openb

    out: dict = {}
    for family in FAULT_FAMILIES:
        made = generate_openb(family, nodes, held, seed=1)
        typical = typical_pods(made.pods)
        jobs, kept, _ = openb_jobs(made.pods)
        jobs = compress_arrivals(jobs, 100.0)
        rng = np.random.default_rng([JUDGED_SEED, 0x5A1E])
        keep = max(2, len(made.nodes) // 10)
        subset = [made.nodes[i] for i in np.sort(rng.choice(len(made.nodes), keep, False))]
        for model_name in FAULT_MODELS:
            rows = _family_runs(agent, subset, kept, jobs, typical, model_name, seeds)
            out[f"{family} / {model_name}"] = {
                name: {k: float(np.mean([r[k] for r in runs])) for k in runs[0] if k in NUMERIC}
                | {
                    "per_seed_lost": [r["gpu_hours_lost"] for r in runs],
                    "per_seed_makespan_s": [r["makespan_s"] for r in runs],
                }
                for name, runs in rows.items()
            }
        print(f"  families: {family} done", file=sys.stderr, flush=True)
    return out


FAMILY_KEYS = ("makespan_s", "mean_wait_s", "restarts", "gpu_hours_lost", "unit_failures")
NUMERIC = (*FAMILY_KEYS, "fallback_decisions", "guarded_decisions")


def _family_runs(agent, subset, kept, jobs, typical, model_name, seeds) -> dict:  # type: ignore[no-untyped-def]
    """Every placement on one family workload and fault model, each fault seed."""
    from placement.fault_patterns import pattern_model
    from placement.faults import FaultSettings, default_fault_model
    from placement.node_pool import NodePool
    from placement.queue.priorities import queue_policy
    from placement.timed import simulate_timed
    from placement.timed_experiment import summarise_timed

    settings = FaultSettings(history_s=3 * 86400.0, window_s=3 * 86400.0)
    unit_node = np.repeat(np.arange(len(subset)), [n.gpus for n in subset])
    rows: dict = {}
    for seed in seeds:
        for name in (*FAMILY_RULES, "fault_aware", "fault_aware+guard"):
            if model_name == "default":
                faults = default_fault_model(len(unit_node), seed=seed, settings=settings)
            else:
                pattern = JUDGED_PATTERNS[model_name]
                faults = pattern_model(pattern, unit_node, seed=seed, settings=settings)
            ctx = PolicyContext(rng=np.random.default_rng(seed), typical=typical)
            if name == "fault_aware":
                policy = agent.policy(ctx)
            elif name == "fault_aware+guard":
                policy = GuardedPolicy(agent.policy(ctx), make_policy(GUARD_RULE, ctx), label=name)
            else:
                policy = make_policy(name, ctx)
            pool = NodePool(
                subset,
                [(p,) for p in kept],
                policy,
                rank=tie_order(len(subset), np.random.default_rng(seed)),
                typical=typical,
                fault_window_s=settings.window_s,
            )
            run = simulate_timed(
                jobs,
                pool,
                policy=queue_policy("fcfs"),
                backfill=True,
                faults=faults,
                seed=seed,
                record_timeline=False,
            )
            m = summarise_timed(run)
            row = {k: m[k] for k in FAMILY_KEYS}
            if isinstance(policy, GuardedPolicy):
                row.update(policy.fallback_counts.report())
            rows.setdefault(name, []).append(row)
    return rows


def family_verdicts(families: dict) -> dict:
    """Per judged workload, the target's test: the agent's GPU-hours lost against the better
    of BestFit and FGD there (mean over the fault seeds; the paired per-seed difference and
    its standard error say how much of the gap is the seeds' noise), its makespan against
    that rule's, and the best rule of the workload (what picking the right rule per workload
    would lose: the bar an agent that only chooses among the rules can reach)."""
    out: dict = {}
    for workload, rows in families.items():
        ref = min(("bestfit", "fgd"), key=lambda n: rows[n]["gpu_hours_lost"])
        best_rule = min(FAMILY_RULES, key=lambda n: rows[n]["gpu_hours_lost"])
        entry: dict = {"reference": ref, "best_rule": best_rule}
        for name in ("fault_aware", "fault_aware+guard"):
            mine = np.array(rows[name]["per_seed_lost"])
            diff = mine - np.array(rows[ref]["per_seed_lost"])
            slower = np.array(rows[name]["per_seed_makespan_s"]) / np.array(
                rows[ref]["per_seed_makespan_s"]
            )
            entry[name] = {
                "lost_minus_reference": float(diff.mean()),
                "lost_minus_reference_se": float(diff.std(ddof=1) / np.sqrt(len(diff)))
                if len(diff) > 1
                else 0.0,
                "makespan_vs_reference_pct": float(100 * (slower.mean() - 1.0)),
                "met": bool(
                    rows[name]["gpu_hours_lost"] <= rows[ref]["gpu_hours_lost"] + 1e-9
                    and slower.mean() <= 1.01
                ),
            }
        out[workload] = entry
    return out


def decision_latency(agent, nodes, pods) -> dict:  # type: ignore[no-untyped-def]
    """Milliseconds per decision on the whole cluster, a third full, 2 % GPUs with faults."""
    cluster = Cluster(nodes)
    rng = np.random.default_rng(0)
    rank = tie_order(len(cluster), rng)
    bestfit = make_policy("bestfit")
    gpu_pods = [p for p in pods if p.num_gpu]
    for pod in gpu_pods[:2500]:
        place(pod, cluster, bestfit, rank=rank)
    policy = agent.policy()
    faults = (rng.random((len(cluster), cluster.max_gpus)) < 0.02).astype(np.int64)
    policy.observe_faults(faults.sum(axis=1), faults)
    times, cpu = [], []
    for pod in gpu_pods[2500:2800]:
        started, cpu_started = time.perf_counter(), time.thread_time()
        choose(pod, cluster, policy, rank=rank)
        times.append((time.perf_counter() - started) * 1000)
        cpu.append((time.thread_time() - cpu_started) * 1000)
    t, c = np.array(times), np.array(cpu)
    return {
        "nodes": len(cluster),
        "gpus": int(cluster.gpu_count.sum()),
        "gpu_allocated_share": cluster.allocated_gpu_milli / cluster.total_gpu_milli,
        "ms_mean": float(t.mean()),
        "ms_median": float(np.median(t)),
        "ms_p95": float(np.percentile(t, 95)),
        "cpu_ms_mean": float(c.mean()),
        "cpu_ms_median": float(np.median(c)),
        "cpu_ms_p95": float(np.percentile(c, 95)),
        "decisions": len(t),
    }


def train(nodes, pods) -> dict:  # type: ignore[no-untyped-def]
    OUT.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    agent = train_agent("fault_aware", nodes=nodes, pods=pods, **SHIPPED)  # type: ignore[arg-type]
    seconds = time.perf_counter() - started
    agent.save(OUT / "fault_aware.pt")
    return {"seconds": seconds, "load_before": load_before, "load_after": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", action="store_true", help="retrain the shipped agent first")
    parser.add_argument("--agent", default=str(OUT / "fault_aware.pt"))
    parser.add_argument("--batches", type=int, default=8, help="batches per pattern and size")
    parser.add_argument(
        "--families-only", action="store_true", help="only the held-out families judge"
    )
    parser.add_argument(
        "--fault-seeds",
        type=int,
        default=len(FAULT_SEEDS),
        help="fault seeds 1..N of the families judge (default 5)",
    )
    parser.add_argument("--json-out", default=None)
    add_data_flag(parser)
    args = parser.parse_args()

    data = placement_dir(args.data)
    nodes = load_nodes(data / "openb_node_list_gpu_node.csv")
    pods = load_pods(data / "openb_pod_list_default.csv")
    report: dict = {
        "settings": {
            "batch": asdict(BATCH),
            "judged_patterns": {k: asdict(v) for k, v in JUDGED_PATTERNS.items()},
        }
    }
    if args.train:
        report["training"] = train(nodes, pods)
        print(f"trained in {report['training']['seconds']:.0f} s", file=sys.stderr)
    agent = load_agent(args.agent, kind="node")
    report["training_curve_seconds"] = agent.curve.seconds
    _, held = split_pods(pods, BATCH.train_share)
    typical = typical_pods(held)
    sizes = {
        "training size (32-64 nodes)": (BATCH, args.batches),
        "larger (128-256 nodes, never trained on)": (
            replace(BATCH, nodes=(128, 256)),
            max(1, args.batches // 2),
        ),
        "all at once (8-16 nodes, oversubscribed)": (ALL_AT_ONCE, args.batches),
    }
    report["batches"] = {}
    if args.families_only:
        sizes = {}
    for label, (settings, count) in sizes.items():
        result = judge_batches(
            agent, nodes, held, label=label, settings=settings, count=count, typical=typical
        )
        report["batches"][label] = result
        print(f"\n## {label}: {count} batches × {len(JUDGED_PATTERNS)} patterns")
        print(
            "| policy | makespan h | Δ vs BestFit % | restarts | GPU-h lost "
            "| Δ lost vs BestFit | JCT h |"
        )
        print("|---|---|---|---|---|---|---|")
        for name, m in result.items():
            print(
                f"| {name} | {m['makespan_h']:.2f} | {m['makespan_vs_bestfit_pct']:+.1f} ± "
                f"{m['makespan_vs_bestfit_se_pct']:.1f} | {m['restarts']:.1f} | "
                f"{m['gpu_hours_lost']:.1f} | {m['lost_vs_bestfit']:+.1f} ± "
                f"{m['lost_vs_bestfit_se']:.1f} | {m['mean_jct_h']:.2f} |"
            )
    report["timed"] = {} if args.families_only else judge_timed(agent, nodes, held, typical)
    print(
        "" if report["timed"] else "(held-out trace table skipped: --families-only)",
        file=sys.stderr,
    )
    print(
        "\n## held-out trace, timed (FCFS + EASY, 10 % of nodes, arrivals ×100), "
        "2 seeds × 2 patterns"
    )
    print("| placement | makespan h | mean wait s | mean JCT s | restarts | GPU-h lost |")
    print("|---|---|---|---|---|---|")
    for name, m in report["timed"].items():
        print(
            f"| {name} | {m['makespan_s'] / 3600:.1f} | {m['mean_wait_s']:.0f} | "
            f"{m['mean_jct_s']:.0f} | {m['restarts']:.1f} | {m['gpu_hours_lost']:.1f} |"
        )
    seeds = tuple(range(1, args.fault_seeds + 1))
    report["families"] = judge_families(agent, nodes, held, seeds)
    report["family_verdicts"] = verdicts = family_verdicts(report["families"])
    report["family_settings"] = {
        "families": list(FAULT_FAMILIES),
        "fault_models": list(FAULT_MODELS),
        "fault_seeds": list(seeds),
        "fallback": GUARD_RULE,
    }
    print(
        "\n## held-out family workloads, timed (FCFS + EASY, 10 % of nodes, arrivals ×100, "
        f"3 days of history), fault seeds 1-{args.fault_seeds}: GPU-h lost (makespan h)"
    )
    print(
        f"| workload / fault model | {' | '.join(FAMILY_RULES)} | fault_aware | "
        f"fallback={GUARD_RULE} [rule's share] | Δ vs min(BestFit, FGD) ± se | "
        "makespan Δ % | met |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for family, rows in report["families"].items():
        v = verdicts[family]
        guard = rows["fault_aware+guard"]
        share = guard.get("fallback_decisions", 0.0) / max(guard.get("guarded_decisions", 0.0), 1)
        cells = " | ".join(
            f"{rows[n]['gpu_hours_lost']:.2f} ({rows[n]['makespan_s'] / 3600:.1f})"
            for n in (*FAMILY_RULES, "fault_aware")
        )
        a = v["fault_aware"]
        print(
            f"| {family} | {cells} | {guard['gpu_hours_lost']:.2f} [{100 * share:.1f} %] | "
            f"{a['lost_minus_reference']:+.2f} ± {a['lost_minus_reference_se']:.2f} | "
            f"{a['makespan_vs_reference_pct']:+.2f} | {'yes' if a['met'] else 'no'} |"
        )
    for name in (*FAMILY_RULES, "fault_aware", "fault_aware+guard"):
        per_model = {
            m: np.mean(
                [
                    r[name]["gpu_hours_lost"]
                    for k, r in report["families"].items()
                    if k.endswith(f"/ {m}")
                ]
            )
            for m in FAULT_MODELS
        }
        print(
            f"mean over workloads, {name}: "
            + ", ".join(f"{m} {x:.2f}" for m, x in per_model.items())
        )
    best = {k: v["best_rule"] for k, v in verdicts.items()}
    print("best rule per workload: " + "; ".join(f"{k}: {r}" for k, r in best.items()))
    print("\nper seed, GPU-h lost")
    for family, rows in report["families"].items():
        for name, m in rows.items():
            seeds_text = " · ".join(f"{x:.1f}" for x in m["per_seed_lost"])
            print(f"  {family} | {name} | {seeds_text}")
    report["latency"] = decision_latency(agent, nodes, pods)
    lat = report["latency"]
    print(
        f"\ndecision on {lat['nodes']} nodes / {lat['gpus']} GPUs: mean {lat['ms_mean']:.2f} ms, "
        f"median {lat['ms_median']:.2f} ms, p95 {lat['ms_p95']:.2f} ms; CPU time mean "
        f"{lat['cpu_ms_mean']:.2f} ms, median {lat['cpu_ms_median']:.2f}, p95 "
        f"{lat['cpu_ms_p95']:.2f} "
        f"(load average {os.getloadavg()[0]:.1f})"
    )
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
