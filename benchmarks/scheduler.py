"""Replay openb pod arrivals against an API server with ``kale scheduler`` placing them.

    python -m benchmarks.scheduler --nodes N.csv --pods P.csv --count 5000 --policy fgd --json

The cluster is the node list, created as Nodes on the API server; the arrivals are the
inflation experiment's order for ``--seed`` (the pod list sorted by name, shuffled, tuned
toward 130 % of the GPU capacity; ``placement.inflation.arrival_list``), the first
``--count`` of them. ``kale scheduler`` runs as its own process (the real command, through
the official client) with the policy, the seed and the pod list as FGD's workload. Each pod
is created when the previous one is bound or has its ``FailedScheduling`` Event, so the
order is exactly the simulator's; nothing departs. ``--nodes``/``--pods`` default to the
openb lists in the shared data folder (``--data``, :mod:`benchmarks.paths`).

The API server: by default the fake one of the tests (``tests/support/kube_api.py``),
started as a process of its own (``python -m tests.support.kube_api``), empty; or any
cluster given by ``--kubeconfig`` that may take 1,213 made-up Nodes (e.g. kwok) and has an
empty namespace ``openb``. Either way this program talks to it only over HTTP, through
``kube/`` (docs/decisions/0166-benchmarks-and-test-support.md).

Measured: per pod, the time from its creation to its binding (or Event), as this program's
watches saw them (the pod's ADDED event to the one carrying its node, or to its
``FailedScheduling`` Event); the share of the GPU capacity bound at the end; and the same
share from placement's own simulator cycle (``placement.placer.place``, the same tie order
and policy seed, no tuning of anything) on the same arrivals — the two must be equal, and
``same_node`` counts the pods that landed on the same node in both.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from tqdm import tqdm

from benchmarks.paths import ROOT, add_data_flag, placement_dir
from kube.client import Kube, connect
from kube.errors import ActuatorError
from kube.informer import Reflector, start
from placement.cluster import Cluster, NodeSpec
from placement.frag import typical_pods
from placement.inflation import arrival_list
from placement.placer import place, tie_order
from placement.pod import Pod
from placement.policies import PolicyContext, make_policy
from placement.workloads.openb import load_nodes, load_pods
from scheduler.objects import Conventions

NAMESPACE = "openb"
NAMES = Conventions()


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


def node_object(node: NodeSpec) -> dict[str, Any]:
    """An openb node as its kubelet and GPU device plugin would report it."""
    alloc = {
        "cpu": f"{node.cpu_milli}m",
        "memory": f"{node.memory_mib}Mi",
        "pods": str(node.pod_limit),
    }
    labels = {"kubernetes.io/hostname": node.name}
    if node.gpus:
        alloc[NAMES.gpu_resource] = str(node.gpus)
        labels[NAMES.gpu_model_label] = node.model
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels, "annotations": {}},
        "spec": {},
        "status": {"capacity": dict(alloc), "allocatable": alloc, "conditions": [ready]},
    }


def pod_object(pod: Pod) -> dict[str, Any]:
    """An openb pod for ``kale scheduler``: whole GPUs as a resource request, a share of one
    GPU and the allowed GPU models as Kale's annotations."""
    requests = {"cpu": f"{pod.cpu_milli}m", "memory": f"{pod.memory_mib}Mi"}
    annotations: dict[str, str] = {}
    if pod.gpu_models:
        annotations[NAMES.gpu_model_annotation] = "|".join(sorted(pod.gpu_models))
    if pod.is_sharing:
        annotations[NAMES.gpu_milli_annotation] = str(pod.gpu_milli)
        annotations[NAMES.gpu_count_annotation] = str(max(pod.num_gpu, 1))
    elif pod.num_gpu:
        requests[NAMES.gpu_resource] = str(pod.num_gpu)
    limits = {k: v for k, v in requests.items() if k == NAMES.gpu_resource}
    resources = {"requests": requests, "limits": limits}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": k8s_name(pod.name),
            "namespace": NAMESPACE,
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": NAMES.scheduler_name,
            "containers": [{"name": "main", "image": "x", "resources": resources}],
        },
    }


