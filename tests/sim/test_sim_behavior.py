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


def study(tmp_path, trace, spec_extra, policy="hpa"):
    """The library call behind ``kale simulate`` (its results carry each resize)."""
    from autoscaler.sim.study import SimSettings, simulate_single

    doc = _job("ctr")
    doc["spec"].update(spec_extra)
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(doc))
    settings = SimSettings(policies=[policy], warmup_days=1, scale_peak=0.8)
    return simulate_single(trace, str(job), settings).sections[0].results[policy]


@pytest.mark.parametrize(
    ("direction", "key"), [("down", "scaleDown"), ("up", "scaleUp")], ids=["down", "up"]
)
def test_a_stabilization_window_acts_at_the_first_resize_it_would_stop(files, direction, key):
    tmp, trace = files
    plain = study(tmp, trace, {})
    first = next(
        t for t, old, new in plain.events if (new < old if direction == "down" else new > old)
    )
    windowed = study(tmp, trace, {"behavior": {key: {"stabilizationWindow": "2h"}}})
    steps = [(s, what) for s, knob, what in windowed.behavior if knob == "stabilization"]
    assert steps, "the window never acted"
    step, what = steps[0]
    assert step == first and what.startswith(f"scale-{direction}")
    moves = [e for e in windowed.events if (e[2] < e[1]) == (direction == "down")]
    plain_moves = [e for e in plain.events if (e[2] < e[1]) == (direction == "down")]
    assert len(moves) < len(plain_moves)


@pytest.mark.parametrize(
    ("cron", "zone"),
    [("0 12 * * *", "UTC"), ("0 13 * * TUE", "Europe/Paris")],  # the same instant in January
    ids=["utc", "paris"],
)
def test_a_schedule_bounds_the_size_while_its_window_is_open(files, cron, zone):
    tmp, trace = files
    # The evaluation starts on Tuesday 2026-01-06 00:00 UTC (step 288); noon is 144 steps on.
    spec = {"schedules": [{"cron": cron, "timeZone": zone, "duration": "2h", "minWorkers": 40}]}
    res = study(tmp, trace, spec)
    opened = WARM + 144
    assert [s for s, knob, _ in res.behavior if knob == "schedule"] == [opened]
    start = res.start_step
    assert res.target[opened - start - 1] < 40  # before the window: the policy's own size
    assert all(res.target[opened - start : opened - start + 24] >= 40)  # two hours of 5 min
    assert res.target[-1] < 40  # and after it
    plain = study(tmp, trace, {})
    assert not plain.behavior and max(plain.target) < 40


def test_a_schedules_maximum_caps_the_size(files):
    tmp, trace = files
    plain = study(tmp, trace, {})
    peak_at = int(plain.target.argmax())
    spec = {"schedules": [{"cron": "@daily", "duration": "1d", "maxWorkers": 3}]}
    capped = study(tmp, trace, spec)
    assert max(capped.target) <= 3 < plain.target[peak_at]
    (first,) = [s for s, knob, _ in capped.behavior if knob == "schedule"][:1]
    assert first >= WARM


def test_kale_simulate_shows_every_knob_acting_at_its_step(files, capsys):
    from autoscaler.sim.study import SimSettings, simulate_single

    tmp, trace = files
    spec = {
        "schedules": [{"cron": "0 12 * * *", "duration": "2h", "minWorkers": 40}],
        "fallback": {"failureThreshold": 3, "workers": 20},
    }
    outage = ("--metrics-outage", "2h+1h")  # steps 24..35 after the warm-up
    # Without the window: where the first scale-down happens (the window must act there).
    doc = _job("ctr")
    doc["spec"].update(spec)
    (tmp / "plain.yaml").write_text(yaml.safe_dump(doc))
    settings = SimSettings(
        policies=["hpa"], warmup_days=1, scale_peak=0.8, metrics_outages=((7200.0, 3600.0),)
    )
    plain = simulate_single(trace, str(tmp / "plain.yaml"), settings).sections[0].results["hpa"]
    first_down = next(t for t, old, new in plain.events if new < old)

    windowed = {**spec, "behavior": {"scaleDown": {"stabilizationWindow": "1h"}}}
    m = simulate(capsys, tmp, trace, windowed, *outage)
    assert knob_steps(m, "fallback") == [WARM + 26]
    assert knob_steps(m, "schedule") == [WARM + 144]
    assert knob_steps(m, "stabilization")[0] == first_down
