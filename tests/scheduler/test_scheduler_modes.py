"""``kale scheduler --dry-run``, ``--once`` and namespace scoping, through the command."""

from __future__ import annotations

import logging

import pytest
import yaml
from scheduler_harness import condition, events, node_of, start_scheduler

from kale.cli import main as cli_main
from tests.support.scheduler_fakes import (
    FakeKubeApi,
    node_doc,
    pod_doc,
    priority_class_doc,
    wait_for,
)

WRITES = ("POST", "PUT", "PATCH", "DELETE")


@pytest.fixture()
def api():
    with FakeKubeApi() as fake:
        fake.core.bookmark_interval_s = 0.2
        fake.put(priority_class_doc("high", 1000))
        yield fake


def write_config(api: FakeKubeApi, tmp_path, **extra) -> str:
    doc = {
        "kubeconfig": str(api.kubeconfig(tmp_path / "kubeconfig")),
        "policy": "first-fit",
        "metrics": {"port": 0},
        "logFormat": "text",
        **extra,
    }
    path = tmp_path / "scheduler.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def writes(api: FakeKubeApi) -> list[str]:
    core = [f"{verb} {res}" for verb, res, _, _ in api.core.verbs if verb not in ("get", "list")]
    core = [c for c in core if not c.startswith("watch")]
    other = [f"{r.method} {r.path}" for r in api.requests if r.method in WRITES]
    return sorted(set(core + other))


def cluster(api: FakeKubeApi) -> None:
    """n1 has room for "fits"; n2 (A100s) is held by a low-priority pod "urgent" (which
    needs A100s) may preempt; "too-big" fits nowhere."""
    api.core.put_node(node_doc("n1", gpus=2))
    api.core.put_node(node_doc("n2", gpus=2, model="A100"))
    api.core.put_pod(pod_doc("low", gpus=2, node="n2", scheduler="default-scheduler"))
    api.core.put_pod(pod_doc("fits", gpus=2))
    api.core.put_pod(pod_doc("too-big", gpus=4))
    api.core.put_pod(pod_doc("urgent", gpus=2, priority_class="high", gpu_models="A100"))


def test_dry_run_decides_and_logs_but_binds_annotates_and_evicts_nothing(api, tmp_path, caplog):
    cluster(api)
    caplog.set_level(logging.INFO, logger="scheduler.core")
    run = start_scheduler(
        api,
        tmp_path,
        dry_run=True,
        leaderElection={
            "enabled": True,
            "namespace": "kale-system",
            "leaseDuration": 2,
            "renewDeadline": 1,
            "retryPeriod": 0.2,
        },
    )
    wait_for(lambda: len(run.scheduler.outcomes) == 3, what="every pod decided")
    tries = run.scheduler.metrics.decisions.labels(policy="first-fit", result="unschedulable")
    api.core.put_node(node_doc("n3", gpus=1))  # a change: the undecided pod is tried again
    wait_for(lambda: tries._value.get() >= 2, what="another try")
    run.stop()
    results = {o.pod: (o.result, o.detail) for o in run.scheduler.outcomes.values()}
    assert results["ml/fits"] == ("would bind", "n1 (GPUs 0:1000,1:1000)")
    assert results["ml/urgent"][0] == "would preempt"
    assert "would preempt ml/low on n2" in results["ml/urgent"][1]
    assert results["ml/too-big"][0] == "unschedulable"
    assert writes(api) == []  # no Binding, status, eviction, Event or Lease
    assert all(node_of(api, n) is None for n in ("fits", "too-big", "urgent"))
    assert node_of(api, "low") == "n2" and condition(api, "too-big") is None
    logged = [r.getMessage() for r in caplog.records]
    assert "dry run: would bind ml/fits to n1 (GPUs 0:1000,1:1000)" in logged
    assert sum("too-big" in m for m in logged) == 1  # retried, logged once


