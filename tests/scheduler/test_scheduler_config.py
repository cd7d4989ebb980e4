"""``scheduler.yaml``: defaults, the example, and one clear line per mistake (exit 2)."""

from __future__ import annotations

import pytest

from common.errors import UserError
from kale.cli import main as cli_main
from scheduler.config import load_scheduler_config, parse_scheduler_config
from tests.support.scheduler_fakes import ROOT


def test_defaults_and_the_example():
    cfg = parse_scheduler_config({})
    assert (cfg.scheduler_name, cfg.policy, cfg.faults.window) == ("kale", "fgd", 86400.0)
    assert cfg.leader_election.lease_name == "kale-scheduler"
    example = load_scheduler_config(ROOT / "examples" / "scheduler.yaml")
    assert example.metrics.port == 9101 and example.conventions().scheduler_name == "kale"


def test_relative_paths_resolve_against_the_file(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("kubeconfig: kc\nworkload: pods.csv\npolicy: bestfit\n")
    cfg = load_scheduler_config(path)
    assert cfg.kubeconfig == str(tmp_path / "kc") and cfg.workload == str(tmp_path / "pods.csv")


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("polcy: fgd\n", "polcy: unknown field"),  # a typo is not ignored
        ("policy: fgdx\n", "policy: unknown policy 'fgdx'; known: first-fit, random"),
        ("policy: 'agent:'\n", "policy: agent: needs a path"),
        ("schedulerName: Kale_1\n", "schedulerName: String should match pattern"),
        ("faults: {window: soon}\n", "faults.window: expected a duration such as 90s"),
        ("backoff: {initial: 0s}\n", "backoff.initial: Input should be greater than 0"),
        ("metrics: {port: 70000}\n", "metrics.port: Input should be less than or equal to 65535"),
        (
            "leaderElection: {enabled: true, renewDeadline: 20s}\n",
            "leaderElection: need leaderElection.retryPeriod < leaderElection.renewDeadline",
        ),
        ("- a list\n", "expected a mapping (a SchedulerConfig)"),
        ("kind: ControllerConfig\n", "kind: Input should be 'SchedulerConfig'"),
    ],
)
def test_each_mistake_is_one_line_naming_the_file_and_field(tmp_path, capsys, text, line):
    path = tmp_path / "scheduler.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as err:
        load_scheduler_config(path)
    assert f"{path}: {line}" in err.value.problems[0]
    assert cli_main.main(["scheduler", "--config", str(path)]) == 2
    out = capsys.readouterr().err
    assert line in out and "Traceback" not in out and len(out.strip().splitlines()) == 1


def test_a_missing_file_is_an_error(tmp_path, capsys):
    assert cli_main.main(["scheduler", "--config", str(tmp_path / "none.yaml")]) == 2
    assert capsys.readouterr().err.strip() == f"{tmp_path / 'none.yaml'}: file not found"


def test_a_bad_workload_file_is_a_user_error(tmp_path, capsys):
    (tmp_path / "pods.csv").write_text("name,cpu_milli\nx,1\n")
    (tmp_path / "s.yaml").write_text(
        f"workload: pods.csv\nkubeconfig: {tmp_path / 'kc'}\nmetrics: {{port: 0}}\n"
    )
    (tmp_path / "kc").write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    assert cli_main.main(["scheduler", "--config", str(tmp_path / "s.yaml")]) == 2
    err = capsys.readouterr().err
    assert "pods.csv" in err and "Traceback" not in err


def test_the_default_names_are_the_schedulers_own_conventions():
    from scheduler.objects import Conventions

    assert parse_scheduler_config({}).conventions() == Conventions()


def test_a_file_of_several_documents_is_named_a_scheduler_config(tmp_path):
    path = tmp_path / "scheduler.yaml"
    path.write_text("policy: fgd\n---\npolicy: bestfit\n")
    with pytest.raises(UserError) as err:
        load_scheduler_config(path)
    assert err.value.problems[0] == (
        f"{path}: contains 2 YAML documents; put one SchedulerConfig in each file"
    )


def test_a_guarded_agents_path_resolves_and_its_rule_stays(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("policy: 'agent:models/a.pt,fallback=fgd'\n")
    cfg = load_scheduler_config(path)
    assert cfg.policy == f"agent:{tmp_path / 'models' / 'a.pt'},fallback=fgd"
    bad = tmp_path / "bad.yaml"
    bad.write_text("policy: 'agent:a.pt,fallback=tetris'\n")
    with pytest.raises(UserError) as err:
        load_scheduler_config(bad)
    assert "unknown fallback policy 'tetris'" in err.value.problems[0]
