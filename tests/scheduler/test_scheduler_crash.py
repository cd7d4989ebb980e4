"""``kale scheduler`` killed with SIGKILL mid-way and restarted: no pod bound twice, none lost.

The real command runs as a subprocess against the fake API server while pods keep
arriving; it is killed without warning (its lease stays held, a gang may be half bound),
a second process waits the lease out, rebuilds its view from the pods' bindings and GPU
annotations, and places the rest.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict

import pytest
import yaml

from tests.support.scheduler_fakes import ROOT, FakeKubeApi, node_doc, pod_doc, wait_for

pytestmark = pytest.mark.slow


def pods() -> list[dict]:
    out = []
    for i in range(60):
        if i % 3 == 0:
            out.append(pod_doc(f"share-{i}", gpus=1, gpu_milli=250 + 50 * (i % 7)))
        else:
            out.append(pod_doc(f"whole-{i}", gpus=1 + (i % 2)))
        if i % 20 == 10:  # a gang of four 2-GPU pods every 20 pods
            for j in range(4):
                out.append(
                    pod_doc(
                        f"gang{i}-{j}",
                        gpus=2,
                        labels={"kale.dev/gang": f"g{i}"},
                        annotations={"kale.dev/gang-size": "4"},
                    )
                )
    return out


def start(config: str, name: str, log: str) -> subprocess.Popen:
    env = dict(os.environ, POD_NAME=name, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-m", "kale.cli.main", "scheduler", "--config", config],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(log, "w"),  # the process owns it
    )


def test_kill_9_and_restart_binds_every_pod_exactly_once(tmp_path):
    with FakeKubeApi() as api:
        api.core.bookmark_interval_s = 0.5
        for i in range(24):
            api.core.put_node(node_doc(f"node-{i:02d}", gpus=8, cpu_milli=64_000))
        cfg = {
            "kubeconfig": str(api.kubeconfig(tmp_path / "kubeconfig")),
            "policy": "bestfit",
            "metrics": {"port": 0},
            "backoff": {"initial": 0.05, "max": 0.5, "flush": 5},
            "leaderElection": {
                "enabled": True,
                "namespace": "kale-system",
                "leaseDuration": 1.5,
                "renewDeadline": 1,
                "retryPeriod": 0.25,
            },
        }
        config = tmp_path / "scheduler.yaml"
        config.write_text(yaml.safe_dump(cfg))
        first = start(str(config), "first", str(tmp_path / "first.log"))
        todo = pods()
        created: list[str] = []

        def create() -> None:
            for pod in todo:
                api.core.put_pod(pod)
                created.append(pod["metadata"]["name"])
                time.sleep(0.01)

        try:

            def leader() -> str | None:
                lease = api.get("coordination.k8s.io/v1", "Lease", "kale-system", "kale-scheduler")
                return lease and lease["spec"].get("holderIdentity")

            wait_for(lambda: leader() == "first", timeout=60, what="the first replica leading")
            creator = threading.Thread(target=create, daemon=True)
            creator.start()
            wait_for(lambda: len(api.core.bindings) >= 20, timeout=60, what="20 bindings")
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
            at_kill = len(api.core.bindings)
            second = start(str(config), "second", str(tmp_path / "second.log"))
            try:
                creator.join(timeout=60)
                wait_for(
                    lambda: all(p["spec"].get("nodeName") for p in api.core.objects("pods")),
                    timeout=90,
                    what="every pod bound after the restart",
                )
            finally:
                second.terminate()
                second.wait(timeout=20)
        finally:
            if first.poll() is None:
                first.kill()
        log = (tmp_path / "second.log").read_text()

    bound = [name for _, name, _ in api.core.bindings]
    assert len(bound) == len(set(bound)) == len(todo), "a pod was bound twice or not at all"
    assert at_kill < len(todo) and len(bound) - at_kill > 0, "the restart had nothing to do"
    assert "Traceback" not in log
    held: dict[tuple[str, int], int] = defaultdict(int)
    for pod in api.core.objects("pods"):
        ann = pod["metadata"]["annotations"]
        milli = int(ann.get("kale.dev/gpu-milli", 1000))
        for g in ann["kale.dev/gpus"].split(","):
            held[(pod["spec"]["nodeName"], int(g))] += milli
    assert max(held.values()) <= 1000, "a GPU was given out twice"
    gangs = defaultdict(set)
    for pod in api.core.objects("pods"):
        if "kale.dev/gang" in pod["metadata"]["labels"]:
            gangs[pod["metadata"]["labels"]["kale.dev/gang"]].add(pod["spec"]["nodeName"])
    assert len(gangs) == 3


def shares(pod: dict) -> list[tuple[str, int, int]]:
    """(node, GPU, milli) the pod's ``kale.dev/gpu-assignment`` records."""
    text = pod["metadata"].get("annotations", {}).get("kale.dev/gpu-assignment", "")
    node = pod["spec"].get("nodeName")
    return [(node, int(g), int(m)) for g, m in (p.split(":") for p in text.split(",") if p)]


