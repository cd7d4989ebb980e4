"""manifests/: the CRD is the generated one; kustomize builds; every object validates offline."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from autoscaler.config import parse_job
from autoscaler.controller.crd import build_crd, render_crd

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(
    KUBECTL is None,
    reason="kubectl (with kustomize) is not installed: cannot render the kustomizations",
)


def kustomize(path: Path) -> list[dict]:
    out = subprocess.run(
        [KUBECTL, "kustomize", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="module")
def base() -> list[dict]:
    return kustomize(MANIFESTS)


@pytest.fixture(scope="module")
def examples() -> list[dict]:
    return kustomize(MANIFESTS / "examples")


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def test_the_committed_crd_is_the_generated_one():
    committed = (MANIFESTS / "crd" / "elastictrainingjobs.yaml").read_text(encoding="utf-8")
    assert committed == render_crd(), "stale CRD: run `python tools/gen_crd.py`"


def test_the_crd_schema_is_structural():
    jsonschema = pytest.importorskip("jsonschema", reason="comes with kubernetes-validate")
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]

    def walk(node: dict, path: str) -> None:
        assert "$ref" not in node, path
        assert isinstance(node.get("additionalProperties", {}), dict), path  # never false
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path}: no type"
        assert not ({"title", "const"} & set(node)), path
        if "default" in node:  # only what a user writes has defaults, and they are valid
            assert path.startswith(".spec."), path
            jsonschema.Draft4Validator(node).validate(node["default"])
        for k, v in node.get("properties", {}).items():
            walk(v, f"{path}.{k}")
        if "items" in node:
            walk(node["items"], f"{path}[]")

    walk(schema, "")
    assert schema["properties"]["metadata"] == {"type": "object"}
    assert build_crd()["spec"]["versions"][0]["subresources"] == {"status": {}}


@needs_kubectl
def test_kustomize_builds_the_controller_and_examples(base, examples):
    assert {d["kind"] for d in base} >= {
        "Namespace",
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Deployment",
        "Service",
    }
    assert all(d["metadata"].get("namespace") in (None, "kale-system") for d in base)
    assert {d["kind"] for d in examples} >= {"StatefulSet", "TFJob", "ElasticTrainingJob"}


@needs_kubectl
def test_every_builtin_object_passes_strict_offline_validation(base, examples):
    kv = pytest.importorskip(
        "kubernetes_validate",
        reason="kubernetes-validate is not installed (pip install 'kale-autoscaler[dev]')",
    )
    version = kv.latest_version()
    checked = 0
    for doc in base + examples:
        if doc["apiVersion"].startswith(("kale.dev/", "kubeflow.org/")):
            continue  # custom resources: checked against their own schema below
        kv.validate(doc, version, strict=True)
        checked += 1
    assert checked >= 15


@needs_kubectl
def test_example_jobs_are_valid_jobs_and_match_the_crd_schema(examples):
    jsonschema = pytest.importorskip(
        "jsonschema", reason="jsonschema comes with kubernetes-validate (the dev extra)"
    )
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    validator = jsonschema.Draft4Validator(schema)
    jobs = by_kind(examples, "ElasticTrainingJob")
    assert len(jobs) == 2
    for doc in jobs:
        validator.validate(doc)
        plain = copy.deepcopy(doc)
        plain["metadata"] = {
            k: v for k, v in plain["metadata"].items() if k in ("name", "namespace")
        }
        job, problems = parse_job(plain)
        assert job is not None and problems == [], problems
        model = MANIFESTS / "deployment" / "models" / job.spec.throughput.model
        assert model.is_file(), f"{job.spec.throughput.model} is not in the kale-models map"
    bad = copy.deepcopy(jobs[0])
    bad["spec"]["training"]["maxWorkers"] = "lots"
    assert list(validator.iter_errors(bad))


@needs_kubectl
def test_targets_of_the_example_jobs_exist(examples):
    sts = {d["metadata"]["name"]: d for d in by_kind(examples, "StatefulSet")}
    tfjobs = {d["metadata"]["name"] for d in by_kind(examples, "TFJob")}
    for job in by_kind(examples, "ElasticTrainingJob"):
        target = job["spec"]["target"]
        if target["kind"] == "StatefulSet":
            assert {target["workers"], target["ps"]} <= set(sts)
            worker = sts[target["workers"]]["spec"]["template"]["spec"]["containers"][0]
            assert worker["resources"]["limits"]["nvidia.com/gpu"] == "1"
        else:
            assert target["name"] in tfjobs
    tf = by_kind(examples, "TFJob")[0]["spec"]["tfReplicaSpecs"]
    assert {"Worker", "PS"} <= set(tf)


@needs_kubectl
def test_the_deployment_is_hardened_and_highly_available(base):
    (dep,) = [d for d in by_kind(base, "Deployment") if d["metadata"]["name"] == "kale-controller"]
    spec = dep["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert dep["spec"]["replicas"] == 2
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert {"cpu", "memory"} <= set(c["resources"]["limits"])
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert spec["serviceAccountName"] == "kale-controller"
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert {"/etc/kale/config", "/etc/kale/models", "/var/lib/kale", "/tmp"} <= mounts
    config_map = next(
        d
        for d in by_kind(base, "ConfigMap")
        if d["metadata"]["name"].startswith("kale-controller-config")
    )
    cfg = yaml.safe_load(config_map["data"]["controller.yaml"])
    assert cfg["leaderElection"]["enabled"] is True
    assert "--config" in c["args"] and c["args"][-1].endswith("controller.yaml")


def test_the_packaged_model_is_the_example_model():
    packaged = json.loads((MANIFESTS / "deployment/models/ctr-sync.json").read_text())
    assert packaged == json.loads((ROOT / "examples/models/ctr-sync.json").read_text())
