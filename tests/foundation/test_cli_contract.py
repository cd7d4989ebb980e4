"""The CLI's exit-code contract: 0 ok, 2 user error (one line, no traceback), 1 internal."""

from __future__ import annotations

import subprocess
import sys

import pytest

from common.durations import format_duration, parse_duration
from kale.cli import main as cli_main

# Only a guard against a hang: interpreter start-up can take a minute on a loaded machine.
SUBPROCESS_TIMEOUT_S = 240


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("5m", 300),
        ("1h", 3600),
        ("1h30m", 5400),
        ("250ms", 0.25),
        ("2d", 172800),
        ("60", 60),
        (45, 45),
        (1.5, 1.5),
    ],
)
def test_durations_parse(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5 minutes", "m5", "-5m", "1x", "5m3", True, [1]])
def test_bad_durations_say_what_is_accepted(text):
    with pytest.raises(ValueError, match=r"duration|negative"):
        parse_duration(text)


@pytest.mark.parametrize("seconds", [30, 60, 300, 3600, 5400, 86400, 0.5])
def test_format_duration_round_trips(seconds):
    assert parse_duration(format_duration(seconds)) == seconds


def test_unknown_command_and_bad_flag_exit_2_with_one_line(capsys):
    assert cli_main.main(["frobnicate"]) == 2
    assert cli_main.main(["trace", "generate", "--days", "-1", "-o", "x.csv"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("kale: error: ") for line in err)


def test_internal_errors_exit_1_without_traceback(monkeypatch, capsys, tmp_path):
    def boom(**_):
        raise RuntimeError("disk on fire")

    import autoscaler.sim.tracegen

    monkeypatch.setattr(autoscaler.sim.tracegen, "generate_trace", boom)
    assert cli_main.main(["trace", "generate", "-o", str(tmp_path / "never.csv")]) == 1
    err = capsys.readouterr().err
    assert "internal error: RuntimeError: disk on fire" in err and "Traceback" not in err


def test_a_built_in_command_that_fails_to_import_is_a_bug_not_a_missing_feature(
    monkeypatch, capsys
):
    # Once a stub turned this into "not available in this version" (exit 2): a broken
    # import is ours to fix, so it is an internal error with the one-line message.
    monkeypatch.setitem(
        cli_main.COMMANDS, "validate", ("kale.cli.no_such_module:validate", "Broken.")
    )
    assert cli_main.main(["validate", "x.yaml"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "kale: internal error: ModuleNotFoundError: No module named "
        "'kale.cli.no_such_module' (set KALE_DEBUG=1 for a traceback)"
    ]


def test_console_script_exits_with_the_code():
    proc = subprocess.run(
        [sys.executable, "-m", "kale.cli.main", "validate", "/nope.yaml"],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "/nope.yaml: file not found"


def test_help_lists_every_command(capsys):
    assert cli_main.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in cli_main.COMMANDS:
        assert name in out
