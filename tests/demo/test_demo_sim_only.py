"""`kale demo --sim-only`: the offline demo, a generated trace through `kale simulate`."""

from __future__ import annotations

import json

import pytest

from kale.cli.main import main


@pytest.mark.slow  # eight days of every policy, and the report
def test_the_offline_demo_compares_every_policy_and_writes_a_report(tmp_path, capsys):
    out = tmp_path / "demo"
    rc = main(
        [
            "demo",
            "--sim-only",
            "--out",
            str(out),
            "--days",
            "8",
            "--forecaster",
            "seasonal_naive",
            "--json",
        ]
    )
    assert rc == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["policies"]) >= {"kale", "hpa", "keda", "autopilot", "madu", "static"}
    assert result["lower_bound_gpu_hours"] > 0
    report = (out / "report.html").read_text()
    assert '<script src="http' not in report and "plotly" in report.lower()
    # Kale scales ahead: fewer SLO violations than the reactive HPA.
    kale, hpa = result["policies"]["kale"], result["policies"]["hpa"]
    assert kale["slo_violation_rate"] <= hpa["slo_violation_rate"]
    assert kale["cumulative_delay_min"] < hpa["cumulative_delay_min"]


def test_the_offline_demo_with_a_missing_job_is_a_user_error(tmp_path, capsys):
    assert (
        main(["demo", "--sim-only", "--out", str(tmp_path), "--job", str(tmp_path / "nope.yaml")])
        == 2
    )
    assert "file not found" in capsys.readouterr().err


@pytest.mark.parametrize("args", [["--sim-only"], ["--no-browser"]], ids=["sim-only", "live"])
def test_without_a_source_checkout_the_demo_says_it_needs_one(args, tmp_path, monkeypatch, capsys):
    from kale.demo import examples

    # An installed wheel: the package is there, the repository's examples/ is not.
    gone = tmp_path / "site-packages" / "examples"
    monkeypatch.setattr(examples, "EXAMPLES", gone)
    monkeypatch.setattr(examples, "JOB", gone / "ctr-sync.yaml")
    monkeypatch.setattr(examples, "MODEL", gone / "models" / "ctr-sync.json")
    assert main(["demo", *args, "--minutes", "0.1", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kale: error: kale demo needs a source checkout: it reads examples/")
    assert "`make demo`" in err
    assert not (tmp_path / "out" / "trace.csv").exists()  # nothing started


def test_impossible_demo_options_are_user_errors(capsys):
    assert main(["demo", "--speedup", "3000", "--minutes", "0.1", "--no-browser"]) == 2
    assert "--speedup" in capsys.readouterr().err
