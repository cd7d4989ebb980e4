"""Replay openb pod arrivals against the fake API server with ``kale scheduler`` placing them.

    python -m benchmarks.scheduler --nodes N.csv --pods P.csv --count 5000 --policy fgd --json

The cluster is the node list, served by the fake API server (``tests/fakes``) as Nodes; the
arrivals are the inflation experiment's order for ``--seed`` (the pod list sorted by name,
shuffled, tuned toward 130 % of the GPU capacity; ``placement.inflation.arrival_list``),
the first ``--count`` of them. ``kale scheduler`` runs as its own process (the real
command, through the official client) with the policy, the seed and the pod list as FGD's
workload. Each pod is created when the previous one is bound or has its
``FailedScheduling`` Event, so the order is exactly the simulator's; nothing departs.

Measured: per pod, the time from its creation to its binding (or Event) as the API server
saw them; the share of the GPU capacity bound at the end; and the same share from
placement's own simulator cycle (``placement.placer.place``, the same tie order and
policy seed, no tuning of anything) on the same arrivals — the two must be equal, and
``same_node`` counts the pods that landed on the same node in both.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from tqdm import tqdm

from benchmarks.paths import ROOT
from placement.cluster import Cluster
from placement.frag import typical_pods
from placement.inflation import arrival_list
from placement.placer import place, tie_order
from placement.policies import PolicyContext, make_policy
from placement.workloads.openb import load_nodes, load_pods
from tests.support.kube_api import FakeKubeApi
from tests.support.kube_core import node_doc, pod_doc


def simulate(nodes, arrivals, pods, policy: str, seed: int) -> tuple[float, list[str | None]]:
    """placement's own cycle: the allocation share and each pod's node (None: failed)."""
    cluster = Cluster(nodes)
    rank = tie_order(len(cluster), np.random.default_rng(seed))
    context = PolicyContext(rng=np.random.default_rng(seed), typical=typical_pods(pods))
    scorer = make_policy(policy, context)
    where: list[str | None] = []
    for pod in arrivals:
        alloc = place(pod, cluster, scorer, rank=rank)
        where.append(None if alloc is None else cluster.names[alloc.node])
    return cluster.allocated_gpu_milli / cluster.total_gpu_milli, where


def k8s_name(name: str) -> str:
    return name.lower().replace("_", "-")


def start_scheduler(api: FakeKubeApi, tmp: Path, args: argparse.Namespace) -> subprocess.Popen:
    cfg = {
        "kubeconfig": str(api.kubeconfig(tmp / "kubeconfig")),
        "policy": args.policy,
        "seed": args.seed,
        "workload": str(Path(args.pods).resolve()),
        "metrics": {"port": 0},
        "backoff": {"flush": "1h"},  # nothing departs: a pod that failed never fits later
        "logFormat": "text",
    }
    (tmp / "scheduler.yaml").write_text(yaml.safe_dump(cfg))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "kale.cli.main", "scheduler"]
    return subprocess.Popen(
        [*cmd, "--config", str(tmp / "scheduler.yaml"), "--log-level", "warning"],
        cwd=ROOT,
        env=env,
        stderr=open(tmp / "scheduler.log", "w"),  # the child owns it
    )


def replay(api: FakeKubeApi, arrivals, timeout_s: float) -> tuple[list[float], list[str | None]]:
    """Create each pod, wait for its binding or Event; latencies (s) and nodes."""
    latencies, where = [], []
    store = api.core
    for pod in tqdm(arrivals, desc="pods", unit="pod", file=sys.stderr, mininterval=1.0):
        name = k8s_name(pod.name)
        seen = len(api.requests)
        doc = pod_doc(
            name,
            namespace="openb",
            gpus=pod.num_gpu,
            gpu_milli=pod.gpu_milli if pod.is_sharing else None,
            cpu_milli=pod.cpu_milli,
            memory_mib=pod.memory_mib,
            gpu_models="|".join(sorted(pod.gpu_models)) or None,
            scheduler="kale",
        )
        store.put_pod(doc)
        created = time.time()
        deadline = time.monotonic() + timeout_s
        node = failed_at = None
        with store.cond:
            while True:
                current = store.pods[("openb", name)]
                node = current["spec"].get("nodeName")
                if node:
                    break
                fails = [
                    r
                    for r in api.requests[seen:]
                    if r.method == "POST"
                    and r.path.endswith("/events")
                    and r.body["involvedObject"]["name"] == name
                    and r.body["reason"] == "FailedScheduling"
                ]
                if fails:
                    failed_at = fails[0].time
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"{name}: neither bound nor failed in {timeout_s:.0f}s")
                store.cond.wait(0.002)
        # bound: the moment the store applied the Binding (this thread wakes on it)
        latencies.append((time.time() if node else failed_at) - created)
        where.append(node)
    return latencies, where


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", required=True, help="openb node list CSV")
    ap.add_argument("--pods", required=True, help="openb pod list CSV")
    ap.add_argument("--count", type=int, default=5000, help="arrivals to replay")
    ap.add_argument("--policy", default="fgd", help="a placement policy name")
    ap.add_argument("--seed", type=int, default=42, help="arrival order and tie order")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for one pod")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)

    nodes = sorted(load_nodes(args.nodes), key=lambda n: n.name)  # the scheduler's order
    pods = load_pods(args.pods)
    capacity = sum(n.gpus for n in nodes) * 1000
    arrivals = arrival_list(pods, capacity, tune=1.3, rng=np.random.default_rng(args.seed))
    arrivals = arrivals[: args.count]
    sim_share, sim_where = simulate(nodes, arrivals, pods, args.policy, args.seed)

    with tempfile.TemporaryDirectory() as tmp, FakeKubeApi() as api:
        api.core.bookmark_interval_s = 5.0
        for n in nodes:
            api.core.put_node(
                node_doc(
                    n.name,
                    gpus=n.gpus,
                    model=n.model,
                    cpu_milli=n.cpu_milli,
                    memory_mib=n.memory_mib,
                    max_pods=n.pod_limit,
                )
            )
        proc = start_scheduler(api, Path(tmp), args)
        try:
            deadline = time.monotonic() + 120
            while not {"pods", "nodes"} <= {r for v, r, *_ in api.core.verbs if v == "watch"}:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit((Path(tmp) / "scheduler.log").read_text()[-2000:])
                time.sleep(0.05)  # the scheduler is up once it watches both
            started = time.time()
            latencies, where = replay(api, arrivals, args.timeout)
            elapsed = time.time() - started
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        log = (Path(tmp) / "scheduler.log").read_text()
    if "Traceback" in log:
        print(log, file=sys.stderr)
    allocated = sum(p.total_gpu_milli for p, w in zip(arrivals, where, strict=True) if w)
    lat_ms = np.array(latencies) * 1000
    out = {
        "bound": sum(w is not None for w in where),
        "failed": sum(w is None for w in where),
        "pods_per_s": round(len(arrivals) / elapsed, 1),
        "p50_ms": round(float(np.percentile(lat_ms, 50)), 2),
        "p99_ms": round(float(np.percentile(lat_ms, 99)), 2),
        "allocation_share": round(allocated / capacity, 6),
        "simulator_allocation_share": round(sim_share, 6),
        "same_node": sum(a == b for a, b in zip(where, sim_where, strict=True)),
        "policy": args.policy,
        "count": len(arrivals),
        "nodes": len(nodes),
        "seed": args.seed,
        "max_ms": round(float(lat_ms.max()), 2),
    }
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:28s} {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
