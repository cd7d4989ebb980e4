"""Benchmark of the learned schedulers beside the heuristics, on workloads they never saw.

Run from the repository root::

    nice .venv/bin/python -m benchmarks.placement_agents            # judge the shipped agents
    nice .venv/bin/python -m benchmarks.placement_agents --train    # retrain them first
    nice .venv/bin/python -m benchmarks.placement_agents --seeds 42-44 --json-out out.json

``--train`` retrains ``balance_dqn`` and ``tr_dqn`` with the settings below — on the data in
the shared data only — and writes ``examples/placement/agents/*.pt``. Training
never touches what is judged:

* ``balance_dqn`` trains on workloads of the ``train-mix`` family
  (``placement.workloads.families``: the default pod list resampled to proportions drawn
  from a training box, on 10–25 % of the nodes), episode seeds from 100,000 up, and keeps
  the weights that allocate most on generated *validation* workloads. It is judged in the
  inflation experiment on the whole default workload and on generated families that lie
  outside the training box (:data:`NODE_FAMILIES`), several seeds each, beside BestFit and
  FGD — alone and behind its guard (``agent:PATH,fallback=fgd``).
* ``tr_dqn`` trains on windows of the Lublin log that overlap none of RLScheduler's ten
  test sequences (start indices 1981, 2756, …) and on ``train-lublin`` sequences (loads and
  machine sizes drawn per sequence); it is judged on exactly those ten, on ten sequences of
  Lublin's workload model at the log's load (generator seeds 1–10) and on Lublin families
  at other loads and machine sizes (:data:`QUEUE_FAMILIES`), none of them trained on.

Prints tables (and ``--json-out`` a JSON file): allocation share at 130 % and 100 %, failed
pods, seconds per run, decision latency on the 1,213-node cluster; bounded slowdown and
utilisation per queue policy with and without EASY, decision latency per job; training
time. Not a test: numbers are printed, nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.paths import ROOT, add_data_flag, placement_dir
from placement.agents import load_agent
from placement.agents.training import train_agent
from placement.cluster import Cluster
from placement.fallback import counts_of
from placement.frag import typical_pods
from placement.inflation import InflationSettings, arrival_list, parse_seeds, run_experiment
from placement.placer import choose, place, tie_order
from placement.policies import PolicyContext, make_policy
from placement.protocol import ProtocolSettings, run_protocol, sequences
from placement.queue.priorities import queue_policy
from placement.queue.rlscheduler import simulate
from placement.timed_experiment import TimedConfig, run_timed
from placement.workloads.batch import batch_jobs_from_swf
from placement.workloads.openb import load_nodes, load_pods
from placement.workloads.swf import load_swf

OUT = ROOT / "examples" / "placement" / "agents"

# The shipped agents' training (chosen on training and validation workloads only;
# docs/decisions/0125-training-and-judging-apart.md,
# docs/decisions/0171-agents-that-contain-their-rule.md).
BALANCE = {"episodes": 30, "seed": 0, "overrides": {}}
TR = {"episodes": 60, "seed": 0, "overrides": {}}
NODE_BASELINES = ("bestfit", "fgd")
NODE_FAMILIES = (
    "sharing-heavy",
    "sharing-light",
    "multi-gpu-heavy",
    "cpu-heavy",
    "model-constrained",
    "small-cluster",
)
"""Generated workloads balance_dqn is judged on (generator seeds 1, 2, 3 with inflation seeds
42, 43, 44): each lies outside the training box on its axis, or is a cluster size never
trained on (docs/placement.md, "Workload families")."""
QUEUE_BASELINES = ("fcfs", "sjf", "f1")
QUEUE_FAMILIES = (
    "lublin-load-0.7",
    "lublin-load-1.2",
    "lublin-load-0.9+procs-128",
    "lublin-load-1.0+procs-512",
    "lublin-load-1.1+procs-64",
)
"""Lublin families tr_dqn is judged on besides Lublin-1 and the Lublin model at the log's
load (generator seeds 1, 2, 3): other loads and machine sizes than the log's, never trained
or validated on."""
PUBLISHED_BSLD = {"fcfs": (7273.77, 235.82), "sjf": (277.35, 73.31), "f1": (258.37, 75.07)}


def train(nodes, pods, jobs, processors, names: list[str]) -> dict[str, float]:
    """Retrain the named agents and write them under examples/; returns seconds per agent."""
    OUT.mkdir(parents=True, exist_ok=True)
    seconds = {}
    for name, plan, data in (
        ("balance_dqn", BALANCE, {"nodes": nodes, "pods": pods}),
        ("tr_dqn", TR, {"jobs": jobs, "processors": processors}),
    ):
        if name not in names:
            continue
        started, cpu = time.perf_counter(), time.process_time()
        agent = train_agent(
            name, episodes=plan["episodes"], seed=plan["seed"], overrides=plan["overrides"], **data
        )
        agent.save(OUT / f"{name}.pt")
        seconds[name] = round(time.perf_counter() - started, 1)
        seconds[f"{name}_cpu"] = round(time.process_time() - cpu, 1)
        print(
            f"trained {name}: {plan['episodes']} episodes in {seconds[name]} s "
            f"({seconds[f'{name}_cpu']} CPU-s)",
            flush=True,
        )
    return seconds


def node_latency(nodes, pods, name: str, *, warm: int = 4000, samples: int = 300) -> float:
    """Median seconds of one whole decision (filter, score, tie-break, GPUs), mid-run."""
    cluster, rng = Cluster(nodes), np.random.default_rng(42)
    arrivals = arrival_list(pods, cluster.total_gpu_milli, tune=1.3, rng=rng)
    rank = tie_order(len(cluster), rng)
    policy = make_policy(name, PolicyContext(rng=rng, typical=typical_pods(pods)))
    for pod in arrivals[:warm]:
        place(pod, cluster, policy, rank=rank)
    times = []
    for pod in arrivals[warm : warm + samples]:
        started = time.perf_counter()
        choose(pod, cluster, policy, rank=rank)
        times.append(time.perf_counter() - started)
        place(pod, cluster, policy, rank=rank)
    return float(np.median(times))


class RewardGreedy:
    """Ablation: the node with the best *one-step* reward of balance_dqn's environment (α·
    uniformity gain − β·stranded change), no learning. If the agent only matched this, the
    DQN would have learned nothing beyond its reward."""

    name = "reward_greedy"

    def __init__(self, context: PolicyContext) -> None:
        from placement.env.node_features import NODE_FEATURES, Tolerance

        self.tolerance = Tolerance.of(context.typical) if context.typical else Tolerance()
        self.gain = NODE_FEATURES.index("uniformity_gain")
        self.before, self.after = (NODE_FEATURES.index(n) for n in ("stranded", "stranded_after"))

    def score(self, pod, cluster, nodes):
        from placement.env.node_env import observe

        rows, _ = observe(cluster, pod, nodes, self.tolerance)
        from placement.agents.balance_dqn import BalanceDQNSettings

        env = BalanceDQNSettings().env
        alpha, beta = env.alpha, env.beta
        stranded = (rows[:, self.after] - rows[:, self.before]) * 8.0  # in GPUs (1000 milli)
        reward = alpha * rows[:, self.gain] - beta * stranded
        return np.unique(reward, return_inverse=True)[1].reshape(-1).astype(np.int64)

    def choose_gpus(self, pod, cluster, node):
        from placement.cluster import default_gpus

        return default_gpus(cluster, pod, node)


def ablation(nodes, pods, seeds) -> dict[str, object]:
    """balance_dqn beside its own one-step reward used greedily (seeds as given)."""
    from placement.policies.registry import POLICIES

    POLICIES.setdefault("reward_greedy", RewardGreedy)  # benchmark-only entry
    settings = InflationSettings(track_fragmentation=False)
    agent = f"agent:{OUT / 'balance_dqn.pt'}"
    return run_experiment(nodes, pods, ["reward_greedy", agent], seeds, settings)["policies"]


def judge_nodes(nodes, pods, seeds, agent_name) -> dict[str, object]:
    """BestFit, FGD, the agent and the guarded agent on the default workload and on every
    generated family, seeds as given (family ``i``-th seed: generator seed ``i + 1``)."""
    from placement.workloads.families import generate_openb

    settings = InflationSettings(track_fragmentation=False)
    names = [*NODE_BASELINES, agent_name, f"{agent_name},fallback=fgd"]
    out: dict[str, object] = {}
    workloads = {"default": [(nodes, pods, seed) for seed in seeds]}
    for family in NODE_FAMILIES:
        made = [generate_openb(family, nodes, pods, seed=i + 1) for i in range(len(seeds))]
        workloads[family] = [(m.nodes, m.pods, seed) for m, seed in zip(made, seeds, strict=True)]
    for label, runs in workloads.items():
        per: dict[str, list[dict[str, object]]] = {}
        for node_list, pod_list, seed in runs:
            result = run_experiment(node_list, pod_list, names, [seed], settings)["policies"]
            for name, summary in result.items():
                per.setdefault(name, []).append(summary)
        out[label] = {
            name: {
                "final": float(np.mean([r["final"] for r in rows])),
                "per_seed": [r["final"] for r in rows],
                "failed_pods": float(np.mean([r["failed_pods"] for r in rows])),
                "seconds_per_run": float(np.mean([r["seconds_per_run"] for r in rows])),
                **(
                    {
                        "fallback_decisions": int(sum(r["fallback_decisions"] for r in rows)),
                        "guarded_decisions": int(sum(r["guarded_decisions"] for r in rows)),
                    }
                    if "fallback_decisions" in rows[0]
                    else {}
                ),
            }
            for name, rows in per.items()
        }
        print(f"  nodes: {label} done", file=sys.stderr, flush=True)
    latency = {n: node_latency(nodes, pods, n) for n in ("bestfit", "fgd", agent_name)}
    return {"workloads": out, "latency_s": latency}


def queue_latency(jobs, processors, name: str) -> float:
    """Median seconds per head decision (``keys``) over the first judged sequence."""
    policy = queue_policy(name)
    times: list[float] = []

    class Timed:
        def __init__(self) -> None:
            self.name = policy.name

        def keys(self, view):
            started = time.perf_counter()
            out = policy.keys(view)
            times.append(time.perf_counter() - started)
            return out

    seq = sequences(jobs, ProtocolSettings(), path="lublin")[0]
    simulate(seq, processors=processors, policy=Timed(), backfill=False)
    return float(np.median(times))


class RandomOrder:
    """A uniformly random head (seeded): the floor a learned queue policy must clear."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def keys(self, view):
        return (self.rng.random(len(view)),)


