"""``kale validate`` on the behaviour knobs: each error names the field, exit code 2."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((ROOT / "examples/ctr-sync.yaml").read_text())


def _sched(**fields):
    return {"cron": "0 9 * * 1-5", "duration": "8h", **fields}


CASES = [
    (
        "bad-cron",
        lambda s: s.update(schedules=[_sched(cron="0 25 * * *", minWorkers=2)]),
        "spec.schedules.0.cron: hour field: 25 is outside 0-23",
    ),
    (
        "cron-fields",
        lambda s: s.update(schedules=[_sched(cron="0 9 * *", minWorkers=2)]),
        "spec.schedules.0.cron: '0 9 * *' has 4 fields",
    ),
    (
        "unknown-zone",
        lambda s: s.update(schedules=[_sched(timeZone="Mars/Olympus", minWorkers=2)]),
        "spec.schedules.0.timeZone: 'Mars/Olympus' is not a time zone of the IANA database",
    ),
    (
        "min-above-max",
        lambda s: s.update(schedules=[_sched(), _sched(minWorkers=6, maxWorkers=3)]),
        "spec.schedules.1.minWorkers: must be ≤ spec.schedules.1.maxWorkers (6 > 3)",
    ),
    (
        "no-bound",
        lambda s: s.update(schedules=[_sched()]),
        "spec.schedules.0: needs minWorkers or maxWorkers",
    ),
    (
        "beyond-training",
        lambda s: s.update(schedules=[_sched(maxWorkers=65)]),
        "spec.schedules.0.maxWorkers: must be within spec.training.minWorkers..maxWorkers",
    ),
    (
        "topic-and-topics",
        lambda s: s["source"]["kafka"].update(topics=["a", "b"]),
        "spec.source.kafka.topic: needs exactly one of spec.source.kafka.topic and "
        "spec.source.kafka.topics (both are given)",
    ),
    (
        "topics-repeated",
        lambda s: (
            s["source"]["kafka"].pop("topic"),
            s["source"]["kafka"].update(topics=["a", "a"]),
        ),
        "spec.source.kafka.topics: lists a topic twice",
    ),
    (
        "fallback-beyond-training",
        lambda s: s.update(fallback={"failureThreshold": 2, "workers": 1000}),
        "spec.fallback.workers: must be within spec.training.minWorkers..maxWorkers",
    ),
    (
        "window-too-long",
        lambda s: s.update(behavior={"scaleDown": {"stabilizationWindow": "2d"}}),
        "spec.behavior.scaleDown.stabilizationWindow",
    ),
]


@pytest.mark.parametrize(("change", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_bad_knob_is_one_line_naming_its_field(tmp_path, change, message):
    doc = copy.deepcopy(BASE)
    doc["spec"]["throughput"]["model"] = str(ROOT / "examples" / doc["spec"]["throughput"]["model"])
    change(doc["spec"])
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    run = subprocess.run(
        [sys.executable, "-m", "kale.cli.main", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run.stdout + run.stderr
    out = run.stdout + run.stderr
    assert f"{path}: {message}" in out, out
    assert "Traceback" not in out


def test_the_knobs_example_validates():
    run = subprocess.run(
        [sys.executable, "-m", "kale.cli.main", "validate", str(ROOT / "examples/ctr-knobs.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
