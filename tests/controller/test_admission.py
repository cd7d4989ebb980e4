"""The platform's admission policy: what a namespace may ask the controller to do.

In cluster mode a tenant's job must not run commands in the controller pod, make it connect
to the metadata service or read files outside the models directory; a refused job becomes
that job's InvalidJob and the other jobs are listed as usual.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import yaml

from autoscaler.controller.cluster_jobs import ClusterJobs
from autoscaler.controller.config import parse_controller_config
from autoscaler.controller.jobs import DirectoryJobs
from autoscaler.job.admission import LOCAL_POLICY, admit, cluster_policy, networks
from autoscaler.job.loading import parse_job
from common.errors import UserError
from kale.cli.main import main
from tests.support.controller_fakes import SYNC_MODEL, job_doc, write_job


def _job(**changes):
    doc = job_doc("ctr", model=SYNC_MODEL.name)
    for path, value in changes.items():
        *parents, last = path.split(".")
        node = doc
        for key in parents:
            node = node[key]
        node[last] = value
    job, problems = parse_job(doc)
    assert job is not None and problems == [], problems
    return job


MODELS = SYNC_MODEL.parent
CLUSTER = cluster_policy(models_root=MODELS)


def _admit(policy, **changes):
    return admit(_job(**changes), policy, path=MODELS / "ctr.yaml")


# (id, changes, field refused) — refused by cluster mode's default policy
REFUSED = [
    # a Local target would run the tenant's command as the controller
    ("local-target", {"spec.target": {"kind": "Local", "command": ["sh", "-c", "id"]}}, "kind"),
    # the cloud metadata service
    ("metadata-service", {"spec.source.kafka.bootstrapServers": ["169.254.169.254:80"]}, "0"),
    # the controller pod itself
    ("loopback", {"spec.source.kafka.bootstrapServers": ["127.0.0.1:9092"]}, "0"),
    ("localhost", {"spec.source.kafka.bootstrapServers": ["localhost:9092"]}, "0"),
    # a public name needs the platform's allow-list
    ("external-name", {"spec.source.kafka.bootstrapServers": ["kafka.example.com:9092"]}, "0"),
    # only the second broker is refused, and it is named
    (
        "second-broker",
        {"spec.source.kafka.bootstrapServers": ["kafka.kafka.svc:9092", "8.8.8.8:9092"]},
        "1",
    ),
    # a model outside the models directory
    ("absolute-model", {"spec.throughput.model": "/tmp/elsewhere/model.json"}, "model"),
    ("escaping-model", {"spec.throughput.model": "../../../etc/x.json"}, "model"),
]


@pytest.mark.parametrize(
    ("changes", "field"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED]
)
def test_cluster_default_refuses_with_the_field_named(changes, field):
    problems = _admit(CLUSTER, **changes)
    assert len(problems) == 1 and problems[0][0].endswith(field), problems
    assert "polic" in problems[0][1]  # the reason says it is the platform's policy


@pytest.mark.parametrize(
    "servers",
    [["kafka.kafka.svc:9092"], ["kafka-0.kafka.ns.svc.cluster.local:9093"], ["10.2.3.4:9092"]],
)
def test_cluster_default_admits_in_cluster_brokers(servers):
    assert _admit(CLUSTER, **{"spec.source.kafka.bootstrapServers": servers}) == []


def test_local_mode_allows_what_the_operator_writes():
    changes = {
        "spec.target": {"kind": "Local", "command": ["python", "w.py"]},
        "spec.source.kafka.bootstrapServers": ["127.0.0.1:9092"],
    }
    assert admit(_job(**changes), LOCAL_POLICY, path=MODELS / "ctr.yaml") == []


def test_the_controller_config_allows_more_and_keeps_the_rest():
    cfg = parse_controller_config(
        {
            "jobs": {"namespaces": [], "modelsDir": str(MODELS)},
            "policy": {
                "allowedTargetKinds": ["DryRun", "Local"],
                "kafka": {"allowedCidrs": ["127.0.0.0/8"]},
                "limits": {"minForecastInterval": "1s"},
            },
        }
    )
    policy = cfg.admission_policy()
    assert policy.models_root == MODELS and policy.limits.min_forecast_interval_s == 1.0
    loopback = {"spec.source.kafka.bootstrapServers": ["127.0.0.1:1"]}
    assert _admit(policy, **loopback) == []
    assert _admit(policy, **loopback, **{"spec.target": {"kind": "Local", "command": ["x"]}}) == []
    sts = {"spec.target": {"kind": "StatefulSet", "workers": "w", "ps": "p"}}
    (refused,) = _admit(policy, **loopback, **sts)
    assert refused[0] == "spec.target.kind"  # not in the list
    # allowing CIDRs replaces the default host patterns: *.svc is no longer implied
    (refused,) = _admit(policy, **{"spec.source.kafka.bootstrapServers": ["k.svc:1"]})
    assert refused[0] == "spec.source.kafka.bootstrapServers.0"


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ({"kafka": {"allowedCidrs": ["10.0.0.1/8"]}}, "policy.kafka.allowedCidrs"),
        ({"kafka": {"allowedHosts": ["bad host"]}}, "policy.kafka.allowedHosts.0"),
        ({"allowedTargetKinds": ["Pod"]}, "policy.allowedTargetKinds.0"),
        ({"limits": {"minForecastInterval": "inf"}}, "policy.limits.minForecastInterval"),
    ],
)
def test_a_bad_policy_is_a_one_line_config_error(policy, expected):
    with pytest.raises(UserError) as info:
        parse_controller_config({"jobs": {"namespaces": []}, "policy": policy}, source="c.yaml")
    assert any(line.startswith(f"c.yaml: {expected}") for line in info.value.problems)


def test_a_symlink_out_of_the_models_directory_is_refused(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    outside = tmp_path / "secret.json"
    outside.write_text(SYNC_MODEL.read_text())
    (models / "m.json").symlink_to(outside)
    policy = dataclasses.replace(CLUSTER, models_root=models)
    problems = admit(_job(**{"spec.throughput.model": "m.json"}), policy, path=models / "j.yaml")
    assert problems and "outside the models directory" in problems[0][1]


def _resource(name: str, **changes) -> dict:
    doc = job_doc(name, model=SYNC_MODEL.name)
    for path, value in changes.items():
        *parents, last = path.split(".")
        node = doc
        for key in parents:
            node = node[key]
        node[last] = value
    doc["metadata"]["uid"] = f"uid-{name}"
    doc["status"] = {"currentWorkers": 1}
    return doc


def test_a_refused_resource_is_that_jobs_problem_only():
    objs = [
        _resource("good"),
        _resource("shell", **{"spec.target": {"kind": "Local", "command": ["sh", "-c", "x"]}}),
        _resource("imds", **{"spec.source.kafka.bootstrapServers": ["169.254.169.254:80"]}),
        _resource("slo-inf", **{"spec.slo.maxDelay": float("inf")}),
        _resource("fast", **{"spec.forecast.interval": "1s", "spec.forecast.horizon": "10m"}),
    ]
    listing = ClusterJobs(lambda: copy.deepcopy(objs), models_dir=MODELS).list()
    assert [j.key for j in listing.jobs] == ["ml/good"]
    invalid = {bad.key: bad for bad in listing.invalid}
    assert set(invalid) == {"ml/shell", "ml/imds", "ml/slo-inf", "ml/fast"}
    assert invalid["ml/shell"].uid == "uid-shell"
    assert "spec.target.kind: Local targets are not allowed" in invalid["ml/shell"].problems[0]
    assert "169.254.169.254 is not an allowed Kafka host" in invalid["ml/imds"].problems[0]
    assert "spec.slo.maxDelay: must be a finite number" in invalid["ml/slo-inf"].problems[0]
    assert "spec.forecast.interval: must be ≥ 10s" in invalid["ml/fast"].problems[0]


def test_the_directory_source_applies_its_policy(tmp_path):
    write_job(tmp_path, job_doc("good", model=SYNC_MODEL))
    bad = job_doc("local", model=SYNC_MODEL, target={"kind": "Local", "command": ["x"]})
    write_job(tmp_path, bad)
    policy = dataclasses.replace(LOCAL_POLICY, target_kinds=frozenset({"DryRun"}))
    listing = DirectoryJobs(tmp_path, policy=policy).list()
    assert [j.key for j in listing.jobs] == ["ml/good"]
    (refused,) = listing.invalid
    assert refused.problems == [
        f"{tmp_path / 'local.yaml'}: spec.target.kind: Local targets are not allowed by the "
        "platform's policy (policy.allowedTargetKinds: DryRun)"
    ]
    assert len(DirectoryJobs(tmp_path).list().jobs) == 2  # local mode's default allows both


def test_kale_validate_applies_a_controller_configs_policy(tmp_path, capsys):
    models = tmp_path / "models"
    models.mkdir()
    (models / "m.json").write_text(SYNC_MODEL.read_text())
    cfg = tmp_path / "controller.yaml"
    cfg.write_text(yaml.safe_dump({"jobs": {"namespaces": [], "modelsDir": "models"}}))
    good = write_job(tmp_path / "jobs", job_doc("good", model="m.json"))
    imds = job_doc("imds", model="m.json")
    imds["spec"]["source"]["kafka"]["bootstrapServers"] = ["169.254.169.254:80"]
    bad = write_job(tmp_path / "jobs", imds)
    assert main(["validate", "--config", str(cfg), str(good)]) == 0
    capsys.readouterr()
    assert main(["validate", "--config", str(cfg), str(good), str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"{bad}: spec.source.kafka.bootstrapServers.0: 169.254.169.254 is not an allowed Kafka "
        "host (policy.kafka.allowedHosts / allowedCidrs in the controller config)"
    ]
    assert main(["validate", str(bad)]) == 2  # local: the model is not beside the job
    assert "m.json" in capsys.readouterr().err


def test_default_cidrs_are_private_networks_only():
    nets = cluster_policy().kafka_cidrs
    assert nets == networks(["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"])
    assert not any(n.overlaps(networks(["169.254.0.0/16"])[0]) for n in nets)
    assert Path(SYNC_MODEL).is_file()