class ShortestFirst:
    """Ablation for tr_dqn: the rule its warm start imitates (SJF heads, the shortest
    eligible job backfilled first), inside the agent's own action space."""

    name = "shortest_first"

    def keys(self, view):
        return (view.estimate_s, view.submit_s)

    def pick_backfill(self, view, candidates, shadow_s):
        return int(np.argmin(view.estimate_s[candidates]))


def judge_model_sequences(jobs, processors, agent_name, *, ablation: bool) -> dict[str, object]:
    """Mean bounded slowdown with EASY on Lublin-model sequences no agent trained on."""
    from placement.agents.training import JUDGE_SEEDS, lublin_sequences, training_arrival_scale
    from placement.protocol import RLSCHEDULER_STARTS
    from placement.queue.metrics import summarise

    scale = training_arrival_scale(jobs, processors, RLSCHEDULER_STARTS)
    model = lublin_sequences(JUDGE_SEEDS, processors, scale)
    policies = [RandomOrder(), *(queue_policy(n) for n in QUEUE_BASELINES)]
    policies += [ShortestFirst()] if ablation else []
    out: dict[str, object] = {}
    agents = [agent_name, f"{agent_name},fallback=sjf"]
    for name, policy in [(p.name, p) for p in policies] + [(a, queue_policy(a)) for a in agents]:
        runs = [
            summarise(simulate(s, processors=processors, policy=policy, backfill=True), processors)
            for s in model
        ]
        out[f"{name}+easy"] = {
            "bsld": float(np.mean([r["bsld"] for r in runs])),
            "util": float(np.mean([r["util"] for r in runs])),
            "per_sequence_bsld": [r["bsld"] for r in runs],
        }
    return out


