"""The shared terminal helpers: one number formatter, tables, flag checks, fit progress."""

from __future__ import annotations

import io
import itertools
import math

import click
import numpy as np
import pytest
from click.testing import CliRunner

from common.numbers import format_number, format_percent, format_rate
from kale.terminal.flags import DURATION, bootstrap_servers, int_list, non_negative, positive
from kale.terminal.output import table
from kale.terminal.progress import FitProgress


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (8030.0, "8.03k"),  # the three: one style, never 8.03e+3
        (10_400.0, "10.4k"),
        (61_390.0, "61.4k"),  # never 6.139e+04
        (1_234_567, "1.23M"),  # a big count gets a suffix too
        (999.7, "1.00k"),  # rounding carries into the next suffix
        (9.996, "10.0"),  # and into the next power of ten
        (612.4, "612"),
        (2.5, "2.50"),  # three significant digits, zeros kept
        (0.0123, "0.0123"),
        (1.23e-7, "0.000000123"),  # tiny, still no exponent
        (25.0, "25"),  # whole numbers below 1000 read whole
        (3, "3"),
        (-61_390.0, "-61.4k"),
        (0.0, "0"),
        (np.float64(8030.5), "8.03k"),  # numpy scalars are numbers
        (np.int64(12), "12"),
        (None, "–"),
        (math.nan, "–"),
        (math.inf, "∞"),
        ("text", "text"),
    ],
)
def test_every_number_reads_one_way(value, text):
    assert format_number(value) == text


def test_percentages_and_rates_use_the_same_rule():
    assert [format_percent(f) for f in (0.0123, 0.25, 0.0, 1.0)] == ["1.23%", "25%", "0%", "100%"]
    assert format_percent(None) == "–"
    assert format_rate(61_390.0) == "61.4k samples/s"


def test_a_table_formats_numbers_right_aligns_them_and_shows_fractions_as_percent():
    text = table(
        [["kale", 0.004, 61_390.0, None], ["hpa", 0.1957, 8030.0, 12]],
        ["policy", "violations", "gpu_hours", "rescales"],
        percent=("violations",),
    )
    assert text.splitlines() == [
        "policy  violations  gpu_hours  rescales",
        "------  ----------  ---------  --------",
        "kale        0.400%      61.4k         –",
        "hpa          19.6%      8.03k        12",
    ]


def _run(callback, value, param_type=None):
    @click.command()
    @click.option("--x", type=param_type, callback=callback)
    def cmd(x):
        click.echo(repr(x))

    return CliRunner().invoke(cmd, ["--x", value])


@pytest.mark.parametrize(
    ("callback", "param_type", "value", "message"),
    [
        (positive, int, "0", "must be a positive integer, got 0"),  # zero workers
        (positive, float, "-1", "must be a positive number, got -1.0"),  # a negative speed-up
        (positive, float, "nan", "must be a positive number, got nan"),  # NaN slips past <= 0
        (positive, DURATION, "0s", "must be a positive duration, got 0.0"),  # a zero interval
        (non_negative, float, "-5", "must be a number ≥ 0, got -5.0"),  # a negative load
        (non_negative, DURATION, "-1", "must not be negative"),  # the duration type says it
        (int_list, None, "1,x", "positive integers such as 1,2,4; got 'x'"),  # a typo in a grid
        (bootstrap_servers, None, "host", "expected HOST:PORT"),  # no port
        (bootstrap_servers, None, "h:70000", "expected HOST:PORT"),  # port out of range
    ],
)
def test_flag_checks_refuse_with_exit_2_and_say_what_is_accepted(
    callback, param_type, value, message
):
    result = _run(callback, value, param_type)
    assert result.exit_code == 2
    assert "Invalid value for '--x'" in result.output and message in result.output


@pytest.mark.parametrize(
    ("callback", "param_type", "value", "parsed"),
    [
        (positive, DURATION, "5m", "300.0"),
        (non_negative, float, "0", "0.0"),
        (int_list, None, "4,1,4,2", "(4, 1, 2)"),  # duplicates dropped, order kept
        (bootstrap_servers, None, "a:1,b:9092", "'a:1,b:9092'"),
    ],
)
def test_flag_checks_pass_good_values_through(callback, param_type, value, parsed):
    result = _run(callback, value, param_type)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == parsed


class Model:
    """A stand-in forecaster: ``fit`` returns itself, as the real ones do."""

    name = "fake"

    def __init__(self, fail: bool = False) -> None:
        self.fail, self.fitted_on = fail, None

    def fit(self, history):
        if self.fail:
            raise ValueError("too short")
        self.fitted_on = len(history)
        return self


def test_without_a_terminal_every_fit_is_one_line():
    stream = io.StringIO()
    clock = itertools.count(0.0, 1.5).__next__  # each reading is 1.5 s after the last
    with FitProgress(2, label="backtest", stream=stream, clock=clock) as progress:
        model = progress.watch(Model(), "ets")
        assert model.fit([1, 2, 3]) is model  # the watched model, so chains stay watched
        assert model.fitted_on == 3 and model.name == "fake"  # everything else passes through
        with pytest.raises(ValueError, match="too short"):
            progress.watch(Model(fail=True), "kale").fit([1])
    assert stream.getvalue().splitlines() == [
        "kale: backtest: ets on 3 steps fitted in 1.5 s (1/2)",
        "kale: backtest: kale on 1 steps failed after 1.5 s (2/2)",
    ]


def test_on_a_terminal_the_bar_keeps_moving_while_a_fit_runs(wait_until):
    stream = io.StringIO()
    with FitProgress(1, label="backtest", stream=stream, interactive=True, refresh_s=0.01) as p:
        with p.fit("kale", steps=4032):
            # No fit has finished, yet the bar is redrawn (its clock moves): wait for a few.
            drawn = len(stream.getvalue())
            wait_until(lambda: stream.getvalue().count("\r") >= 3, message="bar refreshes")
            assert len(stream.getvalue()) > drawn
            assert "fitting kale on 4,032 steps" in stream.getvalue()
        assert p.done == 1
