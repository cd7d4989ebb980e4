"""The kubectl operators use, against the fake API server: what an operator sees.

The controller runs on the fake API server (jobs as custom resources, their status and
Events written as in a cluster); then the real ``kubectl`` reads them through discovery and
the Table form of lists, exactly as it reads a cluster: ``kubectl get etj`` (the CRD's printer
columns, and no deprecation warning: the CRD serves one version), ``kubectl scale etj``
(the job's scale subresource: a pin), ``kubectl get pytorchjobs`` and ``kubectl describe
etj`` (status and Events).
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.fault_fakes import ClusterRig, FakeKubeApi, Objects
from tests.support.kube_crds import kale_crd

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(
    KUBECTL is None, reason="kubectl is not installed: cannot check what an operator sees"
)
ETJ = ("kale.dev/v1alpha1", "ElasticTrainingJob", "ml")


class Operator:
    """Runs kubectl with the fake's kubeconfig and its own discovery cache."""

    def __init__(self, api: FakeKubeApi, tmp: Path) -> None:
        self.kubeconfig = api.kubeconfig(tmp / "operator.kubeconfig", namespace="ml")
        self.cache = tmp / "kubectl-cache"

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        assert KUBECTL is not None
        return subprocess.run(
            [KUBECTL, "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.cache), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def ok(self, *args: str) -> str:
        out = self.run(*args)
        assert out.returncode == 0, out.stderr
        assert out.stderr == "", out.stderr  # no warning, no error
        return out.stdout


def table(text: str) -> list[dict[str, str]]:
    """kubectl's table as one dict per row, cut at the header's column starts."""
    header, *lines = text.rstrip("\n").split("\n")
    names = header.split()
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    ends = [*starts[1:], None]
    return [
        {n: line[a:b].strip() for n, a, b in zip(names, starts, ends, strict=True)}
        for line in lines
    ]


@pytest.fixture()
def cluster(tmp_path):
    with FakeKubeApi() as api:
        rig = ClusterRig(api, tmp_path, jobs=2)
        pt = Objects("ml").pytorchjob("ctr-pt", 2)
        pt["status"] = {
            "conditions": [
                {"type": "Created", "status": "True", "reason": "PyTorchJobCreated"},
                {"type": "Running", "status": "True", "reason": "PyTorchJobRunning"},
            ]
        }
        api.put(pt)
        for _ in range(2):
            rig.tick()
        yield api, rig, Operator(api, tmp_path)
        rig.close()


def test_kubectl_get_etj_shows_the_printer_columns_and_no_warning(cluster):
    api, _, kubectl = cluster
    rows = table(kubectl.ok("get", "etj"))
    assert list(rows[0]) == ["NAME", "WORKERS", "DESIRED", "PS", "RATE", "ACTION", "READY", "AGE"]
    assert [r["NAME"] for r in rows] == ["job0", "job1"]
    for row in rows:
        status = api.get(*ETJ, row["NAME"])["status"]
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert row["WORKERS"] == str(status["currentWorkers"])
        assert row["DESIRED"] == str(status["desiredWorkers"])
        assert row["PS"] == str(status["currentPS"])
        assert row["RATE"] == str(int(status["metrics"]["arrivalRate"])) == "100000"
        assert row["ACTION"] == status["lastDecision"]["action"]
        assert row["READY"] == ready["status"]
    wide = table(kubectl.ok("get", "etj", "-A", "-o", "wide"))
    assert list(wide[0])[:2] == ["NAMESPACE", "NAME"] and {"PAUSED", "LAG"} <= set(wide[0])
    assert {r["NAMESPACE"] for r in wide} == {"ml"}


def test_a_served_deprecated_version_would_be_read_and_warned_about(cluster):
    """What the single served version avoids: with the old CRD (v1 served, deprecated),
    discovery prefers the GA v1 and kubectl prints its warning on every call."""
    api, _, kubectl = cluster
    old = kale_crd()
    served = copy.deepcopy(old["spec"]["versions"][0])
    served.update(
        name="v1",
        storage=False,
        deprecated=True,
        deprecationWarning="kale.dev/v1 ElasticTrainingJob is deprecated; use kale.dev/v1alpha1",
    )
    old["spec"]["versions"] = [old["spec"]["versions"][0], served]
    api.crds.install(old)
    out = kubectl.run("get", "etj")
    assert out.returncode == 0
    assert "Warning: kale.dev/v1 ElasticTrainingJob is deprecated" in out.stderr


def test_kubectl_scale_etj_pins_the_job(cluster):
    api, rig, kubectl = cluster
    assert kubectl.ok("scale", "etj/job0", "--replicas", "3").strip() == (
        "elastictrainingjob.kale.dev/job0 scaled"
    )
    assert api.get(*ETJ, "job0")["spec"]["replicas"] == 3
    rig.tick()
    assert rig.replicas("job0-worker") == 3
    assert rig.status("job0")["lastDecision"]["action"] == "pinned"
    (row,) = [r for r in table(kubectl.ok("get", "etj")) if r["NAME"] == "job0"]
    assert row["ACTION"] == "pinned"


def test_kubectl_get_pytorchjobs_and_the_built_ins(cluster):
    _, rig, kubectl = cluster
    (row,) = table(kubectl.ok("get", "pytorchjobs"))
    assert (row["NAME"], row["STATE"]) == ("ctr-pt", "Running") and row["AGE"]
    sets = table(kubectl.ok("get", "statefulsets"))
    assert list(sets[0]) == ["NAME", "READY", "AGE"]  # the server's columns for the kind
    assert [r["NAME"] for r in sets] == ["job0-ps", "job0-worker", "job1-ps", "job1-worker"]
    for row in sets:
        n = rig.replicas(row["NAME"])
        assert row["READY"] == f"{n}/{n}"


def test_kubectl_describe_etj_shows_the_status_and_the_events(cluster):
    api, _, kubectl = cluster
    text = kubectl.ok("describe", "etj", "job0")
    status = api.get(*ETJ, "job0")["status"]
    assert "API Version:  kale.dev/v1alpha1" in text
    assert "\nStatus:\n" in text
    shown = re.search(r"\n  Current Workers:\s+(\d+)\n", text)
    assert shown is not None and int(shown[1]) == status["currentWorkers"]
    events = text.split("\nEvents:\n", 1)[1]
    assert "ScaledUp" in events and "kale-controller" in events
    (event,) = [e for e in api.list("v1", "Event", "ml") if e["reason"] == "ScaledUp"
                and e["involvedObject"]["name"] == "job0"]  # fmt: skip
    assert event["message"] in events


def test_kubectl_finds_priority_classes_and_disruption_budgets(cluster):
    api, _, kubectl = cluster
    api.put(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "training-high"},
            "value": 1000,
        }
    )
    api.put(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "job0-workers", "namespace": "ml"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "job0"}}},
        }
    )
    assert [r["NAME"] for r in table(kubectl.ok("get", "pc"))] == ["training-high"]
    assert [r["NAME"] for r in table(kubectl.ok("get", "pdb"))] == ["job0-workers"]
