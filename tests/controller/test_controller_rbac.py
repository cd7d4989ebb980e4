"""Least privilege, checked by use: replay the controller against the fake API server and
compare every request it made with the RBAC rules in manifests/rbac/.

Discovery (``GET /apis/<group>/<version>``, how a Scale target's kind is found) is a
non-resource URL that Kubernetes' built-in ``system:discovery`` ClusterRole grants every
authenticated identity; it is allowed here as that role allows it."""

from __future__ import annotations

import re
import time
from pathlib import Path
from types import SimpleNamespace

import yaml

from autoscaler.actuators.base import Size
from autoscaler.actuators.dryrun import DryRunActuator
from autoscaler.actuators.statefulset import StatefulSetActuator
from autoscaler.actuators.tfjob import TFJobActuator
from autoscaler.controller.app import actuator_factory
from autoscaler.controller.cluster_jobs import ClusterJobs
from autoscaler.controller.loop import Controller
from autoscaler.controller.runner import Runner
from autoscaler.policy.quota import ResourceManager
from forecasting.registry import make_forecaster
from kube.client import RetryPolicy, connect
from kube.configmaps import ConfigMaps
from kube.custom_resources import ElasticTrainingJobs
from kube.events import EventRecorder
from kube.job_watch import JobInformer
from kube.leader import LeaderElector
from kube.secrets import Secrets
from tests.support.controller_fakes import (
    SYNC_MODEL,
    T0,
    FakeClock,
    FakeKubeApi,
    Objects,
    TraceMetrics,
    job_doc,
)

ROOT = Path(__file__).resolve().parents[2]
PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<g>[^/]+)/[^/]+)(?:/namespaces/(?P<ns>[^/]+))?"
    r"/(?P<res>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$"
)
VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
DISCOVERY = re.compile(r"^/(?:api|apis)(?:/[^/]+)*$")
"""``system:discovery``: nonResourceURLs ``/api``, ``/api/*``, ``/apis``, ``/apis/*``, get."""


def discovery(request) -> bool:
    return (
        request.method == "GET"
        and PATH.match(request.path) is None
        and DISCOVERY.match(request.path) is not None
    )


def rules() -> list[tuple[str | None, dict]]:
    """(namespace the rule applies in, or None for cluster-wide; rule)."""
    out = []
    for name, ns in (("clusterrole.yaml", None), ("role.yaml", "kale-system")):
        doc = yaml.safe_load((ROOT / "manifests" / "rbac" / name).read_text())
        out += [(ns, r) for r in doc["rules"]]
    return out


def allowed_by(request, rule_ns, rule) -> bool:
    m = PATH.match(request.path)
    assert m, request.path
    group = m["g"] or ""
    resource = m["res"] + (f"/{m['sub']}" if m["sub"] else "")
    watching = "watch=true" in getattr(request, "query", "")
    verb = VERBS.get(request.method) or ("get" if m["name"] else "watch" if watching else "list")
    return (
        group in rule["apiGroups"]
        and resource in rule["resources"]
        and verb in rule["verbs"]
        and rule_ns in (None, m["ns"])
        and ("resourceNames" not in rule or m["name"] in rule["resourceNames"])
    )