class Seen:
    """What the watches saw, and when (``time.monotonic``): each pod's first sight, its node,
    its first ``FailedScheduling`` Event."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.created: dict[str, float] = {}
        self.bound: dict[str, tuple[float, str]] = {}
        self.failed: dict[str, float] = {}

    def pods(self, kind: str, payload: Any) -> None:
        now = time.monotonic()
        with self.cond:
            for pod in payload if kind == "SYNC" else [payload]:
                name = pod["metadata"]["name"]
                self.created.setdefault(name, now)
                node = (pod.get("spec") or {}).get("nodeName")
                if node and name not in self.bound:
                    self.bound[name] = (now, node)
            self.cond.notify_all()

    def events(self, kind: str, payload: Any) -> None:
        now = time.monotonic()
        with self.cond:
            for event in payload if kind == "SYNC" else [payload]:
                if event.get("reason") == "FailedScheduling":
                    self.failed.setdefault(event["involvedObject"]["name"], now)
            self.cond.notify_all()


@contextlib.contextmanager
def fake_api_server(tmp: Path) -> Iterator[Path]:
    """The tests' fake API server as a process; yields its kubeconfig."""
    kubeconfig = tmp / "fake-kubeconfig"
    cmd = [sys.executable, "-m", "tests.support.kube_api", "--kubeconfig", str(kubeconfig)]
    with open(tmp / "api-server.log", "w") as log:  # the child keeps its own copy
        proc = subprocess.Popen([*cmd, "--bookmark-interval", "5"], cwd=ROOT, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while not kubeconfig.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit((tmp / "api-server.log").read_text()[-2000:])
            time.sleep(0.05)
        yield kubeconfig
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_scheduler(
    kubeconfig: Path, tmp: Path, args: argparse.Namespace, port: int
) -> subprocess.Popen:
    cfg = {
        "kubeconfig": str(kubeconfig.resolve()),
        "policy": args.policy,
        "seed": args.seed,
        "workload": str(Path(args.pods).resolve()),
        "metrics": {"port": port, "address": "127.0.0.1"},  # /readyz: both first lists in
        "backoff": {"flush": "1h"},  # nothing departs: a pod that failed never fits later
        "logFormat": "text",
    }
    (tmp / "scheduler.yaml").write_text(yaml.safe_dump(cfg))
    cmd = [
        sys.executable,
        "-m",
        "kale.cli.main",
        "scheduler",
        "--config",
        str(tmp / "scheduler.yaml"),
    ]
    with open(tmp / "scheduler.log", "w") as log:  # the child keeps its own copy
        return subprocess.Popen([*cmd, "--log-level", "warning"], cwd=ROOT, stderr=log)


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def create(kube: Kube, what: str, fn: Any, *args: Any) -> None:
    """One create, its answer left undecoded (model objects cost more than the request)."""
    try:
        resp = kube.call(what, fn, *args, _preload_content=False)
        resp.read()  # all of it before the connection goes back to the pool
        resp.release_conn()
    except ActuatorError as exc:
        raise SystemExit(f"{what}: {exc} (the benchmark needs an empty cluster)") from None


def replay(
    kube: Kube, seen: Seen, arrivals: list[Pod], timeout_s: float
) -> tuple[list[float], list[str | None]]:
    """Create each pod, wait for its binding or Event; latencies (s) and nodes."""
    latencies: list[float] = []
    where: list[str | None] = []
    core = kube.core
    for pod in tqdm(arrivals, desc="pods", unit="pod", file=sys.stderr, mininterval=1.0):
        name = k8s_name(pod.name)
        create(kube, f"pod {name}", core.create_namespaced_pod, NAMESPACE, pod_object(pod))
        deadline = time.monotonic() + timeout_s
        with seen.cond:
            while not (name in seen.created and (name in seen.bound or name in seen.failed)):
                if time.monotonic() > deadline:
                    raise SystemExit(f"{name}: neither bound nor failed in {timeout_s:.0f}s")
                seen.cond.wait(0.05)
            created = seen.created[name]
            if name in seen.bound:
                at, node = seen.bound[name]
                latencies.append(at - created)
                where.append(node)
            else:
                latencies.append(seen.failed[name] - created)
                where.append(None)
    return latencies, where


def run(
    kubeconfig: Path, tmp: Path, args: argparse.Namespace, nodes: list[NodeSpec], arrivals
) -> tuple[list[float], list[str | None], float]:
    """Nodes in, the scheduler up, the arrivals replayed: (latencies, nodes, seconds)."""
    kube = connect(kubeconfig=kubeconfig)
    seen = Seen()
    watches = [
        Reflector(kube, "pods", seen.pods, field_selector=f"metadata.namespace={NAMESPACE}"),
        Reflector(
            kube,
            "events",
            seen.events,
            field_selector=f"involvedObject.namespace={NAMESPACE},reason=FailedScheduling",
        ),
    ]
    for n in nodes:
        create(kube, f"node {n.name}", kube.core.create_node, node_object(n))
    for w in watches:
        start(w)
    port = free_port()
    proc = start_scheduler(kubeconfig, tmp, args, port)
    try:
        deadline = time.monotonic() + 120
        while not (ready(port) and all(w.synced.is_set() for w in watches)):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit((tmp / "scheduler.log").read_text()[-2000:])
            time.sleep(0.05)  # the scheduler is ready once it has listed pods and nodes
        started = time.time()
        latencies, where = replay(kube, seen, arrivals, args.timeout)
        elapsed = time.time() - started
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        for w in watches:
            w.stop()
        kube.close()
    return latencies, where, elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", help="openb node list CSV (default: the shared data's)")
    ap.add_argument("--pods", help="openb pod list CSV (default: the shared data's)")
    add_data_flag(ap)
    ap.add_argument("--count", type=int, default=5000, help="arrivals to replay")
    ap.add_argument("--policy", default="fgd", help="a placement policy name")
    ap.add_argument("--seed", type=int, default=42, help="arrival order and tie order")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for one pod")
    ap.add_argument(
        "--kubeconfig",
        type=Path,
        help="replay against this cluster (default: the tests' fake API server, started here)",
    )
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    data = placement_dir(args.data)
    args.nodes = args.nodes or str(data / "openb_node_list_gpu_node.csv")
    args.pods = args.pods or str(data / "openb_pod_list_default.csv")

    nodes = sorted(load_nodes(args.nodes), key=lambda n: n.name)  # the scheduler's order
    pods = load_pods(args.pods)
    capacity = sum(n.gpus for n in nodes) * 1000
    arrivals = arrival_list(pods, capacity, tune=1.3, rng=np.random.default_rng(args.seed))
    arrivals = arrivals[: args.count]
    sim_share, sim_where = simulate(nodes, arrivals, pods, args.policy, args.seed)

    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        with contextlib.ExitStack() as stack:
            kubeconfig = args.kubeconfig or stack.enter_context(fake_api_server(tmp))
            latencies, where, elapsed = run(kubeconfig, tmp, args, nodes, arrivals)
        log = (tmp / "scheduler.log").read_text()
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
