"""``kale crd``, ``kale controller`` and ``kale plan`` through the real entry point."""

from __future__ import annotations

import json
import logging
import shlex
from pathlib import Path

import pandas as pd
import pytest
import yaml

from kale.cli.main import main
from tests.support.controller_fakes import SYNC_MODEL, job_doc, write_job

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def keep_logging():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def run(capsys, command: str) -> tuple[int, str, str]:
    code = main(shlex.split(command))
    out, err = capsys.readouterr()
    return code, out, err


def test_crd_prints_the_committed_crd(capsys):
    code, out, _ = run(capsys, "crd")
    assert code == 0
    assert out == (ROOT / "manifests/crd/elastictrainingjobs.yaml").read_text()


def test_controller_with_a_missing_config_exits_2_with_one_line(tmp_path, capsys):
    code, _, err = run(capsys, f"controller --config {tmp_path / 'nope.yaml'} --once")
    assert code == 2
    assert err.strip().count("\n") == 0 and "file not found" in err


def test_controller_with_a_bad_config_names_the_field(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("jobs: {directory: .}\ninterval: soon\n")
    code, _, err = run(capsys, f"controller --config {cfg} --once")
    assert code == 2 and "interval: expected a duration" in err


def test_plan_refuses_to_act(tmp_path, capsys):
    path = write_job(tmp_path, job_doc())
    code, _, err = run(capsys, f"plan --job {path} --once --no-dry-run")
    assert code == 2 and "kale controller" in err


@pytest.fixture
def kafka_job(kafka_broker, topic_name, tmp_path):
    """A job on a topic that already holds half an hour of traffic (with its timestamps)."""
    from autoscaler.kafka import clients
    from autoscaler.kafka.local.replay import replay

    clients.ensure_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    now = pd.Timestamp.now(tz="UTC").floor("min")
    index = pd.date_range(now - pd.Timedelta(minutes=30), periods=30, freq="1min")
    rates = pd.Series([1.0 + (i % 10) / 2 for i in range(30)], index=index)
    replay(
        rates, kafka_broker.bootstrap, topic_name, speedup=5000, progress=False, timestamps="trace"
    )
    doc = job_doc("ctr", model=SYNC_MODEL)
    doc["spec"]["source"]["kafka"].update(
        bootstrapServers=[kafka_broker.bootstrap], topic=topic_name
    )
    return write_job(tmp_path / "jobs", doc)


@pytest.mark.kafka
def test_plan_prints_one_decision_as_json(kafka_job, tmp_path, capsys):
    code, out, err = run(
        capsys,
        f"plan --job {kafka_job} --once --dry-run --json "
        f"--forecast-model seasonal_naive --window 0.5 "
        f"--state-dir {tmp_path / 'state'} --current-workers 3",
    )
    assert code == 0, err
    plan = json.loads(out)
    assert set(plan) == {
        "job",
        "time",
        "current_workers",
        "desired_workers",
        "desired_ps",
        "forecast",
        "lead_s",
        "backlog",
        "reason",
    }
    assert plan["job"] == "ml/ctr" and plan["current_workers"] == 3
    assert plan["desired_workers"] >= 1 and plan["desired_ps"] >= 1
    assert plan["lead_s"] == 360.0  # rescale 5 min + one interval
    assert plan["backlog"] > 0  # nobody consumes this topic
    assert plan["forecast"]["model"] == "seasonal_naive"
    assert plan["reason"]["action"] in ("hold", "scale_up", "scale_down")


@pytest.mark.kafka
def test_plan_reports_missing_metrics_and_exits_2(kafka_broker, tmp_path, capsys):
    doc = job_doc("ctr", model=SYNC_MODEL)
    doc["spec"]["source"]["kafka"].update(
        bootstrapServers=[kafka_broker.bootstrap], topic="no-such-topic-kale"
    )
    path = write_job(tmp_path, doc)
    code, out, err = run(
        capsys, f"plan --job {path} --once --json --window 0.2 --state-dir {tmp_path / 'state'}"
    )
    assert code == 2
    plan = json.loads(out)
    assert plan["desired_workers"] == plan["current_workers"] == 1  # held, never zero
    assert "metrics unavailable" in plan["reason"]["why"] and "metrics unavailable" in err


@pytest.mark.kafka
def test_controller_once_in_local_dry_run_mode(kafka_job, tmp_path, capsys):
    cfg = tmp_path / "controller.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "jobs": {"directory": str(kafka_job.parent)},
                "metrics": {"port": 0},
                # Longer than any tick: the snapshot stored after the backfill can never be
                # a baseline yet, however slow the machine (with 200ms a busy one measured).
                "meter": {"window": "1h"},
                "forecasting": {"model": "seasonal_naive"},
                "stateDir": str(tmp_path / "state"),
                "quota": {"gpus": 8},
            }
        )
    )
    code, _, err = run(capsys, f"controller --config {cfg} --once --dry-run --log-level debug")
    assert code == 0, err
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    decisions = [x for x in lines if x.get("event") == "decision"]
    assert decisions and decisions[0]["job"] == "ml/ctr"
    assert decisions[0]["action"] == "hold_warming_up"  # the first snapshot of the topic
    assert not (tmp_path / "state" / "status").exists()  # a dry run writes no status