def test_once_places_the_pending_pods_prints_a_summary_and_exits_0(api, tmp_path, capsys):
    cluster(api)
    path = write_config(api, tmp_path)
    assert cli_main.main(["scheduler", "--config", path, "--once"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        "kale scheduler --once: 3 pending pod(s) in all namespaces: 1 bound, 1 nominated, "
        "1 unschedulable"
    )
    assert "  ml/fits  bound: n1 (GPUs 0:1000,1:1000)" in out
    assert any(line.startswith("  ml/urgent  nominated: ") for line in out)
    assert node_of(api, "fits") == "n1" and api.core.evictions == [("ml", "low")]
    assert condition(api, "too-big")["reason"] == "Unschedulable"
    assert events(api, "FailedScheduling", "too-big")  # written before the exit


def test_once_with_dry_run_prints_the_plan_and_writes_nothing(api, tmp_path, capsys):
    cluster(api)
    path = write_config(api, tmp_path)
    assert cli_main.main(["scheduler", "--config", path, "--once", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "--once (dry run: nothing written): 3 pending pod(s)" in out
    assert "1 would bind, 1 would preempt, 1 unschedulable" in out
    assert writes(api) == []


def test_namespaces_scope_which_pods_are_placed(api, tmp_path):
    api.core.put_node(node_doc("n1", gpus=8))
    api.core.put_pod(pod_doc("theirs-held", gpus=3, namespace="other", node="n1"))
    api.core.put_pod(pod_doc("ours", gpus=4))
    api.core.put_pod(pod_doc("theirs", gpus=1, namespace="other"))
    api.core.put_pod(pod_doc("big", gpus=1, namespace="team"))
    run = start_scheduler(api, tmp_path, namespaces=["ml", "team"])
    wait_for(lambda: node_of(api, "ours") and node_of(api, "big", "team"), what="in-scope pods")
    run.stop()
    # a pod of another namespace is left to its own scheduler (no Event, no condition), but
    # the pods bound there still hold their GPUs: "ours" and "big" got the five still free
    assert node_of(api, "theirs", "other") is None and not events(api, "FailedScheduling")
    assert condition(api, "theirs", "other") is None
    assert api.core.pod("ml", "ours")["metadata"]["annotations"]["kale.dev/gpus"] == "3,4,5,6"
    assert api.core.pod("team", "big")["metadata"]["annotations"]["kale.dev/gpus"] == "7"


def test_the_namespace_flag_replaces_the_files_namespaces(api, tmp_path, capsys):
    api.core.put_node(node_doc("n1", gpus=8))
    api.core.put_pod(pod_doc("ours", gpus=1))
    api.core.put_pod(pod_doc("theirs", gpus=1, namespace="other"))
    path = write_config(api, tmp_path, namespaces=["ml"])
    assert cli_main.main(["scheduler", "--config", path, "--once", "--namespace", "other"]) == 0
    assert "1 pending pod(s) in other: 1 bound" in capsys.readouterr().out
    assert node_of(api, "theirs", "other") == "n1" and node_of(api, "ours") is None


@pytest.mark.parametrize(
    ("args", "config", "line"),
    [
        (["--namespace", "Not_A_Namespace"], {}, "--namespace: 'Not_A_Namespace' is not a"),
        (
            [],
            {"namespaces": ["ml", "ml"]},
            "scheduler.yaml: namespaces: a namespace is listed twice",
        ),
        ([], {"namespaces": ["-x"]}, "namespaces: '-x' is not a namespace name (a DNS-1123 label)"),
    ],
)
def test_a_bad_namespace_is_one_clear_line(api, tmp_path, capsys, args, config, line):
    path = write_config(api, tmp_path, **config)
    assert cli_main.main(["scheduler", "--config", path, "--once", *args]) == 2
    err = capsys.readouterr().err
    assert line in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_once_refuses_to_bind_beside_the_replica_holding_the_lease(api, tmp_path, capsys):
    election = {
        "enabled": True,
        "namespace": "kale-system",
        "leaseDuration": 1.5,
        "renewDeadline": 1,
        "retryPeriod": 0.2,
    }
    leader = start_scheduler(api, tmp_path / "leader", leaderElection=election)
    wait_for(leader.app.is_leader, what="the running replica leading")
    path = write_config(api, tmp_path, leaderElection=election)
    try:
        assert cli_main.main(["scheduler", "--config", path, "--once"]) == 2
    finally:
        leader.stop()
    err = capsys.readouterr().err
    assert "holds the Lease kale-system/kale-scheduler" in err
    assert "binding beside it could give a GPU twice (stop it, or add --dry-run)" in err
