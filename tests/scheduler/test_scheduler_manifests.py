"""manifests/scheduler: least privilege checked by use, and a hardened Deployment."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml
from scheduler_harness import events, node_of, start_scheduler

from scheduler.config import parse_scheduler_config
from tests.support.scheduler_fakes import ROOT, FakeKubeApi, node_doc, pod_doc, wait_for

SCHEDULER = ROOT / "manifests" / "scheduler"
PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<g>[^/]+)/[^/]+)(?:/namespaces/(?P<ns>[^/]+))?"
    r"/(?P<res>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$"
)
VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def rules() -> list[tuple[str | None, dict]]:
    """(namespace a rule applies in, None = cluster-wide; the rule)."""
    out = []
    for doc in yaml.safe_load_all((SCHEDULER / "rbac.yaml").read_text()):
        if doc["kind"] == "ClusterRole":
            out += [(None, r) for r in doc["rules"]]
        elif doc["kind"] == "Role":
            out += [("kale-system", r) for r in doc["rules"]]
    return out


def allows(rule_ns, rule, group, resource, verb, ns, name) -> bool:
    return (
        group in rule["apiGroups"]
        and resource in rule["resources"]
        and verb in rule["verbs"]
        and rule_ns in (None, ns)
        and ("resourceNames" not in rule or name in rule["resourceNames"])
    )


def requests_made(api: FakeKubeApi) -> list[tuple[str, str, str, str | None, str | None]]:
    """(group, resource[/sub], verb, namespace, name) of every request, watches included."""
    out = [("", res, verb, ns, name) for verb, res, ns, name in api.core.verbs]
    for r in api.requests:
        m = PATH.match(r.path)
        assert m, r.path
        res = m["res"] + (f"/{m['sub']}" if m["sub"] else "")
        if (m["g"] or "") == "" and m["res"] in ("pods", "nodes", "events"):
            continue  # in api.core.verbs, with list and watch told apart
        verb = VERBS.get(r.method) or ("get" if m["name"] else "list")
        out.append((m["g"] or "", res, verb, m["ns"], m["name"]))
    return out


def test_the_scheduler_needs_exactly_the_rbac_rules_it_is_given(tmp_path):
    with FakeKubeApi() as api:
        api.core.put_node(node_doc("n1", gpus=2))
        run = start_scheduler(
            api,
            tmp_path,
            policy="fgd",
            leaderElection={
                "enabled": True,
                "namespace": "kale-system",
                "retryPeriod": 0.2,
                "renewDeadline": 1,
                "leaseDuration": 2,
            },
        )
        wait_for(run.app.is_leader)
        api.fail(409, method="POST", path="/binding", times=1)  # the binder re-reads the pod
        api.core.put_pod(pod_doc("fits", gpus=2))
        api.core.put_pod(pod_doc("waits", gpus=2))  # FailedScheduling
        wait_for(lambda: node_of(api, "fits") and events(api, "FailedScheduling", "waits"))
        wait_for(lambda: ("watch", "events", None, None) in api.core.verbs, what="events watch")
        api.core.put_pod(pod_doc("urgent", gpus=2, priority=100))  # evicts "fits" (status too)
        wait_for(lambda: node_of(api, "urgent"), what="the preemptor bound")
        run.stop()
    granted = rules()
    made = requests_made(api)
    for group, res, verb, ns, name in made:
        assert any(allows(rns, r, group, res, verb, ns, name) for rns, r in granted), (
            f"{verb} {res} ({ns}/{name}) is not allowed by manifests/scheduler/rbac.yaml"
        )
    for rns, rule in granted:
        for verb in rule["verbs"]:
            narrowed = dict(rule, verbs=[verb])
            assert any(allows(rns, narrowed, g, res, v, ns, n) for g, res, v, ns, n in made), (
                f"unused permission: {verb} {rule['resources']} (least privilege)"
            )


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize) not installed")
def test_the_scheduler_deployment_is_hardened_and_configured():
    out = subprocess.run(
        ["kubectl", "kustomize", str(ROOT / "manifests")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    (dep,) = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "kale-scheduler"
    ]
    spec = dep["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert dep["spec"]["replicas"] == 2 and spec["serviceAccountName"] == "kale-scheduler"
    assert c["args"][:2] == ["scheduler", "--config"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert "schedulerName" not in spec  # placed by the default scheduler, never by itself
    (cm,) = [d for d in docs if d["metadata"]["name"].startswith("kale-scheduler-config")]
    cfg = parse_scheduler_config(yaml.safe_load(cm["data"]["scheduler.yaml"]))
    assert cfg.leader_election.enabled and cfg.leader_election.lease_name == "kale-scheduler"
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {("ClusterRole", "kale-scheduler"), ("Role", "kale-scheduler-leader-election")} <= kinds


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize) not installed")
def test_the_example_job_targets_are_placed_by_kale_scheduler():
    out = subprocess.run(
        ["kubectl", "kustomize", str(ROOT / "manifests" / "examples")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    sts = [d for d in yaml.safe_load_all(out.stdout) if d and d["kind"] == "StatefulSet"]
    assert len(sts) == 2
    for doc in sts:
        assert doc["spec"]["template"]["spec"]["schedulerName"] == "kale"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize) not installed")
def test_the_metrics_component_scrapes_the_scheduler_and_alerts_on_it():
    out = subprocess.run(
        ["kubectl", "kustomize", str(ROOT / "manifests" / "overlays" / "metrics")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    (monitor,) = [
        d
        for d in docs
        if d["kind"] == "ServiceMonitor" and d["metadata"]["name"] == "kale-scheduler"
    ]
    (service,) = [
        d
        for d in docs
        if d["kind"] == "Service" and d["metadata"]["name"] == "kale-scheduler-metrics"
    ]
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= {
        p["name"] for p in service["spec"]["ports"]
    }
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    (group,) = [g for g in rule["spec"]["groups"] if g["name"] == "kale-scheduler"]
    alerts = {r["alert"] for r in group["rules"]}
    assert {
        "KaleSchedulerDown",
        "KaleSchedulerPodsUnschedulable",
        "KaleSchedulerBindErrors",
        "KaleSchedulerPreemptionsHigh",
    } <= alerts
    assert all("kale_scheduler_" in r["expr"] for r in group["rules"])


def test_promtool_accepts_the_schedulers_exposition():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip(
            "promtool is not installed (Debian: apt-get install prometheus; `make test` "
            "installs it when it runs as root with apt-get)"
        )
    from scheduler.metrics import SchedulerMetrics

    m = SchedulerMetrics()
    m.preemption_victims.inc(2)
    m.eviction_failures.labels(reason="blocked").inc()
    m.longest_pending.set(12.5)
    m.latency.observe(0.01)
    out = subprocess.run(
        [promtool, "check", "metrics"], input=m.render(), capture_output=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