def judge_queue_families(agent_name) -> dict[str, object]:
    """Mean bounded slowdown with EASY on every Lublin family, generator seeds 1-3."""
    from placement.queue.metrics import summarise
    from placement.workloads.families import generate_lublin_family

    names = [*QUEUE_BASELINES, agent_name, f"{agent_name},fallback=sjf"]
    policies = {name: queue_policy(name) for name in names}
    out: dict[str, object] = {}
    for family in QUEUE_FAMILIES:
        made = [generate_lublin_family(family, seed=seed) for seed in (1, 2, 3)]
        rows: dict[str, object] = {}
        for name, policy in policies.items():
            runs = [
                summarise(
                    simulate(m.jobs, processors=m.processors, policy=policy, backfill=True),
                    m.processors,
                )
                for m in made
            ]
            rows[f"{name}+easy"] = {
                "bsld": float(np.mean([r["bsld"] for r in runs])),
                "per_sequence_bsld": [r["bsld"] for r in runs],
            }
        out[family] = rows
    return out


def judge_queue(jobs, processors, agent_name, *, ablation: bool = False) -> dict[str, object]:
    out: dict[str, object] = {}
    guarded = f"{agent_name},fallback=sjf"
    extra = ["shortest_first"] if ablation else []
    for name in ["random", *QUEUE_BASELINES, *extra, agent_name, guarded]:
        policy = {"random": RandomOrder(), "shortest_first": ShortestFirst()}.get(name)
        policy = policy or queue_policy(name)
        for backfill in (False, True):
            counts = counts_of(policy)
            before = counts.snapshot() if counts is not None else None
            result = run_protocol(
                jobs,
                processors=processors,
                policy=policy,
                backfill=backfill,
                settings=ProtocolSettings(),
            )
            key = f"{name}{'+easy' if backfill else ''}"
            out[key] = {k: result[k] for k in ("bsld", "util", "mean_wait_s")}
            if counts is not None and before is not None:
                out[key].update(counts.since(before).report())
            out[key]["per_sequence_bsld"] = [m["bsld"] for m in result["per_sequence"]]
    out["latency_s"] = {n: queue_latency(jobs, processors, n) for n in ("sjf", agent_name)}
    out["lublin_model"] = judge_model_sequences(jobs, processors, agent_name, ablation=ablation)
    out["families"] = judge_queue_families(agent_name)
    return out


