"""controller.yaml: one line per problem naming the field; a missing file is an error."""

from __future__ import annotations

import pytest

from autoscaler.controller.config import load_controller_config, parse_controller_config
from common.errors import UserError

BASE = {"jobs": {"directory": "jobs"}}


def test_minimal_local_config_gets_the_documented_defaults():
    cfg = parse_controller_config(BASE)
    assert cfg.interval == 60.0
    assert cfg.quota.gpus is None and cfg.metrics.port == 9100
    assert cfg.leader_election.enabled is False and not cfg.cluster_mode
    assert cfg.state_dir == ".kale-state" and cfg.log_format == "json"


def test_cluster_config_with_durations_and_leader_election():
    cfg = parse_controller_config(
        {
            "interval": "30s",
            "jobs": {"namespaces": ["ml"], "modelsDir": "/m"},
            "quota": {"gpus": 16},
            "leaderElection": {"enabled": True, "leaseDuration": "20s"},
            "meter": {"window": "5s", "threads": 8},
            "forecasting": {"model": "seasonal_naive"},
        }
    )
    assert cfg.cluster_mode and cfg.interval == 30.0 and cfg.quota.gpus == 16
    assert cfg.leader_election.lease_duration == 20.0 and cfg.meter.threads == 8


def test_tick_deadlines_and_threads_default_to_fractions_of_the_interval():
    cfg = parse_controller_config(BASE)
    assert cfg.tick.write_threads == 8 and cfg.tick.backfill_threads == 2
    # min(max(2 x meter.timeout, 5 s), interval / 3): two 10 s timeouts, capped at 20 s
    assert cfg.observe_deadline == 20.0 and cfg.write_deadline == 20.0
    fast = parse_controller_config({**BASE, "interval": "15s", "meter": {"timeout": "1s"}})
    assert fast.observe_deadline == 5.0 and fast.write_deadline == 5.0


def test_tick_deadlines_and_threads_can_be_set():
    cfg = parse_controller_config(
        {
            **BASE,
            "tick": {
                "observeDeadline": "7s",
                "writeDeadline": "30s",
                "writeThreads": 16,
                "backfillThreads": 4,
            },
        }
    )
    assert cfg.observe_deadline == 7.0 and cfg.write_deadline == 30.0
    assert cfg.tick.write_threads == 16 and cfg.tick.backfill_threads == 4


def test_build_wires_the_tick_settings_into_the_controller(tmp_path):
    from autoscaler.controller.app import build

    cfg = parse_controller_config(
        {
            "jobs": {"directory": str(tmp_path / "jobs")},
            "stateDir": str(tmp_path / "state"),
            "metrics": {"port": 0},
            "tick": {"observeDeadline": "7s", "writeThreads": 3, "backfillThreads": 5},
        }
    )
    (tmp_path / "jobs").mkdir()
    app = build(cfg, dry_run=True)
    try:
        s = app.controller.settings
        assert (s.observe_deadline_s, s.act_deadline_s, s.act_threads) == (7.0, 20.0, 3)
        assert app.background is not None and app.background.threads == 5
    finally:
        app.close()


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        # no jobs source at all
        ({}, "jobs: required field is missing"),
        # both sources: the message names both fields
        (
            {"jobs": {"directory": "d", "namespaces": []}},
            "jobs: set exactly one of jobs.directory (local mode) and jobs.namespaces",
        ),
        # neither source inside jobs
        ({"jobs": {}}, "set exactly one of jobs.directory"),
        # a typo in a key is an unknown field, not silently ignored
        ({**BASE, "intervall": "60s"}, "intervall: unknown field"),
        # a bad duration says what is accepted
        ({**BASE, "interval": "soon"}, "interval: expected a duration"),
        # zero interval
        ({**BASE, "interval": 0}, "interval: Input should be greater than 0"),
        # negative quota
        ({**BASE, "quota": {"gpus": -1}}, "quota.gpus: Input should be greater than or equal to 0"),
        # port out of range
        ({**BASE, "metrics": {"port": 70000}}, "metrics.port"),
        # leader election timings out of order name all three fields
        (
            {**BASE, "leaderElection": {"leaseDuration": "5s"}},
            "leaderElection.retryPeriod < leaderElection.renewDeadline"
            " < leaderElection.leaseDuration",
        ),
        # an unknown forecast model
        ({**BASE, "forecasting": {"model": "prophet"}}, "forecasting.model"),
        # one write thread would write inline, without the deadline
        ({**BASE, "tick": {"writeThreads": 1}}, "tick.writeThreads"),
        # no backfill thread at all
        ({**BASE, "tick": {"backfillThreads": 0}}, "tick.backfillThreads"),
        # a deadline beyond an hour
        ({**BASE, "tick": {"observeDeadline": "2h"}}, "tick.observeDeadline"),
        # deadlines that do not fit in the interval name both and the interval
        (
            {**BASE, "interval": "60s", "tick": {"observeDeadline": "50s"}},
            "tick.observeDeadline (50s) + tick.writeDeadline (20s) must be less than "
            "interval (60s)",
        ),
        # wrong kind
        ({**BASE, "kind": "ElasticTrainingJob"}, "kind: Input should be 'ControllerConfig'"),
    ],
)
def test_invalid_configs_name_the_field(doc, expected):
    with pytest.raises(UserError) as info:
        parse_controller_config(doc, source="c.yaml")
    assert any(expected in line for line in info.value.problems), info.value.problems
    assert all(line.startswith("c.yaml: ") for line in info.value.problems)


def test_a_missing_file_is_a_hard_error(tmp_path):
    with pytest.raises(UserError, match="file not found"):
        load_controller_config(tmp_path / "nope.yaml")


def test_an_empty_file_asks_for_a_controller_config(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("\n")
    with pytest.raises(UserError, match="expected a ControllerConfig"):
        load_controller_config(p)


def test_relative_paths_resolve_against_the_file(tmp_path):
    p = tmp_path / "conf" / "c.yaml"
    p.parent.mkdir()
    p.write_text("jobs:\n  directory: ../jobs\nstateDir: state\nkubeconfig: kc\n")
    cfg = load_controller_config(p)
    assert cfg.jobs.directory == str(p.parent / "../jobs")
    assert cfg.state_dir == str(p.parent / "state")
    assert cfg.kubeconfig == str(p.parent / "kc")


def test_the_example_config_is_valid():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    cfg = load_controller_config(root / "examples" / "controller.yaml")
    assert not cfg.cluster_mode
    assert Path(cfg.jobs.directory).resolve() == (root / "examples").resolve()
    cfg = load_controller_config(root / "manifests" / "deployment" / "controller.yaml")
    assert cfg.cluster_mode and cfg.leader_election.enabled
