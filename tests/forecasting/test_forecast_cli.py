"""``kale forecast``: output shapes and the exit-code contract (2 = the user's mistake)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from autoscaler.sim.tracegen import generate_trace
from autoscaler.sim.traces import save_trace
from kale.cli.main import main

FAST = ["--horizon", "8", "--epochs", "1"]
# Only a guard against a hang: a loaded 2-core machine can take a minute to import torch.
SUBPROCESS_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def trace_csv(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("traces") / "t.csv"
    save_trace(generate_trace(days=6, interval_s=900, seed=2), path)
    return str(path)


def run(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(["forecast", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.training
def test_backtest_json_has_every_metric_for_every_model(capsys, trace_csv):
    rc, out, _ = run(
        capsys,
        "backtest",
        "--trace",
        trace_csv,
        "--models",
        "kale,seasonal_naive,ets,stl_ets,dlinear",
        "--folds",
        "3",
        "--test-days",
        "1",
        *FAST,
        "--json",
    )
    assert rc == 0
    data = json.loads(out)
    assert set(data["models"]) == {"kale", "seasonal_naive", "ets", "stl_ets", "dlinear"}
    for name, m in data["models"].items():
        assert "error" not in m, (name, m.get("error"))
        for key in (
            "mase",
            "smape",
            "mae",
            "rmse",
            "p90_coverage",
            "pinball",
            "fit_seconds",
            "predict_ms",
        ):
            assert isinstance(m[key], float), (name, key)
    assert data["folds"] == 3


def test_backtest_table_for_people(capsys, trace_csv):
    rc, out, _ = run(
        capsys,
        "backtest",
        "--trace",
        trace_csv,
        "--models",
        "seasonal_naive",
        "--folds",
        "2",
        "--test-days",
        "1",
        "--horizon",
        "8",
    )
    assert rc == 0
    assert "seasonal_naive" in out and "mase" in out


@pytest.fixture(scope="module")
def short_fit_csv(tmp_path_factory) -> str:
    """Six days, so a 5-day test window leaves one day to fit: too short for kale."""
    path = tmp_path_factory.mktemp("traces") / "short_fit.csv"
    save_trace(generate_trace(days=6, interval_s=900, seed=3), path)
    return str(path)


def test_backtest_says_which_model_was_not_scored_and_why(capsys, short_fit_csv):
    rc, out, err = run(
        capsys,
        "backtest",
        "--trace",
        short_fit_csv,
        "--models",
        "kale,seasonal_naive",
        "--folds",
        "2",
        "--test-days",
        "5",
        *FAST,
        "--json",
    )
    assert rc == 0  # seasonal naive was scored
    data = json.loads(out)
    assert data["models"]["kale"]["mase"] is None
    assert "InsufficientHistoryError" in data["models"]["kale"]["error"]
    assert isinstance(data["models"]["seasonal_naive"]["mase"], float)
    lines = [ln for ln in err.splitlines() if ln.startswith("kale: warning: kale was not")]
    assert len(lines) == 1
    assert "--test-days" in lines[0] and "fitted on the 1 days" in lines[0]
    # stderr is not a terminal here: one progress line per fit, failed or not.
    fits = [ln for ln in err.splitlines() if ln.startswith("kale: backtest: ")]
    assert len(fits) == 2
    assert re.fullmatch(r"kale: backtest: kale on 96 steps failed after \d+\.\d s \(1/2\)", fits[0])
    assert re.fullmatch(
        r"kale: backtest: seasonal_naive on 96 steps fitted in \d+\.\d s \(2/2\)", fits[1]
    )


def test_backtest_with_nothing_scored_exits_2(capsys, short_fit_csv):
    rc, out, err = run(
        capsys,
        "backtest",
        "--trace",
        short_fit_csv,
        "--models",
        "kale",
        "--folds",
        "2",
        "--test-days",
        "5",
        *FAST,
        "--json",
    )
    assert rc == 2
    assert json.loads(out)["models"]["kale"]["error"]  # the document is still printed
    assert "kale was not scored" in err


@pytest.mark.training
def test_predict_json_shape(capsys, trace_csv):
    rc, out, err = run(capsys, "predict", "--trace", trace_csv, "--model", "kale", *FAST, "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert set(data) == {"timestamps", "mean", "p10", "p50", "p90"}
    assert all(len(data[k]) == 8 for k in data)
    assert data["timestamps"][0] == "2026-01-11T00:00:00Z"  # the step after the trace
    assert all(a <= b <= c for a, b, c in zip(data["p10"], data["p50"], data["p90"], strict=True))


def test_fit_then_predict_from_the_saved_model(capsys, trace_csv, tmp_path):
    model = tmp_path / "m.kale"
    rc, _, err = run(
        capsys,
        "fit",
        "--trace",
        trace_csv,
        "--model",
        "dlinear",
        "--horizon",
        "8",
        "-o",
        str(model),
    )
    assert rc == 0, err
    rc, out, _ = run(
        capsys,
        "predict",
        "--trace",
        trace_csv,
        "--model-file",
        str(model),
        "--horizon",
        "8",
        "--json",
    )
    assert rc == 0
    assert len(json.loads(out)["mean"]) == 8


def test_fit_from_a_saved_model_refits_it_incrementally(capsys, tmp_path):
    series = generate_trace(days=10, interval_s=900, seed=4)  # Monday to Wednesday
    day = 96
    old, new = tmp_path / "old.csv", tmp_path / "new.csv"
    save_trace(series.iloc[: 9 * day], old)
    save_trace(series.iloc[day:], new)
    rc, _, err = run(capsys, "fit", "--trace", str(old), *FAST, "-o", str(tmp_path / "m.kale"))
    assert rc == 0, err
    rc, out, err = run(
        capsys,
        "fit",
        "--trace",
        str(new),
        "--from",
        str(tmp_path / "m.kale"),
        "-o",
        str(tmp_path / "m2.kale"),
        "--json",
    )
    assert rc == 0, err
    summary = json.loads(out)["fit_summary"]
    assert summary["refit"]["mode"] == "incremental", summary["refit"]
    assert summary["history_steps"] == 9 * day


def test_short_trace_still_forecasts_and_warns(capsys, tmp_path):
    path = tmp_path / "short.csv"
    save_trace(generate_trace(days=1, interval_s=900, seed=1), path)
    rc, out, err = run(capsys, "predict", "--trace", str(path), "--model", "kale", *FAST, "--json")
    assert rc == 0
    assert "using seasonal_naive" in err and "days" in err
    assert len(json.loads(out)["p90"]) == 8


@pytest.mark.slow  # a real process: imports torch
def test_the_fallback_reason_is_said_once(tmp_path):
    """In a real process (pytest's log capture would hide a second, bare copy from the
    fallback wrapper's log): one ``kale: warning:`` line and, stderr not being a terminal,
    the one progress line of the fit; nothing else."""
    path = tmp_path / "short.csv"
    save_trace(generate_trace(days=1, interval_s=900, seed=1), path)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kale.cli.main",
            "forecast",
            "predict",
            "--trace",
            str(path),
            "--model",
            "kale",
            "--horizon",
            "4",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    progress, *rest = done.stderr.splitlines()
    assert re.fullmatch(r"kale: forecast: kale on 96 steps fitted in \d+\.\d s \(1/1\)", progress)
    assert rest == [
        "kale: warning: using seasonal_naive: history is 1 days, kale needs 2 days (192 steps)"
    ]


def test_a_model_warning_names_kale_once(capsys):
    """The kale model's log messages start with its name; the CLI's line adds its own
    ``kale: warning:`` prefix and must not say ``kale:`` twice."""
    import logging

    from kale.cli.forecasters import route_library_warnings

    route_library_warnings()
    logging.getLogger("forecasting.transformer.train").warning(
        "kale: training stopped by the time budget after %d epochs", 2
    )
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "time budget" in ln]
    assert lines == ["kale: warning: training stopped by the time budget after 2 epochs"]


@pytest.mark.parametrize("suffix", [".png", ".html"])
def test_plot_writes_the_picture(capsys, trace_csv, tmp_path, suffix):
    out_file = tmp_path / f"f{suffix}"
    rc, _, err = run(
        capsys,
        "plot",
        "--trace",
        trace_csv,
        "--model",
        "seasonal_naive",
        "--horizon",
        "8",
        "--origin",
        "2026-01-10T06:00:00Z",
        "-o",
        str(out_file),
    )
    assert rc == 0, err
    data = out_file.read_bytes()
    assert len(data) > 1000
    if suffix == ".html":
        text = data.decode()
        assert 'src="https://cdn.plot.ly' not in text and len(data) > 1_000_000  # embedded


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # the trace file does not exist
        (["predict", "--trace", "missing.csv"], "file not found"),
        # an unknown model name
        (["backtest", "--trace", "{trace}", "--models", "kale,prophet"], "unknown model"),
        # an unknown model where one is expected: the message names the flag given
        (["predict", "--trace", "{trace}", "--model", "prophet"], "--model: unknown model"),
        # more than one model where one is expected
        (["predict", "--trace", "{trace}", "--model", "ets,kale"], "give one model"),
        # a test window longer than the trace
        (["backtest", "--trace", "{trace}", "--models", "ets", "--test-days", "30"], "--test-days"),
        # a picture format nobody can open
        (["plot", "--trace", "{trace}", "-o", "f.pdf"], ".png or .html"),
        # an origin outside the trace
        (["plot", "--trace", "{trace}", "--origin", "2030-01-01", "-o", "f.png"], "--origin"),
        # a horizon that is not positive (click's own check)
        (["predict", "--trace", "{trace}", "--horizon", "0"], "horizon"),
        # a model file that is not one
        (["predict", "--trace", "{trace}", "--model-file", "{trace}"], "--model-file"),
    ],
)
def test_user_mistakes_exit_2_with_one_line(capsys, trace_csv, args, message):
    rc, _, err = run(capsys, *[a.replace("{trace}", trace_csv) for a in args])
    assert rc == 2
    assert message in err
    assert "Traceback" not in err


def test_bad_trace_content_exits_2(capsys, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp,value\n2026-01-01T00:00:00Z,1\n2026-01-01T00:01:00Z,-5\n")
    rc, _, err = run(capsys, "predict", "--trace", str(bad))
    assert rc == 2
    assert "bad.csv:3" in err and "negative" in err
