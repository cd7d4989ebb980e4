"""Benchmark of the node-level placement policies: the inflation experiment of "Beware of
Fragmentation" (ATC'23) on the openb default workload, next to the published means.

Run from the repository root::

    nice .venv/bin/python -m benchmarks.placement                 # seeds 42-51, all policies
    nice .venv/bin/python -m benchmarks.placement --seeds 42-44 --json-out bench.json

Prints, per policy, the mean allocation share at 130 % and 100 % arrived demand over the
seeds, the published mean, the difference and whether it is inside the target band
(±0.5 points; Random ±1.0), failed pods, final fragmentation, seconds per run (one core);
then the time of one placement decision on the full cluster half-way through a run. Not a
test: numbers are printed, nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from benchmarks.paths import add_data_flag, placement_dir
from placement.cluster import Cluster
from placement.frag import typical_pods
from placement.inflation import (
    InflationSettings,
    arrival_list,
    parse_seeds,
    run_experiment,
)
from placement.placer import choose, place, tie_order
from placement.policies import PolicyContext, make_policy
from placement.policies.registry import PUBLISHED as PAPER_POLICIES
from placement.workloads.openb import load_nodes, load_pods

# Published means over 10 seeds, default openb workload (PLACEMENT.md): (at 130 %, at 100 %)
PUBLISHED = {
    "random": (87.47, 86.30),
    "dotprod": (90.85, 90.62),
    "clustering": (91.88, 91.65),
    "packing": (92.00, 91.78),
    "bestfit": (93.08, 92.86),
    "fgd": (95.39, 95.23),
}
BAND = {"random": 1.0}  # others: 0.5


def decision_latency(nodes, pods, name: str, *, warm: int, samples: int) -> float:
    """Mean µs of one ``choose`` (filter + score + tie-break + GPU choice) on the full
    cluster after ``warm`` arrivals placed by the same policy (seed 42)."""
    rng = np.random.default_rng(42)
    cluster = Cluster(nodes)
    arrivals = arrival_list(pods, cluster.total_gpu_milli, tune=1.3, rng=rng)
    rank = tie_order(len(cluster), rng)
    policy = make_policy(name, PolicyContext(rng=rng, typical=typical_pods(pods)))
    for pod in arrivals[:warm]:
        place(pod, cluster, policy, rank=rank)
    probe = arrivals[warm : warm + samples]
    choose(probe[0], cluster, policy, rank=rank)  # warm the memo
    started = time.perf_counter()
    for pod in probe:
        choose(pod, cluster, policy, rank=rank)
    return (time.perf_counter() - started) / len(probe) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", help="openb node list (default: the shared data's)")
    parser.add_argument("--pods", help="openb pod list (default: the shared data's)")
    add_data_flag(parser)
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--policies", default=",".join(PAPER_POLICIES))
    parser.add_argument("--json-out", type=Path, help="Also write the results here (JSON).")
    args = parser.parse_args()
    data = placement_dir(args.data)
    args.nodes = args.nodes or str(data / "openb_node_list_gpu_node.csv")
    args.pods = args.pods or str(data / "openb_pod_list_default.csv")

    nodes, pods = load_nodes(args.nodes), load_pods(args.pods)
    seeds = parse_seeds(args.seeds)
    names = [n.strip() for n in args.policies.split(",") if n.strip()]
    with tqdm(total=len(names) * len(seeds), desc="inflation", unit="run", file=sys.stderr) as bar:
        result = run_experiment(
            nodes, pods, names, seeds, InflationSettings(), on_run=lambda r: bar.update(1)
        )
    summary = result["policies"]

    header = (
        f"{'policy':<11}{'final':>8}{'pub':>8}{'diff':>7}{'band':>6}{'ok':>4}"
        f"{'at100':>8}{'pub100':>8}{'std':>6}{'failed':>8}{'frag%':>7}{'s/run':>7}"
    )
    print(f"inflation, openb default, {len(nodes)} nodes, {len(pods)} pods, seeds {args.seeds}")
    print(header)
    print("-" * len(header))
    rows = {}
    for name in names:
        s = summary[name]
        pub, pub100 = PUBLISHED.get(name, (float("nan"), float("nan")))
        band = BAND.get(name, 0.5)
        diff = s["final"] - pub
        ok = abs(diff) <= band
        rows[name] = {"published": pub, "published_at100": pub100, "diff": diff, "ok": ok}
        print(
            f"{name:<11}{s['final']:>8.2f}{pub:>8.2f}{diff:>+7.2f}{band:>6.1f}"
            f"{'yes' if ok else 'NO':>4}{s['at100']:>8.2f}{pub100:>8.2f}{s['final_std']:>6.2f}"
            f"{s['failed_pods']:>8.0f}{s['frag_final_pct']:>7.2f}{s['seconds_per_run']:>7.2f}"
        )

    print("\none placement decision on the full cluster, half-way through a run (seed 42):")
    latency = {}
    for name in names:
        latency[name] = decision_latency(nodes, pods, name, warm=5000, samples=400)
        print(f"  {name:<11}{latency[name]:>9.0f} µs")

    if args.json_out:
        out = {**result, "published": rows, "decision_us": latency}
        args.json_out.write_text(json.dumps(out, indent=2))
        print(f"\nwrote {args.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
