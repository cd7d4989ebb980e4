"""``kale simulate`` of a job with ``fallback``, ``behavior`` and ``schedules``: each knob
acts at the step the semantics say (the same wrapper the controller runs)."""

from __future__ import annotations

import json

import pytest
import yaml

from autoscaler.sim.tracegen import generate_trace
from autoscaler.sim.traces import save_trace
from kale.cli import main as cli_main
from tests.sim.test_sim_cli import _job

WARM = 288  # one day of 5-minute steps


@pytest.fixture
def files(tmp_path):
    from throughput.model import ThroughputModel

    (tmp_path / "models").mkdir()
    ThroughputModel(
        family="fixed-ratio",
        mode="sync",
        theta=(0.05, 2.0, 0.002),
        global_batch=4096,
        ratio=4,
        min_workers=1,
        max_workers=64,
    ).save(tmp_path / "models" / "m.json")
    trace = tmp_path / "t.csv"
    save_trace(generate_trace(days=2, interval_s=300, seed=7), trace)
    return tmp_path, str(trace)


def simulate(capsys, tmp_path, trace, spec_extra, *args):
    doc = _job("ctr")
    doc["spec"].update(spec_extra)
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(doc))
    code = cli_main.main(
        [
            "simulate",
            *("--trace", trace, "--job", str(job), "--policies", "hpa"),
            *("--warmup-days", "1", "--scale-peak", "0.8", "--json", *args),
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)["policies"]["hpa"]


def knob_steps(metrics, knob):
    return [b["step"] for b in metrics.get("behavior", []) if b["knob"] == knob]


def test_without_knobs_nothing_is_reported_and_an_outage_holds(files, capsys):
    tmp, trace = files
    plain = simulate(capsys, tmp, trace, {})
    assert "behavior" not in plain
    held = simulate(capsys, tmp, trace, {}, "--metrics-outage", "6h+1h")
    assert "behavior" not in held  # no fallback: the size is held through the outage


def test_fallback_sizes_the_job_after_the_threshold_of_blind_steps(files, capsys):
    tmp, trace = files
    spec = {"fallback": {"failureThreshold": 3, "workers": 20}}
    m = simulate(capsys, tmp, trace, spec, "--metrics-outage", "6h+1h")
    # 6h after the warm-up is step 72 of the evaluation: blind steps 72..83; the third is 74.
    assert knob_steps(m, "fallback") == [WARM + 74]
    assert m["behavior"][0]["what"].endswith("20 workers")