def test_the_controller_needs_exactly_the_rbac_rules_it_is_given(tmp_path):
    with FakeKubeApi() as api:
        objs = Objects("ml")
        api.put(objs.statefulset("ctr-worker", 1, gpus=1))
        api.put(objs.statefulset("ctr-ps", 1))
        api.put(objs.tfjob("ctr-tf", workers=1, ps=1))
        api.put(
            job_doc(
                "ctr",
                target={"kind": "StatefulSet", "workers": "ctr-worker", "ps": "ctr-ps"},
                model="ctr-sync.json",
            )
        )
        api.put(job_doc("tf", target={"kind": "TFJob", "name": "ctr-tf"}, model="ctr-sync.json"))
        api.put(objs.pytorchjob("ctr-pt", 1, min_replicas=1, max_replicas=16))
        api.put(objs.pytorchjob("ctr-pt-hpa", 1, min_replicas=1, max_replicas=16))
        api.put(objs.deployment("ctr-deploy", 1, gpus=1))
        api.put(objs.statefulset("ctr-deploy-ps", 1))
        api.put(
            job_doc("pt", target={"kind": "PyTorchJob", "name": "ctr-pt"}, model="ctr-sync.json")
        )
        ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "ctr-deploy"}
        ps = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "ctr-deploy-ps"}
        target = {"kind": "Scale", "scaleTargetRef": ref, "psRef": ps}
        api.put(job_doc("deploy", target=target, model="ctr-sync.json"))
        ref = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "ctr-pt-hpa"}
        target = {"kind": "Scale", "scaleTargetRef": ref}
        api.put(job_doc("pt-scale", target=target, model="ctr-sync.json"))
        own = job_doc("own", target={"kind": "DryRun"})  # its model in its own namespace
        own["spec"]["throughput"] = {"configMapRef": {"name": "own-model"}}
        own["spec"]["source"]["kafka"]["sasl"] = {  # and its Kafka credentials
            "mechanism": "SCRAM-SHA-512",
            "secretRef": {"name": "own-kafka"},
        }
        api.put(own)
        api.put(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "own-kafka", "namespace": "ml"},
                "data": {"username": "b3du", "password": "czNjcmV0"},
            }
        )
        api.put(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "own-model", "namespace": "ml"},
                "data": {"model.json": SYNC_MODEL.read_text(encoding="utf-8")},
            }
        )
        kube = connect(
            kubeconfig=api.kubeconfig(tmp_path / "kc"), retry=RetryPolicy(sleep=lambda s: None)
        )
        clock = FakeClock(T0 + 86400)
        crs = ElasticTrainingJobs(kube)
        informer = JobInformer(kube).start()  # list once, then watch (as the controller does)

        controllers_own = actuator_factory(SimpleNamespace(get=lambda: kube))

        def actuator(entry):
            t = entry.job.spec.target
            if t.kind in ("PyTorchJob", "Scale"):
                return controllers_own(entry)
            if t.kind == "TFJob":
                return TFJobActuator(kube, namespace=entry.namespace, name=t.name)
            if t.kind == "DryRun":
                return DryRunActuator(Size(1, 1))
            return StatefulSetActuator(kube, namespace=entry.namespace, workers=t.workers, ps=t.ps)

        controller = Controller(
            jobs_source=ClusterJobs(
                informer.list,
                models_dir=SYNC_MODEL.parent,
                config_maps=ConfigMaps(kube).read,
                secrets=Secrets(kube).read,
            ),
            meter_factory=lambda e: TraceMetrics(clock, lambda t: 100_000.0, history_start=T0),
            forecaster_factory=lambda e: make_forecaster("seasonal_naive"),
            actuator_factory=actuator,
            resource_manager=ResourceManager(64),
            clock=clock,
            status_sink=crs,
            event_sink=EventRecorder(kube, clock=clock),
        )
        elector = LeaderElector(kube, namespace="kale-system", identity="kale-0", clock=clock)
        runner = Runner(controller, interval_s=60, elector=elector, clock=clock)
        for _ in range(3):
            runner.step()
            clock.advance(2)
        assert set(controller.runtimes) == {
            "ml/ctr",
            "ml/tf",
            "ml/own",
            "ml/pt",
            "ml/deploy",
            "ml/pt-scale",
        }, controller.invalid
        informer.stop()
        api.stop()  # ends the open watch, which is then logged
        deadline = time.monotonic() + 30
        while not api.calls("GET", "elastictrainingjobs") or not any(
            "watch=true" in r.query for r in api.calls("GET")
        ):
            assert time.monotonic() < deadline, "the watch never ended"
            time.sleep(0.05)
        controller.close()
        kube.close()
        requests = list(api.requests)

    assert {r.status for r in requests} <= {200, 201, 404}  # 404: the first lease read
    assert any(discovery(r) for r in requests)  # Scale targets' kinds were looked up
    requests = [r for r in requests if not discovery(r)]
    granted = rules()
    for req in requests:
        assert any(allowed_by(req, ns, rule) for ns, rule in granted), (
            f"{req.method} {req.path} is not allowed by manifests/rbac"
        )
    for ns, rule in granted:
        for verb in rule["verbs"]:
            narrowed = dict(rule, verbs=[verb])
            assert any(allowed_by(r, ns, narrowed) for r in requests), (
                f"unused permission: {verb} {rule['resources']} (least privilege)"
            )
