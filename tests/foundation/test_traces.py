"""Trace loading, generation and summary: the series everything else consumes."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from autoscaler.sim.tracegen import Burst, burst_factor, generate_trace, trace_components
from autoscaler.sim.traces import Trace, TraceGapWarning, load_trace, save_trace, trace_info
from common.errors import UserError
from kale.cli.main import main

GOOD = "timestamp,value\n2026-01-01T00:00:00Z,1.5\n2026-01-01T00:01:00Z,2\n2026-01-01T00:02:00Z,0\n"

# (id, file content, expected message fragment after "FILE")
BAD_TRACES = [
    ("wrong-header", "time,rate\n2026-01-01T00:00:00Z,1\n", ":1: header must be 'timestamp,value'"),
    (
        "bad-timestamp",
        "timestamp,value\nyesterday,1\n2026-01-01T00:01:00Z,2\n",
        ":2: timestamp 'yesterday' is not ISO-8601",
    ),
    (
        "bad-number",
        "timestamp,value\n2026-01-01T00:00:00Z,abc\n",
        ":2: value 'abc' is not a number",
    ),
    (
        "negative",
        "timestamp,value\n2026-01-01T00:00:00Z,1\n2026-01-01T00:01:00Z,-2\n",
        ":3: value -2 is negative",
    ),
    (
        "infinite",
        "timestamp,value\n2026-01-01T00:00:00Z,inf\n2026-01-01T00:01:00Z,2\n",
        ":2: value is inf, expected a finite rate",
    ),
    (
        "no-values",
        "timestamp,value\n2026-01-01T00:00:00Z,\n2026-01-01T00:01:00Z,nan\n2026-01-01T00:02:00Z,3\n",
        "needs at least 2 rows with a value, found 1",
    ),
    (
        "irregular-after-blank-line",
        "timestamp,value\n2026-01-01T00:00:00Z,1\n\n2026-01-01T00:01:00Z,1\n"
        "2026-01-01T00:02:30Z,1\n",
        ":5: irregular interval",
    ),
    (
        "duplicate",
        "timestamp,value\n2026-01-01T00:00:00Z,1\n2026-01-01T00:00:00Z,2\n",
        ":3: duplicate timestamp",
    ),
    (
        "backwards",
        "timestamp,value\n2026-01-01T00:01:00Z,1\n2026-01-01T00:00:00Z,2\n",
        ":3: timestamp 2026-01-01T00:00:00Z goes back in time",
    ),
    (
        "irregular",
        "timestamp,value\n2026-01-01T00:00:00Z,1\n2026-01-01T00:01:00Z,1\n2026-01-01T00:02:30Z,1\n",
        ":4: irregular interval",
    ),
    ("extra-column", "timestamp,value\n2026-01-01T00:00:00Z,1,3\n", ":2: expected 2 columns"),
    ("one-row", "timestamp,value\n2026-01-01T00:00:00Z,1\n", "needs at least 2 rows, found 1"),
    ("empty", "", "empty file"),
]


@pytest.mark.parametrize(
    ("content", "expected"), [r[1:] for r in BAD_TRACES], ids=[r[0] for r in BAD_TRACES]
)
def test_bad_trace_names_file_line_and_reason(tmp_path, content, expected):
    path = tmp_path / "t.csv"
    path.write_text(content)
    with pytest.raises(UserError) as exc:
        load_trace(path)
    assert str(exc.value).startswith(str(path))
    assert expected in str(exc.value)


def test_good_trace_loads_on_a_regular_utc_grid(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(GOOD)
    trace = load_trace(path)
    assert trace.interval_s == 60
    assert trace.series.tolist() == [1.5, 2.0, 0.0]
    assert str(trace.series.index.tz) == "UTC"


def test_gaps_are_interpolated_with_a_warning_that_counts_them(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(
        "timestamp,value\n2026-01-01T00:00:00Z,0\n2026-01-01T00:03:00Z,3\n2026-01-01T00:04:00Z,4\n"
    )
    with pytest.warns(TraceGapWarning, match="2 missing step"):
        trace = load_trace(path)
    assert trace.series.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert trace.filled_steps == 2


def test_empty_and_nan_values_are_gaps_filled_like_missing_rows(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(
        "timestamp,value\n2026-01-01T00:00:00Z,\n2026-01-01T00:01:00Z,1\n"
        "2026-01-01T00:02:00Z,\n2026-01-01T00:03:00Z,NaN\n2026-01-01T00:05:00Z,5\n"
        "2026-01-01T00:06:00Z,nan\n"
    )
    with pytest.warns(TraceGapWarning) as caught:
        trace = load_trace(path)
    messages = [str(w.message) for w in caught]
    assert any("2 row(s) with no value at the start or end cut off" in m for m in messages)
    assert any("3 missing step(s) (2 with an empty or nan value)" in m for m in messages)
    # The ends cannot be interpolated: the trace runs from the first to the last value.
    assert trace.series.index[0].isoformat() == "2026-01-01T00:01:00+00:00"
    assert trace.series.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert trace.filled_steps == 3


@pytest.mark.parametrize("interval", [60, 300, 1800, 3600])
def test_any_interval_round_trips_through_csv(tmp_path, interval):
    series = generate_trace(days=3, interval_s=interval, seed=2)
    path = tmp_path / "t.csv"
    save_trace(series, path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace = load_trace(path)
    assert trace.interval_s == interval
    assert len(trace.series) == 3 * 86400 // interval
    np.testing.assert_allclose(trace.series.to_numpy(), series.to_numpy(), rtol=1e-5)


@pytest.mark.parametrize("ratio", [5.0, 20.0, 30.0])
def test_generated_trace_has_the_requested_peak_trough_ratio(ratio):
    series = generate_trace(days=14, interval_s=300, peak_trough=ratio, seed=4)
    info = trace_info(Trace(series=series, interval_s=300))
    assert info["peak_trough_ratio"] == pytest.approx(ratio, rel=1e-6)
    assert info["seasonality_strength"] > 0.6
    assert info["daily_period_steps"] == 288


def test_generated_trace_is_deterministic_per_seed_and_weekends_differ():
    a = generate_trace(days=14, interval_s=600, seed=7)
    b = generate_trace(days=14, interval_s=600, seed=7)
    c = generate_trace(days=14, interval_s=600, seed=8)
    assert a.equals(b) and not a.equals(c)
    early = a.between_time("07:00", "11:00")
    weekend = early[early.index.day_of_week >= 5].mean()
    weekday = early[early.index.day_of_week < 5].mean()
    assert weekend > 1.2 * weekday  # weekends rise from early morning


def test_trace_components_rebuild_the_trace_and_keep_what_was_drawn():
    kwargs = {"days": 9, "interval_s": 900, "seed": 5, "bursts_per_day": 2.0}
    parts = trace_components(**kwargs)
    series = generate_trace(**kwargs)
    assert parts.series().equals(series)
    # The parts multiply back to the raw trace; the offset is what restores peak/trough.
    raw = (
        parts.base
        * parts.level()
        * burst_factor(parts.t_days, parts.bursts)
        * np.exp(parts.ar + parts.white)
    )
    np.testing.assert_allclose(np.clip(raw - parts.offset, 0, None), series.to_numpy())
    assert 0 < parts.offset < series.max()
    assert len(parts.bursts) > 0 and parts.bursts_per_day == 2.0
    # The day level sits at day midpoints and is linear in between (a reference forecaster
    # relies on this to infer the level being approached).
    mids = parts.day_midpoints
    np.testing.assert_allclose(parts.level(t_days=mids[1:4]), parts.day_level[1:4])
    halfway = parts.level(t_days=np.array([mids[2] + 0.25]))[0]
    assert halfway == pytest.approx(0.75 * parts.day_level[2] + 0.25 * parts.day_level[3])
    # The correlated noise is the AR(1) of its innovations.
    innov = parts.ar[1:] - parts.phi * parts.ar[:-1]
    assert np.std(innov) == pytest.approx(parts.sd_innovation, rel=0.2)


def test_burst_factor_rises_at_once_and_decays_with_its_time_constant():
    b = Burst(at_days=1.0, amp=0.4, tau_days=0.1)
    f = burst_factor(np.array([0.99, 1.0, 1.1, 1.2]), [b])
    np.testing.assert_allclose(f, [1.0, 1.4, 1.0 + 0.4 / np.e, 1.0 + 0.4 / np.e**2])
    assert (burst_factor(np.array([0.5, 2.0]), []) == 1.0).all()


def test_noise_only_series_reports_no_seasonality():
    rng = np.random.default_rng(0)
    from autoscaler.sim.traces import series_from_values

    info = trace_info(
        Trace(series=series_from_values(rng.gamma(50, 1, 4 * 1440), 60), interval_s=60)
    )
    assert info["detected_periods"] == {}


def test_cli_generate_then_info_json(tmp_path, capsys):
    out = tmp_path / "t.csv"
    assert (
        main(
            [
                "trace",
                "generate",
                "--days",
                "3",
                "--interval",
                "300",
                "--peak-trough",
                "10",
                "--seed",
                "1",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["trace", "info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    for field in (
        "rows",
        "start",
        "end",
        "interval_s",
        "min",
        "max",
        "mean",
        "peak_trough_ratio",
        "daily_period_steps",
        "seasonality_strength",
    ):
        assert field in info
    assert info["rows"] == 3 * 288 and info["interval_s"] == 300
    assert info["peak_trough_ratio"] == pytest.approx(10, rel=1e-6)


def test_cli_info_on_bad_file_exits_2_with_one_line(tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text("timestamp,value\n2026-01-01T00:00:00Z,-1\n2026-01-01T00:01:00Z,1\n")
    assert main(["trace", "info", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"kale: error: {path}:2: value -1 is negative (samples/s must be ≥ 0)"]


JITTERED = (
    "timestamp,value\n"
    "2026-01-01T00:00:07Z,2\n"
    "2026-01-01T00:00:52Z,4\n"  # same minute as the row before: averaged
    "2026-01-01T00:02:10Z,6\n"  # out of order, and minute 00:01 has no row at all
    "2026-01-01T00:01:59Z,\n"  # a gap cell counts as no value
    "2026-01-01T00:03:00Z,8\n"
    "2026-01-01T00:03:00Z,10\n"  # a repeated timestamp
)


def test_irregular_trace_error_says_how_to_fix_it(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(
        "timestamp,value\n2026-01-01T00:00:00Z,1\n2026-01-01T00:01:07Z,1\n2026-01-01T00:01:58Z,1\n"
    )
    with pytest.raises(UserError, match="kale trace resample"):
        load_trace(path)


def test_resample_puts_jitter_and_disorder_on_a_regular_grid(tmp_path):
    from autoscaler.sim.traces import resample_points

    path = tmp_path / "t.csv"
    path.write_text(JITTERED)
    series, counts = resample_points(path, 60)
    assert list(series.index.strftime("%H:%M")) == ["00:00", "00:01", "00:02", "00:03"]
    np.testing.assert_allclose(series.to_numpy(), [3.0, np.nan, 6.0, 9.0])
    assert counts == {"rows": 6, "steps": 4, "empty_steps": 1}
    summed, _ = resample_points(path, 120, how="sum")  # counts per row add up
    np.testing.assert_allclose(summed.to_numpy(), [6.0, 24.0])
    assert summed.index[0].isoformat() == "2026-01-01T00:00:00+00:00"


def test_cli_resample_writes_a_trace_every_command_reads(tmp_path, capsys):
    path, out = tmp_path / "t.csv", tmp_path / "regular.csv"
    path.write_text(JITTERED)
    assert main(["trace", "resample", str(path), "--interval", "1m", "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["steps"] == 4 and report["empty_steps"] == 1 and report["interval_s"] == 60
    with pytest.warns(TraceGapWarning, match="1 missing step"):
        trace = load_trace(out)
    np.testing.assert_allclose(trace.series.to_numpy(), [3.0, 4.5, 6.0, 9.0])
    assert main(["trace", "resample", str(path), "--interval", "1d", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "choose a shorter --interval" in err[0]
