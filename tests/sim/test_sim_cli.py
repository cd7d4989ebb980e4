"""``kale simulate``: the JSON contract, the report, multi-job runs and one-line user errors."""

from __future__ import annotations

import json
import math
import re

import pytest
import yaml

from autoscaler.sim.report import METRIC_COLUMNS, metrics_table_html
from autoscaler.sim.tracegen import generate_trace
from autoscaler.sim.traces import save_trace
from common.numbers import format_number, format_percent
from kale.cli import main as cli_main

METRICS = {
    "slo_violation_rate",
    "cumulative_delay_min",
    "downtime_min",
    "rescale_count",
    "gpu_hours",
    "mean_workers",
    "max_delay_min",
    "p99_delay_min",
}


def _job(name, model="models/m.json", priority=0, annotations=None, min_workers=1):
    return {
        "apiVersion": "kale.dev/v1alpha1",
        "kind": "ElasticTrainingJob",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "priority": priority,
            "source": {
                "kafka": {
                    "bootstrapServers": ["127.0.0.1:9092"],
                    "topic": "clicks",
                    "consumerGroup": "g",
                }
            },
            "training": {
                "mode": "sync",
                "globalBatchSize": 4096,
                "workersPerPS": 4,
                "minWorkers": min_workers,
                "maxWorkers": 64,
            },
            "slo": {"maxDelay": "10m"},
            "rescale": {"duration": "5m"},
            "throughput": {"model": model},
            "forecast": {"interval": "5m", "horizon": "1h"},
            "target": {"kind": "DryRun"},
        },
    }


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
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(_job("ctr")))
    trace = tmp_path / "t.csv"
    save_trace(generate_trace(days=3, interval_s=300, seed=7), trace)
    return tmp_path, str(job), str(trace)


