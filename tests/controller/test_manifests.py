"""manifests/: the CRD is the generated one; kustomize builds; every object validates offline."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from autoscaler.job.crd import build_crd, render_crd
from autoscaler.job.loading import LoadedJob, parse_job, validate_file

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
    assert committed == render_crd(), "stale CRD: run `python -m tools.gen_crd`"


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
    versions = build_crd()["spec"]["versions"]
    assert [(v["name"], v["served"], v["storage"]) for v in versions] == [
        ("v1alpha1", True, True),
        ("v1", False, False),  # listed so that objects stored as v1 stay readable
    ]
    assert not any(v.get("deprecated") for v in versions)
    assert build_crd()["spec"]["conversion"] == {"strategy": "None"}
    for v in versions:  # one schema: the API server converts by rewriting apiVersion
        assert v["schema"] == versions[0]["schema"]
    for v in versions[:1]:  # the served version
        assert v["subresources"] == {
            "status": {},
            "scale": {
                "specReplicasPath": ".spec.replicas",
                "statusReplicasPath": ".status.replicas",
                "labelSelectorPath": ".status.labelSelector",
            },
        }
        columns = {c["name"]: c["jsonPath"] for c in v["additionalPrinterColumns"]}
        assert columns["Workers"] == ".status.currentWorkers"
        assert columns["PS"] == ".status.currentPS"
        assert columns["Rate"] == ".status.metrics.arrivalRate"
        types = {c["name"]: c["type"] for c in v["additionalPrinterColumns"]}
        assert types["Rate"] == "integer"  # a number column prints the float in full
    status = schema["properties"]["status"]["properties"]
    conditions = status["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    item = conditions["items"]
    assert "type" in item["required"]
    assert item["properties"]["lastTransitionTime"]["format"] == "date-time"
    assert item["properties"]["observedGeneration"]["type"] == "integer"
    assert {"replicas", "labelSelector"} <= set(status)


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
    maps = {d["metadata"]["name"]: d for d in by_kind(examples, "ConfigMap")}
    assert len(jobs) == 2
    for doc in jobs:
        validator.validate(doc)
        plain = copy.deepcopy(doc)
        plain["metadata"] = {
            k: v for k, v in plain["metadata"].items() if k in ("name", "namespace")
        }
        job, problems = parse_job(plain)
        assert job is not None and problems == [], problems
        assert job.spec.replicas is None  # a manifest must not pin the job
        ref = job.spec.throughput
        data = None
        if ref.config_map_ref is not None:  # the model lives next to the job, in its namespace
            cm = maps[ref.config_map_ref.name]
            assert cm["metadata"]["namespace"] == doc["metadata"]["namespace"]
            data = json.loads(cm["data"][ref.config_map_ref.key])
        LoadedJob(job, None).throughput_model(data)  # a usable model, whatever its source
    bad = copy.deepcopy(jobs[0])
    bad["spec"]["training"]["maxWorkers"] = "lots"
    assert list(validator.iter_errors(bad))


@pytest.mark.parametrize(
    "name", ["elastictrainingjob.yaml", "elastictrainingjob-tfjob.yaml"], ids=str
)
def test_example_job_files_pass_kale_validate(name):
    job, errors, warnings = validate_file(MANIFESTS / "examples" / name)
    assert job is not None and errors == [] and warnings == []


@needs_kubectl
def test_example_workloads_leave_replicas_to_kale_and_run_real_trainer_flags(examples):
    from kale.cli.trainer import train

    for sts in by_kind(examples, "StatefulSet"):
        assert "replicas" not in sts["spec"], sts["metadata"]["name"]  # HPA's convention
    pods = [s["spec"]["template"]["spec"] for s in by_kind(examples, "StatefulSet")]
    tf = by_kind(examples, "TFJob")[0]["spec"]["tfReplicaSpecs"]
    pods += [r["template"]["spec"] for r in tf.values()]
    trainer_args = [
        c["args"] for p in pods for c in p["containers"] if c.get("args", [None])[0] == "train"
    ]
    assert len(trainer_args) == 2
    for args in trainer_args:
        ctx = train.make_context("train", list(args[1:]))  # click refuses unknown flags
        assert ctx.params["workers"] == 1
        job_file = ctx.params["job_path"]
        mounts = {
            m["mountPath"]
            for p in pods
            for c in p["containers"]
            if c.get("args") == args
            for m in c.get("volumeMounts", [])
        }
        assert str(job_file.parent) in mounts


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