TIMED_PRESSURE = {"node_share": 0.1, "arrival_speedup": 400.0}
"""openb's real arrivals load its cluster under 1 %: a tenth of the nodes and arrivals 400×
faster make pods queue (FCFS), so placement decides the waits."""
TIMED_KEYS = ("bsld", "mean_wait_s", "mean_jct_s", "makespan_s", "util")


def judge_timed(data: Path, agent_node: str, agent_queue: str) -> dict[str, object]:
    """The openb timed experiment: node policies under FCFS, queue policies under BestFit."""
    common = {
        "nodes": str(data / "openb_node_list_gpu_node.csv"),
        "pods": str(data / "openb_pod_list_default.csv"),
        **TIMED_PRESSURE,
    }
    places = run_timed(
        TimedConfig(queue="fcfs", placement=f"random,bestfit,fgd,{agent_node}", **common)
    ).policies
    queues = run_timed(
        TimedConfig(queue=f"fcfs,sjf,{agent_queue}", placement="bestfit", **common)
    ).policies
    pick = {k: {m: v.get(m) for m in TIMED_KEYS} for k, v in {**places, **queues}.items()}
    return pick


def print_tables(result: dict[str, object], agent_node: str, agent_queue: str) -> None:
    """Whatever parts were run, as tables (agents by their names, not their paths)."""

    def label(name: str) -> str:
        return name.replace(agent_node, "balance_dqn").replace(agent_queue, "tr_dqn")

    nodes = result.get("nodes")
    if nodes:
        print("\ninflation: allocated % at 130 % demand (mean over seeds; failed pods)")
        names = list(next(iter(nodes["workloads"].values())))
        print("| workload | " + " | ".join(label(n) for n in names) + " |")
        print("|---|" + "---|" * len(names))
        for workload, per in nodes["workloads"].items():
            cells = []
            for n in names:
                cell = f"{per[n]['final']:.2f} ({per[n]['failed_pods']:.0f})"
                if "fallback_decisions" in per[n]:
                    share = per[n]["fallback_decisions"] / max(per[n]["guarded_decisions"], 1)
                    cell += f" [{100 * share:.1f} % rule]"
                cells.append(cell)
            print(f"| {workload} | " + " | ".join(cells) + " |")
        ms = {label(k): round(v * 1e3, 3) for k, v in nodes["latency_s"].items()}
        print("decision latency (ms, 1,213 nodes, median):", ms)
    queue = result.get("queue")
    if queue:
        print("\nLublin-1, RLScheduler protocol, 10 judged sequences (published in brackets)")
        print(f"{'policy':<16}{'bsld':>10}{'':>11}{'util':>7}")
        for key, s in queue.items():
            if key in ("latency_s", "lublin_model", "families"):
                continue
            base = key.replace("+easy", "")
            pub = PUBLISHED_BSLD.get(base, (None, None))[1 if key.endswith("+easy") else 0]
            shown = f"[{pub}]" if pub else ""
            print(f"{label(key):<20}{s['bsld']:>10.2f}{shown:>11}{s['util']:>7.3f}")
        ms = {label(k): round(v * 1e3, 3) for k, v in queue["latency_s"].items()}
        print("decision latency (ms per head choice, median):", ms)
        print("\nLublin model, 10 sequences never trained on (generator seeds 1-10), EASY")
        for key, s in queue["lublin_model"].items():
            print(f"{label(key):<20}{s['bsld']:>10.2f}{s['util']:>18.3f}")
        print("\nLublin families (generator seeds 1-3), bounded slowdown with EASY")
        families = queue["families"]
        keys = list(next(iter(families.values())))
        print("| family | " + " | ".join(label(k) for k in keys) + " |")
        print("|---|" + "---|" * len(keys))
        for family, rows in families.items():
            print(f"| {family} | " + " | ".join(f"{rows[k]['bsld']:.2f}" for k in keys) + " |")
    timed = result.get("timed")
    if timed:
        print(f"\nopenb timed experiment ({TIMED_PRESSURE})")
        print(f"{'policy':<22}" + "".join(f"{k:>13}" for k in TIMED_KEYS))
        for name, m in timed.items():
            print(f"{label(name):<22}" + "".join(f"{(m[k] or 0):>13.4g}" for k in TIMED_KEYS))