def _run(capsys, *args):
    code = cli_main.main(["simulate", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_has_every_metric_for_every_policy_and_the_lower_bound(files, capsys):
    _, job, trace = files
    code, out, err = _run(
        capsys,
        "--trace",
        trace,
        "--job",
        job,
        "--policies",
        "hpa,keda,autopilot,static",
        "--warmup-days",
        "1",
        "--scale-peak",
        "0.8",
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    assert set(data["policies"]) == {"hpa", "keda", "autopilot", "static"}
    best = data["optimal"]
    assert best["lower_bound_gpu_hours"] <= best["gpu_hours"] + 1e-9
    assert best["slo_violation_rate"] <= 0.01
    for metrics in data["policies"].values():
        assert set(metrics) >= METRICS | {"regret", "rescales_per_day"}
        assert metrics["gpu_hours"] >= data["lower_bound_gpu_hours"] * 0.5
        assert metrics["regret"] == pytest.approx(metrics["gpu_hours"] / best["gpu_hours"])
        assert metrics["rescales_per_day"] == pytest.approx(metrics["rescale_count"] / 2)
    assert data["lower_bound_gpu_hours"] > 0
    assert data["steps"] == 2 * 288 and data["warmup_steps"] == 288
    assert data["interval_s"] == 300 and data["rescale_s"] == 300 and data["slo_s"] == 600
    assert data["peak_workers"] == 32


def test_scale_peak_puts_the_trace_maximum_at_k_times_the_peak_throughput(files, capsys):
    _, job, trace = files
    from autoscaler.sim.traces import load_trace

    top = float(load_trace(trace).series.max())
    code, out, _ = _run(
        capsys,
        "--trace",
        trace,
        "--job",
        job,
        "--policies",
        "static",
        "--warmup-days",
        "1",
        "--scale-peak",
        "0.5",
        "--json",
    )
    data = json.loads(out)
    assert code == 0
    assert data["scale"] * top == pytest.approx(0.5 * data["peak_throughput"])


def test_a_trace_the_smallest_size_serves_is_warned_about_before_and_in_the_json(files, capsys):
    _, job, trace = files
    args = ["--trace", trace, "--job", job, "--policies", "static", "--warmup-days", "1"]
    code, out, err = _run(capsys, *args, "--json")  # unscaled: far below one worker's rate
    assert code == 0, err
    (line,) = [x for x in err.splitlines() if "warning" in x]
    assert "never needs more than minWorkers (1)" in line and "--scale-peak" in line
    assert json.loads(out)["warnings"] == [line.split("warning: ", 1)[1]]

    code, out, err = _run(capsys, *args, "--scale-peak", "0.8", "--json")
    assert code == 0 and "warning" not in err
    assert json.loads(out)["warnings"] == []


def test_flags_override_the_jobs_rescale_and_slo_and_resample_refines_the_grid(files, capsys):
    _, job, trace = files
    code, out, err = _run(
        capsys,
        "--trace",
        trace,
        "--job",
        job,
        "--policies",
        "static",
        "--warmup-days",
        "1",
        "--rescale",
        "2m",
        "--slo",
        "15m",
        "--resample",
        "1m",
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["rescale_s"] == 120 and data["slo_s"] == 900
    assert data["interval_s"] == 60 and data["steps"] == 2 * 1440


def test_the_report_is_one_self_contained_html_page(files, capsys):
    tmp, job, trace = files
    report = tmp / "out" / "r.html"
    code, _, err = _run(
        capsys,
        "--trace",
        trace,
        "--job",
        job,
        "--policies",
        "hpa,static",
        "--warmup-days",
        "1",
        "--report",
        str(report),
    )
    assert code == 0, err
    page = report.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert '<script src="http' not in page and "<script src=" not in page
    assert "Plotly.newPlot" in page and len(page) > 1_000_000  # the bundle is inline
    assert "lower bound" in page and "SLO" in page
    # each policy beside the optimum: its workers and capacity drawn, and the regret column
    assert "optimal workers" in page and "optimal capacity" in page
    assert "regret (× optimal)" in page


def test_the_reports_table_writes_numbers_as_the_terminal_and_the_dashboard_do():
    metrics = {
        "kale": {
            "slo_violation_rate": 0.0123,
            "gpu_hours": 14920.5,
            "rescale_count": 6,
            "regret": 1.125,
            "mean_workers": None,
            "max_delay_min": math.inf,
        }
    }
    page = metrics_table_html(metrics, lower_bound_gpu_hours=14000.0)
    rows = re.findall(r"<tr><th>([^<]*)</th>(.*?)</tr>", page)
    cells = {name: re.findall(r"<td>([^<]*)</td>", row) for name, row in rows}
    kale = dict(zip([key for key, _, _ in METRIC_COLUMNS], cells["kale"], strict=True))
    assert kale["slo_violation_rate"] == "1.23%" == format_percent(0.0123)
    assert kale["gpu_hours"] == "14.9k" == format_number(14920.5)  # never 14920.5
    assert (kale["rescale_count"], kale["regret"]) == ("6", "1.13")
    assert (kale["mean_workers"], kale["max_delay_min"]) == ("–", "∞")
    assert "14.0k" in cells["lower bound"]


def test_the_table_is_printed_without_json(files, capsys):
    _, job, trace = files
    code, out, _ = _run(
        capsys, "--trace", trace, "--job", job, "--policies", "static", "--warmup-days", "1"
    )
    assert code == 0
    assert out.splitlines()[0].split()[:2] == ["policy", "violations"]
    assert any(line.startswith("lower_bound") for line in out.splitlines())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # an unknown name lists the valid ones
        (["--policies", "hpa,frob"], "valid names: kale, hpa"),
        # nothing left after the warm-up
        (["--policies", "hpa", "--warmup-days", "3"], "--warmup-days"),
        # a resample step that does not divide the interval
        (["--policies", "hpa", "--resample", "7m"], "--resample"),
        # the multi-job flags belong together
        (["--policies", "hpa", "--quota-gpus", "3"], "--quota-gpus is only used with --jobs"),
    ],
)
def test_user_errors_are_one_line(files, capsys, args, message):
    _, job, trace = files
    code, _, err = _run(capsys, "--trace", trace, "--job", job, *args)
    assert code == 2
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_missing_files_are_user_errors(files, capsys):
    tmp, job, trace = files
    code, _, err = _run(capsys, "--trace", str(tmp / "nope.csv"), "--job", job, "--policies", "hpa")
    assert code == 2 and "nope.csv" in err
    code, _, err = _run(
        capsys, "--trace", trace, "--job", str(tmp / "nope.yaml"), "--policies", "hpa"
    )
    assert code == 2 and "nope.yaml" in err
    (tmp / "models" / "m.json").write_text("{not json")
    code, _, err = _run(capsys, "--trace", trace, "--job", job, "--policies", "hpa")
    assert code == 2 and "m.json" in err


def test_several_jobs_share_a_quota_that_is_never_exceeded(files, capsys):
    tmp, _, trace = files
    jobs = tmp / "jobs"
    jobs.mkdir()
    other = tmp / "other.csv"
    save_trace(generate_trace(days=3, interval_s=300, seed=8), other)
    (jobs / "a.yaml").write_text(
        yaml.safe_dump(_job("a", "../models/m.json", priority=1, min_workers=2))
    )
    (jobs / "b.yaml").write_text(
        yaml.safe_dump(
            _job(
                "b",
                "../models/m.json",
                annotations={"kale.dev/trace": "../other.csv", "kale.dev/scale-peak": "0.6"},
            )
        )
    )
    code, out, err = _run(
        capsys,
        "--jobs",
        str(jobs),
        "--quota-gpus",
        "24",
        "--trace",
        trace,
        "--scale-peak",
        "0.8",
        "--policies",
        "hpa,autopilot,static",
        "--warmup-days",
        "1",
        "--json",
        "--report",
        str(tmp / "multi.html"),
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["quota_gpus"] == 24 and set(data["jobs"]) == {"a", "b"}
    assert data["jobs"]["b"]["trace"].endswith("other.csv")
    assert data["jobs"]["a"]["priority"] == 1
    for summary in data["policies"].values():
        assert summary["max_gpus_in_use"] <= 24 and not summary["quota_exceeded"]
        assert set(summary["jobs"]) == {"a", "b"}
        assert set(summary["jobs"]["a"]) >= METRICS
    assert '<script src="http' not in (tmp / "multi.html").read_text(encoding="utf-8")


def test_multi_job_needs_a_quota_and_a_trace(files, capsys):
    tmp, _, _ = files
    jobs = tmp / "jobs"
    jobs.mkdir()
    (jobs / "a.yaml").write_text(yaml.safe_dump(_job("a", "../models/m.json")))
    code, _, err = _run(capsys, "--jobs", str(jobs), "--policies", "hpa")
    assert code == 2 and "--quota-gpus" in err
    code, _, err = _run(capsys, "--jobs", str(jobs), "--quota-gpus", "8", "--policies", "hpa")
    assert code == 2 and "kale.dev/trace" in err
