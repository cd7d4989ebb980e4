"""`kale demo` (what `make demo` runs) finishes with a comparison and a report."""

from __future__ import annotations

import json

from autoscaler.cli.main import main


def test_demo_runs_to_its_summary(tmp_path, capsys):
    out = tmp_path / "demo"
    rc = main(["demo", "--out", str(out), "--days", "8", "--forecaster", "seasonal_naive",
               "--json"])
    assert rc == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["policies"]) >= {"kale", "hpa", "keda", "autopilot", "madu", "static"}
    assert result["lower_bound_gpu_hours"] > 0
    report = (out / "report.html").read_text()
    assert "<script src=\"http" not in report and "plotly" in report.lower()
    # Kale scales ahead: fewer SLO violations than the reactive HPA.
    kale, hpa = result["policies"]["kale"], result["policies"]["hpa"]
    assert kale["slo_violation_rate"] < hpa["slo_violation_rate"]


def test_demo_with_a_missing_job_is_a_user_error(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--job", str(tmp_path / "nope.yaml")]) == 2
    assert "file not found" in capsys.readouterr().err
