"""The install: the release manifest is the kustomize base, every overlay builds and validates,
each overlay does what it says, and the alerts are valid rules over exported metrics."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from autoscaler.controller.metrics import ControllerMetrics
from scheduler.metrics import SchedulerMetrics

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
OVERLAYS = sorted(p.name for p in (MANIFESTS / "overlays").iterdir() if p.is_dir())
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(
    KUBECTL is None, reason="kubectl (with kustomize) is not installed: cannot render manifests"
)


def kustomize_text(path: Path) -> str:
    out = subprocess.run(
        [KUBECTL, "kustomize", str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def kustomize(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(kustomize_text(path)) if d]


def one(docs: list[dict], kind: str, name: str) -> dict:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def controller_container(docs: list[dict]) -> dict:
    return one(docs, "Deployment", "kale-controller")["spec"]["template"]["spec"]["containers"][0]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    out = {name: kustomize(MANIFESTS / "overlays" / name) for name in OVERLAYS}
    out["base"] = kustomize(MANIFESTS)
    return out


def test_the_overlays_cover_the_common_choices():
    assert {"watch-namespaces", "no-leader-election", "metrics", "history-pvc", "sharding"} <= set(
        OVERLAYS
    )


@needs_kubectl
def test_the_release_manifest_is_the_rendered_base():
    from tools.gen_release import HEADER

    committed = (MANIFESTS / "release.yaml").read_text(encoding="utf-8")
    assert committed == HEADER + kustomize_text(MANIFESTS), "stale: run `make release`"


@needs_kubectl
def test_every_overlay_passes_strict_offline_validation(rendered):
    kv = pytest.importorskip(
        "kubernetes_validate",
        reason="kubernetes-validate is not installed (pip install 'kale-autoscaler[dev]')",
    )
    version = kv.latest_version()
    for name, docs in rendered.items():
        builtin = [d for d in docs if not d["apiVersion"].startswith("monitoring.coreos.com/")]
        for doc in builtin:  # the CRD itself is a built-in kind: validated too
            kv.validate(doc, version, strict=True)
        assert len(builtin) >= 15, name


@needs_kubectl
def test_the_controller_arguments_are_real_flags_in_every_overlay(rendered):
    from kale.cli.controller import controller

    for name, docs in rendered.items():
        args = controller_container(docs)["args"]
        assert args[0] == "controller", name
        controller.make_context("controller", list(args[1:]))  # click refuses unknown flags


@needs_kubectl
def test_watch_namespaces_binds_the_role_in_those_namespaces_only(rendered):
    docs = rendered["watch-namespaces"]
    assert "--watch-namespace=ml" in controller_container(docs)["args"]
    bindings = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert "kale-controller" not in {d["metadata"]["name"] for d in bindings}
    rb = next(d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["namespace"] == "ml")
    assert rb["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "kale-controller",
    }
    assert rb["subjects"] == [
        {"kind": "ServiceAccount", "name": "kale-controller", "namespace": "kale-system"}
    ]


@needs_kubectl
def test_no_leader_election_runs_one_replica_without_a_lease(rendered):
    docs = rendered["no-leader-election"]
    assert one(docs, "Deployment", "kale-controller")["spec"]["replicas"] == 1
    assert "--no-leader-election" in controller_container(docs)["args"]
    roles = {d["metadata"]["name"] for d in docs if d["kind"] in ("Role", "RoleBinding")}
    assert "kale-controller-leader-election" not in roles


@pytest.mark.parametrize("overlay", ["history-pvc", "production"])
@needs_kubectl
def test_history_on_a_volume_has_one_writer(rendered, overlay):
    docs = rendered[overlay]
    dep = one(docs, "Deployment", "kale-controller")
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    claim = volumes["state"]["persistentVolumeClaim"]["claimName"]
    assert "emptyDir" not in volumes["state"]
    pvc = one(docs, "PersistentVolumeClaim", claim)
    assert pvc["metadata"]["namespace"] == "kale-system"
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    mounts = {m["name"]: m["mountPath"] for m in controller_container(docs)["volumeMounts"]}
    cfg = yaml.safe_load(
        next(
            d
            for d in docs
            if d["kind"] == "ConfigMap"
            and d["metadata"]["name"].startswith("kale-controller-config")
        )["data"]["controller.yaml"]
    )
    assert mounts["state"] == cfg["stateDir"]  # the history lives on the claim


@pytest.mark.parametrize("overlay", ["metrics", "production"])
@needs_kubectl
def test_the_service_monitor_scrapes_the_metrics_service(rendered, overlay):
    docs = rendered[overlay]
    monitor = one(docs, "ServiceMonitor", "kale-controller")
    service = one(docs, "Service", "kale-controller-metrics")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    ports = {p["name"] for p in service["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
    assert all(e.get("honorLabels") for e in monitor["spec"]["endpoints"])  # our `namespace`
    dash = one(docs, "ConfigMap", "kale-grafana-dashboard")
    assert dash["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dash["data"]["kale-dashboard.json"] == (
        MANIFESTS / "grafana/kale-dashboard.json"
    ).read_text(encoding="utf-8")


def _exported_names() -> set[str]:
    """Every series the controller and `kale scheduler` export (the alerts cover both)."""
    names = set()
    registries = (ControllerMetrics().registry, SchedulerMetrics().registry)
    for m in (m for r in registries for m in r.collect()):
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}
        names |= {m.name + s for s in suffixes.get(m.type, [""])}
    return names


def test_the_alerts_query_only_exported_metrics_and_pass_promtool(tmp_path):
    rule = yaml.safe_load((MANIFESTS / "components/metrics/prometheusrule.yaml").read_text())
    groups = rule["spec"]["groups"]
    exprs = [r["expr"] for g in groups for r in g["rules"]]
    used = {n for e in exprs for n in re.findall(r"\bkale_[a-z_]+", e)}
    assert used and used <= _exported_names(), used - _exported_names()
    assert not [e for e in exprs if re.search(r"\bjob=", e)]
    for g in groups:
        for r in g["rules"]:
            assert r["labels"]["severity"] in ("critical", "warning", "info"), r["alert"]
            anchor = r["annotations"]["runbook_url"].split("#")[1]
            assert anchor == r["alert"].lower(), r["alert"]
    docs = (ROOT / "docs/operate.md").read_text(encoding="utf-8")
    for g in groups:
        for r in g["rules"]:
            assert f"### {r['alert']}" in docs, f"docs/operate.md does not explain {r['alert']}"
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip(
            "promtool is not installed (Debian: apt-get install prometheus; `make test` "
            "installs it when it runs as root with apt-get)"
        )
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": groups}), encoding="utf-8")
    out = subprocess.run(
        [promtool, "check", "rules", str(rules_file)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr


@needs_kubectl
def test_the_sharding_overlay_grants_exactly_the_leases_its_shards_use(rendered):
    from autoscaler.controller.config import parse_controller_config

    docs = rendered["sharding"]
    data = next(
        d
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("kale-controller-config")
    )["data"]["controller.yaml"]
    cfg = parse_controller_config(yaml.safe_load(data))
    assert cfg.shards > 1 and cfg.leader_election.enabled
    dep = one(docs, "Deployment", "kale-controller")
    replicas = dep["spec"]["replicas"]
    assert cfg.max_shards_per_replica is not None
    assert cfg.max_shards_per_replica * (replicas - 1) >= cfg.shards  # one replica may die
    role = one(docs, "Role", "kale-controller-leader-election")
    names = {n for rule in role["rules"] for n in rule.get("resourceNames", [])}
    assert names == {f"{cfg.leader_election.lease_name}-{k}" for k in range(cfg.shards)}