CURVES = ("balance_dqn", "tr_dqn", "async_transformer")
"""The shipped agents whose training curves docs/placement.md shows (docs/img/shipped_*)."""


def draw_curves(folder: Path) -> None:
    """Each shipped agent's curve as its file recorded it: no training, no judging."""
    from placement.agents.training import validation_curve
    from placement.plots import plot_training

    folder.mkdir(parents=True, exist_ok=True)
    metric = {"balance_dqn": "allocated_share", "async_transformer": "mean_wait_s"}
    for name in CURVES:
        agent = load_agent(OUT / f"{name}.pt")
        out = plot_training(
            agent.curve.records,
            folder / f"shipped_{name}.png",
            title=f"{name} (shipped) training",
            metric=metric.get(name),
            validation=validation_curve(agent),
        )
        print(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--train",
        nargs="?",
        const="balance_dqn,tr_dqn",
        default="",
        help="retrain and write the agents (all, or a comma-separated list)",
    )
    parser.add_argument("--seeds", default="42-44", help="inflation seeds to judge on")
    parser.add_argument("--skip-nodes", action="store_true")
    parser.add_argument("--skip-queue", action="store_true")
    parser.add_argument("--skip-timed", action="store_true")
    parser.add_argument(
        "--ablation",
        action="store_true",
        help="balance_dqn vs its reward; tr_dqn vs the rule its warm start imitates",
    )
    parser.add_argument(
        "--tr-agent", type=Path, help="judge this tr_dqn file instead of the shipped one"
    )
    parser.add_argument("--json-out", type=Path)
    parser.add_argument(
        "--curves",
        type=Path,
        metavar="DIR",
        help="only draw the shipped agents' training curves (with validation) into DIR",
    )
    add_data_flag(parser)
    args = parser.parse_args()
    if args.curves:
        draw_curves(args.curves)
        return 0
    data = placement_dir(args.data)
    nodes = load_nodes(data / "openb_node_list_gpu_node.csv")
    pods = load_pods(data / "openb_pod_list_default.csv")
    trace = load_swf(data / "lublin_256.swf")
    jobs, processors = batch_jobs_from_swf(trace), int(trace.processors or 256)
    result: dict[str, object] = {}
    if args.train:
        names = [n.strip() for n in args.train.split(",") if n.strip()]
        result["training_seconds"] = train(nodes, pods, jobs, processors, names)
    files = {"balance_dqn": OUT / "balance_dqn.pt", "tr_dqn": args.tr_agent or OUT / "tr_dqn.pt"}
    agent_node, agent_queue = f"agent:{files['balance_dqn']}", f"agent:{files['tr_dqn']}"
    for name, path in files.items():
        if not path.exists():
            print(f"{name}: no agent at {path} (run with --train)")
            continue
        agent = load_agent(path)
        result[f"{name}_training"] = {
            "seconds": agent.curve.seconds,
            "episodes": len(agent.curve.records),
            "bytes": path.stat().st_size,
        }
        print(
            f"{name}: trained {len(agent.curve.records)} episodes in "
            f"{agent.curve.seconds:.0f} s; file {path.stat().st_size} bytes"
        )
    if not args.skip_nodes:
        result["nodes"] = judge_nodes(nodes, pods, parse_seeds(args.seeds), agent_node)
    if not args.skip_queue:
        result["queue"] = judge_queue(jobs, processors, agent_queue, ablation=args.ablation)
    if args.ablation and not args.skip_nodes:
        result["ablation"] = ablation(nodes, pods, parse_seeds(args.seeds))
        for name, s in result["ablation"].items():
            print(
                f"ablation {name}: final {s['final']:.2f} at100 {s['at100']:.2f} "
                f"failed {s['failed_pods']:.1f}"
            )
    if not args.skip_timed:
        result["timed"] = judge_timed(data, agent_node, agent_queue)
    print_tables(result, agent_node, agent_queue)
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