def load(api: FakeKubeApi) -> dict[tuple[str, int], int]:
    held: dict[tuple[str, int], int] = defaultdict(int)
    for pod in api.core.objects("pods"):
        for node, g, m in shares(pod):
            held[(node, g)] += m
    return held


def other_scheduler_binds(api: FakeKubeApi, name: str, milli: int) -> bool:
    """Another GPU-sharing scheduler binds a pod through the API, recording its share the
    same way, on the emptiest GPU with room (kale packs the fullest): what a restarted
    kale must account exactly. Returns whether it found room."""
    held = load(api)
    nodes = sorted(n["metadata"]["name"] for n in api.core.objects("nodes"))
    room = [(1000 - held[(n, g)], n, g) for n in nodes for g in range(4)]
    free, node, gpu = max(room)
    if free < milli:
        return False
    pod = pod_doc(name, gpus=1, gpu_milli=milli, scheduler="other")
    api.core.put_pod(pod)
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "annotations": {"kale.dev/gpu-assignment": f"{gpu}:{milli}"}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    code, _, _ = api.handle("POST", f"/api/v1/namespaces/ml/pods/{name}/binding", binding, None)
    return code == 201


def test_after_kill_9_no_gpu_is_over_committed_even_with_another_scheduler_binding(tmp_path):
    with FakeKubeApi() as api:
        api.core.bookmark_interval_s = 0.5
        for i in range(4):
            api.core.put_node(node_doc(f"node-{i}", gpus=4, cpu_milli=64_000))
        cfg = {
            "kubeconfig": str(api.kubeconfig(tmp_path / "kubeconfig")),
            "policy": "fgd",
            "metrics": {"port": 0},
            "backoff": {"initial": 0.05, "max": 0.5, "flush": 2},
        }
        config = tmp_path / "scheduler.yaml"
        config.write_text(yaml.safe_dump(cfg))
        sizes = [150 + 50 * (i % 12) for i in range(48)]  # 150..700 milli: ~ 4 nodes' worth
        first = start(str(config), "first", str(tmp_path / "first.log"))
        try:
            for i, milli in enumerate(sizes[:24]):
                api.core.put_pod(pod_doc(f"a-{i}", gpus=1, gpu_milli=milli))
            wait_for(lambda: len(api.core.bindings) >= 12, timeout=60, what="12 bindings")
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
        finally:
            if first.poll() is None:
                first.kill()
        # meanwhile: another scheduler places pods, and more of ours arrive
        others = [other_scheduler_binds(api, f"o-{i}", 450) for i in range(6)]
        assert any(others)
        for i, milli in enumerate(sizes[24:]):
            api.core.put_pod(pod_doc(f"b-{i}", gpus=1, gpu_milli=milli))
        second = start(str(config), "second", str(tmp_path / "second.log"))
        try:

            def settled() -> bool:
                for pod in api.core.objects("pods"):
                    conds = pod.get("status", {}).get("conditions", [])
                    if not pod["spec"].get("nodeName") and not any(
                        c["type"] == "PodScheduled" and c["status"] == "False" for c in conds
                    ):
                        return False
                return True

            wait_for(settled, timeout=90, what="every pod bound or marked unschedulable")
        finally:
            second.terminate()
            second.wait(timeout=20)
        log = (tmp_path / "second.log").read_text()
    assert "Traceback" not in log
    ours = [p for p in api.core.objects("pods") if p["spec"]["schedulerName"] == "kale"]
    bound = [p for p in ours if p["spec"].get("nodeName")]
    assert len(bound) > 24, "the restarted scheduler placed nothing"
    for pod in bound:  # every share kale gave is on the pod, for a device plugin
        ann = pod["metadata"]["annotations"]
        assert shares(pod) and shares(pod)[0][2] == int(ann["kale.dev/gpu-milli"])
    names = [name for _, name, _ in api.core.bindings]
    assert len(names) == len(set(names)), "a pod was bound twice"
    assert max(load(api).values()) <= 1000, "a GPU was given out beyond its 1000 thousandths"
